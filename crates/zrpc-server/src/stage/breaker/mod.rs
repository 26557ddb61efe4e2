//! Breaker: a Google-SRE adaptive breaker per full method
//! (go-zero `serverinterceptors/breakerinterceptor.go`).
//!
//! Each method has its own [`GoogleBreaker`](zrpc_core::breaker::GoogleBreaker) from a
//! process-wide [`BreakerRegistry`] keyed by `/pkg.Service/Method`. A rejected call gets
//! `Unavailable "circuit breaker is open: ..."` (go-zero's words, then the method and its
//! breaker's window: `/pkg.S/M dropped 38 of the last 200 calls in 10s (150 failed, 12
//! succeeded; drop chance 81%)`) and counts in
//! `rpc_server_dropped_total{reason="breaker"}`. The outcome of an allowed call is
//! its final code: `DeadlineExceeded`, `Internal`, `Unavailable` (which includes a nested
//! breaker's "circuit breaker is open"), `DataLoss`, `Unimplemented` and `ResourceExhausted`
//! are failures ([`code::is_acceptable`]); a call dropped before it finished is a `Cancelled`,
//! which is acceptable.
//!
//! Unlike go-zero, only failures the **server** produced count (see [`CallFacts`](crate::call::CallFacts)):
//! a failure whose request body never arrived whole (undecodable, truncated, still missing at
//! the deadline) or failed (the caller reset the stream) is recorded as acceptable, and a
//! handler panic is a failure even though the recover stage drops the handler as a
//! cancellation. Auth runs before this stage, so unauthenticated calls never reach it. A
//! hostile caller therefore cannot open the breaker for everyone else.
//!
//! Nor can it grow the registry: a method gets its breaker only once a call to it has
//! finished with a code other than `Unimplemented` (what tonic's router and generated services
//! answer for unknown services and methods). Calls to a method without a breaker yet pass
//! unguarded, so `/x.Y/<random>` paths cost no memory. (grpc-go answers unknown methods before
//! any interceptor runs, so go-zero's breaker never sees them either.)

use std::sync::Arc;

use zrpc_core::breaker::{BreakerOpen, BreakerPromise, BreakerRegistry};
use zrpc_core::grpc::code;

use super::{Admission, Call, End, Env, Rejection, Stage};
use crate::call::Blame;
use crate::metrics::DropReason;

/// The message of a breaker rejection (go-zero's), which the method and the breaker's
/// window follow.
#[cfg(test)]
pub(crate) const BREAKER_OPEN_MESSAGE: &str = "circuit breaker is open";

/// The figures of a breaker rejection of `method` in `message`: `[dropped, total, failed,
/// succeeded, chance %]`; `None` when `message` is not a breaker rejection. Panics when it
/// is one whose figures do not add up.
#[cfg(test)]
pub(crate) fn breaker_figures(message: &str, method: &str) -> Option<[u64; 5]> {
    let rest = message.strip_prefix(BREAKER_OPEN_MESSAGE)?;
    let figures = rest
        .strip_prefix(&format!(": {method} dropped "))
        .unwrap_or_else(|| panic!("not explained: {message}"));
    let numbers: Vec<u64> = figures
        .split(|c: char| !c.is_ascii_digit())
        .filter(|n| !n.is_empty())
        .filter_map(|n| n.parse().ok())
        .collect();
    // dropped D of the last T calls in 10s (F failed, A succeeded; drop chance P%)
    let [d, t, window, f, a, p] = numbers[..] else {
        panic!("not explained: {message}");
    };
    assert_eq!(
        figures,
        format!(
            "{d} of the last {t} calls in {window}s ({f} failed, {a} succeeded; drop chance {p}%)"
        ),
        "{message}"
    );
    assert!(d >= 1 && d + f + a == t && p <= 100, "{message}");
    Some([d, t, f, a, p])
}

/// The breaker stage's settings: the registry when `Middlewares.Breaker` is on.
#[derive(Debug, Clone)]
pub(crate) struct BreakerStage {
    registry: Option<Arc<BreakerRegistry>>,
}

impl BreakerStage {
    /// A breaker stage over the process-wide registry ([`BreakerRegistry::shared`]).
    #[cfg(test)]
    pub(crate) fn new(enabled: bool) -> Self {
        Self::with_registry(enabled, BreakerRegistry::shared())
    }

    /// A breaker stage over `registry`, an owned handle (a server of its own, or tests).
    pub(crate) fn with_registry(enabled: bool, registry: Arc<BreakerRegistry>) -> Self {
        Self {
            registry: enabled.then_some(registry),
        }
    }
}

