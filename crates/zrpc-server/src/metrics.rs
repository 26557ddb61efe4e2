//! zrpc's Prometheus metrics, in `prometheus::default_registry()`: the one registry of both
//! sides (the client's families live there too) and the one most Rust code registers into, so
//! [`render`] and the DevServer's `/metrics` serve zrpc's families with the application's own.
//!
//! Names and labels are go-zero's (`serverinterceptors/prometheusinterceptor.go`):
//! `rpc_server_requests_duration_ms{method}` (buckets 1..5000 ms) and
//! `rpc_server_requests_code_total{method,code}` with the numeric code. zrpc adds (never
//! renames) `rpc_server_dropped_total{method,reason}` for calls rejected before the handler by
//! load protection (`reason` = `breaker`, `shedder`, `limit`, `tier` or `stream_cap`, as the
//! client's `rpc_client_dropped_total` names its own drops), shedder gauges per server
//! (`rpc_server_shedder_*{server}`), concurrency-limit gauges per server and method
//! (`rpc_server_concurrency_*{server,method}`) and breaker gauges per method
//! (`rpc_server_breaker_drop_ratio{method}`, `rpc_server_breaker_requests{method,outcome}`).
//! Streams are recorded in their own families, `rpc_server_streams_duration_ms{method}` and
//! `rpc_server_streams_code_total{method,code}`: go-zero records no streams, and a stream's
//! lifetime in `rpc_server_requests_duration_ms` would skew the latency a mixed Go/Rust fleet's
//! dashboards compare.
//!
//! On Linux zrpc adds the standard process metrics (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds`, `process_start_time_seconds`, ...), read
//! at scrape time ([`process`](self) module docs say why not prometheus's `process` feature).
//!
//! Several servers in one process share these families (go-zero does the same). The handles
//! (`server_metrics`, `registry`) are for zrpc's own crates and tests, outside the API semver
//! covers: the public surface is the families' names and labels (`docs/metrics.md`) and
//! [`render`].

use std::sync::OnceLock;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

#[cfg(target_os = "linux")]
mod process;

#[doc(hidden)]
pub use zrpc_core::metrics::DURATION_BUCKETS_MS;

/// The registry of zrpc's metrics, `prometheus::default_registry()`, with the process metrics
/// added on first use (on Linux).
#[doc(hidden)]
pub fn registry() -> &'static Registry {
    static PROCESS: std::sync::Once = std::sync::Once::new();
    let registry = prometheus::default_registry();
    PROCESS.call_once(|| {
        #[cfg(target_os = "linux")]
        if let Err(e) = registry.register(Box::new(process::ProcessCollector::new())) {
            tracing::error!(target: "zrpc::metrics", "cannot register process metrics: {e}");
        }
    });
    registry
}

/// The server metric families.
#[doc(hidden)]
#[derive(Debug)]
pub struct ServerMetrics {
    /// `rpc_server_requests_duration_ms{method}`.
    pub duration_ms: HistogramVec,
    /// `rpc_server_requests_code_total{method,code}`.
    pub code_total: IntCounterVec,
    /// `rpc_server_dropped_total{method,reason}`: calls rejected before their handler, by
    /// reason: `breaker`, `shedder`, `limit`, `tier`, `stream_cap` (zrpc addition;
    /// `docs/metrics.md`).
    pub dropped_total: IntCounterVec,
    /// `rpc_server_streams_duration_ms{method}`: a stream's lifetime (zrpc addition).
    pub stream_duration_ms: HistogramVec,
    /// `rpc_server_streams_code_total{method,code}` (zrpc addition).
    pub stream_code_total: IntCounterVec,
}

/// The server metric families, registered in [`registry`] on first use.
#[doc(hidden)]
pub fn server_metrics() -> &'static ServerMetrics {
    static METRICS: OnceLock<ServerMetrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let duration_ms = HistogramVec::new(
            HistogramOpts::new(
                "rpc_server_requests_duration_ms",
                "rpc server requests duration(ms).",
            )
            .buckets(DURATION_BUCKETS_MS.to_vec()),
            &["method"],
        );
        let code_total = IntCounterVec::new(
            Opts::new(
                "rpc_server_requests_code_total",
                "rpc server requests code count.",
            ),
            &["method", "code"],
        );
        let dropped_total = IntCounterVec::new(
            Opts::new(
                "rpc_server_dropped_total",
                "rpc server requests rejected before the handler (reason: breaker, shedder, \
                 limit, tier, stream_cap).",
            ),
            &["method", "reason"],
        );
        let stream_duration_ms = HistogramVec::new(
            HistogramOpts::new(
                "rpc_server_streams_duration_ms",
                "rpc server streams duration(ms) (zrpc; go-zero records no streams).",
            )
            .buckets(DURATION_BUCKETS_MS.to_vec()),
            &["method"],
        );
        let stream_code_total = IntCounterVec::new(
            Opts::new(
                "rpc_server_streams_code_total",
                "rpc server streams code count (zrpc; go-zero records no streams).",
            ),
            &["method", "code"],
        );
        // The options are static and valid; a failure here is a programming error caught by tests.
        let (
            Ok(duration_ms),
            Ok(code_total),
            Ok(dropped_total),
            Ok(stream_duration_ms),
            Ok(stream_code_total),
        ) = (
            duration_ms,
            code_total,
            dropped_total,
            stream_duration_ms,
            stream_code_total,
        )
        else {
            unreachable!("static metric options are valid")
        };
        for c in [
            Box::new(duration_ms.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(code_total.clone()),
            Box::new(dropped_total.clone()),
            Box::new(stream_duration_ms.clone()),
            Box::new(stream_code_total.clone()),
        ] {
            if let Err(e) = registry().register(c) {
                tracing::error!(target: "zrpc::metrics", "cannot register server metrics: {e}");
            }
        }
        ServerMetrics {
            duration_ms,
            code_total,
            dropped_total,
            stream_duration_ms,
            stream_code_total,
        }
    })
}

