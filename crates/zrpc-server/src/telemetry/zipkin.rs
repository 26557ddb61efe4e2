//! go-zero's `zipkin` batcher: spans as Zipkin v2 JSON, POSTed to the collector URL in
//! `Telemetry.Endpoint`, mapped as Go's OpenTelemetry Zipkin exporter maps them (the service in
//! `localEndpoint.serviceName`, attributes and resource as tags, the status as
//! `otel.status_code` and `error`, events as annotations). opentelemetry-zipkin 0.33 sends no
//! service name, which leaves every span under "unknown" in Zipkin: hence this one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::Request;
use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry::{Array, Value};
use opentelemetry_http::HttpClient;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use serde::Serialize;

/// Sends each batch to one Zipkin collector.
#[derive(Debug)]
pub(super) struct ZipkinExporter {
    url: String,
    client: Arc<dyn HttpClient>,
    service: String,
    /// The resource's attributes, as tags of every span (as Go's exporter adds them).
    resource: Vec<(String, String)>,
}

impl ZipkinExporter {
    pub(super) fn new(url: &str, client: impl HttpClient + 'static) -> Self {
        ZipkinExporter {
            url: url.to_owned(),
            client: Arc::new(client),
            service: String::new(),
            resource: Vec::new(),
        }
    }
}

impl SpanExporter for ZipkinExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans: Vec<Span<'_>> = batch.iter().map(|s| self.span(s)).collect();
        let body =
            serde_json::to_vec(&spans).map_err(|e| OTelSdkError::InternalFailure(e.to_string()))?;
        let request = Request::post(&self.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Bytes::from(body))
            .map_err(|e| OTelSdkError::InternalFailure(e.to_string()))?;
        let answer = self
            .client
            .send_bytes(request)
            .await
            .map_err(|e| OTelSdkError::InternalFailure(format!("zipkin {}: {e}", self.url)))?;
        if answer.status().is_success() {
            Ok(())
        } else {
            Err(OTelSdkError::InternalFailure(format!(
                "zipkin {} answered {}",
                self.url,
                answer.status()
            )))
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), text(v)))
            .collect();
        self.service = self
            .resource
            .iter()
            .find(|(k, _)| k == "service.name")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
    }
}

impl ZipkinExporter {
    fn span<'a>(&'a self, s: &'a SpanData) -> Span<'a> {
        let mut tags: BTreeMap<&str, String> = s
            .attributes
            .iter()
            .map(|kv| (kv.key.as_str(), text(&kv.value)))
            .collect();
        for (k, v) in &self.resource {
            tags.insert(k, v.clone());
        }
        match &s.status {
            Status::Unset => {}
            Status::Ok => {
                tags.insert("otel.status_code", "OK".to_owned());
            }
            Status::Error { description } => {
                tags.insert("otel.status_code", "ERROR".to_owned());
                tags.insert("error", description.to_string());
            }
        }
        if !matches!(s.status, Status::Error { .. }) {
            tags.remove("error");
        }
        let scope = &s.instrumentation_scope;
        if !scope.name().is_empty() {
            tags.insert("otel.scope.name", scope.name().to_owned());
            if let Some(v) = scope.version().filter(|v| !v.is_empty()) {
                tags.insert("otel.scope.version", v.to_owned());
            }
        }
        Span {
            trace_id: s.span_context.trace_id().to_string(),
            id: s.span_context.span_id().to_string(),
            parent_id: (s.parent_span_id != SpanId::INVALID).then(|| s.parent_span_id.to_string()),
            // lower case, as Go's Zipkin model writes names
            name: s.name.to_lowercase(),
            kind: match s.span_kind {
                SpanKind::Server => Some("SERVER"),
                SpanKind::Client => Some("CLIENT"),
                SpanKind::Producer => Some("PRODUCER"),
                SpanKind::Consumer => Some("CONSUMER"),
                SpanKind::Internal => None,
            },
            timestamp: micros(s.start_time),
            duration: s
                .end_time
                .duration_since(s.start_time)
                .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            local_endpoint: Endpoint {
                service_name: &self.service,
            },
            annotations: s
                .events
                .iter()
                .map(|e| Annotation {
                    timestamp: micros(e.timestamp),
                    value: if e.attributes.is_empty() {
                        e.name.to_string()
                    } else {
                        let attrs: BTreeMap<&str, String> = e
                            .attributes
                            .iter()
                            .map(|kv| (kv.key.as_str(), text(&kv.value)))
                            .collect();
                        format!(
                            "{}: {}",
                            e.name,
                            serde_json::to_string(&attrs).unwrap_or_default()
                        )
                    },
                })
                .collect(),
            tags,
        }
    }
}

/// A span in Zipkin's v2 JSON model.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Span<'a> {
    trace_id: String,
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_id: Option<String>,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    timestamp: u64,
    duration: u64,
    local_endpoint: Endpoint<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    annotations: Vec<Annotation>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    tags: BTreeMap<&'a str, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Endpoint<'a> {
    service_name: &'a str,
}

#[derive(Serialize)]
struct Annotation {
    timestamp: u64,
    value: String,
}

/// Microseconds since the Unix epoch, Zipkin's timestamps.
fn micros(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A tag's text: slices as JSON lists, the rest as printed (Go's `attributeToStringPair`).
fn text(v: &Value) -> String {
    match v {
        Value::Array(Array::Bool(a)) => serde_json::to_string(a).unwrap_or_default(),
        Value::Array(Array::I64(a)) => serde_json::to_string(a).unwrap_or_default(),
        Value::Array(Array::F64(a)) => serde_json::to_string(a).unwrap_or_default(),
        Value::Array(Array::String(a)) => {
            serde_json::to_string(&a.iter().map(|s| s.as_str()).collect::<Vec<_>>())
                .unwrap_or_default()
        }
        other => other.to_string(),
    }
}