/// The stage, when `Middlewares.Breaker` is on; its gauges are registered with it.
pub(crate) fn build(env: &Env<'_>) -> Option<Box<dyn Stage>> {
    if !env.conf.middlewares.breaker {
        return None;
    }
    crate::gauges::register_breakers(&env.breakers);
    Some(Box::new(BreakerStage::with_registry(
        true,
        Arc::clone(&env.breakers),
    )))
}

impl Stage for BreakerStage {
    fn admit(&self, call: &mut Call<'_>) -> Admission {
        let Some(registry) = &self.registry else {
            return Admission::pass();
        };
        if call.is_infrastructure() {
            return Admission::pass();
        }
        let path = call.method();
        let Some(breaker) = registry.find(path) else {
            return Admission::built_in(BreakerRecord(Record::Learn {
                registry: Arc::clone(registry),
                method: path.to_owned(),
            }));
        };
        match breaker.allow(call.now().into_std()) {
            Ok(promise) => Admission::built_in(BreakerRecord(Record::Guarded(promise))),
            Err(open) => rejection(call.method(), &open),
        }
    }

    fn name(&self) -> &'static str {
        "breaker"
    }
}

/// Reports the call's outcome to its breaker.
#[derive(Debug)]
pub(crate) struct BreakerRecord(Record);

#[derive(Debug)]
enum Record {
    Guarded(BreakerPromise),
    /// A method without a breaker yet: it gets one if the call shows the method exists.
    Learn {
        registry: Arc<BreakerRegistry>,
        method: String,
    },
}

impl BreakerRecord {
    /// Reports the final code: a failure the server caused is one for the breaker.
    pub(crate) fn finish(self, end: &End<'_>) {
        match self.0 {
            Record::Guarded(promise) => {
                let now = end.now.into_std();
                match end.blame() {
                    Blame::Server => promise.reject(now),
                    // A caller-caused failure is acceptable, like a go-zero acceptable code:
                    // the server did its job.
                    Blame::None | Blame::Caller => promise.accept(now),
                }
            }
            Record::Learn { registry, method } => {
                // The method exists when its service answered the call (a made-up path is
                // answered `Unimplemented`); a call a later stage rejected shows nothing.
                if end.names_a_method() {
                    let _ = registry.get(&method);
                }
            }
        }
    }
}

