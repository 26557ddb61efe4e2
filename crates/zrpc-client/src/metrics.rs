//! Client metrics, registered in `prometheus::default_registry()`, the one registry of both sides
//! (the DevServer of zrpc-server serves it on `/metrics`). The handles (`client_metrics`,
//! `registry`, `ClientMetrics`) are for zrpc's own crates and tests, outside the API semver
//! covers: the public surface is the families' names and labels (`docs/metrics.md`).
//!
//! go-zero's families (`clientinterceptors/prometheusinterceptor.go`):
//! - `rpc_client_requests_duration_ms{method}`, buckets 1, 2, 5, ..., 5000 ms;
//! - `rpc_client_requests_code_total{method,code}`, numeric code.
//!
//! go-zero records unary calls only (its client stream interceptors record no metrics), so
//! streaming calls go to zrpc's own families, named as the server's: `rpc_client_streams_duration_ms{method}`
//! (the stream's lifetime) and `rpc_client_streams_code_total{method,code}`. A call is a stream
//! when its method is declared streaming ([`declare_streaming_methods`]; health `Watch` and
//! reflection are known): tonic's generated client sends the four kinds alike (same path, same
//! `GrpcMethod` extension, a request body of one message or many with no size hint), so the
//! method's kind is known only from its proto, as on the server.
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

use std::collections::HashSet;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

use zrpc_core::metrics::ScrapedGauges;

use crate::balancer::service::Shared;

#[doc(hidden)]
pub use zrpc_core::metrics::DURATION_BUCKETS_MS;

/// The registry holding the client metrics: `prometheus::default_registry()`.
#[doc(hidden)]
#[must_use]
pub fn registry() -> &'static Registry {
    prometheus::default_registry()
}

/// The client metric families (handles: clones record into the same series).
#[doc(hidden)]
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
    /// `rpc_client_streams_duration_ms{method}` (zrpc addition): a streaming call's lifetime.
    pub stream_duration_ms: HistogramVec,
    /// `rpc_client_streams_code_total{method,code}` (zrpc addition).
    pub stream_code_total: IntCounterVec,
    /// `rpc_client_attempts_total{method,kind}` (zrpc addition): attempts of calls with a retry
    /// or hedging policy, `kind` one of `first`, `retry`, `hedge`.
    pub attempts_total: IntCounterVec,
    /// `rpc_client_retry_budget_exhausted_total{method}` (zrpc addition): retries and hedges
    /// not made because the client's retry budget was spent.
    pub retry_budget_exhausted_total: IntCounterVec,
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
        let stream_duration_ms = HistogramVec::new(
            HistogramOpts::new(
                "rpc_client_streams_duration_ms",
                "rpc client streams duration(ms) (zrpc; go-zero records no streams).",
            )
            .buckets(DURATION_BUCKETS_MS.to_vec()),
            &["method"],
        )?;
        let stream_code_total = IntCounterVec::new(
            Opts::new(
                "rpc_client_streams_code_total",
                "rpc client streams code count (zrpc; go-zero records no streams).",
            ),
            &["method", "code"],
        )?;
        let attempts_total = IntCounterVec::new(
            Opts::new(
                "rpc_client_attempts_total",
                "attempts of calls with a retry or hedging policy, by kind (first, retry, hedge)",
            ),
            &["method", "kind"],
        )?;
        let retry_budget_exhausted_total = IntCounterVec::new(
            Opts::new(
                "rpc_client_retry_budget_exhausted_total",
                "retries or hedges not made because the client's retry budget was spent",
            ),
            &["method"],
        )?;
        registry.register(Box::new(duration_ms.clone()))?;
        registry.register(Box::new(code_total.clone()))?;
        registry.register(Box::new(dropped_total.clone()))?;
        registry.register(Box::new(stream_duration_ms.clone()))?;
        registry.register(Box::new(stream_code_total.clone()))?;
        registry.register(Box::new(attempts_total.clone()))?;
        registry.register(Box::new(retry_budget_exhausted_total.clone()))?;
        Ok(ClientMetrics {
            duration_ms,
            code_total,
            dropped_total,
            stream_duration_ms,
            stream_code_total,
            attempts_total,
            retry_budget_exhausted_total,
        })
    }
}

