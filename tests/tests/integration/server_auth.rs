//! Server auth: app/token metadata against the configured tokens.

use tonic::{Code, Request};
use zrpc_tests::greeter::{TestGreeter, start_server, test_conf};
use zrpc_tests::pb::HelloRequest;

fn req(app: Option<&str>, token: Option<&str>) -> Request<HelloRequest> {
    let mut r = Request::new(HelloRequest { name: "x".into() });
    if let Some(a) = app {
        r.metadata_mut().insert("app", a.parse().unwrap());
    }
    if let Some(t) = token {
        r.metadata_mut().insert("token", t.parse().unwrap());
    }
    r
}

#[tokio::test]
async fn server_auth_missing_wrong_and_right_tokens() {
    let mut conf = test_conf("auth.rpc").with_auth_tokens([("billing", "s3cret")]);
    conf.strict_control = true;
    let srv = start_server(conf, TestGreeter::new()).await;
    let mut c = srv.client().await;

    let e = c.say_hello(req(None, None)).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::Unauthenticated, "app/token required")
    );
    let e = c.say_hello(req(Some("billing"), None)).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::Unauthenticated, "app/token required")
    );
    let e = c
        .say_hello(req(Some("billing"), Some("guess")))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::Unauthenticated, "access denied")
    );
    let e = c
        .say_hello(req(Some("stranger"), Some("s3cret")))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::Unauthenticated, "access denied")
    );

    let ok = c.say_hello(req(Some("billing"), Some("s3cret"))).await;
    assert_eq!(ok.expect("right token").into_inner().message, "hello x");
    assert_eq!(
        srv.greeter.started(),
        1,
        "rejected calls never reach the handler"
    );

    // Health checks need no credentials.
    let mut health = tonic_health::pb::health_client::HealthClient::new(srv.channel().await);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health is exempt from auth");
    assert_eq!(status.into_inner().status, 1);
    srv.shutdown().await.expect("clean shutdown");
}

/// A token store given to a server whose `Auth` is off would check nothing: serving refuses
/// it, naming the key to set, instead of serving every caller unchecked.
#[tokio::test]
async fn a_token_store_without_auth_is_refused() {
    let conf = test_conf("auth-off.rpc");
    assert!(!conf.auth);
    let store = std::sync::Arc::new(zrpc_server::StaticTokens::new([("app", "secret")]));
    let server = zrpc_server::Server::new(conf)
        .unwrap()
        .add_service(TestGreeter::new().into_service())
        .token_store(store);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = server
        .serve_with_listener(listener, std::future::pending())
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("`Auth`") && message.contains("Auth: true"),
        "{message}"
    );
}

/// A token store that answers after `delay` (a slow Redis, say), with `token` for every app.
#[derive(Debug)]
struct SlowTokens {
    delay: std::time::Duration,
    token: &'static str,
}

impl zrpc_server::TokenStore for SlowTokens {
    fn lookup(&self, _app: &str) -> zrpc_server::Lookup {
        let (delay, token) = (self.delay, self.token);
        zrpc_server::Lookup::Pending(Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(Some(std::sync::Arc::from(token)))
        }))
    }
}

/// The caller's deadline bounds the token lookup: a store that answers after 2 s does not hold
/// a call whose caller gave it 200 ms. The server itself answers `DeadlineExceeded` at the
/// deadline (the raw client below enforces no deadline of its own), records code 4, and the
/// handler never runs.
#[tokio::test]
async fn a_slow_token_store_is_bounded_by_the_callers_deadline() {
    use std::time::{Duration, Instant};
    let conf = test_conf("auth-slow-store.rpc")
        .with_auth_tokens([("billing", "s3cret")])
        .with_cpu_threshold(0);
    let store = std::sync::Arc::new(SlowTokens {
        delay: Duration::from_secs(2),
        token: "s3cret",
    });
    let srv = zrpc_tests::greeter::start_server_with(conf, TestGreeter::new(), move |s| {
        s.token_store(store)
    })
    .await;
    let recorded = || {
        zrpc_server::metrics::server_metrics()
            .code_total
            .with_label_values(&[zrpc_tests::greeter::SAY_HELLO, "4"])
            .get()
    };
    let before = recorded();
    let started = Instant::now();
    let reply = zrpc_tests::h2raw::unary(
        srv.addr,
        &[
            ("app", "billing"),
            ("token", "s3cret"),
            ("grpc-timeout", "200m"),
        ],
        b"\x00\x00\x00\x00\x03\x0a\x01x".to_vec(),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(reply.status().0, Code::DeadlineExceeded as i32, "{reply:?}");
    // At the deadline, not at the store's answer 2 s later (the margin is for a loaded machine;
    // without the bound the reply comes after the lookup, past 2 s).
    assert!(
        took >= Duration::from_millis(195) && took < Duration::from_millis(1500),
        "answered after {took:?}"
    );
    assert!(
        recorded() > before,
        "the server records the call as DeadlineExceeded (code 4)"
    );
    assert_eq!(srv.greeter.started(), 0, "the handler never ran");
    srv.shutdown().await.expect("clean shutdown");
}
