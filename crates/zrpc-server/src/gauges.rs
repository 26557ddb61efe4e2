//! Scrape-time gauges of the breaker registry (zrpc additions).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};
use zrpc_core::breaker::BreakerRegistry;

/// `rpc_server_breaker_drop_ratio{method}` and `rpc_server_breaker_requests{method,outcome}`
/// (the window's accepts, failures and drops) of every breaker in a registry, read at
/// scrape time, with a `registry` const label: `global` for the process-wide registry
/// (the default), an id for a server-specific one.
#[derive(Clone)]
struct BreakerCollector {
    // Held for as long as the collector is registered (for good): its address, the key of
    // `register_breakers`, is never reused.
    registry: Arc<BreakerRegistry>,
    drop_ratio: GaugeVec,
    requests: GaugeVec,
}

impl std::fmt::Debug for BreakerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BreakerCollector").finish_non_exhaustive()
    }
}

impl Collector for BreakerCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.drop_ratio
            .desc()
            .into_iter()
            .chain(self.requests.desc())
            .collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let now = Instant::now();
        self.drop_ratio.reset();
        self.requests.reset();
        for name in self.registry.names() {
            let b = self.registry.get(&name);
            self.drop_ratio
                .with_label_values(&[&name])
                .set(b.drop_ratio(now));
            let s = b.stats(now);
            #[allow(clippy::cast_precision_loss)]
            for (outcome, v) in [
                ("accept", s.accepts),
                ("failure", s.failures),
                ("drop", s.drops),
            ] {
                self.requests
                    .with_label_values(&[&name, outcome])
                    .set(v as f64);
            }
        }
        self.drop_ratio
            .collect()
            .into_iter()
            .chain(self.requests.collect())
            .collect()
    }
}

/// Registers the gauges of `registry` in the zrpc registry, once per breaker registry.
pub(crate) fn register_breakers(registry: &Arc<BreakerRegistry>) {
    static DONE: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    let key = Arc::as_ptr(registry) as usize;
    let done = DONE.get_or_init(|| Mutex::new(HashSet::new()));
    if !done.lock().map(|mut d| d.insert(key)).unwrap_or(false) {
        return;
    }
    let global = std::ptr::eq(Arc::as_ptr(registry), BreakerRegistry::global());
    let label = if global {
        "global".to_owned()
    } else {
        format!("{key:x}")
    };
    let opts =
        |name: &str, help: &str| Opts::new(name, help).const_label("registry", label.clone());
    let drop_ratio = GaugeVec::new(
        opts(
            "rpc_server_breaker_drop_ratio",
            "Probability that the method's breaker rejects a request now.",
        ),
        &["method"],
    );
    let requests = GaugeVec::new(
        opts(
            "rpc_server_breaker_requests",
            "Requests in the method breaker's 10 s window, by outcome.",
        ),
        &["method", "outcome"],
    );
    let (Ok(drop_ratio), Ok(requests)) = (drop_ratio, requests) else {
        return;
    };
    let c = BreakerCollector {
        registry: Arc::clone(registry),
        drop_ratio,
        requests,
    };
    if let Err(e) = crate::metrics::registry().register(Box::new(c)) {
        tracing::warn!(target: "zrpc::metrics", "cannot register breaker gauges: {e}");
    }
}

#[cfg(test)]
mod tests {
    use zrpc_core::breaker::BreakerConfig;

    use super::*;

    #[test]
    fn exports_breaker_state_per_method() {
        let reg = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
        let b = reg.get("/g.T/Gauged");
        let now = Instant::now();
        for _ in 0..50 {
            b.mark_failure(now);
        }
        register_breakers(&reg);
        register_breakers(&reg);
        let text = crate::metrics::render();
        assert!(
            text.contains("rpc_server_breaker_requests{method=\"/g.T/Gauged\",outcome=\"failure\""),
            "{text}"
        );
        assert!(
            text.contains("rpc_server_breaker_drop_ratio{method=\"/g.T/Gauged\""),
            "{text}"
        );
    }
}