/// The rejection of a call the open breaker drops (logged at debug level): go-zero's words,
/// then the method and its breaker's window.
#[cold]
#[inline(never)]
fn rejection(path: &str, open: &BreakerOpen) -> Admission {
    let message = open.explain(path);
    tracing::debug!(target: "zrpc::breaker", method = path, "{message}");
    Admission::reject(
        Rejection::of(code::UNAVAILABLE, message).dropped(DropReason::Breaker.label()),
    )
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use tonic::body::Body;

    use http::Request;
    use tower::{Layer, ServiceExt};
    use zrpc_core::breaker::BreakerConfig;
    use zrpc_core::grpc::status_message_from_headers;

    use super::*;
    use crate::call::CallFacts;
    use crate::layers::test_util::{final_code, response_with_code};

    #[tokio::test]
    async fn opens_after_repeated_failures() {
        let registry = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
        let svc = BreakerStage::with_registry(true, registry).layer(tower::service_fn(
            |_req: Request<Body>| async { Ok::<_, Infallible>(response_with_code(code::INTERNAL)) },
        ));
        let mut rejected = 0;
        for _ in 0..200 {
            let req = Request::builder()
                .uri("/b.T/Fails")
                .body(Body::empty())
                .unwrap();
            let resp = svc.clone().oneshot(req).await.unwrap();
            let msg = status_message_from_headers(resp.headers()).unwrap_or_default();
            if breaker_figures(&msg, "/b.T/Fails").is_some() {
                rejected += 1;
                assert_eq!(final_code(resp).await, Some(code::UNAVAILABLE));
            } else {
                assert_eq!(final_code(resp).await, Some(code::INTERNAL));
            }
        }
        assert!(rejected > 100, "only {rejected} of 200 rejected");
        // Other methods have their own breaker.
        let req = Request::builder()
            .uri("/b.T/Other")
            .body(Body::empty())
            .unwrap();
        let resp = svc.oneshot(req).await.unwrap();
        assert_eq!(final_code(resp).await, Some(code::INTERNAL));
        // Each rejection counts once in the drop-reason metric, under its method.
        let dropped = |m: &str, reason: &str| {
            crate::metrics::server_metrics()
                .dropped_total
                .with_label_values(&[m, reason])
                .get()
        };
        assert_eq!(dropped("/b.T/Fails", "breaker"), rejected as u64);
        assert_eq!(dropped("/b.T/Fails", "shedder"), 0);
        assert_eq!(dropped("/b.T/Other", "breaker"), 0);
        let text = crate::metrics::render();
        assert!(text.contains(&format!(
            "rpc_server_dropped_total{{method=\"/b.T/Fails\",reason=\"breaker\"}} {rejected}"
        )));
    }

    fn own_registry() -> Arc<BreakerRegistry> {
        Arc::new(BreakerRegistry::new(BreakerConfig::default()))
    }

    /// 200 calls failing with `code` whose request facts are `facts()`; how many the breaker
    /// rejected.
    async fn rejections(code: i32, facts: impl Fn() -> CallFacts) -> usize {
        let svc = BreakerStage::with_registry(true, own_registry()).layer(tower::service_fn(
            move |_req: Request<Body>| async move { Ok::<_, Infallible>(response_with_code(code)) },
        ));
        let mut rejected = 0;
        for _ in 0..200 {
            let mut req = Request::builder()
                .uri("/b.T/M")
                .body(Body::empty())
                .unwrap();
            req.extensions_mut().insert(facts());
            let resp = svc.clone().oneshot(req).await.unwrap();
            let msg = status_message_from_headers(resp.headers()).unwrap_or_default();
            if breaker_figures(&msg, "/b.T/M").is_some() {
                rejected += 1;
            }
            let _ = final_code(resp).await;
        }
        rejected
    }

    #[tokio::test]
    async fn failures_before_the_request_arrived_do_not_open_it() {
        // Undecodable or missing requests (tonic answers Internal), bodies still missing at
        // the deadline (DeadlineExceeded): the body was never read to its end.
        for code in [code::INTERNAL, code::DEADLINE_EXCEEDED, code::UNAVAILABLE] {
            assert_eq!(rejections(code, CallFacts::default).await, 0, "code {code}");
        }
    }

    #[tokio::test]
    async fn handler_failures_after_the_request_arrived_open_it() {
        let arrived = || {
            let f = CallFacts::default();
            f.mark_request_ended();
            f
        };
        for code in [code::INTERNAL, code::DEADLINE_EXCEEDED, code::UNAVAILABLE] {
            let n = rejections(code, arrived).await;
            assert!(n > 100, "code {code}: only {n} of 200 rejected");
        }
    }

    #[tokio::test]
    async fn a_handler_panic_counts_although_it_looks_cancelled() {
        // The recover layer marks the panic, then drops the handler: Cancelled.
        let panicked = || {
            let f = CallFacts::default();
            f.mark_panicked();
            f
        };
        let n = rejections(code::CANCELLED, panicked).await;
        assert!(n > 100, "only {n} of 200 rejected");
        assert_eq!(rejections(code::CANCELLED, CallFacts::default).await, 0);
    }

    #[tokio::test]
    async fn unknown_methods_get_no_breaker() {
        let registry = own_registry();
        let svc = BreakerStage::with_registry(true, registry.clone()).layer(tower::service_fn(
            |req: Request<Body>| async move {
                let c = if req.uri().path() == "/b.T/Real" {
                    code::OK
                } else {
                    code::UNIMPLEMENTED
                };
                Ok::<_, Infallible>(response_with_code(c))
            },
        ));
        for i in 0..1000 {
            let req = Request::builder()
                .uri(format!("/b.T/Random{i}"))
                .body(Body::empty())
                .unwrap();
            let resp = svc.clone().oneshot(req).await.unwrap();
            assert_eq!(final_code(resp).await, Some(code::UNIMPLEMENTED));
        }
        assert_eq!(registry.len(), 0, "{:?}", registry.names());
        let req = Request::builder()
            .uri("/b.T/Real")
            .body(Body::empty())
            .unwrap();
        let resp = svc.clone().oneshot(req).await.unwrap();
        assert_eq!(final_code(resp).await, Some(code::OK));
        assert_eq!(registry.names(), vec!["/b.T/Real".to_owned()]);
    }

    #[tokio::test]
    async fn acceptable_codes_keep_it_closed() {
        let registry = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
        let svc = BreakerStage::with_registry(true, registry).layer(tower::service_fn(
            |_req: Request<Body>| async {
                Ok::<_, Infallible>(response_with_code(code::INVALID_ARGUMENT))
            },
        ));
        for _ in 0..200 {
            let req = Request::builder()
                .uri("/b.T/BadArgs")
                .body(Body::empty())
                .unwrap();
            let resp = svc.clone().oneshot(req).await.unwrap();
            assert_eq!(final_code(resp).await, Some(code::INVALID_ARGUMENT));
        }
    }
}
