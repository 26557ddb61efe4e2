//! The observing stage of the client chain: tracing, duration log, metrics and breaker, fed by one
//! classification of each call's outcome.
//!
//! go-zero runs four interceptors here, and each reads the outcome itself. This stage reads it
//! once (tower-http's `ClassifyResponse`/`ClassifyEos`, linkerd's `classify`): the final gRPC code
//! comes from the error of a failed call, the `grpc-status` header of a trailers-only response, or
//! the trailers at the end of the body (a call dropped before that is `Cancelled`), and one
//! `Outcome` hands it to every recorder switched on, with one clock read. The per-method state
//! (breaker, metric handles, log name) is resolved once per client (`layers::method`).
//! `Client::call` starts each call's record with [`Observe::begin`] and ends it with the
//! answer: from a trailers-only response's headers at once, or from the trailers at the end of
//! the body, read by the one body wrapper that also reports to the endpoint.
//!
//! Recorders, in go-zero's order (outer to inner), each switched by `Middlewares`:
//! - trace: the `rpc.client` span, entered while the call runs, with the trace context injected
//!   into the request;
//! - duration: failed calls at error level, successes slower than 500 ms at warn
//!   ([`super::duration`]);
//! - metrics: `rpc_client_requests_duration_ms{method}` and
//!   `rpc_client_requests_code_total{method,code}` for unary calls, `rpc_client_streams_*` for
//!   methods declared streaming, chosen once per method ([`crate::metrics`]);
//! - breaker: one Google-SRE breaker per target and method; an open breaker fails the call locally
//!   with `Unavailable "circuit breaker is open"`, which the outer recorders see ([`super::breaker`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::body::Body;
use tower::BoxError;
use zrpc_core::breaker::{BreakerOpen, BreakerPromise, BreakerRegistry};
use zrpc_core::grpc::{OnStatus, code};

use super::method::{MethodState, Methods};
use super::{breaker, code_of_error, duration, trace};
use crate::metrics::{ClientMetrics, DropReason};

/// The observing stage (see the module docs). Clones share the per-method states.
#[derive(Debug, Clone)]
pub(crate) struct Observe {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    methods: Methods,
    trace: bool,
    /// `Some(threshold)` when the duration log is on.
    slow: Option<Duration>,
}

/// Builds an [`Observe`]; every recorder starts off.
#[derive(Debug)]
#[must_use]
pub(crate) struct ObserveBuilder {
    target: Arc<str>,
    trace: bool,
    slow: Option<Duration>,
    metrics: Option<ClientMetrics>,
    breakers: Option<Arc<BreakerRegistry>>,
}

impl ObserveBuilder {
    /// Turns the client span and trace-context injection on (default off).
    pub(crate) fn trace(mut self, on: bool) -> Self {
        self.trace = on;
        self
    }

    /// Logs failed calls, and successful calls slower than `slow` (go-zero: 500 ms,
    /// [`duration::SLOW_THRESHOLD`]); default off.
    pub(crate) fn duration_log(mut self, slow: Option<Duration>) -> Self {
        self.slow = slow;
        self
    }

    /// Records the client metric families `metrics` (default off).
    pub(crate) fn metrics(mut self, metrics: Option<ClientMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Guards calls with the breakers of `registry`, named `<target><method>` (default off).
    pub(crate) fn breakers(mut self, registry: Option<Arc<BreakerRegistry>>) -> Self {
        self.breakers = registry;
        self
    }

    /// The stage.
    #[must_use]
    pub(crate) fn build(self) -> Observe {
        Observe {
            shared: Arc::new(Shared {
                methods: Methods::new(self.target, self.breakers, self.metrics),
                trace: self.trace,
                slow: self.slow,
            }),
        }
    }
}

impl Observe {
    /// A builder for calls to `target` (named in logs, spans and breaker names).
    pub(crate) fn builder(target: &str) -> ObserveBuilder {
        ObserveBuilder {
            target: Arc::from(target),
            trace: false,
            slow: None,
            metrics: None,
            breakers: None,
        }
    }
}

/// One call's recorders: fed once with the final code.
#[derive(Debug)]
pub(crate) struct Outcome {
    method: Arc<MethodState>,
    start: Instant,
    slow: Option<Duration>,
    promise: Option<BreakerPromise>,
    span: Option<tracing::Span>,
}

/// What is known of a failure beyond its code, for the log.
pub(crate) enum Detail<'a> {
    None,
    Message(&'a http::HeaderMap),
    Error(&'a (dyn std::error::Error + 'static)),
}

