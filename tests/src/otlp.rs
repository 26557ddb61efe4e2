//! A small trace collector on loopback, for tests that follow one trace across processes. It
//! takes spans the ways go-zero's batchers send them: OTLP/gRPC (opentelemetry-proto's generated
//! tonic service) on [`Collector::addr`], and on [`Collector::http_addr`] (HTTP/1.1) OTLP/HTTP
//! protobuf at `/v1/traces` and Zipkin v2 JSON at `/api/v2/spans`; [`file_spans`] reads the
//! `file` batcher's JSON lines. It keeps every span it is sent.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use tokio::net::TcpListener;

/// One exported span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanRecord {
    /// The exporter's `service.name`.
    pub service: String,
    /// The span name.
    pub name: String,
    /// OTLP span kind (2 server, 3 client).
    pub kind: i32,
    /// Trace id, 32 hex digits.
    pub trace_id: String,
    /// Span id, 16 hex digits.
    pub span_id: String,
    /// Parent span id, 16 hex digits, empty for a root span.
    pub parent: String,
}

/// A running collector (stops with the test's runtime).
#[derive(Debug, Clone)]
pub struct Collector {
    /// Where OTLP/gRPC exporters send (`Telemetry.Endpoint` of `Batcher: otlpgrpc`).
    pub addr: SocketAddr,
    /// The HTTP/1.1 listener: `Batcher: otlphttp` sends to this `host:port`, `Batcher: zipkin`
    /// to `http://<it>/api/v2/spans`.
    pub http_addr: SocketAddr,
    spans: Arc<Mutex<Vec<SpanRecord>>>,
}

struct Sink(Arc<Mutex<Vec<SpanRecord>>>);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let out = records(req.into_inner());
        self.0.lock().unwrap_or_else(|e| e.into_inner()).extend(out);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The spans of one OTLP export.
fn records(req: ExportTraceServiceRequest) -> Vec<SpanRecord> {
    let mut out = Vec::new();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .and_then(|a| match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for span in rs.scope_spans.iter().flat_map(|s| &s.spans) {
            out.push(SpanRecord {
                service: service.clone(),
                name: span.name.clone(),
                kind: span.kind,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent: hex(&span.parent_span_id),
            });
        }
    }
    out
}

/// The spans of one Zipkin v2 JSON upload (kinds mapped to OTLP's numbers).
fn zipkin_records(body: &[u8]) -> Result<Vec<SpanRecord>, String> {
    let spans: Vec<serde_json::Value> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    Ok(spans
        .iter()
        .map(|s| SpanRecord {
            service: text(&s["localEndpoint"]["serviceName"]),
            name: text(&s["name"]),
            kind: match s["kind"].as_str() {
                Some("SERVER") => 2,
                Some("CLIENT") => 3,
                Some("PRODUCER") => 4,
                Some("CONSUMER") => 5,
                _ => 1,
            },
            trace_id: text(&s["traceId"]),
            span_id: text(&s["id"]),
            parent: text(&s["parentId"]),
        })
        .collect())
}

/// The spans in a file written by go-zero's `file` batcher (Go's stdouttrace JSON lines; its
/// `SpanKind` numbers are OTLP's) and the JSON of each line, for tests that compare shapes.
///
/// # Panics
/// When a line is not JSON.
pub fn file_spans(path: &std::path::Path) -> (Vec<SpanRecord>, Vec<serde_json::Value>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let records = lines
        .iter()
        .map(|v| {
            let parent = s(&v["Parent"]["SpanID"]);
            SpanRecord {
                service: v["Resource"]
                    .as_array()
                    .and_then(|r| r.iter().find(|a| a["Key"] == "service.name"))
                    .map(|a| s(&a["Value"]["Value"]))
                    .unwrap_or_default(),
                name: s(&v["Name"]),
                kind: v["SpanKind"]
                    .as_i64()
                    .and_then(|k| i32::try_from(k).ok())
                    .unwrap_or(0),
                trace_id: s(&v["SpanContext"]["TraceID"]),
                span_id: s(&v["SpanContext"]["SpanID"]),
                parent: if parent.bytes().all(|b| b == b'0') {
                    String::new()
                } else {
                    parent
                },
            }
        })
        .collect();
    (records, lines)
}

/// Answers one HTTP request: an OTLP/HTTP export or a Zipkin upload, its spans kept.
async fn http_export(
    req: hyper::Request<hyper::body::Incoming>,
    spans: Arc<Mutex<Vec<SpanRecord>>>,
) -> Result<hyper::Response<http_body_util::Full<bytes::Bytes>>, std::convert::Infallible> {
    use http_body_util::BodyExt;
    use prost::Message;
    let answer = |status: u16, body: Vec<u8>| {
        hyper::Response::builder()
            .status(status)
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .unwrap_or_default()
    };
    let path = req.uri().path().to_owned();
    let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
        return Ok(answer(400, b"unreadable body".to_vec()));
    };
    let got = match path.as_str() {
        "/v1/traces" => ExportTraceServiceRequest::decode(body)
            .map(records)
            .map_err(|e| e.to_string()),
        "/api/v2/spans" => zipkin_records(&body),
        _ => return Ok(answer(404, Vec::new())),
    };
    match got {
        Ok(out) => {
            spans.lock().unwrap_or_else(|e| e.into_inner()).extend(out);
            let ok = if path == "/v1/traces" {
                answer(200, ExportTraceServiceResponse::default().encode_to_vec())
            } else {
                answer(202, Vec::new())
            };
            Ok(ok)
        }
        Err(e) => Ok(answer(400, e.into_bytes())),
    }
}

impl Collector {
    /// Starts a collector on a free loopback port.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let spans = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(Sink(spans.clone())))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        let http = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let http_addr = http.local_addr().expect("local address");
        let kept = spans.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = http.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| http_export(req, kept.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Collector {
            addr,
            http_addr,
            spans,
        }
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<SpanRecord> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until `done` holds for the spans received (true) or `limit` passes (false).
    pub async fn wait_for(&self, limit: Duration, done: impl Fn(&[SpanRecord]) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if done(&self.spans()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        done(&self.spans())
    }
}
