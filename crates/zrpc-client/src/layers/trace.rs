//! Client span and trace-context injection (go-zero `UnaryTracingInterceptor`).
//!
//! Each call runs in a `tracing` span `rpc.client` (kind client, `otel.name` = full method,
//! `rpc.system = grpc`, `rpc.service`, `rpc.method`, `peer.service` = target). The W3C
//! `traceparent`/`tracestate` and `baggage` of the span's OpenTelemetry context are injected into
//! the request headers with the global propagator, or, while the application has set none
//! (OpenTelemetry's default injects nothing), with W3C trace context and baggage: go-zero's
//! global propagator. The final code is recorded as `rpc.grpc.status_code`, and
//! `otel.status_code = ERROR` for failures.
//!
//! Injection from the span needs the `otel` cargo feature (the span's OpenTelemetry context comes
//! from tracing-opentelemetry). Before it, in every build, a call made while a zrpc server handles
//! a call gets that call's `traceparent`, `tracestate` and `baggage` unchanged
//! (`zrpc_core::grpc::trace_context`), whether or not a subscriber wants the span; an
//! OpenTelemetry context, when the span has one, overwrites the first two (the call's span is the
//! next one's parent). Metadata the call sets itself is kept: its own `baggage` members are
//! merged with the context's, never replaced.
//!
//! A call made outside a server's call whose span starts a trace records the trace id in the
//! span's `trace` field (go-zero's log field); inside one, the server's span carries it.

#[cfg(feature = "otel")]
use http::{HeaderName, HeaderValue};
#[cfg(feature = "otel")]
use opentelemetry::propagation::{Injector, TextMapPropagator};
#[cfg(feature = "otel")]
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
#[cfg(feature = "otel")]
use tracing_opentelemetry::OpenTelemetrySpanExt;
use zrpc_core::grpc::code;
use zrpc_core::grpc::method::split;

#[cfg(feature = "otel")]
struct HeaderInjector<'a>(&'a mut http::HeaderMap);

#[cfg(feature = "otel")]
impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) else {
            return;
        };
        if k == zrpc_core::grpc::trace_context::BAGGAGE {
            zrpc_core::grpc::trace_context::merge_baggage(self.0, &v);
        } else {
            self.0.insert(k, v);
        }
    }
}

/// Injects `cx` with the global propagator or, while that is OpenTelemetry's default (it names
/// no field and injects nothing), with W3C trace context and baggage: go-zero's global
/// propagator.
#[cfg(feature = "otel")]
fn inject(cx: &opentelemetry::Context, headers: &mut http::HeaderMap) {
    opentelemetry::global::get_text_map_propagator(|p| {
        let mut injector = HeaderInjector(headers);
        if p.fields().next().is_some() {
            p.inject_context(cx, &mut injector);
        } else {
            TraceContextPropagator::new().inject_context(cx, &mut injector);
            BaggagePropagator::new().inject_context(cx, &mut injector);
        }
    });
}

/// Opens the `rpc.client` span of a call to `path` and injects its context into `headers`;
/// `None` when no subscriber wants the span.
///
/// A disabled span (no subscriber interested: none installed, or its level above info) carries
/// no OpenTelemetry context, so nothing would be injected (`context()` of a disabled span is the
/// empty context) and nothing recorded: the call then skips the propagator (a global lock read
/// and a dynamic call), the span's enters and exits on every poll and the final record.
pub(crate) fn start(
    target: &str,
    path: &str,
    headers: &mut http::HeaderMap,
) -> Option<tracing::Span> {
    zrpc_core::grpc::trace_context::inject_current(headers);
    #[cfg(feature = "otel")]
    let passed_on = headers.contains_key(&zrpc_core::grpc::trace_context::TRACEPARENT);
    // The field values are computed only for an enabled span: splitting the path up front
    // would cost every call something even while tracing is off.
    let span = tracing::info_span!(
        "rpc.client",
        otel.kind = "client",
        otel.name = %path.trim_start_matches('/'),
        rpc.system = "grpc",
        rpc.service = %split(path).map_or("", |(service, _)| service),
        rpc.method = %split(path).map_or(path, |(_, method)| method),
        peer.service = %target,
        rpc.grpc.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        trace = tracing::field::Empty,
    );
    if span.is_disabled() {
        return None;
    }
    #[cfg(feature = "otel")]
    {
        use opentelemetry::trace::TraceContextExt;
        let cx = span.context();
        inject(&cx, headers);
        // a trace this call starts: its log lines carry the id (a server's call carries its own)
        let sc = cx.span().span_context().clone();
        if !passed_on && sc.is_valid() {
            span.record("trace", sc.trace_id().to_string());
        }
    }
    Some(span)
}

