//! Metrics: go-zero's Prometheus interceptor (`serverinterceptors/prometheusinterceptor.go`).
//!
//! After the final status: observe `rpc_server_requests_duration_ms{method}` and increment
//! `rpc_server_requests_code_total{method,code}` (numeric code), for unary calls only, as
//! go-zero does. Calls of the streaming methods the server knows (the call's kind,
//! `call::CallKind`) are recorded in
//! zrpc's own `rpc_server_streams_duration_ms` / `rpc_server_streams_code_total` (their duration
//! is the stream's lifetime), so go-zero's families mean the same on Go and Rust servers.
//! Unlike go-zero, metrics are always recorded when the stage is on (go-zero records only when a
//! Prometheus endpoint is enabled).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use tokio::time::Instant;

use http::Request;
use http::uri::PathAndQuery;
use zrpc_core::grpc::code;

use parking_lot::RwLock;
use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec};

use super::{Admission, Call, End, Env, Stage};
use crate::layers::util::method_of;
use crate::metrics::{ServerMetrics, server_metrics};

/// The metrics stage (`Middlewares.Prometheus`): its families and the handles of the methods
/// it has seen; `None` = off.
#[derive(Debug, Clone)]
pub(crate) struct MetricsStage {
    state: Option<Arc<State>>,
}

impl MetricsStage {
    /// A metrics stage that knows no method ahead (for the tests).
    #[cfg(test)]
    pub(crate) fn new(enabled: bool) -> Self {
        Self::knowing(enabled, &[])
    }

    /// A metrics stage that records the calls of `described` methods under their own label
    /// from the first (the others once their service answered one).
    pub(crate) fn knowing(enabled: bool, described: &[String]) -> Self {
        MetricsStage {
            state: enabled.then(|| {
                Arc::new(State {
                    metrics: server_metrics(),
                    methods: RwLock::new(HashMap::default()),
                    described: described.iter().map(|m| Box::from(m.as_str())).collect(),
                })
            }),
        }
    }

    /// The stage's state, when it is on.
    #[cfg(test)]
    pub(crate) fn state(&self) -> Option<&Arc<State>> {
        self.state.as_ref()
    }
}

/// The stage, when `Middlewares.Prometheus` is on.
pub(crate) fn build(env: &Env<'_>) -> Option<Box<dyn Stage>> {
    env.conf
        .middlewares
        .prometheus
        .then(|| Box::new(MetricsStage::knowing(true, env.described)) as _)
}

impl Stage for MetricsStage {
    fn admit(&self, call: &mut Call<'_>) -> Admission {
        match &self.state {
            Some(state) => {
                let start = call.now();
                let streaming = call.is_streaming();
                Admission::built_in(state.start(call.request(), start, streaming))
            }
            None => Admission::pass(),
        }
    }

    fn name(&self) -> &'static str {
        "metrics"
    }
}

/// Methods whose metric handles are kept (see [`State::methods`]): as many as the limit stage
/// keeps limits for. A server whose calls spread over more methods than this records the rest
/// with the per-call lookup.
const CACHED_METHODS: usize = 1024;

/// The stage's metric families and the handles of the methods it has seen.
#[derive(Debug)]
pub(crate) struct State {
    metrics: &'static ServerMetrics,
    /// Per-method handles, resolved once per method: a `with_label_values` lookup hashes its
    /// labels into the vector's map on every call. Only methods shown to exist are kept
    /// ([`State::record_uncached`]: random paths of a hostile caller take no room), at most
    /// [`CACHED_METHODS`]; other calls use the per-call lookup, which records the same
    /// series. A map: with a list, the calls of a server with many methods spent their time
    /// scanning it (CPU per call grew x1.4 from 1 to 10,000 methods, `zrpc-bench scale`).
    methods: RwLock<HashMap<Box<str>, Arc<MethodHandles>, foldhash::fast::RandomState>>,
    /// The methods the server's descriptor sets name: known to exist before any call.
    described: std::collections::HashSet<Box<str>, foldhash::fast::RandomState>,
}

/// One method's histogram and its counters by code (resolved on the first call with the code).
#[derive(Debug)]
struct MethodHandles {
    method: Box<str>,
    duration_ms: Histogram,
    codes: [OnceLock<IntCounter>; 17],
    code_total: &'static IntCounterVec,
}

