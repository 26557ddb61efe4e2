use std::convert::Infallible;

use tower::ServiceExt;
use zrpc_core::breaker::BreakerConfig;
use zrpc_core::cpu::FixedCpu;
use zrpc_core::grpc::status_message_from_headers;
use zrpc_core::shedder::{AdaptiveShedder, ShedderConfig};

use super::*;
use crate::layers::StreamingMethods;
use crate::layers::auth::StaticTokens;
use crate::layers::breaker::BREAKER_OPEN_MESSAGE;
use crate::layers::shedding::{OVERLOADED_MESSAGE, SheddingSettings};
use crate::layers::test_util::{TestBody, final_code, response_with_code};
use crate::layers::{TimeoutSettings, facts};

fn stages() -> Stages {
    Stages {
        facts: false,
        trace: TraceLayer::new(false),
        recover: RecoverLayer::new(false),
        stat: StatLayer::new(StatSettings::default()),
        metrics: MetricsLayer::new(false),
        auth: AuthLayer::new(None, false),
        breaker: BreakerLayer::new(false),
        limit: LimitLayer::new(None, std::time::Instant::now()),
        shedding: SheddingLayer::new(None),
        timeout: TimeoutLayer::new(TimeoutSettings::default()),
    }
}

fn request(path: &str) -> Request<Body> {
    Request::builder().uri(path).body(Body::empty()).unwrap()
}

/// A service answering every call with `code` in its trailers.
fn answering(
    code: i32,
) -> impl Service<Request<Body>, Response = Response<TestBody>, Error = Infallible> + Clone {
    tower::service_fn(move |_req: Request<Body>| async move {
        Ok::<_, Infallible>(response_with_code(code))
    })
}

fn breaker_on(registry: &Arc<BreakerRegistry>) -> BreakerLayer {
    BreakerLayer::with_registry(true, Arc::clone(registry))
}

#[tokio::test]
async fn recorders_count_and_pass_the_code() {
    let svc = GovernorLayer::new(&Stages {
        metrics: MetricsLayer::new(true),
        ..stages()
    })
    .layer(answering(code::UNAVAILABLE));
    let m = crate::metrics::server_metrics();
    let count = || {
        m.code_total
            .with_label_values(&["/governor.R/M", "14"])
            .get()
    };
    let before = count();
    for _ in 0..3 {
        let resp = svc.clone().oneshot(request("/governor.R/M")).await.unwrap();
        assert_eq!(final_code(resp).await, Some(code::UNAVAILABLE));
    }
    assert_eq!(count(), before + 3);
}

#[tokio::test]
async fn a_failing_method_opens_its_breaker_and_a_cold_cpu_sheds_nothing() {
    let registry = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
    // A cold CPU never sheds.
    let shedder = Arc::new(AdaptiveShedder::new(
        ShedderConfig::default(),
        Arc::new(FixedCpu::new(0)),
    ));
    let svc = GovernorLayer::new(&Stages {
        breaker: breaker_on(&registry),
        shedding: SheddingLayer::new(Some(SheddingSettings {
            shedder,
            streaming: StreamingMethods::default(),
        })),
        ..stages()
    })
    .layer(answering(code::INTERNAL));
    let mut rejected = 0;
    for _ in 0..200 {
        let resp = svc
            .clone()
            .oneshot(request("/governor.G/Fails"))
            .await
            .unwrap();
        let msg = status_message_from_headers(resp.headers());
        assert_ne!(msg.as_deref(), Some(OVERLOADED_MESSAGE));
        if msg.as_deref() == Some(BREAKER_OPEN_MESSAGE) {
            rejected += 1;
            assert_eq!(final_code(resp).await, Some(code::UNAVAILABLE));
        } else {
            assert_eq!(final_code(resp).await, Some(code::INTERNAL));
        }
    }
    assert!(rejected > 100, "only {rejected} of 200 rejected");
}

#[tokio::test]
async fn an_unauthenticated_caller_cannot_move_the_breaker_but_is_counted() {
    let registry = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
    let store: Arc<dyn TokenStore> = Arc::new(StaticTokens::new([("app", "secret")]));
    let svc = GovernorLayer::new(&Stages {
        metrics: MetricsLayer::new(true),
        auth: AuthLayer::new(Some(store), true),
        breaker: breaker_on(&registry),
        ..stages()
    })
    .layer(answering(code::OK));
    let m = crate::metrics::server_metrics();
    let unauthenticated = || {
        m.code_total
            .with_label_values(&["/governor.A/M", "16"])
            .get()
    };
    let before = unauthenticated();
    for _ in 0..300 {
        let resp = svc.clone().oneshot(request("/governor.A/M")).await.unwrap();
        assert_eq!(final_code(resp).await, Some(code::UNAUTHENTICATED));
    }
    assert_eq!(unauthenticated(), before + 300);
    // Rejected before the breaker: it never saw the method.
    assert!(registry.find("/governor.A/M").is_none());
}

#[tokio::test]
async fn a_panicking_handler_answers_internal_and_every_record_sees_it() {
    let registry = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
    let svc = GovernorLayer::new(&Stages {
        facts: true,
        recover: RecoverLayer::new(true),
        metrics: MetricsLayer::new(true),
        breaker: breaker_on(&registry),
        ..stages()
    })
    .layer(tower::service_fn(|_req: Request<Body>| async {
        if true {
            panic!("handler exploded");
        }
        Ok::<_, Infallible>(response_with_code(code::OK))
    }));
    let m = crate::metrics::server_metrics();
    let internal = || {
        m.code_total
            .with_label_values(&["/governor.P/M", "13"])
            .get()
    };
    let before = internal();
    let mut rejected = 0;
    for _ in 0..200 {
        let resp = svc.clone().oneshot(request("/governor.P/M")).await.unwrap();
        let msg = status_message_from_headers(resp.headers());
        if msg.as_deref() == Some(BREAKER_OPEN_MESSAGE) {
            rejected += 1;
            continue;
        }
        assert_eq!(msg.as_deref(), Some("panic: handler exploded"));
        assert_eq!(final_code(resp).await, Some(code::INTERNAL));
    }
    // The panics are the server's failures (never read request bodies would blame the
    // caller): the breaker opens.
    assert!(rejected > 100, "only {rejected} of 200 rejected");
    assert_eq!(internal(), before + 200 - rejected);
}

