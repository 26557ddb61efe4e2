//! The status codes a zrpc client reports at gRPC's edges, against a foreign server:
//! `grpc-edge` (interop/gozero/cmd/grpc-edge: a plain grpc-go v1.80 server, and a raw HTTP/2
//! peer on golang.org/x/net/http2's framer). Each code is the one grpc-go's client reports:
//!
//! - a stream the server resets at or after the caller's deadline (grpc-go's server does so
//!   with `CANCEL`): `DeadlineExceeded` (that it is no transport failure of the server is
//!   checked where the endpoint's statistics can be read, `balancer::endpoint`'s tests);
//! - `RST_STREAM CANCEL` before the deadline: `Cancelled`;
//! - a connection cut in the middle of a response body: `Unavailable` (with a retry policy
//!   too: the headers committed the call);
//! - a message the client cannot decode: `Internal`;
//! - status details, binary metadata and a non-ASCII `grpc-message`: unchanged;
//! - a request that crossed the server's graceful GOAWAY (its `MaxConnectionAge`): served on
//!   the next connection, as grpc-go's client's transparent retry does, with one endpoint too.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;
use zrpc::RpcClientConf;
use zrpc_tests::gozero_or_skip;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::pb::{HelloRequest, HelloStreamRequest};

/// The `details` answer's message, as grpc-edge sends it.
const DETAILS_MESSAGE: &str = "nöt välid: 名前 ✓ 100%";

/// A running grpc-edge: its two ports and the event lines it prints.
struct Edge {
    grpc: String,
    raw: String,
    /// The greeter with `MaxConnectionAge` 300 ms.
    aging: String,
    events: std::sync::mpsc::Receiver<String>,
    child: Child,
    _stdin: ChildStdin,
}

impl Edge {
    fn start(program: &std::path::Path) -> Edge {
        let mut child = Command::new(program)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first: serde_json::Value =
            serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let (tx, events) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Edge {
            grpc: first["grpc"].as_str().unwrap().to_owned(),
            raw: first["raw"].as_str().unwrap().to_owned(),
            aging: first["aging"].as_str().unwrap().to_owned(),
            events,
            child,
            _stdin: stdin,
        }
    }

    /// Waits for an event line containing `what`.
    fn wait_event(&self, what: &str) {
        loop {
            let line = self
                .events
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("no {what:?} event from grpc-edge"));
            if line.contains(what) {
                return;
            }
        }
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The config of a zrpc client of `addr` with the call timeout `timeout`, without its breaker
/// (the failures these tests make one after the other would open it).
fn conf(addr: &str, timeout: Duration) -> RpcClientConf {
    let mut conf = RpcClientConf::direct([addr]).with_timeout(timeout);
    conf.middlewares.breaker = false;
    conf
}

/// A zrpc client of `addr` with the call timeout `timeout` (see [`conf`]).
async fn client(addr: &str, timeout: Duration) -> zrpc::Client {
    zrpc::client(conf(addr, timeout)).await.unwrap()
}

/// The error of a `SayHello` asking `name` of the grpc-go server at `addr` (5 s timeout).
async fn failed_call(addr: &str, name: &str) -> tonic::Status {
    GreeterClient::new(client(addr, Duration::from_secs(5)).await)
        .say_hello(HelloRequest { name: name.into() })
        .await
        .unwrap_err()
}

#[tokio::test]
async fn a_reset_at_the_callers_deadline_is_deadline_exceeded() {
    let p = gozero_or_skip!();
    let edge = Edge::start(&p.edge);

    // unary: grpc-go resets the stream at the deadline, about when the client's own timer fires
    let timeout = Duration::from_millis(50);
    let mut greeter = GreeterClient::new(client(&edge.grpc, timeout).await);
    for i in 0..30 {
        let started = Instant::now();
        let err = greeter
            .say_hello(HelloRequest {
                name: "sleep".into(),
            })
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.code(), Code::DeadlineExceeded, "call {i}: {err:?}");
        // Ended by the deadline: grpc-go's handler waits for the call's end, so without the
        // deadline the call would never end. The margin above the 50 ms is for a loaded machine.
        assert!(
            took >= timeout && took < Duration::from_secs(3),
            "call {i} took {took:?}"
        );
    }

