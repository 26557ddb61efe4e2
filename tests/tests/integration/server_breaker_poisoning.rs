//! Server breaker poisoning: failures a caller causes (undecodable requests, request
//! bodies that never arrive, missing credentials) never open the server breaker for others; a
//! failing handler still does (the control).

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Code, Request, Status};
use zrpc_tests::greeter::{SAY_HELLO, SAY_HELLO_STREAM, TestGreeter, start_server, test_conf};
use zrpc_tests::pb::{HelloRequest, HelloStreamRequest};

/// A rejection by the breaker of `method`, its figures checked.
fn breaker_open(e: &tonic::Status, method: &str) -> bool {
    e.code() == Code::Unavailable
        && zrpc_tests::explained::breaker_open(e.message(), method).is_some()
}

/// Field 1 (`name`, a string) said to be 5 bytes long, followed by 1: prost cannot decode it.
const GARBAGE: &[u8] = &[0x0a, 0x05, 0x41];

/// Sends and receives messages as raw bytes, so a test can put anything in a valid gRPC frame.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

async fn grpc(ch: &Channel) -> tonic::client::Grpc<Channel> {
    let mut g = tonic::client::Grpc::new(ch.clone());
    g.ready().await.unwrap();
    g
}

/// One unary call on `path` whose request message is `payload`, as is.
async fn raw_unary(ch: &Channel, path: &'static str, payload: &'static [u8]) -> Status {
    let mut g = grpc(ch).await;
    let req = Request::new(Bytes::from_static(payload));
    match g
        .unary(req, PathAndQuery::from_static(path), RawCodec)
        .await
    {
        Ok(_) => Status::ok("unexpected success"),
        Err(s) => s,
    }
}

/// One call on `path` that sends its headers (deadline `deadline`) and never its request body.
async fn body_never_sent(ch: &Channel, path: &'static str, deadline: Duration) -> Code {
    let mut g = grpc(ch).await;
    let mut req = Request::new(futures_util::stream::pending::<Bytes>());
    req.set_timeout(deadline);
    let call = g.client_streaming(req, PathAndQuery::from_static(path), RawCodec);
    match tokio::time::timeout(deadline * 10, call).await {
        Ok(Ok(_)) => Code::Ok,
        Ok(Err(s)) => s.code(),
        // The server never answered: the client gives up (and resets the stream).
        Err(_) => Code::DeadlineExceeded,
    }
}

fn with_credentials<T>(msg: T, creds: Option<(&str, &str)>) -> Request<T> {
    let mut r = Request::new(msg);
    if let Some((app, token)) = creds {
        r.metadata_mut().insert("app", app.parse().unwrap());
        r.metadata_mut().insert("token", token.parse().unwrap());
    }
    r
}

/// 200 unary calls of a well-behaved client; how many the breaker rejected.
async fn unary_rejections(ch: &Channel, creds: Option<(&str, &str)>) -> usize {
    let mut c = zrpc_tests::pb::greeter_client::GreeterClient::new(ch.clone());
    let mut open = 0;
    for i in 0..200 {
        let req = with_credentials(
            HelloRequest {
                name: format!("good {i}"),
            },
            creds,
        );
        match c.say_hello(req).await {
            Ok(_) => {}
            Err(e) if breaker_open(&e, SAY_HELLO) => open += 1,
            Err(e) => panic!("well-behaved call {i} failed: {e:?}"),
        }
    }
    open
}