/// Why the server rejected a call before its handler ran: the `reason` label of
/// `rpc_server_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DropReason {
    /// The method's breaker is open (`Unavailable "circuit breaker is open"`).
    Breaker,
    /// The CPU shedder found the server overloaded (`ResourceExhausted "service overloaded"`).
    Shedder,
    /// The concurrency limit was reached (`ResourceExhausted "service overloaded"`).
    Limit,
    /// The call's tier's share of the concurrency limit was reached; a call of a higher tier
    /// would have been admitted (`ResourceExhausted "service overloaded"`).
    Tier,
    /// HTTP/2 refused the stream (`RST_STREAM REFUSED_STREAM`): its connection had
    /// `Transport.MaxConcurrentStreams` streams open. Its method is unknown (`method=""`).
    StreamCap,
}

impl DropReason {
    /// The `reason` label.
    pub(crate) const fn label(self) -> &'static str {
        match self {
            DropReason::Breaker => "breaker",
            DropReason::Shedder => "shedder",
            DropReason::Limit => "limit",
            DropReason::Tier => "tier",
            DropReason::StreamCap => "stream_cap",
        }
    }
}

/// Counts a call to `method` dropped for `reason` in `rpc_server_dropped_total`.
///
/// No allocation but on the first drop of each (method, reason): the counter vector keeps the
/// resolved child, found again by a hash of the two label values under a read lock. (A
/// per-method handle cached in the layers would save that lookup, but the breaker registry and
/// the shedder live in `zrpc-core`, and a second table keyed by method would cost the same.)
pub(crate) fn count_drop(method: &str, reason: &str) {
    server_metrics()
        .dropped_total
        .with_label_values(&[method, reason])
        .inc();
}

/// Registers `gauges` (scrape-time collectors) in [`registry`]; `what` names them in the
/// warning when they cannot be.
pub(crate) fn register<C: prometheus::core::Collector + Clone + 'static>(gauges: &C, what: &str) {
    if let Err(e) = registry().register(Box::new(gauges.clone())) {
        tracing::warn!(target: "zrpc::metrics", "cannot register {what} gauges: {e}");
    }
}

/// Unregisters `gauges` (a server's, at its shutdown).
pub(crate) fn unregister<C: prometheus::core::Collector + Clone + 'static>(gauges: &C) {
    let _ = registry().unregister(Box::new(gauges.clone()));
}

/// Renders every metric of the process's registry (`prometheus::default_registry()`: zrpc's
/// server and client families, the process metrics and the application's own) in the
/// Prometheus text format, as the DevServer's `/metrics` serves them.
pub fn render() -> String {
    let families = registry().gather();
    let mut out = String::new();
    if let Err(e) = prometheus::TextEncoder::new().encode_utf8(&families, &mut out) {
        tracing::error!(target: "zrpc::metrics", "cannot encode metrics: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_have_go_zero_names() {
        let m = server_metrics();
        m.duration_ms.with_label_values(&["/t.T/M"]).observe(3.0);
        m.code_total.with_label_values(&["/t.T/M", "0"]).inc();
        let text = render();
        assert!(
            text.contains("rpc_server_requests_duration_ms_bucket{method=\"/t.T/M\",le=\"5\"} 1")
        );
        assert!(text.contains("rpc_server_requests_code_total{code=\"0\",method=\"/t.T/M\"} 1"));
    }

    #[test]
    fn drops_are_counted_by_method_and_reason() {
        count_drop("/t.D/M", DropReason::Breaker.label());
        count_drop("/t.D/M", DropReason::Shedder.label());
        count_drop("/t.D/M", DropReason::Shedder.label());
        count_drop("/t.D/M", DropReason::Tier.label());
        let text = render();
        assert!(
            text.contains("rpc_server_dropped_total{method=\"/t.D/M\",reason=\"breaker\"} 1"),
            "{text}"
        );
        assert!(text.contains("rpc_server_dropped_total{method=\"/t.D/M\",reason=\"shedder\"} 2"));
        assert!(text.contains("rpc_server_dropped_total{method=\"/t.D/M\",reason=\"tier\"} 1"));
    }
}
