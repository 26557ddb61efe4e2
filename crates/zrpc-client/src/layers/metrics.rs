//! Prometheus metrics per call (go-zero `PrometheusInterceptor`): see [`crate::metrics`].

use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::future::BoxFuture;
use tonic::body::Body;

use super::{BoxError, Response, observe};
use crate::metrics::{ClientMetrics, client_metrics};

/// Records `rpc_client_requests_duration_ms` and `rpc_client_requests_code_total`.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsLayer;

impl<S> tower::Layer<S> for MetricsLayer {
    type Service = Metrics<S>;
    fn layer(&self, inner: S) -> Metrics<S> {
        Metrics {
            inner,
            metrics: client_metrics(),
        }
    }
}

/// The service of [`MetricsLayer`].
#[derive(Debug, Clone)]
pub struct Metrics<S> {
    inner: S,
    metrics: &'static ClientMetrics,
}

impl<S> tower::Service<http::Request<Body>> for Metrics<S>
where
    S: tower::Service<http::Request<Body>, Response = Response, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let start = Instant::now();
        let method = req.uri().path().to_owned();
        let metrics = self.metrics;
        let fut = self.inner.call(req);
        Box::pin(observe(fut, move |code: i32| {
            let ms = start.elapsed().as_secs_f64() * 1000.0;
            metrics
                .duration_ms
                .with_label_values(&[method.as_str()])
                .observe(ms);
            metrics
                .code_total
                .with_label_values(&[method.as_str(), zrpc_core::grpc::code::as_str(code)])
                .inc();
        }))
    }
}