#[tokio::test]
async fn malformed_protobuf_does_not_open_the_breaker() {
    let srv = start_server(test_conf("poison.decode.rpc"), TestGreeter::new()).await;
    let ch = srv.channel().await;
    for i in 0..100 {
        let s = raw_unary(&ch, SAY_HELLO, GARBAGE).await;
        // tonic's decode error: the call reached the codec, never the handler.
        assert_eq!(s.code(), Code::Internal, "garbage call {i}: {s:?}");
    }
    assert_eq!(srv.greeter.started(), 0);
    assert_eq!(unary_rejections(&ch, None).await, 0);
    assert_eq!(srv.greeter.started(), 200);
    srv.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn malformed_protobuf_from_callers_without_credentials_does_not_open_the_breaker() {
    let mut conf = test_conf("poison.auth.rpc").with_auth_tokens([("billing", "s3cret")]);
    conf.strict_control = true;
    let srv = start_server(conf, TestGreeter::new()).await;
    let ch = srv.channel().await;
    for i in 0..100 {
        let s = raw_unary(&ch, SAY_HELLO, GARBAGE).await;
        assert_eq!(s.code(), Code::Unauthenticated, "garbage call {i}: {s:?}");
    }
    assert_eq!(unary_rejections(&ch, Some(("billing", "s3cret"))).await, 0);
    srv.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn request_bodies_that_never_arrive_do_not_open_the_breaker() {
    let srv = start_server(test_conf("poison.body.rpc"), TestGreeter::new()).await;
    let ch = srv.channel().await;
    let deadline = Duration::from_millis(200);
    // 200 streaming and 200 unary calls that send their headers, then nothing until the
    // deadline; concurrently, to keep the test short.
    let mut calls = Vec::new();
    for path in [SAY_HELLO_STREAM, SAY_HELLO] {
        for _ in 0..200 {
            let ch = ch.clone();
            calls.push(tokio::spawn(async move {
                body_never_sent(&ch, path, deadline).await
            }));
        }
    }
    for call in calls {
        let code = call.await.unwrap();
        assert_ne!(code, Code::Ok);
    }
    assert_eq!(srv.greeter.started(), 0);

    // A well-behaved client: 200 streaming calls, 200 unary calls, none rejected.
    let mut c = zrpc_tests::pb::greeter_client::GreeterClient::new(ch.clone());
    let mut open = 0;
    for i in 0..200 {
        let req = HelloStreamRequest {
            name: format!("good {i}"),
            count: 1,
            interval_ms: 0,
        };
        match c.say_hello_stream(req).await {
            Ok(resp) => {
                let mut s = resp.into_inner();
                while let Some(m) = s.message().await.unwrap() {
                    assert!(m.message.starts_with("hello"));
                }
            }
            Err(e) if breaker_open(&e, SAY_HELLO_STREAM) => open += 1,
            Err(e) => panic!("well-behaved stream {i} failed: {e:?}"),
        }
    }
    assert_eq!(open, 0, "streaming calls rejected by the breaker");
    assert_eq!(unary_rejections(&ch, None).await, 0);
    srv.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn handler_failures_still_open_the_breaker() {
    // The control: the same harness sees the breaker open when the handler itself fails.
    let srv = start_server(test_conf("poison.control.rpc"), TestGreeter::new()).await;
    let ch = srv.channel().await;
    let mut c = zrpc_tests::pb::greeter_client::GreeterClient::new(ch.clone());
    for _ in 0..100 {
        let e = c
            .say_hello(HelloRequest {
                name: "fail:13".into(),
            })
            .await
            .unwrap_err();
        assert!(
            matches!(e.code(), Code::Internal | Code::Unavailable),
            "{e:?}"
        );
    }
    let open = unary_rejections(&ch, None).await;
    assert!(
        open > 0,
        "the breaker never opened after 100 handler failures"
    );
    srv.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn handler_panics_open_the_breaker() {
    // The recover layer drops a panicking handler, which looks like a cancellation; it is still
    // the server's failure.
    let srv = start_server(test_conf("poison.panic.rpc"), TestGreeter::new()).await;
    let ch = srv.channel().await;
    let mut c = zrpc_tests::pb::greeter_client::GreeterClient::new(ch.clone());
    for _ in 0..100 {
        let e = c
            .say_hello(HelloRequest {
                name: "panic".into(),
            })
            .await
            .unwrap_err();
        assert!(
            matches!(e.code(), Code::Internal | Code::Unavailable),
            "{e:?}"
        );
    }
    let open = unary_rejections(&ch, None).await;
    assert!(
        open > 0,
        "the breaker never opened after 100 handler panics"
    );
    srv.shutdown().await.expect("clean shutdown");
}
