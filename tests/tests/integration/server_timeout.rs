//! Server timeouts: `Timeout`, `MethodTimeouts` overrides, the handler is dropped on expiry,
//! streams are not timed out by the server's own `Timeout`; the caller's deadline holds over the
//! whole call, unary or streaming, whatever the server's `Timeout`, and is recorded as
//! `DeadlineExceeded` (metrics, breaker) through the real serve loop, while a caller's cancel is
//! `Cancelled` and never a breaker failure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_stream::StreamExt;
use tonic::Code;
use zrpc_core::breaker::{BreakerRegistry, BreakerStats};
use zrpc_server::metrics::server_metrics;
use zrpc_tests::greeter::{
    SAY_HELLO, SAY_HELLO_STREAM, TestGreeter, start_server, start_server_with, test_conf,
};
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
    // The slow handler was dropped: it never finished.
    srv.greeter
        .wait_for("the dropped handler", |g| g.dropped() == 1)
        .await;
    // A fast call is fine.
    assert!(client.say_hello(hello("sleep:10")).await.is_ok());
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

/// The caller's `grpc-timeout` is enforced by the server even with its own `Timeout` off, with
/// every middleware off and with the defaults: tonic's `GrpcTimeout` did it before zrpc served
/// connections itself. The server drops the handler. (The server answers `DeadlineExceeded`; a
/// tonic client times the call out itself at the same instant, as `Cancelled`, so either code
/// can reach this caller.)
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
        srv.greeter
            .wait_for("the dropped handler", |g| g.dropped() == 1)
            .await;
        // Without a deadline nothing times the call out.
        assert!(client.say_hello(hello("sleep:300")).await.is_ok());
        assert_eq!(srv.greeter.started(), 2, "lean {lean}");
        assert_eq!(
            srv.greeter.finished(),
            1,
            "lean {lean}: the late handler was dropped"
        );
        srv.shutdown().await.expect("clean shutdown");
    }
}

/// `method`'s breaker in `registry`, now. (A server makes a method's breaker at its first
/// call, which that breaker does not count: the tests make one call first.)
fn breaker(registry: &BreakerRegistry, method: &str) -> BreakerStats {
    registry.get(method).stats(std::time::Instant::now())
}

/// `rpc_server_requests_code_total` (or the streams' family) of `method` and `code`: shared by
/// every test in this process, so the tests compare differences, and each test's exact count is
/// its server's own breaker.
fn code_count(stream: bool, method: &str, code: Code) -> u64 {
    let m = server_metrics();
    let family = if stream {
        &m.stream_code_total
    } else {
        &m.code_total
    };
    family
        .with_label_values(&[method, &(code as i32).to_string()])
        .get()
}

/// A config with the server's own `Timeout` off, so that only the caller's deadline can time a
/// call out (the shedder off: this test is not about CPU).
fn caller_deadline_conf(name: &str) -> zrpc_server::RpcServerConf {
    test_conf(name)
        .with_timeout(Duration::ZERO)
        .with_cpu_threshold(0)
}

/// With the server's `Timeout` at 0, a unary call that overruns its caller's deadline is a
/// `DeadlineExceeded` of the server's, in its metrics and as a breaker failure (go-zero counts
/// a timeout in the called service as a breaker failure since v1.7), never `Cancelled`: the
/// caller's reset at its deadline and the server's timer race, and both are the deadline.
#[tokio::test]
async fn an_overrun_of_the_callers_deadline_is_a_deadline_exceeded_breaker_failure() {
    const CALLS: u64 = 3;
    let registry = Arc::new(BreakerRegistry::default());
    let breakers = registry.clone();
    let srv = start_server_with(
        caller_deadline_conf("caller-deadline-metrics.rpc"),
        TestGreeter::new(),
        move |s| s.breaker_registry(breakers),
    )
    .await;
    let mut client = srv.client().await;
    client.say_hello(hello("first")).await.unwrap();
    let before = code_count(false, SAY_HELLO, Code::DeadlineExceeded);
    for _ in 0..CALLS {
        // A deadline of 1 s: the caller's reset counts as its deadline up to 100 ms before the
        // server's timer (its request may take that long to arrive on a busy machine).
        let mut req = tonic::Request::new(hello("sleep:3000"));
        req.set_timeout(Duration::from_secs(1));
        let err = client.say_hello(req).await.unwrap_err();
        assert!(
            matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled),
            "{err:?}"
        );
    }
    srv.greeter
        .wait_for("every late handler dropped", |g| g.dropped() == CALLS)
        .await;
    let stats = breaker(&registry, SAY_HELLO);
    assert_eq!(
        (stats.failures, stats.accepts),
        (CALLS, 0),
        "each overrun is a failure of the server: {stats:?}"
    );
    let after = code_count(false, SAY_HELLO, Code::DeadlineExceeded);
    assert!(after - before >= CALLS, "code 4 counted {}", after - before);
    srv.shutdown().await.expect("clean shutdown");
}

