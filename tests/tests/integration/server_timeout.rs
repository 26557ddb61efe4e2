//! Server timeouts: `Timeout`, `MethodTimeouts` overrides, the handler is dropped
//! on expiry, streams are not timed out.

use std::time::{Duration, Instant};

use tokio_stream::StreamExt;
use tonic::Code;
use zrpc_tests::greeter::{SAY_HELLO, TestGreeter, start_server, test_conf};
use zrpc_tests::pb::{HelloRequest, HelloStreamRequest};

fn hello(name: &str) -> HelloRequest {
    HelloRequest { name: name.into() }
}

#[tokio::test]
async fn server_timeout_gives_deadline_exceeded_and_drops_the_handler() {
    let conf = test_conf("timeout.rpc").with_timeout(Duration::from_millis(200));
    let srv = start_server(conf, TestGreeter::new()).await;
    let mut client = srv.client().await;

    let t0 = Instant::now();
    let err = client.say_hello(hello("sleep:2000")).await.unwrap_err();
    let took = t0.elapsed();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(
        took >= Duration::from_millis(190) && took < Duration::from_millis(1500),
        "{took:?}"
    );
    // A fast call is fine.
    assert!(client.say_hello(hello("sleep:10")).await.is_ok());
    // The slow handler was dropped: it never finished.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(srv.greeter.started(), 2);
    assert_eq!(srv.greeter.finished(), 1);
    srv.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn server_method_timeouts_override_the_default() {
    // Shorter than the default.
    let conf = test_conf("mtimeout-short.rpc")
        .with_timeout(Duration::from_secs(5))
        .with_method_timeout(SAY_HELLO, Duration::from_millis(150));
    let srv = start_server(conf, TestGreeter::new()).await;
    let err = srv
        .client()
        .await
        .say_hello(hello("sleep:1000"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded);
    srv.shutdown().await.expect("clean shutdown");

    // Longer than the default.
    let conf = test_conf("mtimeout-long.rpc")
        .with_timeout(Duration::from_millis(100))
        .with_method_timeout(SAY_HELLO, Duration::from_secs(3));
    let srv = start_server(conf, TestGreeter::new()).await;
    let reply = srv.client().await.say_hello(hello("sleep:400")).await;
    assert!(reply.is_ok(), "{reply:?}");
    srv.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn server_streams_are_not_timed_out() {
    let conf = test_conf("stream-timeout.rpc").with_timeout(Duration::from_millis(100));
    let srv = start_server(conf, TestGreeter::new()).await;
    let mut stream = srv
        .client()
        .await
        .say_hello_stream(HelloStreamRequest {
            name: "s".into(),
            count: 4,
            interval_ms: 80,
        })
        .await
        .expect("stream starts")
        .into_inner();
    let mut got = 0;
    while let Some(m) = stream.next().await {
        m.expect("no timeout mid-stream");
        got += 1;
    }
    assert_eq!(got, 4);
    srv.shutdown().await.expect("clean shutdown");
}

/// The caller's `grpc-timeout` is enforced by the server even with its own `Timeout` off, in
/// the lean chain (every middleware off) and in the governed one: tonic's `GrpcTimeout` did it
/// before zrpc served connections itself. The server drops the handler. (The server answers
/// `DeadlineExceeded`, `transport::serve`'s unit tests show it; a tonic client times the call out
/// itself at the same instant, as `Cancelled`, so either code can reach this caller.)
#[tokio::test]
async fn the_callers_deadline_holds_with_the_server_timeout_off() {
    for lean in [true, false] {
        let mut conf = test_conf("caller-deadline.rpc")
            .with_timeout(Duration::ZERO)
            .with_cpu_threshold(0);
        if lean {
            let m = &mut conf.middlewares;
            (m.trace, m.recover, m.stat, m.prometheus, m.breaker) =
                (false, false, false, false, false);
        }
        let srv = start_server(conf, TestGreeter::new()).await;
        let mut client = srv.client().await;

        let mut req = tonic::Request::new(hello("sleep:2000"));
        req.set_timeout(Duration::from_millis(200));
        let t0 = Instant::now();
        let err = client.say_hello(req).await.unwrap_err();
        let took = t0.elapsed();
        assert!(
            matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled),
            "lean {lean}: {err:?}"
        );
        assert!(
            took >= Duration::from_millis(190) && took < Duration::from_millis(1500),
            "lean {lean}: {took:?}"
        );
        // Without a deadline nothing times the call out.
        assert!(client.say_hello(hello("sleep:300")).await.is_ok());
        tokio::time::sleep(Duration::from_millis(2000)).await;
        assert_eq!(srv.greeter.started(), 2, "lean {lean}");
        assert_eq!(
            srv.greeter.finished(),
            1,
            "lean {lean}: the late handler was dropped"
        );
        srv.shutdown().await.expect("clean shutdown");
    }
}
