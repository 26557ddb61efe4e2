//! Tracing: a span per RPC (go-zero `serverinterceptors/tracinginterceptor.go`).
//!
//! The span is named after the full method without its leading `/` (`pkg.Svc/Method`),
//! kind server, with `rpc.system`, `rpc.service`, `rpc.method`, `net.peer.ip`,
//! `net.peer.port` and, at the end, `rpc.grpc.status_code`. The W3C `traceparent`,
//! `tracestate` and `baggage` metadata become its parent context (OpenTelemetry
//! TraceContext + Baggage propagators, as go-zero's global propagator). The span stays open
//! until the final status, so it covers a whole stream. Spans reach an OTLP collector only
//! when `Telemetry.Endpoint` is set (see [`telemetry`](crate::telemetry)).
//!
//! The parent context and the final status need the `otel` cargo feature (OpenTelemetry); without
//! it the span still gives log lines their `rpc{...}` context. In every build a valid
//! `traceparent` (with `tracestate` and `baggage`) is kept while the handler runs, for zrpc's
//! client to pass on unchanged when it has no OpenTelemetry context of its own
//! (`zrpc_core::grpc::trace_context`): the trace goes on through this service.
//!
//! The span's `trace` field is the call's trace id (go-zero's log field): the caller's, or the
//! one this span starts when OpenTelemetry traces the service. Every log line written inside
//! the span carries it (as a top-level `trace` key in JSON lines, see
//! [`telemetry`](crate::telemetry)). The span's target is `zrpc::rpc`: zrpc's own log set-up
//! turns it off unless spans are exported, and the lines then read the caller's trace id from
//! its context, current while the call is polled.

#[cfg(feature = "otel")]
use std::sync::OnceLock;

#[cfg(feature = "otel")]
use http::HeaderMap;
use http::Request;
#[cfg(feature = "otel")]
use opentelemetry::propagation::{Extractor, TextMapCompositePropagator, TextMapPropagator};
#[cfg(feature = "otel")]
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use tracing::Span;
#[cfg(feature = "otel")]
use tracing_opentelemetry::OpenTelemetrySpanExt;
use zrpc_core::grpc::trace_context::TraceContext;
use zrpc_core::grpc::{OnStatus, method};

use crate::layers::util::peer_addr;
#[cfg(feature = "otel")]
use crate::layers::util::{BAGGAGE, TRACEPARENT, find};

#[cfg(feature = "otel")]
fn propagator() -> &'static TextMapCompositePropagator {
    static P: OnceLock<TextMapCompositePropagator> = OnceLock::new();
    P.get_or_init(|| {
        TextMapCompositePropagator::new(vec![
            Box::new(TraceContextPropagator::new()),
            Box::new(BaggagePropagator::new()),
        ])
    })
}

/// Reads propagation fields from HTTP/2 headers (gRPC metadata).
#[cfg(feature = "otel")]
struct HeaderExtractor<'a>(&'a HeaderMap);

#[cfg(feature = "otel")]
impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The parent context carried by a request's metadata, if any.
#[cfg(feature = "otel")]
pub(crate) fn extract_context(headers: &HeaderMap) -> Option<opentelemetry::Context> {
    let carries = find(headers, &TRACEPARENT).is_some() || find(headers, &BAGGAGE).is_some();
    carries.then(|| propagator().extract(&HeaderExtractor(headers)))
}

/// The trace stage's settings; `enabled` is `Middlewares.Trace`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TraceStage {
    enabled: bool,
}

impl TraceStage {
    /// A trace stage.
    pub(crate) fn new(enabled: bool) -> Self {
        Self { enabled }
    }

    /// Whether calls get a span (`Middlewares.Trace`).
    pub(crate) fn is_on(&self) -> bool {
        self.enabled
    }
}

/// Ends the span with the final code.
#[derive(Debug)]
pub(crate) struct TraceRecord {
    span: Span,
}

impl TraceRecord {
    /// Ends `span` with the call's final code.
    pub(crate) fn new(span: Span) -> Self {
        TraceRecord { span }
    }

    /// Enters the call's span: a line logged at the call's end (the stat stage's) carries the
    /// span's fields, its `trace` among them.
    pub(crate) fn enter(&self) -> tracing::span::Entered<'_> {
        self.span.enter()
    }
}

impl OnStatus for TraceRecord {
    #[cfg(not(feature = "otel"))]
    fn on_status(self, _code: i32) {
        // Without OpenTelemetry nothing exports the span: the code would be recorded for no one.
        let _ = self.span;
    }

