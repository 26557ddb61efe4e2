//! One Google-SRE breaker per (target, method) (go-zero `BreakerInterceptor`).
//!
//! Breakers live in `zrpc_core`'s process-wide registry under the name `<target><full method>`, so
//! clients of the same target share them, as in go-zero. An open breaker rejects locally with
//! `Unavailable "circuit breaker is open"` as a gRPC status (go-zero returns a raw error that shows
//! up as `Unknown`). Outcomes use go-zero's acceptable codes: DeadlineExceeded, Internal,
//! Unavailable, DataLoss, Unimplemented and ResourceExhausted are failures.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use tonic::body::Body;
use zrpc_core::breaker::{BreakerRegistry, GoogleBreaker, is_acceptable_code};

use super::{BoxError, Response, observe};

/// The message of a local breaker rejection.
pub const BREAKER_OPEN: &str = "circuit breaker is open";

/// Guards calls with per-method breakers.
#[derive(Debug, Clone)]
pub struct BreakerLayer {
    target: Arc<str>,
    registry: &'static BreakerRegistry,
}

impl BreakerLayer {
    /// Breakers named `<target><method>` in the global registry.
    #[must_use]
    pub fn new(target: &str) -> Self {
        BreakerLayer::with_registry(target, BreakerRegistry::global())
    }

    /// Breakers from `registry` (tests use their own).
    #[must_use]
    pub fn with_registry(target: &str, registry: &'static BreakerRegistry) -> Self {
        BreakerLayer {
            target: Arc::from(target),
            registry,
        }
    }
}

impl<S> tower::Layer<S> for BreakerLayer {
    type Service = Breaker<S>;
    fn layer(&self, inner: S) -> Breaker<S> {
        Breaker {
            inner,
            target: self.target.clone(),
            registry: self.registry,
            cache: Arc::default(),
        }
    }
}

/// The service of [`BreakerLayer`].
#[derive(Debug, Clone)]
pub struct Breaker<S> {
    inner: S,
    target: Arc<str>,
    registry: &'static BreakerRegistry,
    /// method -> breaker, to skip the name formatting on each call.
    cache: Arc<Mutex<HashMap<String, Arc<GoogleBreaker>>>>,
}

impl<S> Breaker<S> {
    fn breaker(&self, method: &str) -> Arc<GoogleBreaker> {
        let mut cache = self.cache.lock();
        if let Some(b) = cache.get(method) {
            return b.clone();
        }
        let b = self.registry.get(&format!("{}{method}", self.target));
        cache.insert(method.to_owned(), b.clone());
        b
    }
}

impl<S> tower::Service<http::Request<Body>> for Breaker<S>
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
        let breaker = self.breaker(req.uri().path());
        let promise = match breaker.allow(Instant::now()) {
            Ok(p) => p,
            Err(_open) => {
                return Box::pin(async { Err(tonic::Status::unavailable(BREAKER_OPEN).into()) });
            }
        };
        let fut = self.inner.call(req);
        Box::pin(observe(fut, move |code: i32| {
            let now = Instant::now();
            if is_acceptable_code(code) {
                promise.accept(now);
            } else {
                promise.reject(now);
            }
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use tower::{Layer, Service, ServiceExt};
    use zrpc_core::breaker::BreakerConfig;
    use zrpc_core::grpc::{code, status_response};

    use super::*;

    #[tokio::test]
    async fn rejects_locally_with_an_unavailable_status_once_failures_pile_up() {
        let registry: &'static BreakerRegistry =
            Box::leak(Box::new(BreakerRegistry::new(BreakerConfig::default())));
        let inner = tower::service_fn(|_req: http::Request<Body>| async {
            Ok::<_, BoxError>(status_response::<Body>(code::UNAVAILABLE, "down"))
        });
        let mut svc = BreakerLayer::with_registry("direct:///x:1", registry).layer(inner);
        let mut local = 0;
        for _ in 0..300 {
            let req = http::Request::builder()
                .uri("/greeter.Greeter/SayHello")
                .body(Body::empty())
                .unwrap();
            match svc.ready().await.unwrap().call(req).await {
                Ok(resp) => assert_eq!(
                    zrpc_core::grpc::status_from_headers(resp.headers()),
                    Some(code::UNAVAILABLE)
                ),
                Err(e) => {
                    let s = e.downcast::<tonic::Status>().unwrap();
                    assert_eq!(s.code(), tonic::Code::Unavailable);
                    assert_eq!(s.message(), BREAKER_OPEN);
                    local += 1;
                }
            }
        }
        assert!(local > 100, "{local}");
        assert_eq!(
            registry.names(),
            vec!["direct:///x:1/greeter.Greeter/SayHello".to_owned()]
        );
    }
}