impl State {
    /// The record of a call started at `start`, of a streaming method or not.
    pub(crate) fn start<B>(
        self: &Arc<Self>,
        req: &Request<B>,
        start: Instant,
        streaming: bool,
    ) -> MetricsRecord {
        let method = match self.find(req.uri().path()) {
            Some(handles) => Method::Cached(handles),
            None => Method::Uncached(method_of(req), streaming, self.clone()),
        };
        MetricsRecord { start, method }
    }

    fn families(&self, streaming: bool) -> (&'static HistogramVec, &'static IntCounterVec) {
        let m = self.metrics;
        if streaming {
            (&m.stream_duration_ms, &m.stream_code_total)
        } else {
            (&m.duration_ms, &m.code_total)
        }
    }

    fn find(&self, method: &str) -> Option<Arc<MethodHandles>> {
        self.methods.read().get(method).cloned()
    }

    /// Records a call of a method without handles, and keeps handles for it (in the families
    /// of its kind: a method's calls are all streams or none is), when the method is known to
    /// exist: the descriptor sets name it, or its service answered this call (`served`,
    /// [`End::names_a_method`](crate::stage::End::names_a_method)). Other calls are recorded
    /// under `method=""`, so that a caller's made-up paths add no series (each label value is
    /// one for good; grpc-go answers a path that names no method before go-zero's interceptors
    /// run).
    fn record_uncached(&self, method: &str, streaming: bool, ms: f64, c: i32, served: bool) {
        let (duration_ms, code_total) = self.families(streaming);
        let exists = served || self.described.contains(method);
        if !exists {
            duration_ms.with_label_values(&[""]).observe(ms);
            code_total.with_label_values(&["", code::as_str(c)]).inc();
            return;
        }
        if self.methods.read().len() >= CACHED_METHODS {
            duration_ms.with_label_values(&[method]).observe(ms);
            code_total
                .with_label_values(&[method, code::as_str(c)])
                .inc();
            return;
        }
        let handles = self.find(method).unwrap_or_else(|| {
            let handles = Arc::new(MethodHandles {
                method: method.into(),
                duration_ms: duration_ms.with_label_values(&[method]),
                codes: Default::default(),
                code_total,
            });
            let mut methods = self.methods.write();
            match methods.get(method) {
                Some(h) => h.clone(),
                None => {
                    if methods.len() < CACHED_METHODS {
                        methods.insert(method.into(), handles.clone());
                    }
                    handles
                }
            }
        });
        handles.record(ms, c);
    }
}

impl MethodHandles {
    fn record(&self, ms: f64, c: i32) {
        self.duration_ms.observe(ms);
        let label = code::as_str(c);
        // `as_str` maps a code outside 0..=16 to "2" (Unknown), as the per-call lookup does.
        let i = usize::try_from(c).ok().filter(|&i| i < 17).unwrap_or(2);
        self.codes[i]
            .get_or_init(|| self.code_total.with_label_values(&[&*self.method, label]))
            .inc();
    }
}

/// What the metrics stage remembers about a call until its final status.
#[derive(Debug)]
pub(crate) struct MetricsRecord {
    start: Instant,
    method: Method,
}

#[derive(Debug)]
enum Method {
    Cached(Arc<MethodHandles>),
    /// The method, whether it streams, the stage's state.
    Uncached(PathAndQuery, bool, Arc<State>),
}