    #[cfg(feature = "otel")]
    fn on_status(self, code: i32) {
        // Straight to the OpenTelemetry span (a no-op without the OTel layer): `record` would
        // make the fmt layer re-serialize the span's fields, ~5 us per call with JSON logs.
        self.span
            .set_attribute("rpc.grpc.status_code", i64::from(code));
        if code != 0 {
            self.span
                .set_status(opentelemetry::trace::Status::error(format!(
                    "grpc status {} ({})",
                    code,
                    zrpc_core::grpc::code::name(code)
                )));
        }
    }
}

/// The RPC span of `req` (disabled when no subscriber wants it); `context` is the caller's trace
/// context, if any.
pub(crate) fn rpc_span<B>(req: &Request<B>, context: Option<&TraceContext>) -> Span {
    let path = req.uri().path();
    // The field values are computed inside the macro, which evaluates them only when the span
    // is enabled: with no subscriber interested (no OTel exporter, log level above info) the
    // method split and the peer lookup would be work for nothing on every call.
    let split = || method::split(path).unwrap_or(("", ""));
    let peer = || peer_addr(req);
    let span = tracing::info_span!(
        target: "zrpc::rpc",
        "rpc",
        otel.name = path.trim_start_matches('/'),
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = split().0,
        rpc.method = split().1,
        net.peer.ip = %peer().map_or(std::net::IpAddr::from([127, 0, 0, 1]), |p| p.ip()),
        net.peer.port = peer().map_or(0, |p| p.port()),
        trace = context.map(TraceContext::trace_id),
    );
    #[cfg(feature = "otel")]
    if !span.is_disabled() {
        if let Some(parent) = extract_context(req.headers()) {
            let _ = span.set_parent(parent);
        }
        if context.is_none() {
            // a trace this span starts (OpenTelemetry installed): its id for the log lines
            use opentelemetry::trace::TraceContextExt;
            let sc = span.context().span().span_context().clone();
            if sc.is_valid() {
                span.record("trace", sc.trace_id().to_string());
            }
        }
    }
    span
}

/// `f()` with `context` current, if there is one.
pub(crate) fn in_scope<R>(context: &Option<TraceContext>, f: impl FnOnce() -> R) -> R {
    match context {
        Some(cx) => cx.in_scope(f),
        None => f(),
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use tonic::body::Body;

    #[cfg(feature = "otel")]
    use opentelemetry::trace::TraceContextExt;
    use tower::{Layer, ServiceExt};

    use super::*;
    use crate::layers::test_util::{capture_logs, final_code, ok_response};

    #[cfg(feature = "otel")]
    #[test]
    fn extracts_w3c_trace_context_and_baggage() {
        let mut h = HeaderMap::new();
        assert!(extract_context(&h).is_none());
        h.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        h.insert("baggage", "user=alice".parse().unwrap());
        let cx = extract_context(&h).unwrap();
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(sc.is_remote());
        use opentelemetry::baggage::BaggageExt;
        assert_eq!(
            cx.baggage().get("user").map(|v| v.as_str().to_owned()),
            Some("alice".to_owned())
        );
    }

    #[tokio::test]
    async fn the_callers_trace_context_is_current_in_the_handler() {
        const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        // no subscriber at all: the context passes through all the same
        let svc = TraceStage::new(true).layer(tower::service_fn(|_req: Request<Body>| async {
            tokio::task::yield_now().await;
            let mut outgoing = http::HeaderMap::new();
            zrpc_core::grpc::trace_context::inject_current(&mut outgoing);
            assert_eq!(outgoing["traceparent"], TP);
            assert_eq!(outgoing["baggage"], "user=alice");
            Ok::<_, Infallible>(ok_response())
        }));
        let req = Request::builder()
            .uri("/greeter.Greeter/SayHello")
            .header("traceparent", TP)
            .header("baggage", "user=alice")
            .body(Body::empty())
            .unwrap();
        let resp = svc.oneshot(req).await.unwrap();
        assert_eq!(final_code(resp).await, Some(0));
        let mut after = http::HeaderMap::new();
        zrpc_core::grpc::trace_context::inject_current(&mut after);
        assert!(after.is_empty(), "{after:?}");
    }

    #[tokio::test]
    async fn handler_runs_inside_the_rpc_span() {
        let (_guard, logs) = capture_logs();
        let svc = TraceStage::new(true).layer(tower::service_fn(|_req: Request<Body>| async {
            tracing::info!("inside handler");
            Ok::<_, Infallible>(ok_response())
        }));
        let req = Request::builder()
            .uri("/greeter.Greeter/SayHello")
            .body(Body::empty())
            .unwrap();
        let resp = svc.oneshot(req).await.unwrap();
        assert_eq!(final_code(resp).await, Some(0));
        let out = logs.contents();
        assert!(out.contains("rpc{"), "{out}");
        assert!(out.contains("rpc.method=\"SayHello\""), "{out}");
        assert!(out.contains("inside handler"), "{out}");
    }
}