impl Outcome {
    pub(crate) fn record(self, code: i32, detail: Detail<'_>) {
        self.record_at(code, detail, Instant::now());
    }

    /// Records the final `code`, the call having ended at `now`.
    pub(crate) fn record_at(mut self, code: i32, detail: Detail<'_>, now: Instant) {
        let elapsed = now.saturating_duration_since(self.start);
        let _enter = self.span.as_ref().map(|span| {
            trace::record(span, code);
            span.enter()
        });
        if let Some(slow) = self.slow {
            let name = &self.method.name;
            match detail {
                Detail::Error(e) => duration::log_error(name, e, elapsed),
                Detail::Message(h) => duration::log_status(name, code, h, elapsed, slow),
                Detail::None => duration::log_end(name, code, elapsed, slow),
            }
        }
        if let Some(m) = &self.method.metrics {
            m.record(&self.method.path, elapsed.as_secs_f64() * 1000.0, code);
            if let Detail::Error(e) = &detail
                && crate::balancer::is_no_endpoint(*e)
            {
                m.dropped(&self.method.path, DropReason::NoEndpoint);
            }
        }
        if let Some(p) = self.promise.take() {
            if code::is_acceptable(code) {
                p.accept(now);
            } else {
                p.reject(now);
            }
        }
    }
}

impl OnStatus for Outcome {
    fn on_status(self, code: i32) {
        self.record(code, Detail::None);
    }
}

impl Outcome {
    /// The call's span, while it runs (tracing on).
    pub(crate) fn span(&self) -> Option<&tracing::Span> {
        self.span.as_ref()
    }
}

impl Observe {
    /// Starts observing a call that starts at `start`: resolves its method, opens its span
    /// (injecting the trace context into `req`), asks the breaker. An open breaker's rejection
    /// is recorded here and returned as the call's error.
    pub(crate) fn begin(
        &self,
        req: &mut http::Request<Body>,
        start: Instant,
    ) -> Result<Outcome, BoxError> {
        let shared = &self.shared;
        let method = shared.methods.get(req.uri().path());
        let span = if shared.trace {
            trace::start(shared.methods.target(), &method.path, req.headers_mut())
        } else {
            None
        };
        let mut outcome = Outcome {
            promise: None,
            method,
            start,
            slow: shared.slow,
            span,
        };
        if let Some(b) = &outcome.method.breaker {
            match b.allow(start) {
                Ok(p) => outcome.promise = Some(p),
                Err(open) => return Err(rejected(outcome, shared.methods.target(), &open)),
            }
        }
        Ok(outcome)
    }
}

/// Records a call the open breaker rejected; its error.
#[cold]
#[inline(never)]
fn rejected(outcome: Outcome, target: &str, open: &BreakerOpen) -> BoxError {
    if let Some(m) = &outcome.method.metrics {
        m.dropped(&outcome.method.path, DropReason::Breaker);
    }
    let err: BoxError = breaker::open(open, &outcome.method.path, target).into();
    outcome.record(code_of_error(&*err), Detail::Error(&*err));
    err
}

