//! Span export with go-zero's batchers: `otlpgrpc` (OTLP over gRPC, tonic), `otlphttp` (OTLP
//! protobuf over HTTP), `zipkin` (Zipkin v2 JSON over HTTP) and `file` (go-zero's JSON lines),
//! each to `Telemetry.Endpoint` as go-zero's `core/trace` reads it.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::HttpError;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanExporter};

use crate::conf::TelemetryConf;
use crate::error::Error;

/// How long one export may take (go-zero's exporters' default, 10 s).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a collector's answer read (the exporters only look at its status).
const MAX_ANSWER: usize = 64 * 1024;

/// The tracer provider exporting with `t`'s batcher, spans named for `service`.
pub(super) fn provider(t: &TelemetryConf, service: &str) -> Result<SdkTracerProvider, Error> {
    let failed = |e: &dyn std::fmt::Display| {
        Error::Telemetry(format!(
            "Telemetry.Batcher {:?} to Endpoint {:?}: {e}",
            t.batcher, t.endpoint
        ))
    };
    match t.batcher.as_str() {
        "otlphttp" => {
            use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
            let host = t.endpoint.strip_prefix("http://").unwrap_or(&t.endpoint);
            let path = if t.otlp_http_path.is_empty() {
                "/v1/traces"
            } else {
                &t.otlp_http_path
            };
            let headers: HashMap<String, String> = t.otlp_headers.clone().into_iter().collect();
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(format!("http://{host}{path}"))
                .with_timeout(EXPORT_TIMEOUT)
                .with_headers(headers)
                .with_http_client(RuntimeHttpClient::new())
                .build()
                .map(|e| with_exporter(e, t, service))
                .map_err(|e| failed(&e))
        }
        "zipkin" => Ok(with_exporter(
            super::zipkin::ZipkinExporter::new(&t.endpoint, RuntimeHttpClient::new()),
            t,
            service,
        )),
        "file" => super::file::FileExporter::open(&t.endpoint)
            .map(|e| with_exporter(e, t, service))
            .map_err(|e| failed(&e)),
        // otlpgrpc, go-zero's default
        _ => {
            use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
            let endpoint = if t.endpoint.contains("://") {
                t.endpoint.clone()
            } else {
                format!("http://{}", t.endpoint)
            };
            let metadata = t.metadata().map_err(|e| Error::Telemetry(e.to_string()))?;
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .with_metadata(metadata)
                .build()
                .map(|e| with_exporter(e, t, service))
                .map_err(|e| failed(&e))
        }
    }
}

/// go-zero's provider: parent-based ratio sampling, `service.name`, batched export.
fn with_exporter(
    exporter: impl SpanExporter + 'static,
    t: &TelemetryConf,
    service: &str,
) -> SdkTracerProvider {
    SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            t.sampler,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(service.to_owned())
                .build(),
        )
        .build()
}

/// The HTTP client of the OTLP/HTTP and Zipkin exporters: hyper's pooled client, each request
/// run on the Tokio runtime the provider was built in. The SDK's batch processor exports from a
/// thread of its own, outside any runtime, where opentelemetry-http's hyper client (which
/// spawns onto the current runtime) would panic and a blocking client would add a second HTTP
/// stack to the build.
#[derive(Debug, Clone)]
struct RuntimeHttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
}

impl RuntimeHttpClient {
    /// A client on the current runtime. Panics outside one, as tonic's exporter does: the
    /// provider is built in `zrpc::server`'s runtime.
    fn new() -> Self {
        RuntimeHttpClient {
            client: Client::builder(TokioExecutor::new()).build_http(),
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

#[tonic::async_trait]
impl opentelemetry_http::HttpClient for RuntimeHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let send = async move {
            let response = client.request(request.map(Full::new)).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_ANSWER).collect().await?.to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        let task = self.runtime.spawn(async move {
            tokio::time::timeout(EXPORT_TIMEOUT, send)
                .await
                .map_err(|_| format!("no answer within {EXPORT_TIMEOUT:?}"))?
        });
        task.await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A span file that cannot be opened stops the start with the key, the path and the cause.
    #[test]
    fn an_unopenable_span_file_is_a_clear_error() {
        let t = TelemetryConf {
            endpoint: "/nonexistent-zrpc-dir/spans.json".into(),
            batcher: "file".into(),
            ..TelemetryConf::default()
        };
        let e = provider(&t, "greet.rpc").unwrap_err().to_string();
        assert!(
            e.contains(
                "Telemetry.Batcher \"file\" to Endpoint \"/nonexistent-zrpc-dir/spans.json\""
            ) && e.contains("No such file or directory"),
            "{e}"
        );
    }
}
