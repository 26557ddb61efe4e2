//! gRPC compression on both sides, judged by peers zrpc did not write: grpcio (Python, on gRPC
//! core) compressing its requests, tonic's own codec decoding zrpc's compressed messages and
//! compressing its own, and raw HTTP/2 for what no library sends (an unknown encoding, a
//! compressed flag without `grpc-encoding`) and to read the flags on the wire. go-zero's side is
//! in the interop suite (`tests/tests/interop/compression.rs`).

use std::io::{Read, Write};
use std::net::SocketAddr;

use prost::Message;
use tonic::codec::CompressionEncoding;
use zrpc::compression::{CallCompression, Encoding};
use zrpc_client::conf::RpcClientConf;
use zrpc_tests::greeter::{TestGreeter, TestServer, start_server, test_conf};
use zrpc_tests::grpcio::{hex, run_client};
use zrpc_tests::h2raw::unary;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::pb::{HelloReply, HelloRequest, HelloStreamRequest};

const SAY_HELLO: &str = "/greeter.Greeter/SayHello";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// One unary call from grpcio (`tests/python/grpcio_call.py`) with its channel compression,
/// on a blocking thread (the server runs on the test's runtime).
async fn grpcio(
    addr: SocketAddr,
    method: &str,
    request: &[u8],
    compression: &str,
    repeat: usize,
) -> serde_json::Value {
    let args = vec![
        addr.to_string(),
        method.to_owned(),
        hex(request),
        compression.to_owned(),
        repeat.to_string(),
    ];
    run_client("grpcio_call.py", args).await
}

fn hello(name: &str) -> Vec<u8> {
    HelloRequest { name: name.into() }.encode_to_vec()
}

fn reply_of(v: &serde_json::Value) -> String {
    assert_eq!(v["code"], "OK", "{v}");
    HelloReply::decode(&unhex(v["reply"].as_str().unwrap())[..])
        .unwrap()
        .message
}

fn framed(flag: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![flag];
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .unwrap();
    out
}

async fn server(name: &str, edit: impl FnOnce(&mut zrpc::RpcServerConf)) -> TestServer {
    let mut conf = test_conf(name).with_cpu_threshold(0);
    edit(&mut conf);
    start_server(conf, TestGreeter::new()).await
}

async fn zrpc_client(addr: SocketAddr, edit: impl FnOnce(&mut RpcClientConf)) -> zrpc::Client {
    let mut conf = RpcClientConf::direct([addr.to_string()]);
    edit(&mut conf);
    zrpc::client(conf).await.unwrap()
}

