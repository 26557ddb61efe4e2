//! A server that breaks the protocol in the middle of a call (a message cut short, no trailers, a
//! malformed `grpc-status`, a compressed flag without an encoding, an encoding the client lacks,
//! a message that does not decode, a stream reset with each HTTP/2 reason): the zrpc client
//! must end the call with the code a grpc-go v1.83.2 client gives (`gzip-interop`'s
//! `unary_status`), for the same bytes from the same server. The server is the h2 crate's,
//! scripted per case; both clients call `grpc.testing.TestService/UnaryCall` on it.

use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use zrpc::RpcClientConf;
use zrpc_interop::pb::SimpleRequest;
use zrpc_interop::pb::test_service_client::TestServiceClient;
use zrpc_tests::grpcgo::grpcgo_unary_status;

/// What the scripted server does after the request's headers.
#[derive(Debug, Clone, Copy)]
enum Script {
    /// A message prefix declaring 10 octets, 3 of them, then the end of the stream.
    CutShort,
    /// A whole (empty) message, then the end of the stream without trailers.
    NoTrailers,
    /// A whole message, then `grpc-status: abc`.
    MalformedStatus,
    /// A message with the compressed flag, no `grpc-encoding`.
    CompressedWithoutEncoding,
    /// `grpc-encoding: br` and a compressed message.
    UnknownEncoding,
    /// A message whose bytes are not a `SimpleResponse`, then status 0.
    Undecodable,
    /// The response headers, then `RST_STREAM` with this reason.
    Reset(h2::Reason),
}

impl Script {
    fn name(self) -> String {
        match self {
            Script::Reset(r) => format!("RST_STREAM {r:?} after the headers"),
            other => format!("{other:?}"),
        }
    }
}

fn grpc_head(encoding: Option<&'static str>) -> http::Response<()> {
    let mut b = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc");
    if let Some(e) = encoding {
        b = b.header("grpc-encoding", e);
    }
    b.body(()).unwrap()
}

fn status(code: &str) -> HeaderMap {
    let mut t = HeaderMap::new();
    t.insert("grpc-status", code.parse().unwrap());
    t
}

/// Answers one call's `respond` as `script` says.
fn answer(script: Script, mut respond: h2::server::SendResponse<Bytes>) -> Result<(), h2::Error> {
    let encoding = matches!(script, Script::UnknownEncoding).then_some("br");
    let mut s = respond.send_response(grpc_head(encoding), false)?;
    match script {
        Script::CutShort => s.send_data(Bytes::from_static(&[0, 0, 0, 0, 10, 1, 2, 3]), true),
        Script::NoTrailers => s.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true),
        Script::MalformedStatus => {
            s.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), false)?;
            s.send_trailers(status("abc"))
        }
        Script::CompressedWithoutEncoding | Script::UnknownEncoding => {
            s.send_data(Bytes::from_static(&[1, 0, 0, 0, 2, 0xab, 0xcd]), false)?;
            s.send_trailers(status("0"))
        }
        Script::Undecodable => {
            // field 1 (payload), wire type 2, a length past the end
            s.send_data(Bytes::from_static(&[0, 0, 0, 0, 2, 0x0a, 0x7f]), false)?;
            s.send_trailers(status("0"))
        }
        Script::Reset(reason) => {
            s.send_reset(reason);
            Ok(())
        }
    }
}

/// A server on 127.0.0.1:0 answering every call as `script` says.
async fn scripted_server(script: Script) -> u16 {
    zrpc_tests::h2raw::h2_server(move |respond| {
        let _ = answer(script, respond);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_breaking_the_protocol_mid_call_gets_grpc_gos_codes() {
    let p = zrpc_tests::grpcgo_or_skip!();
    let scripts = [
        Script::CutShort,
        Script::NoTrailers,
        Script::MalformedStatus,
        Script::CompressedWithoutEncoding,
        Script::UnknownEncoding,
        Script::Undecodable,
        Script::Reset(h2::Reason::PROTOCOL_ERROR),
        Script::Reset(h2::Reason::INTERNAL_ERROR),
        Script::Reset(h2::Reason::CANCEL),
        Script::Reset(h2::Reason::REFUSED_STREAM),
        Script::Reset(h2::Reason::ENHANCE_YOUR_CALM),
        Script::Reset(h2::Reason::INADEQUATE_SECURITY),
    ];
    let mut differ = Vec::new();
    for script in scripts {
        let port = scripted_server(script).await;
        let mut conf = RpcClientConf::direct([format!("127.0.0.1:{port}")]);
        conf.non_block = true;
        let mut stub = TestServiceClient::new(zrpc::client(conf).await.unwrap());
        let zrpc = tokio::time::timeout(
            Duration::from_secs(10),
            stub.unary_call(SimpleRequest::default()),
        )
        .await
        .expect("an answer within 10 s")
        .unwrap_err();
        let go = grpcgo_unary_status(p, port, 0, false, None).await;
        println!(
            "{}: zrpc {} {:?}; grpc-go {} {:?}",
            script.name(),
            zrpc.code() as i32,
            zrpc.message(),
            go.0,
            go.1
        );
        if zrpc.code() as i32 != go.0 {
            differ.push(script.name());
        }
        // where zrpc takes grpc-go's words, they are the same (a reset's after the endpoint)
        if matches!(
            script,
            Script::CutShort | Script::NoTrailers | Script::Reset(_)
        ) {
            assert!(zrpc.message().ends_with(&go.1), "{}: {zrpc}", script.name());
        }
        // a malformed status is named, as grpc-go names it (its rest is Go's parser's words)
        if let Script::MalformedStatus = script {
            let prefix = "transport: malformed grpc-status: ";
            assert!(go.1.starts_with(prefix), "grpc-go: {:?}", go.1);
            assert_eq!(
                zrpc.message(),
                format!("{prefix}\"abc\" is not a status code")
            );
        }
    }
    assert!(differ.is_empty(), "codes differ from grpc-go's: {differ:?}");
}
