use std::convert::Infallible;
use std::io::Write;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::BodyExt;
use tower::ServiceExt;
use zrpc_core::grpc::compression::CallCompression;

use super::*;

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

fn request(headers: &[(&'static str, &'static str)], body: Vec<u8>) -> Request<Body> {
    let mut req = Request::builder().uri("/t.S/M");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(Body::new(http_body_util::Full::new(Bytes::from(body))))
        .unwrap()
}

/// What the service saw of a request.
#[derive(Debug)]
struct Seen {
    headers: HeaderMap,
    body: Result<Vec<u8>, String>,
    call: Option<CallCompression>,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            headers: HeaderMap::new(),
            body: Ok(Vec::new()),
            call: None,
        }
    }
}

/// A service that reads its request whole, then answers `reply` (one message) or, with
/// `trailers_only`, an error in the headers; `choose` runs with the call's compression first.
async fn serve(
    conf: RpcServerConf,
    req: Request<Body>,
    reply: Vec<u8>,
    trailers_only: bool,
    choose: fn(&CallCompression),
) -> (Response<ResponseBody<Body>>, Seen) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen::default()));
    let record = seen.clone();
    let svc = tower::service_fn(move |req: Request<Body>| {
        let record = record.clone();
        let reply = reply.clone();
        async move {
            let (parts, body) = req.into_parts();
            let call = parts.extensions.get::<CallCompression>().cloned();
            if let Some(c) = &call {
                choose(c);
            }
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes().to_vec())
                .map_err(|s| format!("{:?}: {}", s.code(), s.message()));
            *record.lock().unwrap() = Seen {
                headers: parts.headers,
                body,
                call,
            };
            if trailers_only {
                return Ok::<_, Infallible>(status_response(code::INTERNAL, "no"));
            }
            Ok(Response::new(Body::new(http_body_util::Full::new(
                Bytes::from(framed(0, &reply)),
            ))))
        }
    });
    let resp = CompressionLayer::new(&conf)
        .layer(svc)
        .oneshot(req)
        .await
        .unwrap();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (resp, seen)
}

fn conf() -> RpcServerConf {
    RpcServerConf::new("t.rpc", "127.0.0.1:0")
}

async fn body_of(resp: Response<ResponseBody<Body>>) -> Vec<u8> {
    resp.into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec()
}

#[tokio::test]
async fn a_gzip_request_reaches_the_service_decompressed() {
    let req = request(
        &[("grpc-encoding", "gzip")],
        [framed(1, &gzip(b"hello")), framed(0, b"plain")].concat(),
    );
    let (resp, seen) = serve(conf(), req, b"hi".to_vec(), false, |_| {}).await;
    assert_eq!(
        seen.body.unwrap(),
        [framed(0, b"hello"), framed(0, b"plain")].concat()
    );
    assert!(!seen.headers.contains_key("grpc-encoding"));
    assert_eq!(seen.call.unwrap().last_received_compressed(), Some(false));
    assert_eq!(resp.headers()["grpc-accept-encoding"], built());
    assert!(
        !resp.headers().contains_key("grpc-encoding"),
        "not asked for"
    );
    assert_eq!(body_of(resp).await, framed(0, b"hi"));
}

#[tokio::test]
async fn an_unsupported_encoding_is_unimplemented_with_the_accepted_ones() {
    let req = request(&[("grpc-encoding", "br")], framed(1, b"??"));
    let (resp, seen) = serve(conf(), req, Vec::new(), false, |_| {}).await;
    assert!(
        seen.body.is_ok() && seen.body.unwrap().is_empty(),
        "not called"
    );
    let h = resp.headers();
    assert_eq!(h["grpc-status"], "12");
    assert_eq!(h["grpc-accept-encoding"], built());
    let msg = zrpc_core::grpc::status_message_from_headers(h).unwrap();
    assert!(msg.contains("\"br\"") && msg.contains("gzip"), "{msg}");
}

#[tokio::test]
async fn identity_and_plain_calls_pass_untouched() {
    for headers in [&[("grpc-encoding", "identity")][..], &[]] {
        let req = request(headers, framed(0, b"x"));
        let (resp, seen) = serve(conf(), req, b"y".to_vec(), false, |_| {}).await;
        assert_eq!(seen.body.unwrap(), framed(0, b"x"));
        assert!(seen.call.is_none());
        assert!(!resp.headers().contains_key("grpc-accept-encoding"));
        assert_eq!(body_of(resp).await, framed(0, b"y"));
    }
}

#[tokio::test]
async fn a_bomb_ends_the_call_with_resource_exhausted() {
    let bomb = gzip(&vec![0; 8 << 20]);
    let req = request(&[("grpc-encoding", "gzip")], framed(1, &bomb));
    let (_, seen) = serve(conf(), req, Vec::new(), false, |_| {}).await;
    let err = seen.body.unwrap_err();
    assert!(
        err.starts_with("ResourceExhausted")
            && err.contains("grpc: received message after decompression larger than max"),
        "{err}"
    );
}

#[tokio::test]
async fn responses_are_compressed_only_for_clients_that_accept_the_encoding() {
    let big = vec![b'z'; 4096];
    let mut c = conf().with_compression(Some(Encoding::Gzip));
    c.compression_min_size = 1024;
    for (accept, compressed) in [("gzip", true), ("deflate, gzip", true), ("zstd", false)] {
        let req = request(&[("grpc-accept-encoding", accept)], framed(0, b"q"));
        let (resp, _) = serve(c.clone(), req, big.clone(), false, |_| {}).await;
        assert_eq!(
            resp.headers().get("grpc-encoding").map(|v| v.as_bytes()),
            compressed.then_some(&b"gzip"[..]),
            "{accept}"
        );
        let body = body_of(resp).await;
        assert_eq!(body[0], u8::from(compressed), "{accept}");
    }
    // without grpc-accept-encoding: plain, and no call compression for the handler
    let (resp, seen) = serve(c.clone(), request(&[], vec![]), big.clone(), false, |_| {}).await;
    assert!(seen.call.is_none());
    assert!(!resp.headers().contains_key("grpc-encoding"));
    // an error in the headers is left alone
    let req = request(&[("grpc-accept-encoding", "gzip")], vec![]);
    let (resp, _) = serve(c.clone(), req, big.clone(), true, |_| {}).await;
    assert!(!resp.headers().contains_key("grpc-encoding"));
    // the handler turns it off for its call
    let req = request(&[("grpc-accept-encoding", "gzip")], vec![]);
    let (resp, _) = serve(c, req, big.clone(), false, |c| c.set_send(None)).await;
    assert!(!resp.headers().contains_key("grpc-encoding"));
    assert_eq!(body_of(resp).await, framed(0, &big));
}

#[tokio::test]
async fn a_handler_of_a_compressed_request_can_compress_its_response() {
    let req = request(
        &[("grpc-encoding", "gzip"), ("grpc-accept-encoding", "gzip")],
        framed(1, &gzip(b"q")),
    );
    let (resp, _) = serve(conf(), req, b"tiny".to_vec(), false, |c| {
        c.set_send(Some(Encoding::Gzip))
    })
    .await;
    assert_eq!(resp.headers()["grpc-encoding"], "gzip");
    let body = body_of(resp).await;
    assert_eq!(body[0], 1, "chosen for the call: every size");
}

/// The encodings this build decompresses, as the server lists them (`gzip` by default; the
/// workspace's tests turn `deflate` and `zstd` on too).
fn built() -> http::HeaderValue {
    zrpc_core::grpc::compression::Encodings::built().header_value()
}
