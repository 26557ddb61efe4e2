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
    let export = conf
        .telemetry
        .as_ref()
        .filter(|t| !t.endpoint.is_empty() && !t.disabled);
    let Some(t) = export else {
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .try_init();
        return Ok(TelemetryGuard::default());
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
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            t.sampler,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(conf.telemetry_name().to_owned())
                .build(),
        )
        .build();
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