/// The streaming methods of the health and reflection services (what zrpc's server serves).
const INFRA_STREAMS: [&str; 3] = [
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

fn streaming() -> &'static RwLock<HashSet<Box<str>>> {
    static STREAMING: OnceLock<RwLock<HashSet<Box<str>>>> = OnceLock::new();
    STREAMING.get_or_init(|| RwLock::new(INFRA_STREAMS.iter().map(|m| Box::from(*m)).collect()))
}

/// Declares streaming methods (`/pkg.Service/Method`: server-, client- or bidi-streaming), so
/// that every client of this process records their calls in `rpc_client_streams_*` rather than
/// go-zero's unary families (the server's `Server::streaming_method`, for the client side).
///
/// Process-wide, since a method's kind is a property of its proto. Declare before the first
/// call: a client resolves a method's families on its first call of it and keeps them. Health
/// `Watch` and reflection are known without a declaration.
///
/// # Examples
///
/// ```
/// zrpc_client::metrics::declare_streaming_methods(["/greeter.Greeter/SayHelloStream"]);
/// assert!(zrpc_client::metrics::is_streaming_method("/greeter.Greeter/SayHelloStream"));
/// ```
pub fn declare_streaming_methods<I, S>(methods: I)
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut set = streaming().write();
    set.extend(methods.into_iter().map(|m| m.into().into_boxed_str()));
}

/// Whether `full_method` is a declared (or built-in) streaming method. Read once per method and
/// client, on the method's first call.
#[must_use]
pub fn is_streaming_method(full_method: &str) -> bool {
    streaming().read().contains(full_method)
}

/// The client metric families in the global registry, registered on first use (go-zero's
/// package-level metrics, exported by the DevServer's `/metrics`).
#[doc(hidden)]
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
        if let Err(e) = registry().register(Box::new(endpoint_gauges())) {
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

/// `rpc_client_endpoint_*{target,endpoint}` of every live balancer, read at scrape time.
fn endpoint_gauges() -> ScrapedGauges<()> {
    let labels: &[&str] = &["target", "endpoint"];
    ScrapedGauges::new(
        (),
        &[],
        &[
            (
                "rpc_client_endpoint_lag_ms",
                "EWMA latency of the endpoint (ms).",
                labels,
            ),
            (
                "rpc_client_endpoint_inflight",
                "requests in flight on the endpoint.",
                labels,
            ),
            (
                "rpc_client_endpoint_success",
                "EWMA success score of the endpoint (0..1000).",
                labels,
            ),
            (
                "rpc_client_endpoint_down",
                "1 while the endpoint is in transport-failure back-off.",
                labels,
            ),
        ],
        |(), gauges| {
            let [lag, inflight, success, down] = gauges else {
                return;
            };
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
                    lag.with_label_values(&labels).set(s.lag_nanos() / 1e6);
                    #[allow(clippy::cast_precision_loss)]
                    inflight.with_label_values(&labels).set(s.inflight() as f64);
                    success.with_label_values(&labels).set(s.success());
                    down.with_label_values(&labels)
                        .set(if s.is_down(clock.nanos(now)) {
                            1.0
                        } else {
                            0.0
                        });
                }
            }
        },
    )
    .unwrap_or_else(|| unreachable!("static metric options are valid"))
}

#[cfg(test)]
mod tests {
    use prometheus::core::Collector;

    use super::*;
    use crate::balancer::endpoint::ConnectOptions;
    use crate::balancer::service::Balancer;
    use crate::conf::BalancerName;
    use crate::resolver::ResolverStatus;

    #[tokio::test]
    async fn scrapes_at_the_same_time_each_see_every_series() {
        let (_tx, rx) = tokio::sync::watch::channel(Some(Arc::new(vec!["127.0.0.1:9".to_owned()])));
        let b = Balancer::with_status(
            Arc::from("direct:///127.0.0.1:9"),
            BalancerName::P2cEwma,
            rx,
            ConnectOptions::default(),
            1,
            ResolverStatus::default(),
            None,
        );
        track(&b.shared);
        let c = Arc::new(endpoint_gauges());
        let scrapers: Vec<_> = (0..4)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    (0..2000).all(|_| {
                        let families = c.collect();
                        families.len() == 4 && families.iter().all(|f| !f.get_metric().is_empty())
                    })
                })
            })
            .collect();
        for s in scrapers {
            assert!(s.join().unwrap(), "a scrape missed a series");
        }
    }
}
