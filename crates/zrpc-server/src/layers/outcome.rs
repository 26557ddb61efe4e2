//! One read of the final status for adjacent observers: [`RecordersLayer`] (stat, then
//! metrics) and [`GuardsLayer`] (breaker, then shedding).
//!
//! Each of the four stages, as its own layer, wraps the response body in a
//! [`StatusBody`](zrpc_core::grpc::StatusBody) and parses `grpc-status` from the trailers or
//! the trailers-only headers. Two adjacent stages see the same final code (nothing between
//! them changes the response), so the server runs each pair as one layer: one
//! [`ObserveFuture`], one body wrapper, one parse, feeding a [`Both`] record that reports to
//! the inner stage's record first, then the outer's (the order of two nested bodies). The
//! single-stage layers ([`StatLayer`](super::StatLayer), [`MetricsLayer`],
//! [`BreakerLayer`](super::BreakerLayer), [`SheddingLayer`](super::SheddingLayer)) stay for
//! users composing their own chain; the pairs behave as the two nested layers do.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;
use zrpc_core::breaker::BreakerRegistry;
use zrpc_core::grpc::{OnStatus, code};

use super::breaker::{self, BreakerLayer, BreakerRecord};
use super::facts::facts_of;
use super::metrics::{self, MetricsLayer, MetricsRecord};
use super::observe::{ObserveFuture, ObserveOrReject, ObservedBody};
use super::shedding::{self, SheddingLayer, SheddingRecord};
use super::stat::{StatLayer, StatRecord, StatSettings};
use super::util::is_infra;

/// The records of two adjacent stages, fed by one read of the final status: `inner`'s first,
/// then `outer`'s, as two nested bodies would report.
#[derive(Debug)]
pub(crate) struct Both<O, I> {
    outer: Option<O>,
    inner: Option<I>,
}

impl<O: OnStatus, I: OnStatus> OnStatus for Both<O, I> {
    fn on_status(self, c: i32) {
        if let Some(inner) = self.inner {
            inner.on_status(c);
        }
        if let Some(outer) = self.outer {
            outer.on_status(c);
        }
    }
}

/// Stat then metrics as one layer (see the [module docs](self)).
#[derive(Debug, Clone)]
pub(crate) struct RecordersLayer {
    stat: Option<Arc<StatSettings>>,
    metrics: MetricsLayer,
}

impl RecordersLayer {
    /// The pair of `stat` (outer) and `metrics` (inner).
    pub(crate) fn new(stat: &StatLayer, metrics: MetricsLayer) -> Self {
        Self {
            stat: stat.enabled_settings(),
            metrics,
        }
    }
}

impl<S> Layer<S> for RecordersLayer {
    type Service = Recorders<S>;
    fn layer(&self, inner: S) -> Recorders<S> {
        Recorders {
            inner,
            stat: self.stat.clone(),
            metrics: self.metrics.state(),
        }
    }
}

/// Logs slow calls and records duration and code per method.
#[derive(Debug, Clone)]
pub(crate) struct Recorders<S> {
    inner: S,
    stat: Option<Arc<StatSettings>>,
    metrics: Option<Arc<metrics::State>>,
}

/// The record of [`Recorders`]: stat's and metrics', which share the call's start, and one
/// clock read at the end for both durations.
#[derive(Debug)]
pub(crate) struct RecordersRecord(Both<StatRecord, MetricsRecord>);

impl OnStatus for RecordersRecord {
    fn on_status(self, c: i32) {
        let Both { outer, inner } = self.0;
        let start = match (&outer, &inner) {
            (_, Some(m)) => m.started(),
            (Some(s), None) => s.started(),
            (None, None) => return,
        };
        let elapsed = start.elapsed();
        // Inner first, as two nested bodies would report.
        if let Some(m) = inner {
            m.report(elapsed, c);
        }
        if let Some(s) = outer {
            s.report(elapsed, c);
        }
    }
}

impl<S, ReqB, B> Service<Request<ReqB>> for Recorders<S>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
{
    type Response = Response<ObservedBody<B, RecordersRecord>>;
    type Error = S::Error;
    type Future = ObserveFuture<S::Future, RecordersRecord>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline(always)]
    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        if self.stat.is_none() && self.metrics.is_none() {
            return ObserveFuture::passthrough(self.inner.call(req));
        }
        // One clock read for both durations.
        let start = tokio::time::Instant::now();
        let record = RecordersRecord(Both {
            outer: self
                .stat
                .as_ref()
                .map(|s| StatRecord::start(s, &req, start)),
            inner: self.metrics.as_ref().map(|m| m.start(&req, start)),
        });
        ObserveFuture::new(self.inner.call(req), record)
    }
}

/// Breaker then shedding as one layer (see the [module docs](self)).
#[derive(Debug, Clone)]
pub(crate) struct GuardsLayer {
    breaker: Option<Arc<BreakerRegistry>>,
    shedding: Option<Arc<shedding::Shared>>,
}

impl GuardsLayer {
    /// The pair of `breaker` (outer) and `shedding` (inner).
    pub(crate) fn new(breaker: &BreakerLayer, shedding: &SheddingLayer) -> Self {
        Self {
            breaker: breaker.registry(),
            shedding: shedding.shared(),
        }
    }
}

impl<S> Layer<S> for GuardsLayer {
    type Service = Guards<S>;
    fn layer(&self, inner: S) -> Guards<S> {
        Guards {
            inner,
            breaker: self.breaker.clone(),
            shedding: self.shedding.clone(),
        }
    }
}