/// Tests: one call to `inner` observed as `Client::call` observes it: [`Observe::begin`], the
/// call, then its answer or error ended by `client::end` (the body wrapped for its final status).
#[cfg(test)]
pub(crate) async fn observed_call<S>(
    observe: &Observe,
    inner: &mut S,
    mut req: http::Request<Body>,
) -> Result<super::Response, BoxError>
where
    S: tower::Service<http::Request<Body>, Response = super::Response, Error = BoxError>,
{
    use tower::ServiceExt;
    use zrpc_core::grpc::StatusGuard;

    let mut outcome = StatusGuard::new(observe.begin(&mut req, Instant::now())?);
    let answer = inner.ready().await?.call(req).await;
    let answer = answer.map(|resp| crate::balancer::endpoint::Answer { resp, done: None });
    crate::response::end(answer, None, None, outcome.take(), None)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http_body_util::BodyExt;
    use zrpc_core::breaker::BreakerConfig;

    use super::*;
    use crate::layers::Response;

    /// A response whose status comes in its trailers.
    fn trailed(c: &'static str) -> Response {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", c.parse().unwrap());
        let body = http_body_util::Full::new(Bytes::from_static(b"msg"))
            .with_trailers(async move { Some(Ok(trailers)) });
        http::Response::builder()
            .header("content-type", "application/grpc")
            .body(Body::new(body))
            .unwrap()
    }

    fn request() -> http::Request<Body> {
        http::Request::builder()
            .uri("/greeter.Greeter/SayHello")
            .body(Body::empty())
            .unwrap()
    }

    fn count(metrics: &ClientMetrics, c: &str) -> u64 {
        metrics
            .code_total
            .with_label_values(&["/greeter.Greeter/SayHello", c])
            .get()
    }

    #[tokio::test]
    async fn one_classification_feeds_metrics_and_breaker_from_trailers_errors_and_drops() {
        let registry = prometheus::Registry::new();
        let metrics = ClientMetrics::register(&registry).unwrap();
        let breakers = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
        let observe = Observe::builder("direct:///x:1")
            .duration_log(Some(duration::SLOW_THRESHOLD))
            .metrics(Some(metrics.clone()))
            .breakers(Some(breakers.clone()))
            .build();
        let mut svc = tower::service_fn(|req: http::Request<Body>| async move {
            match req.headers().get("x-case").map(|v| v.as_bytes().to_vec()) {
                Some(c) if c == b"error" => {
                    Err::<Response, BoxError>(tonic::Status::deadline_exceeded("too late").into())
                }
                Some(c) if c == b"internal" => Ok(trailed("13")),
                _ => Ok(trailed("0")),
            }
        });
        let breaker = breakers.get("direct:///x:1/greeter.Greeter/SayHello");
        let t0 = Instant::now();

        // OK in the trailers: nothing is recorded before the body ends
        let resp = observed_call(&observe, &mut svc, request()).await.unwrap();
        assert_eq!(count(&metrics, "0"), 0, "recorded at the end of the body");
        resp.into_body().collect().await.unwrap();
        assert_eq!(count(&metrics, "0"), 1);

        // Internal in the trailers
        let mut req = request();
        req.headers_mut()
            .insert("x-case", "internal".parse().unwrap());
        let resp = observed_call(&observe, &mut svc, req).await.unwrap();
        resp.into_body().collect().await.unwrap();
        assert_eq!(count(&metrics, "13"), 1);

        // a local error
        let mut req = request();
        req.headers_mut().insert("x-case", "error".parse().unwrap());
        assert!(observed_call(&observe, &mut svc, req).await.is_err());
        assert_eq!(count(&metrics, "4"), 1);

        // a body dropped before its trailers: Cancelled
        let resp = observed_call(&observe, &mut svc, request()).await.unwrap();
        drop(resp);
        assert_eq!(count(&metrics, "1"), 1);

        let hist = metrics
            .duration_ms
            .with_label_values(&["/greeter.Greeter/SayHello"]);
        assert_eq!(hist.get_sample_count(), 4, "one duration per call");
        // the breaker saw each call once: 2 acceptable (OK, Cancelled), 2 failures
        let stats = breaker.stats(Instant::now().max(t0));
        assert_eq!(stats.total, 4, "{stats:?}");
        assert_eq!(stats.accepts, 2, "{stats:?}");
    }

    #[tokio::test]
    async fn streaming_methods_are_recorded_in_the_stream_families_only() {
        let registry = prometheus::Registry::new();
        let metrics = ClientMetrics::register(&registry).unwrap();
        crate::metrics::declare_streaming_methods(["/observe.S/Stream"]);
        let observe = Observe::builder("direct:///x:1")
            .metrics(Some(metrics.clone()))
            .build();
        let mut svc = tower::service_fn(|_req: http::Request<Body>| async {
            Ok::<_, BoxError>(trailed("0"))
        });
        for path in ["/observe.S/Stream", "/observe.S/Unary"] {
            let req = http::Request::builder()
                .uri(path)
                .body(Body::empty())
                .unwrap();
            let resp = observed_call(&observe, &mut svc, req).await.unwrap();
            resp.into_body().collect().await.unwrap();
        }
        let codes =
            |vec: &prometheus::IntCounterVec, path: &str| vec.with_label_values(&[path, "0"]).get();
        assert_eq!(codes(&metrics.stream_code_total, "/observe.S/Stream"), 1);
        assert_eq!(codes(&metrics.code_total, "/observe.S/Stream"), 0);
        assert_eq!(codes(&metrics.code_total, "/observe.S/Unary"), 1);
        assert_eq!(codes(&metrics.stream_code_total, "/observe.S/Unary"), 0);
        let samples = |vec: &prometheus::HistogramVec, path: &str| {
            vec.with_label_values(&[path]).get_sample_count()
        };
        assert_eq!(samples(&metrics.stream_duration_ms, "/observe.S/Stream"), 1);
        assert_eq!(samples(&metrics.duration_ms, "/observe.S/Stream"), 0);
        // health Watch is known without a declaration
        assert!(crate::metrics::is_streaming_method(
            "/grpc.health.v1.Health/Watch"
        ));
    }

    #[tokio::test]
    async fn local_rejections_are_counted_as_drops_by_reason() {
        use crate::balancer::Balancer;
        use crate::balancer::endpoint::ConnectOptions;
        use crate::conf::BalancerName;
        use crate::retry::Retry;

        let registry = prometheus::Registry::new();
        let metrics = ClientMetrics::register(&registry).unwrap();
        let breakers = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
        let observe = Observe::builder("direct:///x:1")
            .metrics(Some(metrics.clone()))
            .breakers(Some(breakers))
            .build();
        // an empty endpoint set: every call fails locally with "no endpoint available"
        let (_tx, rx) = tokio::sync::watch::channel(Some(Arc::new(Vec::<String>::new())));
        let balancer = Balancer::new(
            Arc::from("direct:///x:1"),
            BalancerName::P2cEwma,
            rx,
            ConnectOptions::default(),
            1,
        );
        let mut svc = Retry::new(balancer, None);
        let dropped = |reason: &str| {
            metrics
                .dropped_total
                .with_label_values(&["/greeter.Greeter/SayHello", reason])
                .get()
        };
        // the failures open the breaker: count both kinds of local rejection as they come
        let (mut no_endpoint, mut breaker) = (0, 0);
        for _ in 0..2_000 {
            let err = observed_call(&observe, &mut svc, request())
                .await
                .unwrap_err();
            let status = err.downcast::<tonic::Status>().unwrap();
            assert_eq!(status.code(), tonic::Code::Unavailable);
            // each names what refused the call and the figure that did
            if status.message().starts_with(breaker::BREAKER_OPEN) {
                let figures = status
                    .message()
                    .strip_prefix(&format!(
                        "{}: /greeter.Greeter/SayHello to direct:///x:1 dropped ",
                        breaker::BREAKER_OPEN
                    ))
                    .unwrap_or_else(|| panic!("{status:?}"));
                assert!(
                    figures.contains(" failed, 0 succeeded; drop chance "),
                    "{status:?}"
                );
                breaker += 1;
            } else {
                assert_eq!(
                    status.message(),
                    "no endpoint available for target direct:///x:1: the resolver's last set \
                     has no endpoints",
                    "{status:?}"
                );
                no_endpoint += 1;
            }
        }
        assert!(breaker > 0 && no_endpoint > 0, "{breaker} {no_endpoint}");
        assert_eq!(dropped("breaker"), breaker);
        assert_eq!(dropped("no_endpoint"), no_endpoint);
        // each call once in the code counter too
        let codes = count(&metrics, "14");
        assert_eq!(codes, breaker + no_endpoint);
    }
}
