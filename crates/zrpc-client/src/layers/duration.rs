//! Error and slow-call logging (go-zero `DurationInterceptor`): every failed call is logged at
//! error level (`fail - <target><method> - <code> - <message>`), a successful call slower than
//! 500 ms (go-zero's `slowThreshold`) at warn level (`slowcall`). No per-call info log.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tonic::body::Body;
use zrpc_core::grpc::{StatusBody, code, status_from_headers, status_message_from_headers};

use super::{BoxError, Response};

/// go-zero's default slow-call threshold.
pub const SLOW_THRESHOLD: Duration = Duration::from_millis(500);

/// Logs failed and slow calls.
#[derive(Debug, Clone)]
pub struct DurationLayer {
    target: Arc<str>,
    slow: Duration,
}

impl DurationLayer {
    /// A layer for `target` with the 500 ms slow threshold.
    #[must_use]
    pub fn new(target: &str) -> Self {
        DurationLayer {
            target: Arc::from(target),
            slow: SLOW_THRESHOLD,
        }
    }

    /// Sets the slow-call threshold (default 500 ms).
    #[must_use]
    pub fn slow_threshold(mut self, slow: Duration) -> Self {
        self.slow = slow;
        self
    }
}

impl<S> tower::Layer<S> for DurationLayer {
    type Service = DurationLog<S>;
    fn layer(&self, inner: S) -> DurationLog<S> {
        DurationLog {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`DurationLayer`].
#[derive(Debug, Clone)]
pub struct DurationLog<S> {
    inner: S,
    layer: DurationLayer,
}

impl<S> tower::Service<http::Request<Body>> for DurationLog<S>
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
        let target = self.layer.target.clone();
        let slow = self.layer.slow;
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = match fut.await {
                Ok(resp) => resp,
                Err(e) => {
                    tracing::error!(target: "zrpc::client", "fail - {target}{method} - {e} - {:?}", start.elapsed());
                    return Err(e);
                }
            };
            if let Some(c) = status_from_headers(resp.headers()).filter(|&c| c != code::OK) {
                let msg = status_message_from_headers(resp.headers()).unwrap_or_default();
                tracing::error!(target: "zrpc::client", "fail - {target}{method} - code {c} ({}): {msg} - {:?}", code::name(c), start.elapsed());
                return Ok(resp);
            }
            Ok(StatusBody::wrap_response(resp, move |c: i32| {
                let elapsed = start.elapsed();
                if c == code::OK && elapsed > slow {
                    tracing::warn!(target: "zrpc::client", "[RPC] ok - slowcall - {target}{method} - {elapsed:?}");
                } else if c != code::OK && c != code::CANCELLED {
                    tracing::error!(target: "zrpc::client", "fail - {target}{method} - code {c} ({}) - {elapsed:?}", code::name(c));
                }
            })
            .map(Body::new))
        })
    }
}
