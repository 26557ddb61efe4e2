//! One cell of the matrix: a case, a direction, a transport.

use std::fmt;

use zrpc_interop::Case;
use zrpc_tests::grpcgo::{
    GrpcGoServer, InteropCerts, ZrpcInteropServer, run_grpcgo_client, run_gzip_client, zrpc_runner,
};

/// Plaintext or TLS (the certificates of [`InteropCerts`], verified as `foo.test.google.fr`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Transport {
    Plaintext,
    Tls,
}

impl Transport {
    fn certs(self) -> Option<InteropCerts> {
        match self {
            Transport::Plaintext => None,
            Transport::Tls => Some(InteropCerts::new()),
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Plaintext => "plaintext",
            Transport::Tls => "TLS",
        })
    }
}

/// The compression cases, which grpc-go's stock interop programs do not implement: they run
/// with `gzip-interop` on the grpc-go side.
fn compression(case: &str) -> bool {
    case.contains("_compressed_")
}

/// grpc-go's interop client (`gzip-interop`'s for a compression case) runs `case` against
/// zrpc's TestService.
pub(crate) async fn grpcgo_to_zrpc(case: &str, t: Transport) {
    let p = zrpc_tests::grpcgo_or_skip!();
    let certs = t.certs();
    let server = ZrpcInteropServer::start(certs.as_ref()).await;
    let (client, run) = if compression(case) {
        let run = run_gzip_client(p, case, server.port(), certs.as_ref()).await;
        ("gzip-interop", run)
    } else {
        let run = run_grpcgo_client(p, case, server.port(), certs.as_ref(), &[]).await;
        ("grpc-go", run)
    };
    assert!(
        run.passed(),
        "{client} client -> zrpc server ({t}): {case} failed (exit {:?}):\n{}",
        run.code,
        run.output.trim_end()
    );
}

/// zrpc's interop client runs `case` against grpc-go's interop server (`gzip-interop`'s for a
/// compression case).
pub(crate) async fn zrpc_to_grpcgo(case: &str, t: Transport) {
    let p = zrpc_tests::grpcgo_or_skip!();
    let certs = t.certs();
    let (name, server) = if compression(case) {
        (
            "gzip-interop",
            GrpcGoServer::start_gzip(p, certs.as_ref()).await,
        )
    } else {
        ("grpc-go", GrpcGoServer::start(p, certs.as_ref()).await)
    };
    let runner = zrpc_runner(server.port, certs.as_ref()).await;
    if let Err(e) = runner.run(parse(case)).await {
        panic!("zrpc client -> {name} server ({t}): {e:#}");
    }
}

/// zrpc's interop client runs `case` against zrpc's TestService.
pub(crate) async fn zrpc_to_zrpc(case: &str, t: Transport) {
    let certs = t.certs();
    let server = ZrpcInteropServer::start(certs.as_ref()).await;
    let runner = zrpc_runner(server.port(), certs.as_ref()).await;
    if let Err(e) = runner.run(parse(case)).await {
        panic!("zrpc client -> zrpc server ({t}): {e:#}");
    }
}

fn parse(case: &str) -> Case {
    case.parse().expect("a case of zrpc's interop client")
}
