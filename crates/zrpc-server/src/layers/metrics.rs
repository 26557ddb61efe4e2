//! Metrics: go-zero's Prometheus interceptor (`serverinterceptors/prometheusinterceptor.go`).
//!
//! After the final status: observe `rpc_server_requests_duration_ms{method}` and increment
//! `rpc_server_requests_code_total{method,code}` (numeric code), for unary calls only, as
//! go-zero does. Streaming methods the server knows ([`StreamingMethods`]) are recorded in
//! zrpc's own `rpc_server_streams_duration_ms` / `rpc_server_streams_code_total` (their duration
//! is the stream's lifetime), so go-zero's families mean the same on Go and Rust servers.
//! Unlike go-zero, metrics are always recorded when the layer is on (go-zero records only when a
//! Prometheus endpoint is enabled).

use std::task::{Context, Poll};
use tokio::time::Instant;

use http::uri::PathAndQuery;
use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;
use zrpc_core::grpc::{OnStatus, code};

use prometheus::{HistogramVec, IntCounterVec};

use super::observe::{ObserveFuture, ObservedBody};
use super::util::{StreamingMethods, method_of};
use crate::metrics::{ServerMetrics, server_metrics};

/// Adds [`Metrics`]; `enabled` is `Middlewares.Prometheus`.
#[derive(Debug, Clone)]
pub struct MetricsLayer {
    enabled: bool,
    streaming: StreamingMethods,
}

impl MetricsLayer {
    /// A metrics layer (no streaming method known: every call counts as unary).
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            streaming: StreamingMethods::default(),
        }
    }

    /// The streaming methods, recorded in the `rpc_server_streams_*` families instead of
    /// go-zero's (default: none).
    #[must_use]
    pub fn streaming(mut self, streaming: StreamingMethods) -> Self {
        self.streaming = streaming;
        self
    }
}

impl<S> Layer<S> for MetricsLayer {
    type Service = Metrics<S>;
    fn layer(&self, inner: S) -> Metrics<S> {
        Metrics {
            inner,
            metrics: self.enabled.then(server_metrics),
            streaming: self.streaming.clone(),
        }
    }
}

/// Records duration and code per method.
#[derive(Debug, Clone)]
pub struct Metrics<S> {
    inner: S,
    metrics: Option<&'static ServerMetrics>,
    streaming: StreamingMethods,
}

/// What [`Metrics`] remembers about a call until its final status.
#[derive(Debug)]
pub struct MetricsRecord {
    start: Instant,
    method: PathAndQuery,
    duration_ms: &'static HistogramVec,
    code_total: &'static IntCounterVec,
}

impl OnStatus for MetricsRecord {
    fn on_status(self, c: i32) {
        let ms = self.start.elapsed().as_secs_f64() * 1000.0;
        let method = self.method.path();
        self.duration_ms.with_label_values(&[method]).observe(ms);
        self.code_total
            .with_label_values(&[method, code::as_str(c)])
            .inc();
    }
}

impl<S, ReqB, B> Service<Request<ReqB>> for Metrics<S>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
{
    type Response = Response<ObservedBody<B, MetricsRecord>>;
    type Error = S::Error;
    type Future = ObserveFuture<S::Future, MetricsRecord>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let Some(metrics) = self.metrics else {
            return ObserveFuture::passthrough(self.inner.call(req));
        };
        let method = method_of(&req);
        let ServerMetrics {
            duration_ms,
            code_total,
            stream_duration_ms,
            stream_code_total,
            ..
        } = metrics;
        let (duration_ms, code_total) = if self.streaming.contains(method.path()) {
            (stream_duration_ms, stream_code_total)
        } else {
            (duration_ms, code_total)
        };
        let record = MetricsRecord {
            start: Instant::now(),
            method,
            duration_ms,
            code_total,
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
    async fn streams_go_to_their_own_families() {
        let layer = MetricsLayer::new(true)
            .streaming(StreamingMethods::new(["/metrics.S/Stream".to_owned()]));
        let svc = layer.layer(tower::service_fn(|_req: Request<()>| async {
            Ok::<_, Infallible>(response_with_code(0))
        }));
        let req = Request::builder()
            .uri("/metrics.S/Stream")
            .body(())
            .unwrap();
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