/// A server stream that is still sending at its caller's deadline is reset with
/// `RST_STREAM CANCEL` (what grpc-go's server sends; a tonic caller reads it as `Cancelled`),
/// after the messages sent before, and is recorded as `DeadlineExceeded`, a breaker failure,
/// whether the server's own `Timeout` (unary only) is set or not.
#[tokio::test]
async fn a_stream_past_the_callers_deadline_is_reset_and_recorded_deadline_exceeded() {
    for server_timeout in [Duration::ZERO, Duration::from_secs(2)] {
        let registry = Arc::new(BreakerRegistry::default());
        let breakers = registry.clone();
        let conf = caller_deadline_conf("caller-deadline-stream.rpc").with_timeout(server_timeout);
        let srv = start_server_with(conf, TestGreeter::new(), move |s| {
            s.breaker_registry(breakers)
        })
        .await;
        let mut client = srv.client().await;
        let first = HelloStreamRequest {
            name: "first".into(),
            count: 1,
            interval_ms: 0,
        };
        let mut first = client.say_hello_stream(first).await.unwrap().into_inner();
        while first.next().await.transpose().unwrap().is_some() {}
        let before = code_count(true, SAY_HELLO_STREAM, Code::DeadlineExceeded);
        let mut req = tonic::Request::new(HelloStreamRequest {
            name: "s".into(),
            count: 20,
            interval_ms: 100,
        });
        req.set_timeout(Duration::from_millis(350));
        let t0 = Instant::now();
        let mut stream = client
            .say_hello_stream(req)
            .await
            .expect("the stream starts")
            .into_inner();
        let mut got = 0;
        let err = loop {
            match stream.next().await {
                Some(Ok(_)) => got += 1,
                Some(Err(e)) => break e,
                None => panic!("the stream ended without an error after {got} messages"),
            }
        };
        let took = t0.elapsed();
        assert_eq!(err.code(), Code::Cancelled, "RST_STREAM CANCEL: {err:?}");
        assert!((2..=5).contains(&got), "{got} messages before the deadline");
        assert!(
            took >= Duration::from_millis(340) && took < Duration::from_millis(1500),
            "{took:?}"
        );
        // The server recorded the deadline before it sent the reset.
        let stats = breaker(&registry, SAY_HELLO_STREAM);
        assert_eq!((stats.failures, stats.accepts), (1, 0), "{stats:?}");
        let after = code_count(true, SAY_HELLO_STREAM, Code::DeadlineExceeded);
        assert!(
            after > before,
            "timeout {server_timeout:?}: stream code 4 not counted"
        );
        srv.shutdown().await.expect("clean shutdown");
    }
}

/// A caller that cancels its call (its stream reset long before any deadline) is recorded as
/// `Cancelled`, an acceptable code: never a failure of the server.
#[tokio::test]
async fn a_callers_cancel_is_cancelled_and_never_a_breaker_failure() {
    let registry = Arc::new(BreakerRegistry::default());
    let breakers = registry.clone();
    let srv = start_server_with(
        caller_deadline_conf("caller-cancel.rpc"),
        TestGreeter::new(),
        move |s| s.breaker_registry(breakers),
    )
    .await;
    let mut client = srv.client().await;
    client.say_hello(hello("first")).await.unwrap();
    let before = code_count(false, SAY_HELLO, Code::Cancelled);
    for deadline in [None, Some(Duration::from_secs(30))] {
        let mut req = tonic::Request::new(hello("sleep:5000"));
        if let Some(d) = deadline {
            req.set_timeout(d);
        }
        let mut call = Box::pin(client.say_hello(req));
        let started = srv.greeter.started() + 1;
        tokio::select! {
            r = &mut call => panic!("the call ended: {r:?}"),
            () = srv.greeter.wait_for("the handler running", |g| g.started() == started) => {}
        }
        drop(call);
    }
    srv.greeter
        .wait_for("both handlers dropped", |g| g.dropped() == 2)
        .await;
    let stats = breaker(&registry, SAY_HELLO);
    assert_eq!(stats.failures, 0, "{stats:?}");
    assert_eq!(
        stats.accepts, 2,
        "a cancel is an acceptable code: {stats:?}"
    );
    assert!(code_count(false, SAY_HELLO, Code::Cancelled) - before >= 2);
    srv.shutdown().await.expect("clean shutdown");
}
