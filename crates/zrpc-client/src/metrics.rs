//! Client metrics, registered in `prometheus::default_registry()` (the DevServer of zrpc-server
//! exports that registry next to its own, so client metrics appear on `/metrics` too).
//!
//! go-zero's families (`clientinterceptors/prometheusinterceptor.go`):
//! - `rpc_client_requests_duration_ms{method}`, buckets 1, 2, 5, ..., 5000 ms;
//! - `rpc_client_requests_code_total{method,code}`, numeric code.
//!
//! zrpc addition, per call: `rpc_client_dropped_total{method,reason}`, calls failed locally
//! without being sent: `reason="breaker"` (the client breaker rejected it) or
//! `reason="no_endpoint"` (no endpoint to send it to: an empty set, or none found by the resolver
//! before the call's deadline). Counted once per method and reason, from handles resolved on the
//! method's first call (no allocation per call).
//!
//! zrpc additions, per endpoint of every live client (read from the balancer's atomics at scrape
//! time, nothing is updated per request): `rpc_client_endpoint_lag_ms{target,endpoint}` (EWMA
//! latency), `rpc_client_endpoint_inflight{target,endpoint}`,
//! `rpc_client_endpoint_success{target,endpoint}` (EWMA success score 0..1000) and
//! `rpc_client_endpoint_down{target,endpoint}` (1 while in transport-failure back-off).

use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use parking_lot::Mutex;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

use crate::balancer::service::Shared;

/// go-zero's duration buckets, in milliseconds.
pub const DURATION_BUCKETS_MS: [f64; 12] = [
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2000.0, 5000.0,
];

/// The registry holding the client metrics: `prometheus::default_registry()`.
#[must_use]
pub fn registry() -> &'static Registry {
    prometheus::default_registry()
}

/// The client metric families (handles: clones record into the same series).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientMetrics {
    /// `rpc_client_requests_duration_ms{method}`.
    pub duration_ms: HistogramVec,
    /// `rpc_client_requests_code_total{method,code}`.
    pub code_total: IntCounterVec,
    /// `rpc_client_dropped_total{method,reason}` (zrpc addition): calls failed locally, never
    /// sent; `reason` is [`DropReason::as_str`].
    pub dropped_total: IntCounterVec,
}

/// Why a call was failed locally, without being sent (the `reason` label of
/// `rpc_client_dropped_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DropReason {
    /// The client breaker of the method rejected it (`Unavailable "circuit breaker is open"`).
    Breaker,
    /// No endpoint to send it to (empty set, or the resolver found none in time).
    NoEndpoint,
}

impl DropReason {
    /// The label value: `breaker`, `no_endpoint`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Breaker => "breaker",
            DropReason::NoEndpoint => "no_endpoint",
        }
    }
}

impl ClientMetrics {
    /// Creates the families and registers them in `registry` (a registry of your own, passed to
    /// the client explicitly; the default client uses [`client_metrics`], in the global registry).
    ///
    /// # Errors
    ///
    /// The families are already registered in `registry`.
    pub fn register(registry: &Registry) -> Result<ClientMetrics, prometheus::Error> {
        let duration_ms = HistogramVec::new(
            HistogramOpts::new(
                "rpc_client_requests_duration_ms",
                "rpc client requests duration(ms).",
            )
            .buckets(DURATION_BUCKETS_MS.to_vec()),
            &["method"],
        )?;
        let code_total = IntCounterVec::new(
            Opts::new(
                "rpc_client_requests_code_total",
                "rpc client requests code count.",
            ),
            &["method", "code"],
        )?;
        let dropped_total = IntCounterVec::new(
            Opts::new(
                "rpc_client_dropped_total",
                "rpc client calls failed locally without being sent, by reason.",
            ),
            &["method", "reason"],
        )?;
        registry.register(Box::new(duration_ms.clone()))?;
        registry.register(Box::new(code_total.clone()))?;
        registry.register(Box::new(dropped_total.clone()))?;
        Ok(ClientMetrics {
            duration_ms,
            code_total,
            dropped_total,
        })
    }
}

/// The client metric families in the global registry, registered on first use (go-zero's
/// package-level metrics, exported by the DevServer's `/metrics`).
pub fn client_metrics() -> &'static ClientMetrics {
    static METRICS: OnceLock<ClientMetrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        ClientMetrics::register(registry()).unwrap_or_else(|e| {
            tracing::error!(target: "zrpc::metrics", "cannot register client metrics: {e}");
            let unregistered = Registry::new();
            ClientMetrics::register(&unregistered)
                .unwrap_or_else(|_| unreachable!("static metric options are valid"))
        })
    })
}

/// Live balancers, for the per-endpoint gauges.
fn balancers() -> &'static Mutex<Vec<Weak<Shared>>> {
    static BALANCERS: OnceLock<Mutex<Vec<Weak<Shared>>>> = OnceLock::new();
    BALANCERS.get_or_init(|| {
        if let Err(e) = registry().register(Box::new(EndpointCollector::new())) {
            tracing::error!(target: "zrpc::metrics", "cannot register endpoint gauges: {e}");
        }
        Mutex::new(Vec::new())
    })
}

/// Adds a balancer to the per-endpoint gauges (removed automatically when dropped).
pub(crate) fn track(shared: &Arc<Shared>) {
    let mut list = balancers().lock();
    list.retain(|w| w.strong_count() > 0);
    list.push(Arc::downgrade(shared));
}

struct EndpointCollector {
    lag: GaugeVec,
    inflight: GaugeVec,
    success: GaugeVec,
    down: GaugeVec,
    descs: Vec<Desc>,
}

impl EndpointCollector {
    fn new() -> Self {
        let gauge = |name: &str, help: &str| {
            GaugeVec::new(Opts::new(name, help), &["target", "endpoint"])
                .unwrap_or_else(|_| unreachable!())
        };
        let lag = gauge(
            "rpc_client_endpoint_lag_ms",
            "EWMA latency of the endpoint (ms).",
        );
        let inflight = gauge(
            "rpc_client_endpoint_inflight",
            "requests in flight on the endpoint.",
        );
        let success = gauge(
            "rpc_client_endpoint_success",
            "EWMA success score of the endpoint (0..1000).",
        );
        let down = gauge(
            "rpc_client_endpoint_down",
            "1 while the endpoint is in transport-failure back-off.",
        );
        let descs = [&lag, &inflight, &success, &down]
            .iter()
            .flat_map(|g| g.desc().into_iter().cloned())
            .collect();
        EndpointCollector {
            lag,
            inflight,
            success,
            down,
            descs,
        }
    }
}

impl Collector for EndpointCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        for g in [&self.lag, &self.inflight, &self.success, &self.down] {
            g.reset();
        }
        let live: Vec<Arc<Shared>> = balancers()
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let now = Instant::now();
        for b in live {
            let clock = b.clock();
            for e in b.endpoints().iter() {
                let labels = [&*b.target, &*e.addr];
                let s = &e.stats;
                self.lag.with_label_values(&labels).set(s.lag_nanos() / 1e6);
                self.inflight
                    .with_label_values(&labels)
                    .set(s.inflight() as f64);
                self.success.with_label_values(&labels).set(s.success());
                self.down
                    .with_label_values(&labels)
                    .set(if s.is_down(clock.nanos(now)) {
                        1.0
                    } else {
                        0.0
                    });
            }
        }
        [&self.lag, &self.inflight, &self.success, &self.down]
            .iter()
            .flat_map(|g| g.collect())
            .collect()
    }
}
