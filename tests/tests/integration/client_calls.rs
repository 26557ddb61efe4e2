//! Client behaviour on single calls: metadata, timeouts, blocking dial, streaming accounting.

use std::time::{Duration, Instant};

use tonic::Code;
use zrpc_client::conf::RpcClientConf;
use zrpc_client::{CallTimeout, Client, Error};
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::pb::{HelloRequest, HelloStreamRequest};

use crate::client_support::{Backend, dead_endpoint};

#[tokio::test]
async fn client_sends_app_and_token() {
    let server = Backend::start("s", Duration::ZERO);
    let conf = RpcClientConf::direct([server.endpoint()]).with_credential("my-app", "secret");
    let mut greeter = GreeterClient::new(Client::new(conf).await.unwrap());
    let reply = greeter
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .unwrap();
    assert_eq!(reply.into_inner().message, "s x");
    assert_eq!(
        server.last_credentials(),
        Some(("my-app".into(), "secret".into()))
    );
}

#[tokio::test]
async fn client_timeout_is_deadline_exceeded_and_call_override_wins() {
    // the server answers after 1 s: far from the 100 ms deadline, so "ended by its deadline"
    // and "waited for the reply" stay apart on a loaded machine
    let reply_after = Duration::from_secs(1);
    let server = Backend::start("s", reply_after);
    let timeout = Duration::from_millis(100);
    let conf = RpcClientConf::direct([server.endpoint()]).with_timeout(timeout);
    let mut greeter = GreeterClient::new(Client::new(conf).await.unwrap());
    let start = Instant::now();
    let e = greeter
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .unwrap_err();
    let took = start.elapsed();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    // ended by its deadline: not before it, and well before the reply would have come
    assert!(
        took >= timeout && took < reply_after * 3 / 4,
        "the call ended after {took:?}"
    );
    // a longer per-call timeout lets it through
    let mut req = tonic::Request::new(HelloRequest { name: "y".into() });
    req.extensions_mut()
        .insert(CallTimeout(Duration::from_secs(5)));
    greeter.say_hello(req).await.unwrap();
    // the caller's shorter grpc-timeout wins over the per-call timeout
    let mut req = tonic::Request::new(HelloRequest { name: "z".into() });
    req.extensions_mut()
        .insert(CallTimeout(Duration::from_secs(5)));
    req.set_timeout(Duration::from_millis(50));
    let e = greeter.say_hello(req).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
}

#[tokio::test]
async fn client_blocking_dial_fails_naming_the_target() {
    let dead = dead_endpoint();
    let start = Instant::now();
    let e = Client::new(RpcClientConf::direct([dead.clone()]).with_non_block(false))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Dial { .. }), "{e:?}");
    assert!(e.to_string().contains(&dead), "{e}");
    assert!(start.elapsed() >= Duration::from_secs(3));
    // non-blocking: created at once; the call fails with Unavailable naming the target
    let client = Client::new(RpcClientConf::direct([dead.clone()]))
        .await
        .unwrap();
    let e = GreeterClient::new(client)
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    assert!(e.message().contains(&dead), "{e:?}");
}

#[tokio::test]
async fn client_blocking_dial_succeeds_with_a_live_server() {
    // A blocking dial waits for its server: started before the server listens, it returns only
    // once it could connect, and the client is usable then.
    let addr = dead_endpoint();
    let dial = tokio::spawn(Client::new(
        RpcClientConf::direct([addr.clone()]).with_non_block(false),
    ));
    // An absence check: nothing listens, so the dial must still wait after a bounded 300 ms
    // (it tries to connect every 100 ms; its own limit is 3 s).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !dial.is_finished(),
        "the blocking dial returned with no server"
    );
    let server = Backend::start_on(&addr, "s", Duration::ZERO);
    let client = dial.await.unwrap().unwrap();
    let eps = client.endpoints();
    assert_eq!(eps.len(), 1);
    assert_eq!(eps[0].addr, addr);
    GreeterClient::new(client)
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .unwrap();
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn client_streams_are_accounted_when_done_or_dropped() {
    let server = Backend::start("s", Duration::ZERO);
    declare_streams();
    let client = Client::new(RpcClientConf::direct([server.endpoint()]))
        .await
        .unwrap();
    let mut greeter = GreeterClient::new(client.clone());
    let mut stream = greeter
        .say_hello_stream(HelloStreamRequest {
            name: "x".into(),
            count: 3,
            interval_ms: 1,
        })
        .await
        .unwrap()
        .into_inner();
    let mut n = 0;
    while stream.message().await.unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 3);
    assert_eq!(client.endpoints()[0].inflight, 0);
    assert!(client.endpoints()[0].lag.is_some());
    // dropped mid-stream: the in-flight slot is released (cancelled)
    let mut stream = greeter
        .say_hello_stream(HelloStreamRequest {
            name: "x".into(),
            count: 100,
            interval_ms: 10,
        })
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap();
    assert_eq!(client.endpoints()[0].inflight, 1);
    drop(stream);
    assert_eq!(client.endpoints()[0].inflight, 0);
}

