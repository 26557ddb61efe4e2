//! The limit stage as a tower layer: admissions by tier, the reasons counted and logged, the
//! samples it takes and refuses, per-method limits.

use std::convert::Infallible;

use std::time::Duration;
use tonic::body::Body;

use crate::call::{CallFacts, CallKind};
use http::{Request, Response};
use tokio::sync::Semaphore;
use tower::{Layer, ServiceExt};
use zrpc_core::grpc::status_message_from_headers;

use super::*;
use crate::layers::test_util::{arriving, capture_logs, final_code, ok_response};

/// The tests' streaming method: its calls arrive as streams.
const STREAM: &str = "/l.T/Stream";

/// A limit of 3 from its first call on: the measurement ends with that call's sample, and no
/// sample window ends in a test (so the limit stays 3: default tier 2, sheddable 1).
fn config() -> LimitConfig {
    let mut c = LimitConfig::default();
    c.min_rtt_samples = 1;
    c.window = Duration::from_secs(3600);
    c
}

fn layer(per_method: bool, config: LimitConfig) -> LimitStage {
    described_layer(per_method, config, &[])
}

/// A limit stage whose descriptor sets name `described`.
fn described_layer(per_method: bool, config: LimitConfig, described: &[&str]) -> LimitStage {
    let described: Vec<String> = described.iter().map(|&m| m.to_owned()).collect();
    LimitStage::new(
        Some(LimitSettings { config, per_method }),
        &described,
        Instant::now(),
    )
}

/// A service behind `layer` whose calls wait for a permit of the returned gate.
fn gated(
    layer: &LimitStage,
) -> (
    impl tower::Service<
        Request<Body>,
        Response = Response<impl http_body::Body<Data: Send, Error: std::fmt::Debug> + Send>,
        Error = Infallible,
        Future: Send,
    > + Clone
    + Send
    + 'static,
    Arc<Semaphore>,
) {
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    let svc = layer.layer(tower::service_fn(move |_req: Request<Body>| {
        let g = g.clone();
        async move {
            g.acquire().await.unwrap().forget();
            Ok::<_, Infallible>(ok_response())
        }
    }));
    (svc, gate)
}

fn request(path: &str, tier: Option<&str>) -> Request<Body> {
    let mut b = Request::builder().uri(path);
    if let Some(t) = tier {
        b = b.header("zrpc-tier", t);
    }
    let req = b.body(Body::empty()).unwrap();
    if path == STREAM {
        arriving(req, CallKind::STREAMING)
    } else {
        req
    }
}

fn dropped(method: &str, reason: &str) -> u64 {
    crate::metrics::server_metrics()
        .dropped_total
        .with_label_values(&[method, reason])
        .get()
}

#[tokio::test]
async fn tiers_are_admitted_up_to_their_share_and_rejections_say_why() {
    let (_guard, logs) = capture_logs();
    let l = layer(false, config());
    let (svc, gate) = gated(&l);
    let call = |path: &'static str, tier: Option<&'static str>| {
        let svc = svc.clone();
        tokio::spawn(async move {
            let resp = svc.oneshot(request(path, tier)).await.unwrap();
            let msg = status_message_from_headers(resp.headers());
            (final_code(resp).await, msg)
        })
    };
    // The first call ends the measurement: the limit is 3.
    let first = call("/l.T/M", None);
    gate.add_permits(1);
    assert_eq!(first.await.unwrap().0, Some(code::OK));
    // Two calls of the default tier (a go-zero caller sets none; an unknown value is the
    // default tier too) fill its share, 3/4 of 3.
    let a = call("/l.T/M", None);
    let b = call("/l.T/M", Some("urgent"));
    tokio::task::yield_now().await;
    // go-zero's words, then the bound that refused the call and its figures.
    let shed = |message: &str| (Some(code::RESOURCE_EXHAUSTED), Some(message.to_owned()));
    assert_eq!(
        call("/l.T/M", Some("default")).await.unwrap(),
        shed(
            "service overloaded: the default tier's share of the concurrency limit is in use \
             (2 in flight, share 2 of limit 3)"
        )
    );
    assert_eq!(
        call("/l.T/M", Some("sheddable")).await.unwrap(),
        shed(
            "service overloaded: the sheddable tier's share of the concurrency limit is in use \
             (2 in flight, share 1 of limit 3)"
        )
    );
    assert_eq!(dropped("/l.T/M", "tier"), 2);
    // Critical calls are counted against the whole limit by themselves: three are admitted
    // beside the default tier's two, the next one finds the limit reached.
    let critical: Vec<_> = (0..3).map(|_| call("/l.T/M", Some("CRITICAL"))).collect();
    tokio::task::yield_now().await;
    assert_eq!(
        call("/l.T/M", Some("critical")).await.unwrap(),
        shed(
            "service overloaded: concurrency limit 3 reached by critical calls (3 critical in \
             flight)"
        )
    );
    assert_eq!(dropped("/l.T/M", "limit"), 1);
    // Streams and health are never limited.
    let stream = call(STREAM, None);
    let health = call("/grpc.health.v1.Health/Check", None);
    gate.add_permits(7);
    for h in [a, b, stream, health].into_iter().chain(critical) {
        assert_eq!(h.await.unwrap().0, Some(code::OK));
    }
    assert_eq!(dropped(STREAM, "limit"), 0);
    assert_eq!(l.shared().unwrap().limits()[0].1.stats().inflight, 0);
    // Each reason is logged, with what was in use.
    let out = logs.contents();
    assert_eq!(out.matches("tier's share").count(), 1, "{out}");
    assert!(out.contains("the default tier's share"), "{out}");
    assert!(
        out.contains("concurrency limit 3 reached by critical calls (3 critical in flight)"),
        "{out}"
    );
}

