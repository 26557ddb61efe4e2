use std::convert::Infallible;
use std::time::Duration;

use tower::ServiceExt;
use zrpc_core::breaker::BreakerConfig;
use zrpc_core::cpu::FixedCpu;
use zrpc_core::grpc::status_message_from_headers;
use zrpc_core::shedder::{AdaptiveShedder, ShedderConfig};

use super::*;
use crate::auth::StaticTokens;
use crate::auth::TokenStore;
use crate::call::{CallKind, FactsLayer, StreamingMethods, facts_of};
use crate::layers::test_util::{TestBody, arriving, final_code, response_with_code};
use crate::stage::breaker::breaker_figures;
use crate::stage::shedding::{OVERLOADED_MESSAGE, SheddingSettings};
use crate::stage::{StatSettings, TimeoutSettings};
use zrpc_core::breaker::BreakerRegistry;

fn stages() -> Stages {
    Stages {
        trace: TraceStage::new(false),
        recover: RecoverStage::new(false),
        stat: StatStage::new(StatSettings::default()),
        metrics: MetricsStage::new(false),
        auth: AuthStage::new(None, false),
        breaker: BreakerStage::new(false),
        limit: LimitStage::new(None, &[], std::time::Instant::now()),
        shedding: SheddingStage::new(None),
        timeout: TimeoutStage::new(TimeoutSettings::default()),
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

fn breaker_on(registry: &Arc<BreakerRegistry>) -> BreakerStage {
    BreakerStage::with_registry(true, Arc::clone(registry))
}

#[tokio::test]
async fn recorders_count_and_pass_the_code() {
    let svc = GovernorLayer::new(&Stages {
        metrics: MetricsStage::new(true),
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
        shedding: SheddingStage::new(Some(SheddingSettings { shedder })),
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
        let msg = status_message_from_headers(resp.headers()).unwrap_or_default();
        assert!(!msg.starts_with(OVERLOADED_MESSAGE), "{msg}");
        if breaker_figures(&msg, "/governor.G/Fails").is_some() {
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
    // The method is named by the server's descriptor sets: its calls are its own from the
    // first, though none reached its service.
    let described = ["/governor.A/M".to_owned()];
    let svc = GovernorLayer::new(&Stages {
        metrics: MetricsStage::knowing(true, &described),
        auth: AuthStage::new(Some(store), true),
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
        recover: RecoverStage::new(true),
        metrics: MetricsStage::new(true),
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
        let msg = status_message_from_headers(resp.headers()).unwrap_or_default();
        if breaker_figures(&msg, "/governor.P/M").is_some() {
            rejected += 1;
            continue;
        }
        assert_eq!(msg, "panic: handler exploded");
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
        recover: RecoverStage::new(true),
        metrics: MetricsStage::new(true),
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
        timeout: TimeoutStage::new(TimeoutSettings {
            default: Some(std::time::Duration::from_millis(100)),
            ..TimeoutSettings::default()
        }),
        metrics: MetricsStage::new(true),
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
    // The handler fails without reading its request: the breaker does not learn from it
    // (the caller's request never arrived whole). The facts layer stands for the transport,
    // which makes every call's facts.
    let registry = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
    let svc = FactsLayer::new(true).layer(
        GovernorLayer::new(&Stages {
            breaker: breaker_on(&registry),
            ..stages()
        })
        .layer(tower::service_fn(|req: Request<Body>| async move {
            assert!(facts_of(&req).is_some());
            Ok::<_, Infallible>(response_with_code(code::INTERNAL))
        })),
    );
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
    fn lookup(&self, app: &str) -> crate::auth::Lookup {
        assert!(!self.panics, "token store exploded");
        let found: Option<Arc<str>> = (app == "app").then(|| Arc::from("secret"));
        crate::auth::Lookup::Pending(Box::pin(async move {
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
        metrics: MetricsStage::new(true),
        auth: AuthStage::new(Some(Arc::new(LaterStore { panics: false })), true),
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
        recover: RecoverStage::new(true),
        auth: AuthStage::new(Some(Arc::new(LaterStore { panics: true })), true),
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

/// A body that sends one message at once, then nothing until it is dropped.
fn stalling_body() -> Body {
    let first = futures_util::stream::once(async {
        Ok::<_, tonic::Status>(http_body::Frame::data(bytes::Bytes::from_static(
            b"\0\0\0\0\0",
        )))
    });
    let rest = futures_util::stream::pending();
    Body::new(http_body_util::StreamBody::new(
        futures_util::StreamExt::chain(first, rest),
    ))
}

/// Past the caller's deadline, a call whose response head was sent ends with a body error
/// that hyper sends as `RST_STREAM CANCEL` (what grpc-go's server sends), and every record sees
/// `DeadlineExceeded`, with no server `Timeout` and on a streaming method alike.
#[tokio::test(start_paused = true)]
async fn a_body_past_the_callers_deadline_ends_in_a_cancel_reset() {
    use http_body_util::BodyExt;

    let m = crate::metrics::server_metrics();
    let svc = GovernorLayer::new(&Stages {
        metrics: MetricsStage::new(true),
        timeout: TimeoutStage::new(TimeoutSettings::default()),
        ..stages()
    })
    .layer(tower::service_fn(|_req: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(stalling_body()))
    }));
    for (path, kind, family) in [
        ("/governor.D/Unary", CallKind::UNARY, &m.code_total),
        (
            "/governor.D/Stream",
            CallKind::STREAMING,
            &m.stream_code_total,
        ),
    ] {
        let count = || family.with_label_values(&[path, "4"]).get();
        let before = count();
        let mut req = request(path);
        req.headers_mut()
            .insert("grpc-timeout", http::HeaderValue::from_static("300m"));
        let req = arriving(req, kind);
        let start = tokio::time::Instant::now();
        let mut body = svc.clone().oneshot(req).await.unwrap().into_body();
        assert!(body.frame().await.unwrap().unwrap().is_data(), "{path}");
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_millis(300), "{path}");
        let reason = err.downcast_ref::<h2::Error>().and_then(h2::Error::reason);
        assert_eq!(reason, Some(h2::Reason::CANCEL), "{path}: {err}");
        assert!(body.frame().await.is_none(), "{path}: the body ends there");
        assert_eq!(count(), before + 1, "{path}: recorded as DeadlineExceeded");
    }
}

/// A caller that resets its call at its deadline (or a little before: its clock started
/// before the request arrived) ran out of time: recorded as `DeadlineExceeded`. A reset long
/// before it, or without a deadline, is `Cancelled`.
#[tokio::test(start_paused = true)]
async fn a_reset_at_the_callers_deadline_is_the_deadline_and_earlier_a_cancel() {
    let m = crate::metrics::server_metrics();
    let svc = GovernorLayer::new(&Stages {
        metrics: MetricsStage::new(true),
        ..stages()
    })
    .layer(tower::service_fn(|_req: Request<Body>| async {
        std::future::pending::<Result<Response<TestBody>, Infallible>>().await
    }));
    let count = |c: &str| m.code_total.with_label_values(&["/governor.X/M", c]).get();
    for (timeout, reset_after, code) in [
        (Some("1S"), 995, "4"),
        (Some("1S"), 500, "1"),
        (None, 500, "1"),
    ] {
        let before = count(code);
        let mut req = request("/governor.X/M");
        if let Some(t) = timeout {
            req.headers_mut()
                .insert("grpc-timeout", http::HeaderValue::from_static(t));
        }
        let call = svc.clone().oneshot(req);
        let _ = tokio::time::timeout(Duration::from_millis(reset_after), call).await;
        assert_eq!(
            count(code),
            before + 1,
            "{timeout:?}, reset after {reset_after} ms"
        );
    }
}

/// What a handler adds with `Trailers` reaches the caller in the trailers of a success and in
/// the headers of an error answered without a body; the status entries stay the server's.
#[tokio::test]
async fn a_handlers_trailers_reach_the_caller() {
    use http_body_util::BodyExt;
    use tonic::metadata::{MetadataMap, MetadataValue};

    let governor =
        GovernorLayer::new(&stages()).layer(tower::service_fn(|req: Request<Body>| async move {
            let fail = req.uri().path().ends_with("Fail");
            let trailers = crate::Trailers::of(&tonic::Request::from_http(req)).unwrap();
            let mut md = MetadataMap::new();
            md.insert("x-cache", MetadataValue::from_static("hit"));
            md.insert_bin("x-id-bin", MetadataValue::from_bytes(b"\x01\x02"));
            md.insert("grpc-status", MetadataValue::from_static("0"));
            trailers.merge(md);
            let mut more = MetadataMap::new();
            more.append("x-cache", MetadataValue::from_static("again"));
            trailers.merge(more);
            Ok::<_, Infallible>(if fail {
                zrpc_core::grpc::status_response::<TestBody>(code::NOT_FOUND, "nope")
            } else {
                response_with_code(code::OK)
            })
        }));
    // As the serve loop hands the call over.
    let svc = tower::ServiceBuilder::new()
        .map_request(|mut req: Request<Body>| {
            req.extensions_mut()
                .insert(crate::call::Arrival::for_test());
            req
        })
        .service(governor);
    let resp = svc
        .clone()
        .oneshot(request("/governor.T/Ok"))
        .await
        .unwrap();
    let trailers = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .trailers()
        .cloned()
        .unwrap();
    let values: Vec<_> = trailers.get_all("x-cache").iter().collect();
    assert_eq!(values, ["hit", "again"]);
    assert_eq!(trailers["x-id-bin"], "AQI");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(trailers.get_all("grpc-status").iter().count(), 1);

    let resp = svc.oneshot(request("/governor.T/Fail")).await.unwrap();
    let headers = resp.headers();
    assert_eq!(headers["grpc-status"], "5");
    assert_eq!(headers.get_all("grpc-status").iter().count(), 1);
    let values: Vec<_> = headers.get_all("x-cache").iter().collect();
    assert_eq!(values, ["hit", "again"]);
    assert_eq!(headers["x-id-bin"], "AQI");
}

/// What a user stage saw of the calls it admitted: `(code, reached_handler)` per call.
#[derive(Debug, Default, Clone)]
struct Seen(Arc<std::sync::Mutex<Vec<(tonic::Code, bool)>>>);

impl super::super::Record for Seen {
    fn finish(self: Box<Self>, end: &super::super::End<'_>) {
        self.0
            .lock()
            .unwrap()
            .push((end.code(), end.reached_handler()));
    }
}

/// Records every call, then rejects the calls to methods ending in `Reject`, and waits 1 s
/// (a slow remote decision) for those ending in `Slow`.
#[derive(Debug, Default)]
struct Gate(Seen);

impl Stage for Gate {
    fn admit(&self, call: &mut super::super::Call<'_>) -> super::super::Admission {
        use super::super::{Admission, Rejection};
        let m = call.method().to_owned();
        if m.ends_with("Reject") {
            Admission::reject(
                Rejection::new(tonic::Code::PermissionDenied, "gated").dropped("gate"),
            )
        } else if m.ends_with("Slow") {
            Admission::wait(async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Admission::pass()
            })
        } else {
            Admission::record(self.0.clone())
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_user_stage_admits_rejects_and_waits_within_the_deadline() {
    let seen = Seen::default();
    let outer = Seen::default();
    // A user stage before it records every call, the rejected ones too.
    #[derive(Debug)]
    struct Outer(Seen);
    impl Stage for Outer {
        fn admit(&self, _: &mut super::super::Call<'_>) -> super::super::Admission {
            super::super::Admission::record(self.0.clone())
        }
    }
    let svc = GovernorLayer::with(
        Frame {
            trace: TraceStage::new(false),
            recover: RecoverStage::new(false),
        },
        vec![Arc::new(Outer(outer.clone())), Arc::new(Gate(seen.clone()))],
        StreamingMethods::default(),
    )
    .layer(answering(code::OK));
    let dropped = || {
        crate::metrics::server_metrics()
            .dropped_total
            .with_label_values(&["/user.G/Reject", "gate"])
            .get()
    };
    let before = dropped();

    let resp = svc.clone().oneshot(request("/user.G/Pass")).await.unwrap();
    assert_eq!(final_code(resp).await, Some(code::OK));
    let resp = svc
        .clone()
        .oneshot(request("/user.G/Reject"))
        .await
        .unwrap();
    assert_eq!(
        status_message_from_headers(resp.headers()).as_deref(),
        Some("gated")
    );
    assert_eq!(final_code(resp).await, Some(code::PERMISSION_DENIED));
    assert_eq!(dropped(), before + 1);
    // A wait longer than the caller's deadline ends at the deadline.
    let mut slow = request("/user.G/Slow");
    slow.headers_mut()
        .insert("grpc-timeout", http::HeaderValue::from_static("200m"));
    let started = tokio::time::Instant::now();
    let resp = svc.clone().oneshot(slow).await.unwrap();
    assert_eq!(final_code(resp).await, Some(code::DEADLINE_EXCEEDED));
    assert_eq!(started.elapsed(), Duration::from_millis(200));
    // Without a deadline the wait ends with the stage's decision.
    let resp = svc.oneshot(request("/user.G/Slow")).await.unwrap();
    assert_eq!(final_code(resp).await, Some(code::OK));

    use tonic::Code::{DeadlineExceeded, Ok, PermissionDenied};
    assert_eq!(*seen.0.lock().unwrap(), [(Ok, true)]);
    assert_eq!(
        *outer.0.lock().unwrap(),
        [
            (Ok, true),
            (PermissionDenied, false),
            (DeadlineExceeded, false),
            (Ok, true)
        ]
    );
}

#[test]
fn the_list_holds_only_what_the_config_switches_on() {
    let names = |conf: &crate::conf::RpcServerConf, store: bool| {
        let env = super::super::Env {
            conf,
            token_store: store
                .then(|| Arc::new(StaticTokens::new([("a", "b")])) as Arc<dyn TokenStore>),
            breakers: Arc::new(BreakerRegistry::new(BreakerConfig::default())),
            limit: crate::stage::limit::gauges::limit_stage(conf, &[]),
            shedding: crate::stage::shedding::gauges::shedding_stage(
                crate::stage::shedding::gauges::shedder(
                    conf,
                    Some(Arc::new(FixedCpu::new(0)) as Arc<dyn zrpc_core::cpu::CpuUsage>),
                )
                .as_ref(),
            ),
            described: &[],
        };
        let user: Arc<dyn Stage> = Arc::new(Gate::default());
        super::super::list(&env, &[user])
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
    };
    let gate = std::any::type_name::<Gate>();
    // go-zero's defaults: no auth, no concurrency limit.
    let conf = crate::conf::RpcServerConf::new("list", "127.0.0.1:0");
    assert_eq!(
        names(&conf, false),
        ["stat", "metrics", "breaker", "shedding", "timeout", gate]
    );
    // Everything on.
    let mut on = conf.clone();
    on.auth = true;
    on.concurrency_limit = Some(crate::conf::ConcurrencyLimitConf::default());
    assert_eq!(
        names(&on, true),
        [
            "stat", "metrics", "auth", "breaker", "limit", "shedding", "timeout", gate
        ]
    );
    // Everything off: only the user's stage is left.
    let mut off = conf;
    off.middlewares.stat = false;
    off.middlewares.prometheus = false;
    off.middlewares.breaker = false;
    off.cpu_threshold = 0;
    off.timeout = 0;
    assert_eq!(names(&off, false), [gate]);
}

/// What kind of call a user stage was told each call is: `(is_streaming, is_infrastructure)`.
#[derive(Debug, Default)]
struct Kinds(std::sync::Mutex<Vec<(bool, bool)>>);

impl Stage for Kinds {
    fn admit(&self, call: &mut super::super::Call<'_>) -> super::super::Admission {
        let kind = (call.is_streaming(), call.is_infrastructure());
        self.0.lock().unwrap().push(kind);
        super::super::Admission::pass()
    }
}

/// The stages and the layers inside the governor read the call's kind from its `Arrival`; a
/// request without one gets the same kind from the governor's own lookup, so nothing depends
/// on whether the transport made the request.
#[tokio::test]
async fn the_calls_kind_is_the_arrivals_or_else_looked_up_once() {
    let kinds = Arc::new(Kinds::default());
    let svc = GovernorLayer::with(
        Frame {
            trace: TraceStage::new(false),
            recover: RecoverStage::new(false),
        },
        vec![kinds.clone() as Arc<dyn Stage>],
        StreamingMethods::new(
            ["/governor.K/Stream", "/grpc.health.v1.Health/Watch"].map(str::to_owned),
        ),
    )
    .layer(tower::service_fn(|req: Request<Body>| async move {
        // What the drain, inside, reads.
        let kind = crate::call::kind_of(req.extensions()).unwrap();
        Ok::<_, Infallible>(response_with_code(i32::from(kind.streaming)))
    }));
    let cases = [
        ("/governor.K/Unary", CallKind::UNARY),
        ("/governor.K/Stream", CallKind::STREAMING),
        (
            "/grpc.health.v1.Health/Check",
            CallKind {
                streaming: false,
                infra: true,
            },
        ),
        (
            "/grpc.health.v1.Health/Watch",
            CallKind {
                streaming: true,
                infra: true,
            },
        ),
    ];
    for (path, kind) in cases {
        for arrived in [false, true] {
            let req = if arrived {
                arriving(request(path), kind)
            } else {
                request(path)
            };
            let resp = svc.clone().oneshot(req).await.unwrap();
            let inner = final_code(resp).await;
            assert_eq!(inner, Some(i32::from(kind.streaming)), "{path}, {arrived}");
            let seen = kinds.0.lock().unwrap().pop();
            assert_eq!(
                seen,
                Some((kind.streaming, kind.infra)),
                "{path}, {arrived}"
            );
        }
    }
    // The Arrival's kind is the call's, whatever the governor's set says: it is not looked up
    // again.
    let resp = svc
        .oneshot(arriving(request("/governor.K/Unary"), CallKind::STREAMING))
        .await
        .unwrap();
    assert_eq!(final_code(resp).await, Some(1));
    assert_eq!(kinds.0.lock().unwrap().pop(), Some((true, false)));
}

/// Calls of made-up paths that a stage rejects before they reach their service leave no
/// per-method state behind: no breaker, no metrics series, and at most `DROP_METHODS` labels
/// of `rpc_server_dropped_total` (each label value is a series kept for good). A real method
/// gets its breaker and its series from its first call its service answers.
#[tokio::test(start_paused = true)]
async fn rejected_calls_of_made_up_paths_add_no_per_method_state() {
    let registry = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
    let svc = GovernorLayer::with(
        Frame {
            trace: TraceStage::new(false),
            recover: RecoverStage::new(false),
        },
        vec![
            Arc::new(MetricsStage::new(true)),
            Arc::new(BreakerStage::with_registry(true, registry.clone())),
            Arc::new(Gate::default()),
        ],
        StreamingMethods::default(),
    )
    .layer(answering(code::OK));
    let n = super::DROP_METHODS + 100;
    for i in 0..n {
        let resp = svc
            .clone()
            .oneshot(request(&format!("/junk.J/R{i}Reject")))
            .await
            .unwrap();
        assert_eq!(final_code(resp).await, Some(code::PERMISSION_DENIED));
    }
    let m = crate::metrics::server_metrics();
    // The series of `family` whose method label is a made-up path.
    let junk = |family: &dyn prometheus::core::Collector| {
        family.collect()[0]
            .get_metric()
            .iter()
            .filter(|s| {
                s.get_label()
                    .iter()
                    .any(|l| l.name() == "method" && l.value().starts_with("/junk.J/"))
            })
            .count()
    };
    let junk_drops = || junk(&m.dropped_total);
    assert_eq!(registry.len(), 0, "no breaker for a made-up path");
    assert_eq!(junk(&m.duration_ms), 0, "no metrics series of their own");
    let drops = junk_drops();
    assert!(
        drops <= super::DROP_METHODS,
        "{drops} method labels of rpc_server_dropped_total"
    );

    let resp = svc.clone().oneshot(request("/junk.J/Real")).await.unwrap();
    assert_eq!(final_code(resp).await, Some(code::OK));
    assert_eq!(registry.names(), vec!["/junk.J/Real".to_owned()]);
    assert_eq!(junk(&m.duration_ms), 1, "the real method's series");
}
