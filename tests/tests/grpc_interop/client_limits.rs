//! A response message over a zrpc client's limit (`MaxDecompressedSize`, default 4 MiB) ends
//! the call with `ResourceExhausted` and grpc-go's client's words (tonic's decoder alone says
//! `OutOfRange`), from three servers: grpc-go's stock interop server (its `gzip-interop` for
//! compressed responses), grpcio's (`tests/python/grpcio_server.py`) and zrpc's. The client
//! answers its next call.

use std::time::Duration;

use prost::Message;
use zrpc::RpcClientConf;
use zrpc::compression::Encoding;
use zrpc_interop::pb::test_service_client::TestServiceClient;
use zrpc_interop::pb::{BoolValue, Payload, SimpleRequest, SimpleResponse};
use zrpc_tests::grpcgo::{GrpcGoServer, ZrpcInteropServer};
use zrpc_tests::grpcio::GrpcioServer;

const DEFAULT_LIMIT: usize = 4 * 1024 * 1024;

async fn stub(port: u16, edit: impl FnOnce(&mut RpcClientConf)) -> TestServiceClient<zrpc::Client> {
    let mut conf = RpcClientConf::direct([format!("127.0.0.1:{port}")]);
    edit(&mut conf);
    TestServiceClient::new(zrpc::client(conf).await.expect("a zrpc client"))
}

/// One UnaryCall asking for `size` octets of payload, bounded to 10 s.
async fn unary(
    stub: &mut TestServiceClient<zrpc::Client>,
    size: usize,
    compressed: bool,
) -> Result<SimpleResponse, tonic::Status> {
    let req = SimpleRequest {
        response_size: i32::try_from(size).unwrap(),
        response_compressed: compressed.then_some(BoolValue { value: true }),
        ..Default::default()
    };
    tokio::time::timeout(Duration::from_secs(10), stub.unary_call(req))
        .await
        .expect("an answer within 10 s")
        .map(tonic::Response::into_inner)
}

/// The wire length of the response to a request for `size` octets.
fn response_len(size: usize) -> usize {
    SimpleResponse {
        payload: Some(Payload {
            body: vec![0; size],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encoded_len()
}

/// The four servers, running while this lives.
struct Servers {
    go: GrpcGoServer,
    gzip: GrpcGoServer,
    py: GrpcioServer,
    zrpc: ZrpcInteropServer,
}

impl Servers {
    /// None without Go (the test is skipped).
    async fn start() -> Option<Servers> {
        let p = zrpc_tests::grpcgo::programs()?;
        Some(Servers {
            go: GrpcGoServer::start(p, None).await,
            gzip: GrpcGoServer::start_gzip(p, None).await,
            py: GrpcioServer::start().await,
            zrpc: ZrpcInteropServer::start(None).await,
        })
    }

    /// Each server's name and port.
    fn ports(&self) -> [(&'static str, u16); 4] {
        [
            ("grpc-go", self.go.port),
            ("grpc-go gzip-interop", self.gzip.port),
            ("grpcio", self.py.port),
            ("zrpc", self.zrpc.port()),
        ]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_over_the_limit_is_resource_exhausted_in_grpc_gos_words() {
    let Some(servers) = Servers::start().await else {
        return;
    };
    const MIB: usize = 1024 * 1024;
    // the default limit, then a lower one (zrpc's interop server answers at most 4 MiB)
    for (limit, size) in [(DEFAULT_LIMIT, 5 * MIB), (MIB, 2 * MIB)] {
        let want = format!(
            "grpc: received message larger than max ({} vs. {limit})",
            response_len(size)
        );
        for (name, port) in servers.ports() {
            if name == "zrpc" && size > DEFAULT_LIMIT {
                continue;
            }
            let mut stub = stub(port, |c| c.max_decompressed_size = limit).await;
            let err = unary(&mut stub, size, false).await.unwrap_err();
            println!(
                "{name}, limit {limit}: {:?} {:?}",
                err.code(),
                err.message()
            );
            assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{name}: {err}");
            assert_eq!(err.message(), want, "{name}");
            // just under the limit passes, on the same client
            let ok = unary(&mut stub, limit - 16, false).await;
            let body = ok
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .payload
                .unwrap()
                .body;
            assert_eq!(body.len(), limit - 16, "{name}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_response_past_the_limit_is_resource_exhausted_in_grpc_gos_words() {
    let Some(servers) = Servers::start().await else {
        return;
    };
    let limit = 1024 * 1024;
    let want = format!("grpc: received message after decompression larger than max {limit}");
    // grpc-go's stock server cannot compress (its gzip-interop does)
    for (name, port) in servers.ports().into_iter().filter(|(n, _)| *n != "grpc-go") {
        let mut stub = stub(port, |c| {
            // asks for compressed responses (grpc-accept-encoding)
            c.compression = Some(Encoding::Gzip);
            c.max_decompressed_size = limit;
        })
        .await;
        let err = unary(&mut stub, 2 * limit, true).await.unwrap_err();
        println!("{name}: {:?} {:?}", err.code(), err.message());
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{name}: {err}");
        assert_eq!(err.message(), want, "{name}");
        let ok = unary(&mut stub, limit / 2, true).await;
        let body = ok
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .payload
            .unwrap()
            .body;
        assert_eq!(body.len(), limit / 2, "{name}");
    }
}