#[test]
fn drops_are_logged_at_most_once_per_second_per_reason() {
    let (_guard, logs) = capture_logs();
    let l = layer(false, config());
    let shared = l.shared().unwrap();
    let limit = &shared.limits()[0].1;
    // The limit's own rejections: its first sample ends the measurement (limit 3), two
    // default calls fill their tier's share, three critical ones the limit.
    let now = Instant::now();
    limit.acquire(Tier::Default, now).unwrap().sample(now);
    let mut held: Vec<_> = (0..2)
        .map(|_| limit.acquire(Tier::Default, now).unwrap())
        .collect();
    let tier = limit.acquire(Tier::Default, now).unwrap_err();
    held.extend((0..3).map(|_| limit.acquire(Tier::Critical, now).unwrap()));
    let full = limit.acquire(Tier::Critical, now).unwrap_err();
    assert_eq!(
        (tier.reason(), full.reason()),
        (RejectReason::Tier, RejectReason::Limit)
    );
    for _ in 0..50 {
        // Counted as the list counts a rejection.
        for a in [
            shared.rejected(Tier::Default, "/l.T/Log", &tier),
            shared.rejected(Tier::Critical, "/l.T/Log", &full),
        ] {
            let crate::stage::Verdict::Reject(r) = a.0 else {
                panic!("not a rejection")
            };
            let _: Response<Body> = crate::stage::governor::rejected("/l.T/Log", r);
        }
    }
    let out = logs.contents();
    assert_eq!(out.matches("service overloaded").count(), 2, "{out}");
    assert_eq!(dropped("/l.T/Log", "tier"), 50);
    assert_eq!(dropped("/l.T/Log", "limit"), 50);
}

#[test]
fn only_calls_the_server_worked_on_are_samples() {
    let mut c = config();
    c.window = Duration::ZERO; // every sample ends a window
    let l = layer(false, c);
    let shared = l.shared().unwrap();
    let limit = Arc::clone(&shared.limits()[0].1);
    let t0 = Instant::now();
    let ms = Duration::from_millis(1);
    let headers = HeaderMap::new();
    let read = || {
        let f = CallFacts::default();
        f.mark_request_ended();
        Some(f)
    };
    // Admits a call that ends as `facts` say, with `c` at `at`.
    let call = |facts: Option<CallFacts>, c: i32, at: Instant| {
        let crate::stage::Verdict::Record(crate::stage::AnyRecord::Limit(r)) =
            shared.admit(&headers, "/l.T/M", t0).0
        else {
            panic!("not admitted")
        };
        r.finish(&crate::stage::End {
            code: c,
            now: tokio::time::Instant::from_std(at),
            facts: facts.as_ref(),
            handled: true,
        });
    };
    // The measurement's sample.
    call(read(), code::OK, t0 + 10 * ms);
    assert_eq!(limit.stats().min_rtt, Some(10 * ms));
    // Cancelled by the caller, or failed before its request arrived: no sample.
    call(read(), code::CANCELLED, t0 + 500 * ms);
    call(Some(CallFacts::default()), code::INTERNAL, t0 + 500 * ms);
    assert_eq!(limit.stats().sample_rtt, None);
    assert_eq!(limit.stats().inflight, 0);
    // The server's own failure and its timeout are.
    call(read(), code::INTERNAL, t0 + 30 * ms);
    assert_eq!(limit.stats().sample_rtt, Some(30 * ms));
    call(read(), code::DEADLINE_EXCEEDED, t0 + 2000 * ms);
    assert_eq!(limit.stats().sample_rtt, Some(2000 * ms));
}