/// Guards each method with its breaker, then sheds calls when the server is overloaded.
#[derive(Debug, Clone)]
pub(crate) struct Guards<S> {
    inner: S,
    breaker: Option<Arc<BreakerRegistry>>,
    shedding: Option<Arc<shedding::Shared>>,
}

/// The record of [`Guards`].
pub(crate) type GuardsRecord = Both<BreakerRecord, SheddingRecord>;

/// Response future of [`Guards`]: the observed call, or the local rejection.
pub(crate) type GuardsFuture<F, B> = ObserveOrReject<F, B, GuardsRecord>;

impl<S, ReqB, B> Service<Request<ReqB>> for Guards<S>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    B: Default,
{
    type Response = Response<ObservedBody<B, GuardsRecord>>;
    type Error = S::Error;
    type Future = GuardsFuture<S::Future, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline(always)]
    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let path = req.uri().path();
        let registry = self.breaker.as_ref().filter(|_| !is_infra(path));
        let shedder = self.shedding.as_ref().filter(|s| s.watches(path));
        if registry.is_none() && shedder.is_none() {
            return GuardsFuture::observe(ObserveFuture::passthrough(self.inner.call(req)));
        }
        let now = std::time::Instant::now();
        // The request's facts, looked up once for both stages.
        let mut facts = None;
        let mut facts_once = || facts.get_or_insert_with(|| facts_of(&req)).clone();
        let outer = match registry {
            Some(registry) => match BreakerRecord::admit(registry, path, &mut facts_once, now) {
                Some(record) => Some(record),
                None => return GuardsFuture::rejected(breaker::rejection()),
            },
            None => None,
        };
        let inner = match shedder {
            Some(shedder) => match shedder.admit(path, facts_once, now) {
                Some(record) => Some(record),
                None => {
                    // The breaker sees the shed call's code, as it would from the response
                    // of a nested shedding layer.
                    if let Some(outer) = outer {
                        outer.on_status(code::RESOURCE_EXHAUSTED);
                    }
                    return GuardsFuture::rejected(shedding::rejection());
                }
            },
            None => None,
        };
        let record = Both { outer, inner };
        GuardsFuture::observe(ObserveFuture::new(self.inner.call(req), record))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::convert::Infallible;

    use tower::ServiceExt;
    use zrpc_core::breaker::BreakerConfig;
    use zrpc_core::cpu::FixedCpu;
    use zrpc_core::grpc::status_message_from_headers;
    use zrpc_core::shedder::{AdaptiveShedder, ShedderConfig};

    use super::*;
    use crate::layers::StreamingMethods;
    use crate::layers::breaker::BREAKER_OPEN_MESSAGE;
    use crate::layers::shedding::{OVERLOADED_MESSAGE, SheddingSettings};
    use crate::layers::test_util::{final_code, response_with_code};

    #[test]
    fn both_reports_inner_then_outer_once() {
        let seen = std::cell::RefCell::new(Vec::new());
        let push = |tag: &'static str| {
            let seen = &seen;
            move |c: i32| seen.borrow_mut().push((tag, c))
        };
        Both {
            outer: Some(push("outer")),
            inner: Some(push("inner")),
        }
        .on_status(code::INTERNAL);
        Both::<fn(i32), _> {
            outer: None,
            inner: Some(push("inner")),
        }
        .on_status(code::OK);
        assert_eq!(
            *seen.borrow(),
            [
                ("inner", code::INTERNAL),
                ("outer", code::INTERNAL),
                ("inner", code::OK)
            ]
        );
    }

    #[tokio::test]
    async fn recorders_count_and_pass_the_code() {
        let svc = RecordersLayer::new(
            &StatLayer::new(StatSettings::default()),
            MetricsLayer::new(true),
        )
        .layer(tower::service_fn(|_req: Request<()>| async {
            Ok::<_, Infallible>(response_with_code(code::UNAVAILABLE))
        }));
        let m = crate::metrics::server_metrics();
        let count = || {
            m.code_total
                .with_label_values(&["/outcome.R/M", "14"])
                .get()
        };
        let before = count();
        for _ in 0..3 {
            let req = Request::builder().uri("/outcome.R/M").body(()).unwrap();
            let resp = svc.clone().oneshot(req).await.unwrap();
            assert_eq!(final_code(resp).await, Some(code::UNAVAILABLE));
        }
        assert_eq!(count(), before + 3);
    }

    #[tokio::test]
    async fn guards_open_the_breaker_and_shed_like_the_nested_layers() {
        let registry = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
        // A cold CPU never sheds.
        let shedder = Arc::new(AdaptiveShedder::new(
            ShedderConfig::default(),
            Arc::new(FixedCpu::new(0)),
        ));
        let shedding = SheddingLayer::new(Some(SheddingSettings {
            shedder,
            streaming: StreamingMethods::default(),
        }));
        let svc = GuardsLayer::new(&BreakerLayer::with_registry(true, registry), &shedding).layer(
            tower::service_fn(|_req: Request<()>| async {
                Ok::<_, Infallible>(response_with_code(code::INTERNAL))
            }),
        );
        let mut rejected = 0;
        for _ in 0..200 {
            let req = Request::builder().uri("/outcome.G/Fails").body(()).unwrap();
            let resp = svc.clone().oneshot(req).await.unwrap();
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
}