impl MetricsRecord {
    /// Records the call's code and its duration.
    pub(crate) fn finish(self, end: &End<'_>) {
        let (elapsed, c) = (end.now.saturating_duration_since(self.start), end.code);
        let ms = elapsed.as_secs_f64() * 1000.0;
        match self.method {
            Method::Cached(handles) => handles.record(ms, c),
            Method::Uncached(method, streaming, state) => {
                state.record_uncached(method.path(), streaming, ms, c, end.names_a_method());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use tonic::body::Body;

    use tower::{Layer, ServiceExt};

    use super::*;
    use crate::call::CallKind;
    use crate::layers::test_util::{arriving, final_code, response_with_code};

    #[tokio::test]
    async fn counts_codes_per_method() {
        let svc =
            MetricsStage::new(true).layer(tower::service_fn(|req: Request<Body>| async move {
                let c = if req.uri().path().ends_with("Fail") {
                    14
                } else {
                    0
                };
                Ok::<_, Infallible>(response_with_code(c))
            }));
        let m = server_metrics();
        let before = m
            .code_total
            .with_label_values(&["/metrics.T/Fail", "14"])
            .get();
        for path in ["/metrics.T/Fail", "/metrics.T/Fail", "/metrics.T/Ok"] {
            let req = Request::builder().uri(path).body(Body::empty()).unwrap();
            final_code(svc.clone().oneshot(req).await.unwrap()).await;
        }
        assert_eq!(
            m.code_total
                .with_label_values(&["/metrics.T/Fail", "14"])
                .get(),
            before + 2
        );
        assert!(
            m.duration_ms
                .with_label_values(&["/metrics.T/Ok"])
                .get_sample_count()
                >= 1
        );
    }

    #[tokio::test]
    async fn streams_go_to_their_own_families() {
        let layer = MetricsStage::new(true);
        let svc = layer.layer(tower::service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(response_with_code(0))
        }));
        let req = Request::builder()
            .uri("/metrics.S/Stream")
            .body(Body::empty())
            .unwrap();
        let req = arriving(req, CallKind::STREAMING);
        final_code(svc.oneshot(req).await.unwrap()).await;
        let m = server_metrics();
        assert_eq!(
            m.stream_code_total
                .with_label_values(&["/metrics.S/Stream", "0"])
                .get(),
            1
        );
        assert_eq!(
            m.code_total
                .with_label_values(&["/metrics.S/Stream", "0"])
                .get(),
            0
        );
    }

    #[tokio::test]
    async fn keeps_handles_only_for_methods_that_exist_and_counts_alike() {
        let layer = MetricsStage::new(true);
        let svc = layer.layer(tower::service_fn(|req: Request<Body>| async move {
            let c = if req.uri().path().ends_with("Nope") {
                code::UNIMPLEMENTED
            } else if req.uri().path().ends_with("Big") {
                99
            } else {
                0
            };
            Ok::<_, Infallible>(response_with_code(c))
        }));
        let m = server_metrics();
        for _ in 0..3 {
            for path in ["/metrics.C/Ok", "/metrics.C/Nope", "/metrics.C/Big"] {
                let req = Request::builder().uri(path).body(Body::empty()).unwrap();
                final_code(svc.clone().oneshot(req).await.unwrap()).await;
            }
        }
        let state = layer.state().unwrap();
        let mut kept: Vec<String> = state
            .methods
            .read()
            .values()
            .map(|h| h.method.to_string())
            .collect();
        kept.sort();
        assert_eq!(kept, ["/metrics.C/Big", "/metrics.C/Ok"]);
        let count = |method: &str, c: &str| m.code_total.with_label_values(&[method, c]).get();
        assert_eq!(count("/metrics.C/Ok", "0"), 3);
        // A path its service did not answer is counted under `method=""`, never its own.
        assert_eq!(count("/metrics.C/Nope", "12"), 0);
        assert!(count("", "12") >= 3);
        // A code outside 0..=16 is recorded as Unknown, cached or not.
        assert_eq!(count("/metrics.C/Big", "2"), 3);
        assert_eq!(
            m.duration_ms
                .with_label_values(&["/metrics.C/Ok"])
                .get_sample_count(),
            3
        );
    }

    #[tokio::test]
    async fn stops_keeping_handles_at_the_cap() {
        let layer = MetricsStage::new(true);
        let svc = layer.layer(tower::service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(response_with_code(0))
        }));
        for i in 0..CACHED_METHODS + 5 {
            let path = format!("/metrics.Cap/M{i}");
            let req = Request::builder().uri(&path).body(Body::empty()).unwrap();
            final_code(svc.clone().oneshot(req).await.unwrap()).await;
        }
        assert_eq!(layer.state().unwrap().methods.read().len(), CACHED_METHODS);
        let last = format!("/metrics.Cap/M{}", CACHED_METHODS + 4);
        assert_eq!(
            server_metrics()
                .code_total
                .with_label_values(&[&last, "0"])
                .get(),
            1
        );
    }

    #[tokio::test]
    async fn a_dropped_call_counts_as_cancelled() {
        let svc = MetricsStage::new(true).layer(tower::service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(response_with_code(0))
        }));
        let req = Request::builder()
            .uri("/metrics.T/Dropped")
            .body(Body::empty())
            .unwrap();
        let resp = svc.oneshot(req).await.unwrap();
        drop(resp);
        assert_eq!(
            server_metrics()
                .code_total
                .with_label_values(&["/metrics.T/Dropped", "1"])
                .get(),
            1
        );
    }
}