/// A stream ends at the call's deadline, whichever sets it (the client's `Timeout`, a
/// `CallTimeout`, or the caller's own `grpc-timeout` with the timeout stage off), against a
/// server that does not bound it (tonic's server bounds a call only until its response head):
/// the client ends it itself, with `DeadlineExceeded`, and releases its endpoint.
#[tokio::test]
async fn client_streams_end_at_their_deadline_against_a_server_that_ignores_it() {
    let server = Backend::start("s", Duration::ZERO);
    let timed = Client::new(
        RpcClientConf::direct([server.endpoint()]).with_timeout(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let mut untimed = RpcClientConf::direct([server.endpoint()]);
    untimed.middlewares.timeout = false;
    let untimed = Client::new(untimed).await.unwrap();
    let request = |timeout: Option<Duration>, call: Option<Duration>| {
        let mut req = tonic::Request::new(HelloStreamRequest {
            name: "x".into(),
            count: 100,
            interval_ms: 1_000,
        });
        if let Some(t) = timeout {
            req.set_timeout(t);
        }
        if let Some(c) = call {
            req.extensions_mut().insert(CallTimeout(c));
        }
        req
    };
    let cases = [
        ("Timeout", &timed, request(None, None), 300),
        (
            "CallTimeout",
            &timed,
            request(None, Some(Duration::from_millis(200))),
            200,
        ),
        (
            "the caller's grpc-timeout",
            &untimed,
            request(Some(Duration::from_millis(200)), None),
            200,
        ),
    ];
    for (what, client, req, deadline_ms) in cases {
        let deadline = Duration::from_millis(deadline_ms);
        let mut greeter = GreeterClient::new(client.clone());
        let start = Instant::now();
        let mut stream = greeter.say_hello_stream(req).await.unwrap().into_inner();
        assert!(stream.message().await.unwrap().is_some(), "{what}");
        let e = stream.message().await.unwrap_err();
        let took = start.elapsed();
        assert_eq!(e.code(), Code::DeadlineExceeded, "{what}: {e:?}");
        assert!(
            took >= deadline - Duration::from_millis(5)
                && took < deadline + Duration::from_millis(700),
            "{what}: ended after {took:?}"
        );
        assert_eq!(client.endpoints()[0].inflight, 0, "{what}");
    }
}

/// A server stream is counted in the client's stream families, a unary call in go-zero's. The
/// client records into a registry of its own: the process-wide one is shared with the other
/// tests of this binary, which run at the same time and make the same calls.
#[tokio::test]
async fn client_server_streams_are_counted_in_the_stream_family_not_the_unary_one() {
    let server = Backend::start("s", Duration::ZERO);
    declare_streams();
    let registry = prometheus::Registry::new();
    let metrics = zrpc_client::metrics::ClientMetrics::register(&registry).unwrap();
    let client = Client::with_handles(
        RpcClientConf::direct([server.endpoint()]),
        zrpc_client::ClientHandles::default().metrics(metrics.clone()),
    )
    .await
    .unwrap();
    let mut greeter = GreeterClient::new(client);
    let stream_method = zrpc_tests::greeter::SAY_HELLO_STREAM;
    let stream_codes = || {
        metrics
            .stream_code_total
            .with_label_values(&[stream_method, "0"])
            .get()
    };
    assert_eq!(stream_codes(), 0);
    let mut stream = greeter
        .say_hello_stream(HelloStreamRequest {
            name: "x".into(),
            count: 3,
            interval_ms: 1,
        })
        .await
        .unwrap()
        .into_inner();
    while stream.message().await.unwrap().is_some() {}
    greeter
        .say_hello(HelloRequest { name: "u".into() })
        .await
        .unwrap();
    assert_eq!(stream_codes(), 1, "one stream, code 0");

    let families = registry.gather();
    let has_series = |family: &str, method: &str| {
        families
            .iter()
            .filter(|f| f.name() == family)
            .flat_map(|f| f.get_metric())
            .any(|m| {
                m.get_label()
                    .iter()
                    .any(|l| l.name() == "method" && l.value() == method)
            })
    };
    assert!(has_series("rpc_client_streams_duration_ms", stream_method));
    assert!(!has_series("rpc_client_requests_code_total", stream_method));
    assert!(!has_series(
        "rpc_client_requests_duration_ms",
        stream_method
    ));
    // the unary call stays in go-zero's families
    let unary = "/greeter.Greeter/SayHello";
    assert!(has_series("rpc_client_requests_code_total", unary));
    assert!(!has_series("rpc_client_streams_code_total", unary));
}

/// Declares the greeter's server-streaming method to the client metrics, before any call of it
/// in this binary (each test calling it declares first), so the families never depend on the
/// order tests run in.
fn declare_streams() {
    zrpc_client::metrics::declare_streaming_methods([zrpc_tests::greeter::SAY_HELLO_STREAM]);
}

#[tokio::test]
async fn client_oversized_messages_are_out_of_range() {
    let a = Backend::start("a", Duration::ZERO);
    let b = Backend::start("b", Duration::ZERO);
    let client = Client::new(RpcClientConf::direct([a.endpoint(), b.endpoint()]))
        .await
        .unwrap();
    // request above the server's 4 MiB decode limit (and above the 256 KiB replay limit)
    let big = "x".repeat(5 * 1024 * 1024);
    let e = GreeterClient::new(client.clone())
        .say_hello(HelloRequest { name: big })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    // reply above the client's decode limit
    let e = GreeterClient::new(client.clone())
        .max_decoding_message_size(1024)
        .say_hello(HelloRequest {
            name: "y".repeat(2048),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    // a large request under the limits passes (not kept for replay, streamed through)
    let r = GreeterClient::new(client)
        .say_hello(HelloRequest {
            name: "z".repeat(1024 * 1024),
        })
        .await
        .unwrap();
    assert_eq!(r.into_inner().message.len(), 2 + 1024 * 1024);
}

#[tokio::test]
async fn client_metrics_are_exported() {
    let server = Backend::start("s", Duration::ZERO);
    let client = Client::new(RpcClientConf::direct([server.endpoint()]))
        .await
        .unwrap();
    GreeterClient::new(client.clone())
        .say_hello(HelloRequest { name: "m".into() })
        .await
        .unwrap();
    let families = zrpc_client::metrics::registry().gather();
    let find = |name: &str| families.iter().find(|f| f.name() == name);
    let codes = find("rpc_client_requests_code_total").expect("code counter");
    assert!(codes.get_metric().iter().any(|m| {
        let labels: Vec<(&str, &str)> = m
            .get_label()
            .iter()
            .map(|l| (l.name(), l.value()))
            .collect();
        labels.contains(&("method", "/greeter.Greeter/SayHello")) && labels.contains(&("code", "0"))
    }));
    assert!(find("rpc_client_requests_duration_ms").is_some());
    let lag = find("rpc_client_endpoint_lag_ms").expect("endpoint gauges");
    assert!(lag.get_metric().iter().any(|m| {
        m.get_label()
            .iter()
            .any(|l| l.name() == "endpoint" && l.value() == server.endpoint())
    }));
    assert!(find("rpc_client_endpoint_inflight").is_some());
    assert!(find("rpc_client_endpoint_success").is_some());
}
