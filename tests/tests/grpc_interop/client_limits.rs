//! A response message over a zrpc client's limit (`MaxDecompressedSize`, default 4 MiB) ends
//! the call with `ResourceExhausted` and grpc-go's client's words (tonic's decoder alone says
//! `OutOfRange`), from three servers: grpc-go's stock interop server (its `gzip-interop` for
//! compressed responses), grpcio's (`tests/python/grpcio_server.py`) and zrpc's. A grpc-go client
//! (`gzip-interop`'s `unary_status`) makes the same call to each and must answer the same. The
//! client answers its next call.
//!
//! A server that is not gRPC (an HTTP/1.1 server, an HTTP/2 server answering 4xx/5xx without
//! `grpc-status`) gets the code gRPC's HTTP-to-gRPC table gives, and a grpc-go client's code.

use std::time::Duration;

use prost::Message;
use zrpc::RpcClientConf;
use zrpc::compression::Encoding;
use zrpc_interop::pb::test_service_client::TestServiceClient;
use zrpc_interop::pb::{BoolValue, Payload, SimpleRequest, SimpleResponse};
use zrpc_tests::grpcgo::{GrpcGoPrograms, GrpcGoServer, ZrpcInteropServer, grpcgo_unary_status};
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

/// The four servers, running while this lives, and the grpc-go programs.
struct Servers {
    programs: &'static GrpcGoPrograms,
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
            programs: p,
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
    // the default limit, then a lower one
    for (limit, size) in [(DEFAULT_LIMIT, 5 * MIB), (MIB, 2 * MIB)] {
        let want = format!(
            "grpc: received message larger than max ({} vs. {limit})",
            response_len(size)
        );
        for (name, port) in servers.ports() {
            let mut stub = stub(port, |c| c.max_decompressed_size = limit).await;
            let err = unary(&mut stub, size, false).await.unwrap_err();
            println!(
                "{name}, limit {limit}: {:?} {:?}",
                err.code(),
                err.message()
            );
            assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{name}: {err}");
            assert_eq!(err.message(), want, "{name}");
            let go = grpcgo_unary_status(servers.programs, port, size, false, Some(limit)).await;
            assert_eq!(
                go,
                (err.code() as i32, want.clone()),
                "{name}: a grpc-go client's answer"
            );
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
        let go = grpcgo_unary_status(servers.programs, port, 2 * limit, true, Some(limit)).await;
        assert_eq!(
            go,
            (err.code() as i32, want.clone()),
            "{name}: a grpc-go client's answer"
        );
        let ok = unary(&mut stub, limit / 2, true).await;
        let body = ok
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .payload
            .unwrap()
            .body;
        assert_eq!(body.len(), limit / 2, "{name}");
    }
}

/// An HTTP/1.1 server on 127.0.0.1:0 (hyper's, answering every request 200 "hello"): what a
/// client meets when the address is a web server's. Serves until the runtime ends.
async fn http1_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from_static(b"hello")),
                    ))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    port
}

/// A server that answers whatever comes with an HTTP/1.1 400 and closes, as web servers answer
/// the HTTP/2 preface (`PRI * HTTP/2.0`) they do not understand.
async fn http1_bad_request_server() -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = sock.read(&mut buf).await;
                let _ = sock
                    .write_all(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    )
                    .await;
                let _ = sock.shutdown().await;
            });
        }
    });
    port
}

/// An HTTP/2 server answering every request with `status`, `content-type: text/plain` and a
/// body, no gRPC header: a proxy or load balancer's error page.
async fn http2_status_server(status: u16) -> u16 {
    zrpc_tests::h2raw::h2_server(move |mut respond| {
        let resp = http::Response::builder()
            .status(status)
            .header("content-type", "text/plain")
            .body(())
            .unwrap();
        if let Ok(mut body) = respond.send_response(resp, false) {
            let _ = body.send_data(bytes::Bytes::from_static(b"no gRPC here\n"), true);
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_grpc_gets_the_code_grpcs_table_gives_as_grpc_go_does() {
    let p = zrpc_tests::grpcgo_or_skip!();
    // gRPC's doc/http-grpc-status-mapping.md; an HTTP/1.1 answer fails the HTTP/2 connection
    let cases: Vec<(String, u16, tonic::Code)> = {
        let mut v = vec![
            (
                "HTTP/1.1 server".to_owned(),
                http1_server().await,
                tonic::Code::Unavailable,
            ),
            (
                "HTTP/1.1 server answering 400".to_owned(),
                http1_bad_request_server().await,
                tonic::Code::Unavailable,
            ),
        ];
        for (status, code) in [
            (400, tonic::Code::Internal),
            (401, tonic::Code::Unauthenticated),
            (403, tonic::Code::PermissionDenied),
            (404, tonic::Code::Unimplemented),
            (429, tonic::Code::Unavailable),
            (500, tonic::Code::Unknown),
            (502, tonic::Code::Unavailable),
            (503, tonic::Code::Unavailable),
            (504, tonic::Code::Unavailable),
        ] {
            v.push((
                format!("HTTP/2 {status}"),
                http2_status_server(status).await,
                code,
            ));
        }
        v
    };
    for (name, port, want) in cases {
        let mut stub = stub(port, |c| c.non_block = true).await;
        let err = unary(&mut stub, 10, false).await.unwrap_err();
        let go = grpcgo_unary_status(p, port, 10, false, None).await;
        println!(
            "{name}: zrpc {:?} {:?}; grpc-go {} {:?}",
            err.code(),
            err.message(),
            go.0,
            go.1
        );
        assert_eq!(err.code(), want, "{name}: zrpc: {err}");
        assert_eq!(go.0, want as i32, "{name}: grpc-go: {}", go.1);
        if name.starts_with("HTTP/2") {
            // grpc-go's words, the error page's first octets quoted
            assert_eq!(err.message(), go.1, "{name}");
        } else {
            // zrpc says what the server did
            let hint = if name.ends_with("400") {
                "the server answered in HTTP/1.1"
            } else {
                "the server closed the connection before sending a byte"
            };
            assert!(err.message().contains(hint), "{name}: {err}");
        }
    }
}