/// Records the final code on the span.
pub(crate) fn record(span: &tracing::Span, code: i32) {
    span.record("rpc.grpc.status_code", code);
    if !code::is_acceptable(code) {
        span.record("otel.status_code", "ERROR");
    }
}

#[cfg(all(test, feature = "otel"))]
mod tests {
    use std::sync::{Arc, Mutex};

    use opentelemetry::KeyValue;
    use opentelemetry::baggage::BaggageExt;
    use opentelemetry::propagation::TextMapCompositePropagator;
    use opentelemetry::trace::TracerProvider;
    use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
    use tower::BoxError;
    use tracing_subscriber::layer::SubscriberExt;

    use tonic::body::Body;

    #[test]
    fn a_span_no_subscriber_wants_is_not_opened_nor_injected() {
        // the same propagator as the other test sets (tests share the global)
        opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
            Box::new(TraceContextPropagator::new()),
            Box::new(BaggagePropagator::new()),
        ]));
        let _cx =
            opentelemetry::Context::current_with_baggage([KeyValue::new("tenant", "t1")]).attach();
        let mut headers = http::HeaderMap::new();
        // no subscriber at all
        let span = super::start("direct:///a:1", "/greeter.Greeter/SayHello", &mut headers);
        assert!(span.is_none());
        // a subscriber that records only errors (the span is at info level)
        let subscriber =
            tracing_subscriber::registry().with(tracing_subscriber::filter::LevelFilter::ERROR);
        tracing::subscriber::with_default(subscriber, || {
            let span = super::start("direct:///a:1", "/greeter.Greeter/SayHello", &mut headers);
            assert!(span.is_none());
        });
        assert!(headers.is_empty(), "{headers:?}");
        // a subscriber that wants it
        let subscriber =
            tracing_subscriber::registry().with(tracing_subscriber::filter::LevelFilter::INFO);
        tracing::subscriber::with_default(subscriber, || {
            let span = super::start("direct:///a:1", "/greeter.Greeter/SayHello", &mut headers);
            assert!(span.is_some_and(|s| !s.is_disabled()));
        });
    }

    #[tokio::test]
    async fn injects_traceparent_and_baggage() {
        opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
            Box::new(TraceContextPropagator::new()),
            Box::new(BaggagePropagator::new()),
        ]));
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let _sub = tracing::subscriber::set_default(subscriber);
        let _cx =
            opentelemetry::Context::current_with_baggage([KeyValue::new("tenant", "t1")]).attach();

        let seen: Arc<Mutex<Option<http::HeaderMap>>> = Arc::default();
        let mut inner = {
            let seen = seen.clone();
            tower::service_fn(move |req: http::Request<Body>| {
                *seen.lock().unwrap() = Some(req.headers().clone());
                async { Ok::<_, BoxError>(http::Response::new(Body::empty())) }
            })
        };
        let observe = crate::layers::observe::Observe::builder("direct:///a:1")
            .trace(true)
            .build();
        let req = http::Request::builder()
            .uri("/greeter.Greeter/SayHello")
            .body(Body::empty())
            .unwrap();
        crate::layers::observe::observed_call(&observe, &mut inner, req)
            .await
            .unwrap();
        let headers = seen.lock().unwrap().take().unwrap();
        let tp = headers
            .get("traceparent")
            .expect("traceparent injected")
            .to_str()
            .unwrap();
        assert!(tp.starts_with("00-") && tp.len() == 55, "{tp}");
        let baggage = headers
            .get("baggage")
            .expect("baggage injected")
            .to_str()
            .unwrap();
        assert!(baggage.contains("tenant=t1"), "{baggage}");
    }
}

#[cfg(test)]
mod passthrough_tests {
    use zrpc_core::grpc::trace_context::TraceContext;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_call_made_while_a_server_handles_one_carries_its_trace_context() {
        let mut incoming = http::HeaderMap::new();
        incoming.insert("traceparent", TP.parse().unwrap());
        incoming.insert("tracestate", "go=1".parse().unwrap());
        let cx = TraceContext::extract(&incoming).unwrap();
        // no subscriber: the span is not opened, the context is passed on all the same
        let mut headers = http::HeaderMap::new();
        let span = cx
            .in_scope(|| super::start("direct:///a:1", "/greeter.Greeter/SayHello", &mut headers));
        assert!(span.is_none());
        assert_eq!(headers["traceparent"], TP);
        assert_eq!(headers["tracestate"], "go=1");
        // outside a server's call: nothing
        let mut headers = http::HeaderMap::new();
        super::start("direct:///a:1", "/greeter.Greeter/SayHello", &mut headers);
        assert!(headers.is_empty(), "{headers:?}");
    }
}