#[tokio::test]
async fn a_panicking_body_ends_with_an_internal_trailer() {
    let svc = GovernorLayer::new(&Stages {
        recover: RecoverLayer::new(true),
        metrics: MetricsLayer::new(true),
        ..stages()
    })
    .layer(tower::service_fn(|_req: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(TestBody::Panics))
    }));
    let m = crate::metrics::server_metrics();
    let internal = || {
        m.code_total
            .with_label_values(&["/governor.B/M", "13"])
            .get()
    };
    let before = internal();
    let resp = svc.oneshot(request("/governor.B/M")).await.unwrap();
    assert_eq!(final_code(resp).await, Some(code::INTERNAL));
    assert_eq!(internal(), before + 1);
}

#[tokio::test(start_paused = true)]
async fn a_late_handler_is_timed_out_and_dropped() {
    let svc = GovernorLayer::new(&Stages {
        timeout: TimeoutLayer::new(TimeoutSettings {
            default: Some(std::time::Duration::from_millis(100)),
            ..TimeoutSettings::default()
        }),
        metrics: MetricsLayer::new(true),
        ..stages()
    })
    .layer(tower::service_fn(|req: Request<Body>| async move {
        // The handler sees the effective deadline.
        let header = req.headers().get("grpc-timeout").unwrap().as_bytes();
        assert_eq!(
            zrpc_core::grpc::timeout::parse(header),
            Some(std::time::Duration::from_millis(100))
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        Ok::<_, Infallible>(response_with_code(code::OK))
    }));
    let resp = svc.oneshot(request("/governor.T/M")).await.unwrap();
    assert_eq!(final_code(resp).await, Some(code::DEADLINE_EXCEEDED));
}

#[tokio::test]
async fn a_request_never_read_blames_the_caller() {
    // The handler fails without reading its request: with facts on, the breaker does not
    // learn from it (the caller's request never arrived whole).
    let registry = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
    let svc = GovernorLayer::new(&Stages {
        facts: true,
        breaker: breaker_on(&registry),
        ..stages()
    })
    .layer(tower::service_fn(|req: Request<Body>| async move {
        assert!(facts::facts_of(&req).is_some());
        Ok::<_, Infallible>(response_with_code(code::INTERNAL))
    }));
    for _ in 0..200 {
        let resp = svc.clone().oneshot(request("/governor.F/M")).await.unwrap();
        assert_eq!(final_code(resp).await, Some(code::INTERNAL));
    }
}

/// A store that answers later (as Redis does), or panics.
#[derive(Debug)]
struct LaterStore {
    panics: bool,
}

impl TokenStore for LaterStore {
    fn lookup(&self, app: &str) -> crate::layers::Lookup {
        assert!(!self.panics, "token store exploded");
        let found: Option<Arc<str>> = (app == "app").then(|| Arc::from("secret"));
        crate::layers::Lookup::Pending(Box::pin(async move {
            tokio::task::yield_now().await;
            Ok(found)
        }))
    }
}

fn with_credentials(path: &str, token: &'static str) -> Request<Body> {
    let mut req = request(path);
    req.headers_mut()
        .insert("app", http::HeaderValue::from_static("app"));
    req.headers_mut()
        .insert("token", http::HeaderValue::from_static(token));
    req
}

#[tokio::test]
async fn a_pending_lookup_admits_or_rejects_then_guards_the_call() {
    let registry = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
    let svc = GovernorLayer::new(&Stages {
        metrics: MetricsLayer::new(true),
        auth: AuthLayer::new(Some(Arc::new(LaterStore { panics: false })), true),
        breaker: breaker_on(&registry),
        ..stages()
    })
    .layer(answering(code::OK));
    let resp = svc
        .clone()
        .oneshot(with_credentials("/governor.L/M", "secret"))
        .await
        .unwrap();
    assert_eq!(final_code(resp).await, Some(code::OK));
    // Admitted after the lookup, the call went through the breaker.
    assert!(registry.find("/governor.L/M").is_some());
    let resp = svc
        .oneshot(with_credentials("/governor.L/Other", "wrong"))
        .await
        .unwrap();
    assert_eq!(
        status_message_from_headers(resp.headers()).as_deref(),
        Some("access denied")
    );
    assert_eq!(final_code(resp).await, Some(code::UNAUTHENTICATED));
    assert!(registry.find("/governor.L/Other").is_none());
}

#[tokio::test]
async fn a_panicking_token_store_answers_internal_when_recover_is_on() {
    let svc = GovernorLayer::new(&Stages {
        recover: RecoverLayer::new(true),
        auth: AuthLayer::new(Some(Arc::new(LaterStore { panics: true })), true),
        ..stages()
    })
    .layer(answering(code::OK));
    let resp = svc
        .oneshot(with_credentials("/governor.S/M", "secret"))
        .await
        .unwrap();
    assert_eq!(
        status_message_from_headers(resp.headers()).as_deref(),
        Some("panic: token store exploded")
    );
    assert_eq!(final_code(resp).await, Some(code::INTERNAL));
}
