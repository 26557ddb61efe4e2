//! Logging and OpenTelemetry set-up (go-zero `ServiceConf.SetUp`: logx + trace agent).
//!
//! [`init`] installs a global `tracing` subscriber (JSON or plain per `Log.Encoding`, level
//! per `Log.Level`, overridable with `RUST_LOG`) and, when `Telemetry.Endpoint` is set and
//! `Telemetry.Disabled` is false, an OTLP/gRPC span exporter with go-zero's sampler
//! (`ParentBased(TraceIdRatioBased(Sampler))`) and `service.name`. Without an endpoint,
//! spans still exist (and appear in logs) but are not exported, as in go-zero.
//! It does nothing when a global subscriber is already installed (by the application or a
//! test harness).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::conf::RpcServerConf;
use crate::error::Error;

/// Keeps the tracer provider alive; flushes spans when dropped (at shutdown).
#[derive(Debug, Default)]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take()
            && let Err(e) = p.shutdown()
        {
            tracing::warn!(target: "zrpc::telemetry", "tracer provider shutdown: {e}");
        }
    }
}

fn level(conf: &RpcServerConf) -> &'static str {
    match conf.log.level.as_str() {
        "debug" => "debug",
        "error" | "severe" => "error",
        _ => "info",
    }
}

/// The OTLP/gRPC tracer provider of `conf` (`None` when `Telemetry.Endpoint` is empty or
/// `Telemetry.Disabled`). Build it inside a Tokio runtime (the exporter uses tonic).
///
/// # Errors
///
/// [`Error::Telemetry`] when the exporter cannot be built.
pub fn tracer_provider(conf: &RpcServerConf) -> Result<Option<SdkTracerProvider>, Error> {
    let Some(t) = conf
        .telemetry
        .as_ref()
        .filter(|t| !t.endpoint.is_empty() && !t.disabled)
    else {
        return Ok(None);
    };
    if t.batcher != "otlpgrpc" {
        tracing::warn!(
            target: "zrpc::telemetry",
            "Telemetry.Batcher {:?} is not supported, using otlpgrpc",
            t.batcher
        );
    }
    let endpoint = if t.endpoint.contains("://") {
        t.endpoint.clone()
    } else {
        format!("http://{}", t.endpoint)
    };
    use opentelemetry_otlp::WithExportConfig;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| Error::Telemetry(e.to_string()))?;
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                t.sampler,
            ))))
            .with_resource(
                Resource::builder()
                    .with_service_name(conf.telemetry_name().to_owned())
                    .build(),
            )
            .build(),
    ))
}

/// Installs logging and (if configured) OTLP export. See the module docs.
///
/// # Errors
///
/// [`Error::Telemetry`] when the OTLP exporter cannot be built.
pub fn init(conf: &RpcServerConf) -> Result<TelemetryGuard, Error> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level(conf)));
    let fmt = if conf.log.encoding == "plain" {
        tracing_subscriber::fmt::layer().boxed()
    } else {
        tracing_subscriber::fmt::layer().json().boxed()
    };
    let Some(provider) = tracer_provider(conf)? else {
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .try_init();
        return Ok(TelemetryGuard::default());
    };
    let tracer = provider.tracer("zrpc");
    opentelemetry::global::set_tracer_provider(provider.clone());
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(tracing_opentelemetry::layer().with_tracer(tracer))
        .try_init();
    Ok(TelemetryGuard {
        provider: Some(provider),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    use super::*;
    use crate::conf::TelemetryConf;
    use crate::{Server, ServerHandle};

    /// A fake OTLP collector.
    struct Collector(mpsc::UnboundedSender<ExportTraceServiceRequest>);

    #[tonic::async_trait]
    impl TraceService for Collector {
        async fn export(
            &self,
            req: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let _ = self.0.send(req.into_inner());
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }

    async fn start_server(conf: RpcServerConf) -> (ServerHandle, tokio::task::JoinHandle<()>) {
        let server = Server::new(conf).unwrap();
        let handle = server.handle();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let task = tokio::spawn(async move {
            server
                .serve_with_listener(listener, std::future::pending())
                .await
                .unwrap();
        });
        handle.serving().await.unwrap();
        (handle, task)
    }

    #[test]
    fn no_endpoint_no_exporter() {
        let conf = RpcServerConf::new("t", "127.0.0.1:0");
        assert!(tracer_provider(&conf).unwrap().is_none());
    }

    #[tokio::test]
    async fn spans_reach_an_otlp_collector_with_the_callers_trace() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let collector = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let collector_addr = collector.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(Collector(tx)))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(collector)),
        );

        let telemetry = TelemetryConf {
            endpoint: collector_addr.to_string(),
            ..TelemetryConf::default()
        };
        let mut conf = RpcServerConf::new("otlp.rpc", "127.0.0.1:0").with_shutdown(
            crate::conf::ShutdownConf::new(Duration::ZERO, Duration::from_secs(2)),
        );
        conf.telemetry = Some(telemetry);
        let provider = tracer_provider(&conf).unwrap().unwrap();
        // Thread-local subscriber: this test's runtime is single-threaded.
        let _guard = tracing::subscriber::set_default(
            tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("zrpc"))),
        );

        let (handle, task) = start_server(conf).await;
        let addr = handle.local_addr().unwrap();
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut req = tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        });
        req.metadata_mut().insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        HealthClient::new(channel).check(req).await.unwrap();
        handle.shutdown();
        task.await.unwrap();

        let flush = tokio::task::spawn_blocking(move || provider.force_flush());
        let export = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the collector received spans")
            .unwrap();
        let _ = flush.await;
        let span = export
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .find(|s| s.name == "grpc.health.v1.Health/Check")
            .expect("the rpc span");
        assert_eq!(
            span.trace_id,
            [
                0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e,
                0x47, 0x36
            ]
        );
        assert_eq!(
            span.parent_span_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert_eq!(span.kind, 2, "SPAN_KIND_SERVER");
        let attr = |k: &str| {
            span.attributes
                .iter()
                .find(|a| a.key == k)
                .and_then(|a| a.value.clone())
        };
        assert!(
            attr("rpc.grpc.status_code").is_some(),
            "{:?}",
            span.attributes
        );
        assert!(attr("rpc.service").is_some(), "{:?}", span.attributes);
    }
}