#[tokio::test]
async fn per_method_limits_are_apart_and_capped() {
    let l = described_layer(true, config(), &["/l.P/A", "/l.P/B"]);
    let (svc, gate) = gated(&l);
    let call = |path: String| {
        let svc = svc.clone();
        tokio::spawn(
            async move { final_code(svc.oneshot(request(&path, None)).await.unwrap()).await },
        )
    };
    let a: Vec<_> = (0..3).map(|_| call("/l.P/A".to_owned())).collect();
    tokio::task::yield_now().await;
    // A is full (3 in its measurement); B has a limit of its own.
    assert_eq!(
        call("/l.P/A".to_owned()).await.unwrap(),
        Some(code::RESOURCE_EXHAUSTED)
    );
    let b = call("/l.P/B".to_owned());
    gate.add_permits(4);
    assert_eq!(b.await.unwrap(), Some(code::OK));
    for h in a {
        assert_eq!(h.await.unwrap(), Some(code::OK));
    }
    let shared = l.shared().unwrap();
    let labels: Vec<String> = shared.limits().into_iter().map(|(m, _)| m).collect();
    assert!(labels.contains(&"/l.P/A".to_owned()) && labels.contains(&"*".to_owned()));
    // Methods past the cap share one limit.
    let now = Instant::now();
    for i in 0..MAX_METHODS + 10 {
        drop(shared.learn(&format!("/l.P/M{i}"), now));
    }
    assert_eq!(shared.limits().len(), MAX_METHODS + 1);
    let late = shared.of_method("/l.P/late", now).unwrap_err();
    let overflow = shared.limits().pop().unwrap().1;
    assert!(Arc::ptr_eq(&late, &overflow));
}

/// Per method, a path no descriptor set names shares the server's `*` limit until its service
/// answers a call with a code other than `Unimplemented`: a caller's made-up paths make no
/// limit (and no five gauge series) of their own.
#[tokio::test]
async fn made_up_paths_get_no_limit_of_their_own() {
    let l = layer(true, config());
    let svc = l.layer(tower::service_fn(|req: Request<Body>| async move {
        let c = if req.uri().path().starts_with("/junk.") {
            code::UNIMPLEMENTED
        } else {
            code::OK
        };
        Ok::<_, Infallible>(crate::layers::test_util::response_with_code(c))
    }));
    let labels = || -> Vec<String> {
        let shared = l.shared().unwrap();
        let mut all: Vec<String> = shared.limits().into_iter().map(|(m, _)| m).collect();
        all.sort();
        all
    };
    for i in 0..50 {
        let path = format!("/junk.J/M{i}");
        let resp = svc.clone().oneshot(request(&path, None)).await.unwrap();
        assert_eq!(final_code(resp).await, Some(code::UNIMPLEMENTED));
    }
    assert_eq!(
        labels(),
        vec!["*".to_owned()],
        "made-up paths share one limit"
    );
    // A real method of a service without descriptor sets: its own limit once answered.
    let resp = svc
        .clone()
        .oneshot(request("/l.P/Real", None))
        .await
        .unwrap();
    assert_eq!(final_code(resp).await, Some(code::OK));
    assert_eq!(labels(), vec!["*".to_owned(), "/l.P/Real".to_owned()]);
    // A described method has its own from its first call, before any answer.
    let d = described_layer(true, config(), &["/l.P/D"]);
    let shared = d.shared().unwrap();
    assert!(shared.of_method("/l.P/D", Instant::now()).is_ok());
    assert!(shared.of_method("/l.P/E", Instant::now()).is_err());
}
