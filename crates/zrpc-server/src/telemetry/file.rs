//! go-zero's `file` batcher: each finished span as one line of JSON appended to the file named
//! by `Telemetry.Endpoint`, in the shape grpc-go's stdouttrace exporter writes (Go's
//! `tracetest.SpanStub`: `Name`, `SpanContext`, `Parent`, `SpanKind`, `StartTime`, ...), so
//! tools that read a go-zero service's span file read a zrpc service's too. opentelemetry-rust's
//! stdout exporter writes another format, to stdout only: hence this one.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::Mutex;
use std::time::SystemTime;

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags};
use opentelemetry::{Array, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use serde::Serialize;

/// Appends spans to one file.
#[derive(Debug)]
pub(super) struct FileExporter {
    file: Mutex<File>,
    resource: Vec<Attribute>,
}

impl FileExporter {
    /// Opens (creates) `path` for appending, as go-zero does.
    pub(super) fn open(path: &str) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(FileExporter {
            file: Mutex::new(file),
            resource: Vec::new(),
        })
    }
}

impl SpanExporter for FileExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let mut out = Vec::new();
        for span in &batch {
            serde_json::to_writer(&mut out, &Stub::of(span, &self.resource))
                .map_err(|e| OTelSdkError::InternalFailure(e.to_string()))?;
            out.push(b'\n');
        }
        // one write per batch: lines of concurrent writers never interleave mid-span
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.write_all(&out)
            .map_err(|e| OTelSdkError::InternalFailure(e.to_string()))
    }

    fn set_resource(&mut self, resource: &Resource) {
        let mut attrs: Vec<Attribute> = resource
            .iter()
            .map(|(k, v)| Attribute::of(k.as_str(), v))
            .collect();
        attrs.sort_by(|a, b| a.key.cmp(&b.key)); // Go's attribute sets are sorted
        self.resource = attrs;
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Stub<'a> {
    name: &'a str,
    span_context: Context,
    parent: Context,
    span_kind: u8,
    start_time: String,
    end_time: String,
    attributes: Option<Vec<Attribute>>,
    events: Option<Vec<EventStub<'a>>>,
    links: Option<Vec<LinkStub>>,
    status: StatusStub<'a>,
    dropped_attributes: u32,
    dropped_events: u32,
    dropped_links: u32,
    child_span_count: u32,
    resource: &'a [Attribute],
    instrumentation_scope: Scope<'a>,
    instrumentation_library: Scope<'a>,
}

