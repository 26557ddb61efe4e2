//! Client span and trace-context injection (go-zero `UnaryTracingInterceptor`).
//!
//! Each call runs in a `tracing` span `rpc.client` (kind client, `otel.name` = full method,
//! `rpc.system = grpc`, `rpc.service`, `rpc.method`, `peer.service` = target). The W3C
//! `traceparent`/`tracestate` and `baggage` of the span's OpenTelemetry context are injected into
//! the request headers with the global propagator (set one with
//! `opentelemetry::global::set_text_map_propagator`; without it nothing is injected). The final
//! code is recorded as `rpc.grpc.status_code`, and `otel.status_code = ERROR` for failures.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use http::{HeaderName, HeaderValue};
use opentelemetry::propagation::Injector;
use tonic::body::Body;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use zrpc_core::grpc::method::split;

use super::{BoxError, Response, observe};
use crate::balancer::is_failure;

/// Creates the client span and injects the trace context.
#[derive(Debug, Clone)]
pub struct TraceLayer {
    target: Arc<str>,
}

impl TraceLayer {
    /// A layer for calls to `target`.
    #[must_use]
    pub fn new(target: &str) -> Self {
        TraceLayer {
            target: Arc::from(target),
        }
    }
}

impl<S> tower::Layer<S> for TraceLayer {
    type Service = Trace<S>;
    fn layer(&self, inner: S) -> Trace<S> {
        Trace {
            inner,
            target: self.target.clone(),
        }
    }
}

/// The service of [`TraceLayer`].
#[derive(Debug, Clone)]
pub struct Trace<S> {
    inner: S,
    target: Arc<str>,
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(k, v);
        }
    }
}

impl<S> tower::Service<http::Request<Body>> for Trace<S>
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

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        let path = req.uri().path();
        let (service, method) = split(path).unwrap_or(("", path));
        let span = tracing::info_span!(
            "rpc.client",
            otel.kind = "client",
            otel.name = %path.trim_start_matches('/'),
            rpc.system = "grpc",
            rpc.service = %service,
            rpc.method = %method,
            peer.service = %self.target,
            rpc.grpc.status_code = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let cx = span.context();
        opentelemetry::global::get_text_map_propagator(|p| {
            p.inject_context(&cx, &mut HeaderInjector(req.headers_mut()));
        });
        let fut = {
            let _enter = span.enter();
            self.inner.call(req)
        };
        let record = span.clone();
        Box::pin(
            observe(fut, move |code: i32| {
                record.record("rpc.grpc.status_code", code);
                if is_failure(code) {
                    record.record("otel.status_code", "ERROR");
                }
            })
            .instrument(span),
        )
    }
}