    // a stream whose head came: the client reads its reset only after the deadline (it was not
    // reading when grpc-go reset the stream), so the reset, not the client's timer, ends it
    let mut stream = sleeping_stream(&edge.grpc).await;
    edge.wait_event("stream-ended");
    let err = stream.message().await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
}

/// A `SayHelloStream` the grpc-go server at `addr` answers with its head and one message, then
/// nothing until the call's deadline (300 ms), read up to that message.
async fn sleeping_stream(addr: &str) -> tonic::Streaming<zrpc_tests::pb::HelloReply> {
    let mut greeter = GreeterClient::new(client(addr, Duration::from_millis(300)).await);
    let mut stream = greeter
        .say_hello_stream(HelloStreamRequest {
            name: "sleep".into(),
            count: 1,
            interval_ms: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.message, "hello sleep 0");
    stream
}

/// Whichever ends it first (the client's timer or grpc-go's reset), a stream ends at its
/// deadline with `DeadlineExceeded`. (That the client ends it by itself against a server that
/// does not is `client_calls.rs`' test, against tonic's server.)
#[tokio::test]
async fn a_stream_ends_at_the_callers_deadline() {
    let p = gozero_or_skip!();
    let edge = Edge::start(&p.edge);
    let started = Instant::now();
    let mut stream = sleeping_stream(&edge.grpc).await;
    let err = stream.message().await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[tokio::test]
async fn a_cancel_from_the_server_before_the_deadline_is_cancelled() {
    let p = gozero_or_skip!();
    let edge = Edge::start(&p.edge);
    let mut greeter = GreeterClient::new(client(&edge.raw, Duration::from_secs(5)).await);
    for edge_case in ["cancel-before-head", "cancel-after-head"] {
        let mut req = tonic::Request::new(HelloRequest { name: "x".into() });
        req.metadata_mut()
            .insert("x-edge", edge_case.parse().unwrap());
        let err = greeter.say_hello(req).await.unwrap_err();
        assert_eq!(err.code(), Code::Cancelled, "{edge_case}: {err:?}");
    }
}

/// A TCP proxy to `upstream` that closes both directions once it has passed `limit` bytes from
/// the server (a fault proxy cutting connections).
async fn cutting_proxy(upstream: String, limit: usize) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut cr, mut cw) = client.split();
                let (mut sr, mut sw) = server.split();
                let up = tokio::io::copy(&mut cr, &mut sw);
                let down = async {
                    let mut passed = 0;
                    let mut buf = vec![0u8; 4096];
                    while passed < limit {
                        let n = sr.read(&mut buf).await?;
                        if n == 0 {
                            break;
                        }
                        let n = n.min(limit - passed);
                        cw.write_all(&buf[..n]).await?;
                        passed += n;
                    }
                    Ok::<_, std::io::Error>(())
                };
                tokio::select! {
                    _ = up => {}
                    _ = down => {}
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_connection_cut_in_the_middle_of_a_response_is_unavailable() {
    let p = gozero_or_skip!();
    let edge = Edge::start(&p.edge);
    let proxy = cutting_proxy(edge.grpc.clone(), 20_000).await;
    let plain = conf(&proxy, Duration::from_secs(5));
    let retrying = plain
        .clone()
        .with_method_config(zrpc::conf::MethodConf::retry(
            [zrpc::conf::MethodName::new("greeter.Greeter", "")],
            zrpc::conf::RetryPolicyConf::default(),
        ));
    for (what, conf) in [("no policy", plain), ("a retry policy", retrying)] {
        let mut greeter = GreeterClient::new(zrpc::client(conf).await.unwrap());
        let mut stream = greeter
            .say_hello_stream(HelloStreamRequest {
                name: "cut".into(),
                count: 5_000,
                interval_ms: 0,
            })
            .await
            .unwrap()
            .into_inner();
        let mut got = 0;
        let err = loop {
            match stream.message().await {
                Ok(Some(_)) => got += 1,
                Ok(None) => panic!("{what}: the stream ended whole after {got} messages"),
                Err(e) => break e,
            }
        };
        assert!(got > 100, "{what}: cut after {got} messages");
        assert_eq!(err.code(), Code::Unavailable, "{what}: {err:?}");
    }
}

#[tokio::test]
async fn a_message_the_client_cannot_decode_is_internal() {
    let p = gozero_or_skip!();
    let edge = Edge::start(&p.edge);
    let err = failed_call(&edge.grpc, "bad-message").await;
    assert_eq!(err.code(), Code::Internal, "{err:?}");
}

/// `google.rpc.Status`, `google.protobuf.Any` and `google.rpc.BadRequest`, as much as the test
/// reads of them.
mod rpc {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Status {
        #[prost(int32, tag = "1")]
        pub(super) code: i32,
        #[prost(string, tag = "2")]
        pub(super) message: String,
        #[prost(message, repeated, tag = "3")]
        pub(super) details: Vec<Any>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Any {
        #[prost(string, tag = "1")]
        pub(super) type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        pub(super) value: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct BadRequest {
        #[prost(message, repeated, tag = "1")]
        pub(super) field_violations: Vec<FieldViolation>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct FieldViolation {
        #[prost(string, tag = "1")]
        pub(super) field: String,
        #[prost(string, tag = "2")]
        pub(super) description: String,
    }
}

#[tokio::test]
async fn status_details_binary_metadata_and_a_non_ascii_message_pass_unchanged() {
    use prost::Message;

    let p = gozero_or_skip!();
    let edge = Edge::start(&p.edge);
    let err = failed_call(&edge.grpc, "details").await;
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(err.message(), DETAILS_MESSAGE);
    let details = rpc::Status::decode(err.details()).unwrap();
    assert_eq!(details.code, Code::InvalidArgument as i32);
    assert_eq!(details.message, DETAILS_MESSAGE);
    assert_eq!(details.details.len(), 1);
    assert_eq!(
        details.details[0].type_url,
        "type.googleapis.com/google.rpc.BadRequest"
    );
    let bad = rpc::BadRequest::decode(&*details.details[0].value).unwrap();
    assert_eq!(
        bad.field_violations,
        vec![rpc::FieldViolation {
            field: "name".into(),
            description: "must not be «details»".into()
        }]
    );
    let bin = |key: &str| {
        err.metadata()
            .get_bin(key)
            .unwrap_or_else(|| panic!("{key} missing: {:?}", err.metadata()))
            .to_bytes()
            .unwrap()
    };
    assert_eq!(&bin("x-head-bin")[..], [0, 1, 2, 0xff]);
    assert_eq!(&bin("x-trail-bin")[..], [0xff, 0xfe, 0, 1]);
}

/// grpc-go's server ends every connection at its `MaxConnectionAge` (300 ms, jittered) with a
/// graceful GOAWAY: the requests that cross it are turned away unprocessed. A zrpc client with
/// that one endpoint sends them again on its next connection: eight callers back to back over
/// about four ages see no failure (without the re-send, some fail with `Unavailable
/// "operation was canceled"` in every run; a bare tonic channel has no such re-send).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_ride_across_grpc_go_connection_ages() {
    let p = gozero_or_skip!();
    let edge = Edge::start(&p.edge);
    let greeter = GreeterClient::new(client(&edge.aging, Duration::from_secs(5)).await);
    let until = Instant::now() + Duration::from_millis(1200);
    let callers: Vec<_> = (0..8)
        .map(|i| {
            let mut greeter = greeter.clone();
            tokio::spawn(async move {
                let mut calls = 0u32;
                while Instant::now() < until {
                    let name = format!("aging {i}");
                    let reply = greeter
                        .say_hello(HelloRequest { name: name.clone() })
                        .await
                        .expect("served across grpc-go's connection ages");
                    assert_eq!(reply.into_inner().message, format!("hello {name}"));
                    calls += 1;
                }
                calls
            })
        })
        .collect();
    let mut calls = 0;
    for caller in callers {
        calls += caller.await.unwrap();
    }
    println!("grpc-go MaxConnectionAge 300 ms: {calls} calls by 8 callers over 1.2 s, all served");
    assert!(calls > 100, "{calls} calls");
}