impl<'a> Stub<'a> {
    fn of(span: &'a SpanData, resource: &'a [Attribute]) -> Self {
        let scope = &span.instrumentation_scope;
        let scope = Scope {
            name: scope.name(),
            version: scope.version().unwrap_or_default(),
            schema_url: scope.schema_url().unwrap_or_default(),
            attributes: none_if_empty(scope.attributes()),
        };
        let parent = if span.parent_span_id == SpanId::INVALID {
            Context::zero()
        } else {
            Context {
                trace_id: span.span_context.trace_id().to_string(),
                span_id: span.parent_span_id.to_string(),
                trace_flags: flags(span.span_context.trace_flags()),
                trace_state: String::new(),
                remote: span.parent_span_is_remote,
            }
        };
        Stub {
            name: &span.name,
            span_context: Context::of(&span.span_context),
            parent,
            // Go's trace.SpanKind numbers
            span_kind: match span.span_kind {
                SpanKind::Internal => 1,
                SpanKind::Server => 2,
                SpanKind::Client => 3,
                SpanKind::Producer => 4,
                SpanKind::Consumer => 5,
            },
            start_time: time(span.start_time),
            end_time: time(span.end_time),
            attributes: none_if_empty(span.attributes.iter()),
            events: (!span.events.is_empty()).then(|| {
                span.events
                    .iter()
                    .map(|e| EventStub {
                        name: &e.name,
                        attributes: none_if_empty(e.attributes.iter()),
                        dropped_attribute_count: e.dropped_attributes_count,
                        time: time(e.timestamp),
                    })
                    .collect()
            }),
            links: (!span.links.is_empty()).then(|| {
                span.links
                    .iter()
                    .map(|l| LinkStub {
                        span_context: Context::of(&l.span_context),
                        attributes: none_if_empty(l.attributes.iter()),
                        dropped_attribute_count: l.dropped_attributes_count,
                    })
                    .collect()
            }),
            status: match &span.status {
                Status::Unset => StatusStub {
                    code: "Unset",
                    description: "",
                },
                Status::Error { description } => StatusStub {
                    code: "Error",
                    description,
                },
                Status::Ok => StatusStub {
                    code: "Ok",
                    description: "",
                },
            },
            dropped_attributes: span.dropped_attributes_count,
            dropped_events: span.events.dropped_count,
            dropped_links: span.links.dropped_count,
            child_span_count: 0, // not kept by the Rust SDK
            resource,
            instrumentation_scope: scope.clone(),
            instrumentation_library: scope,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Context {
    #[serde(rename = "TraceID")]
    trace_id: String,
    #[serde(rename = "SpanID")]
    span_id: String,
    trace_flags: String,
    trace_state: String,
    remote: bool,
}

impl Context {
    fn of(cx: &SpanContext) -> Self {
        Context {
            trace_id: cx.trace_id().to_string(),
            span_id: cx.span_id().to_string(),
            trace_flags: flags(cx.trace_flags()),
            trace_state: cx.trace_state().header(),
            remote: cx.is_remote(),
        }
    }

    fn zero() -> Self {
        Context {
            trace_id: "0".repeat(32),
            span_id: "0".repeat(16),
            trace_flags: "00".to_owned(),
            trace_state: String::new(),
            remote: false,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct EventStub<'a> {
    name: &'a str,
    attributes: Option<Vec<Attribute>>,
    dropped_attribute_count: u32,
    time: String,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct LinkStub {
    span_context: Context,
    attributes: Option<Vec<Attribute>>,
    dropped_attribute_count: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct StatusStub<'a> {
    code: &'static str,
    description: &'a str,
}

#[derive(Serialize, Clone)]
#[serde(rename_all = "PascalCase")]
struct Scope<'a> {
    name: &'a str,
    version: &'a str,
    #[serde(rename = "SchemaURL")]
    schema_url: &'a str,
    attributes: Option<Vec<Attribute>>,
}

/// Go's `attribute.KeyValue` in JSON: `{"Key": .., "Value": {"Type": "STRING", "Value": ..}}`.
#[derive(Debug, Serialize, Clone)]
#[serde(rename_all = "PascalCase")]
struct Attribute {
    key: String,
    value: Typed,
}

#[derive(Debug, Serialize, Clone)]
#[serde(rename_all = "PascalCase")]
struct Typed {
    r#type: &'static str,
    value: serde_json::Value,
}

impl Attribute {
    fn of(key: &str, value: &Value) -> Self {
        use serde_json::json;
        let (ty, v) = match value {
            Value::Bool(b) => ("BOOL", json!(b)),
            Value::I64(i) => ("INT64", json!(i)),
            Value::F64(f) => ("FLOAT64", json!(f)),
            Value::String(s) => ("STRING", json!(s.as_str())),
            Value::Array(Array::Bool(v)) => ("BOOLSLICE", json!(v)),
            Value::Array(Array::I64(v)) => ("INT64SLICE", json!(v)),
            Value::Array(Array::F64(v)) => ("FLOAT64SLICE", json!(v)),
            Value::Array(Array::String(v)) => (
                "STRINGSLICE",
                json!(v.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
            ),
            other => ("STRING", json!(other.to_string())),
        };
        Attribute {
            key: key.to_owned(),
            value: Typed {
                r#type: ty,
                value: v,
            },
        }
    }
}

/// `null` for none, as Go encodes a nil slice.
fn none_if_empty<'k>(kvs: impl Iterator<Item = &'k KeyValue>) -> Option<Vec<Attribute>> {
    let v: Vec<Attribute> = kvs
        .map(|kv| Attribute::of(kv.key.as_str(), &kv.value))
        .collect();
    (!v.is_empty()).then_some(v)
}

/// Trace flags as Go prints them: two hex digits.
fn flags(f: TraceFlags) -> String {
    format!("{:02x}", f.to_u8())
}

/// RFC 3339 in UTC with the fraction's trailing zeros cut, as Go's `time.Time` encodes it.
fn time(t: SystemTime) -> String {
    let full = humantime::format_rfc3339_nanos(t).to_string(); // ...T12:21:21.234480000Z
    let Some((head, frac)) = full.trim_end_matches('Z').split_once('.') else {
        return full;
    };
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        format!("{head}Z")
    } else {
        format!("{head}.{frac}Z")
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn times_read_as_go_writes_them() {
        let t = UNIX_EPOCH + Duration::new(1_796_300_481, 234_480_000);
        assert_eq!(time(t), "2026-12-03T12:21:21.23448Z");
        assert_eq!(
            time(UNIX_EPOCH + Duration::from_secs(1)),
            "1970-01-01T00:00:01Z"
        );
    }

    #[test]
    fn attributes_carry_go_type_names() {
        let a =
            serde_json::to_value(Attribute::of("rpc.grpc.status_code", &Value::I64(0))).unwrap();
        assert_eq!(
            a,
            serde_json::json!({"Key": "rpc.grpc.status_code", "Value": {"Type": "INT64", "Value": 0}})
        );
        let a = serde_json::to_value(Attribute::of("rpc.system", &"grpc".into())).unwrap();
        assert_eq!(a["Value"]["Type"], "STRING");
    }
}