#[tokio::test]
async fn grpcio_compressing_its_requests_is_answered_by_every_service() {
    let server = server("compression-grpcio", |_| {}).await;
    // gRPC core sends a small message uncompressed even in a gzip call (flag 0): both kinds
    let big = format!("{},compression", "p".repeat(2000));
    let cases = [
        ("gzip", big.as_str(), "true"),
        ("deflate", big.as_str(), "true"),
        ("gzip", "small,compression", "false"),
        ("none", big.as_str(), "none"),
    ];
    for (compression, name, how) in cases {
        let v = grpcio(server.addr, SAY_HELLO, &hello(name), compression, 1).await;
        assert_eq!(
            reply_of(&v),
            format!("hello {name} [compressed: {how}]"),
            "{compression}"
        );
    }
    // health, which zrpc adds itself (no generated code of the application's)
    let v = grpcio(server.addr, "/grpc.health.v1.Health/Check", &[], "gzip", 1).await;
    assert_eq!(v["code"], "OK", "{v}");
    assert_eq!(v["reply"], "0801", "SERVING");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_grpcio_zip_bomb_ends_its_call_with_resource_exhausted() {
    let server = server("compression-bomb", |_| {}).await;
    // one 16 MiB message (the same field again and again) that gzip makes ~50 KiB
    let piece = hello(&"z".repeat(1021));
    let v = grpcio(server.addr, SAY_HELLO, &piece, "gzip", 16 * 1024).await;
    assert_eq!(v["code"], "RESOURCE_EXHAUSTED", "{v}");
    let details = v["details"].as_str().unwrap();
    assert_eq!(
        details,
        "grpc: received message after decompression larger than max 4194304"
    );
    // the server goes on serving
    let v = grpcio(server.addr, SAY_HELLO, &hello("after"), "gzip", 1).await;
    assert_eq!(reply_of(&v), "hello after");
    server.shutdown().await.unwrap();
}

/// A request message over the server's 4 MiB limit is `ResourceExhausted` with grpc-go's
/// words, as gRPC's status-code table says (tonic's own decoder would answer `OutOfRange`), for
/// grpcio as for a zrpc client, and the server goes on serving.
#[tokio::test]
async fn an_oversized_uncompressed_request_is_resource_exhausted_as_grpc_go_answers() {
    let server = server("oversized-request", |_| {}).await;
    // one ~5 MiB message, sent uncompressed
    let piece = hello(&"z".repeat(1021));
    let v = grpcio(server.addr, SAY_HELLO, &piece, "none", 5 * 1024).await;
    assert_eq!(v["code"], "RESOURCE_EXHAUSTED", "{v}");
    let len = piece.len() * 5 * 1024;
    assert_eq!(
        v["details"].as_str().unwrap(),
        format!("grpc: received message larger than max ({len} vs. 4194304)")
    );
    // A zrpc client's call (tonic's encoder) gets the same answer.
    let client = zrpc_client(server.addr, |_| {}).await;
    let err = GreeterClient::new(client)
        .say_hello(HelloRequest {
            name: "x".repeat(5 * 1024 * 1024),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert_eq!(
        err.message(),
        "grpc: received message larger than max (5242885 vs. 4194304)"
    );
    // A message of exactly the limit is served.
    assert_eq!(piece.len(), 1024);
    let v = grpcio(server.addr, SAY_HELLO, &piece, "none", 4 * 1024).await;
    assert_eq!(v["code"], "OK", "{}", v["details"]);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn edge_cases_get_the_statuses_the_spec_names() {
    let server = server("compression-edges", |_| {}).await;
    let msg = hello("edge");

    // an encoding the server lacks: Unimplemented, with the ones it accepts
    let raw = unary(server.addr, &[("grpc-encoding", "br")], framed(1, b"x")).await;
    let (code, message) = raw.status();
    assert_eq!(code, 12, "{message}");
    assert!(message.contains("\"br\""), "{message}");
    assert_eq!(raw.headers["grpc-accept-encoding"], "gzip,deflate,zstd");

    // the compressed flag without grpc-encoding: Internal
    let raw = unary(server.addr, &[], framed(1, &gzip(&msg))).await;
    let (code, message) = raw.status();
    assert_eq!(code, 13, "{message}");
    assert!(message.contains("compressed-flag"), "{message}");

    // with grpc-encoding: identity too
    let raw = unary(
        server.addr,
        &[("grpc-encoding", "identity")],
        framed(1, &gzip(&msg)),
    )
    .await;
    assert_eq!(raw.status().0, 13);

    // gzip, and an answer that lists the accepted encodings
    let raw = unary(
        server.addr,
        &[("grpc-encoding", "gzip")],
        framed(1, &gzip(&msg)),
    )
    .await;
    assert_eq!(raw.status().0, 0);
    assert_eq!(raw.headers["grpc-accept-encoding"], "gzip,deflate,zstd");
    assert!(
        !raw.headers.contains_key("grpc-encoding"),
        "not configured to compress"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn responses_are_compressed_only_for_clients_that_advertised_the_encoding() {
    let server = server("compression-responses", |c| {
        c.compression = Some(Encoding::Gzip);
    })
    .await;
    let name = "y".repeat(4000);
    let req = framed(0, &hello(&name));
    let expected = HelloReply {
        message: format!("hello {name}"),
    }
    .encode_to_vec();

    let raw = unary(
        server.addr,
        &[("grpc-accept-encoding", "identity,gzip")],
        req.clone(),
    )
    .await;
    assert_eq!(raw.status().0, 0);
    assert_eq!(raw.headers["grpc-encoding"], "gzip");
    assert_eq!(raw.body[0], 1, "the compressed flag");
    assert_eq!(gunzip(&raw.body[5..]), expected);
    assert!(raw.body.len() < expected.len() / 10, "{}", raw.body.len());

    for accept in [None, Some("identity,deflate")] {
        let headers: Vec<_> = accept
            .map(|a| ("grpc-accept-encoding", a))
            .into_iter()
            .collect();
        let raw = unary(server.addr, &headers, req.clone()).await;
        assert!(!raw.headers.contains_key("grpc-encoding"), "{accept:?}");
        assert_eq!(raw.body, framed(0, &expected), "{accept:?}");
    }

    // tonic's codec takes zrpc's compressed responses, and a tonic client that does not ask
    // gets them plain
    let mut tonic_gzip = server
        .client()
        .await
        .accept_compressed(CompressionEncoding::Gzip);
    let r = tonic_gzip
        .say_hello(HelloRequest { name: name.clone() })
        .await
        .unwrap();
    assert_eq!(r.into_inner().message, format!("hello {name}"));
    let r = server
        .client()
        .await
        .say_hello(HelloRequest { name: name.clone() })
        .await
        .unwrap();
    assert_eq!(r.into_inner().message, format!("hello {name}"));

    // a handler turns it off for its call, or on for a small answer
    let raw = unary(
        server.addr,
        &[("grpc-accept-encoding", "gzip")],
        framed(0, &hello(&format!("{name},send:identity"))),
    )
    .await;
    assert!(!raw.headers.contains_key("grpc-encoding"));
    let raw = unary(
        server.addr,
        &[("grpc-accept-encoding", "gzip")],
        framed(0, &hello("tiny,send:gzip")),
    )
    .await;
    assert_eq!(raw.body[0], 1, "chosen by the handler, whatever the size");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_zrpc_client_compresses_by_config_by_method_and_by_call() {
    let server = server("compression-client", |_| {}).await;
    let big = format!("{},compression", "w".repeat(2000));
    let said = |m: String| m.rsplit_once(" [").map(|(_, how)| how.to_owned()).unwrap();
    let call = |client: zrpc::Client, name: String, choice: Option<CallCompression>| async move {
        let mut req = tonic::Request::new(HelloRequest { name });
        if let Some(c) = choice {
            req.extensions_mut().insert(c);
        }
        GreeterClient::new(client)
            .say_hello(req)
            .await
            .unwrap()
            .into_inner()
            .message
    };

    let gzip_client = zrpc_client(server.addr, |c| c.compression = Some(Encoding::Gzip)).await;
    assert_eq!(
        said(call(gzip_client.clone(), big.clone(), None).await),
        "compressed: true]"
    );
    // below CompressionMinSize: sent as it is, in a call that says gzip
    assert_eq!(
        said(call(gzip_client.clone(), "small,compression".into(), None).await),
        "compressed: false]"
    );
    // one call chosen uncompressed
    let off = CallCompression::send(None);
    assert_eq!(
        said(call(gzip_client, big.clone(), Some(off)).await),
        "compressed: none]"
    );

    let plain = zrpc_client(server.addr, |_| {}).await;
    assert_eq!(
        said(call(plain.clone(), big.clone(), None).await),
        "compressed: none]"
    );
    // one call chosen compressed: every size
    let on = CallCompression::send(Some(Encoding::Zstd));
    assert_eq!(
        said(call(plain, "s,compression".into(), Some(on)).await),
        "compressed: true]"
    );

    let per_method = zrpc_client(server.addr, |c| {
        c.method_compression = vec![zrpc::conf::MethodCompressionConf::new(
            SAY_HELLO,
            Some(Encoding::Deflate),
        )];
    })
    .await;
    assert_eq!(said(call(per_method, big, None).await), "compressed: true]");
    server.shutdown().await.unwrap();
}

/// A bare tonic server with tonic's own gzip: it decodes the requests a zrpc client
/// compresses, and compresses its answers, which the zrpc client decompresses.
#[tokio::test]
async fn a_zrpc_client_and_tonic_s_own_gzip_understand_each_other() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = TestGreeter::new()
        .into_service()
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let client = zrpc_client(addr, |c| c.compression = Some(Encoding::Gzip)).await;
    let name = "t".repeat(3000);
    let call = CallCompression::new();
    let mut req = tonic::Request::new(HelloRequest { name: name.clone() });
    req.extensions_mut().insert(call.clone());
    let reply = GreeterClient::new(client).say_hello(req).await.unwrap();
    assert_eq!(reply.get_ref().message, format!("hello {name}"));
    assert_eq!(
        call.last_received_compressed(),
        Some(true),
        "tonic compressed it"
    );
    assert!(reply.extensions().get::<CallCompression>().is_some());

    // without its accept_compressed, tonic refuses the compressed request: it was compressed
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let plain_addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TestGreeter::new().into_service())
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let client = zrpc_client(plain_addr, |c| c.compression = Some(Encoding::Gzip)).await;
    let err = GreeterClient::new(client)
        .say_hello(HelloRequest { name })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unimplemented, "{err}");
}

#[tokio::test]
async fn streams_and_limits_on_the_client() {
    let server = server("compression-streams", |c| {
        c.compression = Some(Encoding::Gzip);
        c.compression_min_size = 0;
    })
    .await;
    // a client without compression does not ask for it: answered plain
    let plain = zrpc_client(server.addr, |_| {}).await;
    let reply = GreeterClient::new(plain)
        .say_hello(HelloRequest {
            name: "p".repeat(3000),
        })
        .await
        .unwrap();
    assert!(reply.extensions().get::<CallCompression>().is_none());

    // one with Compression: gzip asks, and gets every message compressed
    let client = zrpc_client(server.addr, |c| c.compression = Some(Encoding::Gzip)).await;
    let stream = GreeterClient::new(client)
        .say_hello_stream(HelloStreamRequest {
            name: "s".into(),
            count: 3,
            interval_ms: 0,
        })
        .await
        .unwrap();
    let call = stream
        .extensions()
        .get::<CallCompression>()
        .cloned()
        .unwrap();
    let mut stream = stream.into_inner();
    for i in 0..3 {
        let m = stream.message().await.unwrap().unwrap();
        assert_eq!(m.message, format!("hello s {i}"));
        assert_eq!(call.last_received_compressed(), Some(true));
    }
    assert!(stream.message().await.unwrap().is_none());

    // a response that decompresses past the client's MaxDecompressedSize
    let small = zrpc_client(server.addr, |c| {
        c.compression = Some(Encoding::Gzip);
        c.max_decompressed_size = 1000;
    })
    .await;
    let err = GreeterClient::new(small)
        .say_hello(HelloRequest {
            name: "b".repeat(5000),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
    assert_eq!(
        err.message(),
        "grpc: received message after decompression larger than max 1000",
        "grpc-go's words"
    );
    server.shutdown().await.unwrap();
}

#[test]
fn unknown_or_missing_compression_in_a_file_is_a_clear_error() {
    let text = "Name: a.rpc\nListenOn: 127.0.0.1:0\nCompression: brotli\n";
    let e = zrpc::conf::from_str::<zrpc::RpcServerConf>(text, zrpc::conf::Format::Yaml, "a.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Compression") && e.contains("brotli") && e.contains("gzip"),
        "{e}"
    );
    let text = "Endpoints: [127.0.0.1:1]\nMethodCompression: [{FullMethod: SayHello, Compression: gzip}]\n";
    let e = zrpc::conf::from_str::<RpcClientConf>(text, zrpc::conf::Format::Yaml, "a.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("MethodCompression[0].FullMethod") && e.contains("SayHello"),
        "{e}"
    );
    let text = "Endpoints: [127.0.0.1:1]\nCompression: zstd\nMaxDecompressedSize: 0\n";
    let e = zrpc::conf::from_str::<RpcClientConf>(text, zrpc::conf::Format::Yaml, "a.yaml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("MaxDecompressedSize"), "{e}");
}
