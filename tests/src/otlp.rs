//! A small OTLP/gRPC trace collector on `127.0.0.1:0` (opentelemetry-proto's generated tonic
//! service): it keeps every span it is sent, for tests that follow one trace across processes.

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
    /// Where exporters send (`Telemetry.Endpoint`).
    pub addr: SocketAddr,
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
        let mut out = Vec::new();
        for rs in req.into_inner().resource_spans {
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
        self.0.lock().unwrap_or_else(|e| e.into_inner()).extend(out);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
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
        Collector { addr, spans }
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
