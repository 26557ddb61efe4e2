//! Metrics: go-zero's Prometheus interceptor (`serverinterceptors/prometheusinterceptor.go`).
//!
//! After the final status: observe `rpc_server_requests_duration_ms{method}` and increment
//! `rpc_server_requests_code_total{method,code}` (numeric code). Unlike go-zero, streams are
//! counted too (their duration is the stream's lifetime) and metrics are always recorded
//! when the layer is on (go-zero records only when a Prometheus endpoint is enabled).

use std::task::{Context, Poll};
use tokio::time::Instant;

use http::uri::PathAndQuery;
use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;
use zrpc_core::grpc::{OnStatus, StatusBody, code};

use super::observe::ObserveFuture;
use super::util::method_of;
use crate::metrics::{ServerMetrics, server_metrics};

/// Adds [`Metrics`]; `enabled` is `Middlewares.Prometheus`.
#[derive(Debug, Clone, Copy)]
pub struct MetricsLayer {
    enabled: bool,
}

impl MetricsLayer {
    /// A metrics layer.
    pub fn new(enabled: bool) -> Self {
        Self { enabled }
    }
}

impl<S> Layer<S> for MetricsLayer {
    type Service = Metrics<S>;
    fn layer(&self, inner: S) -> Metrics<S> {
        Metrics {
            inner,
            metrics: self.enabled.then(server_metrics),
        }
    }
}

/// Records duration and code per method.
#[derive(Debug, Clone)]
pub struct Metrics<S> {
    inner: S,
    metrics: Option<&'static ServerMetrics>,
}

/// What [`Metrics`] remembers about a call until its final status.
#[derive(Debug)]
pub struct MetricsRecord {
    start: Instant,
    method: PathAndQuery,
    metrics: &'static ServerMetrics,
}

impl OnStatus for MetricsRecord {
    fn on_status(self, c: i32) {
        let ms = self.start.elapsed().as_secs_f64() * 1000.0;
        let method = self.method.path();
        self.metrics
            .duration_ms
            .with_label_values(&[method])
            .observe(ms);
        self.metrics
            .code_total
            .with_label_values(&[method, code::as_str(c)])
            .inc();
    }
}

impl<S, ReqB, B> Service<Request<ReqB>> for Metrics<S>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
{
    type Response = Response<StatusBody<B, MetricsRecord>>;
    type Error = S::Error;
    type Future = ObserveFuture<S::Future, MetricsRecord>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let Some(metrics) = self.metrics else {
            return ObserveFuture::passthrough(self.inner.call(req));
        };
        let record = MetricsRecord {
            start: Instant::now(),
            method: method_of(&req),
            metrics,
        };
        ObserveFuture::new(self.inner.call(req), record)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::convert::Infallible;

    use tower::ServiceExt;

    use super::*;
    use crate::layers::test_util::{final_code, response_with_code};

    #[tokio::test]
    async fn counts_codes_per_method() {
        let svc = MetricsLayer::new(true).layer(tower::service_fn(|req: Request<()>| async move {
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
            let req = Request::builder().uri(path).body(()).unwrap();
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
    async fn a_dropped_call_counts_as_cancelled() {
        let svc = MetricsLayer::new(true).layer(tower::service_fn(|_req: Request<()>| async {
            Ok::<_, Infallible>(response_with_code(0))
        }));
        let req = Request::builder()
            .uri("/metrics.T/Dropped")
            .body(())
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
