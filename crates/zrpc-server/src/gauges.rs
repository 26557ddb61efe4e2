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
    // `collect` resets and refills the two vectors it shares between scrapes: two scrapes
    // at once (Prometheus and a person's curl) would see each other's empty vectors.
    scrape: Arc<Mutex<()>>,
}

impl std::fmt::Debug for BreakerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BreakerCollector").finish_non_exhaustive()
    }
}

impl BreakerCollector {
    fn new(registry: &Arc<BreakerRegistry>, label: &str) -> Option<Self> {
        let opts = |name: &str, help: &str| Opts::new(name, help).const_label("registry", label);
        let drop_ratio = GaugeVec::new(
            opts(
                "rpc_server_breaker_drop_ratio",
                "Probability that the method's breaker rejects a request now.",
            ),
            &["method"],
        )
        .ok()?;
        let requests = GaugeVec::new(
            opts(
                "rpc_server_breaker_requests",
                "Requests in the method breaker's 10 s window, by outcome.",
            ),
            &["method", "outcome"],
        )
        .ok()?;
        Some(Self {
            registry: Arc::clone(registry),
            drop_ratio,
            requests,
            scrape: Arc::default(),
        })
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
        let _one_scrape = self
            .scrape
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
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
    let Some(c) = BreakerCollector::new(registry, &label) else {
        return;
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

    #[test]
    fn scrapes_at_the_same_time_each_see_every_series() {
        let reg = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
        reg.get("/g.T/Both").mark_failure(Instant::now());
        let c = BreakerCollector::new(&reg, "both").unwrap();
        let scrapers: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    (0..2000).all(|_| {
                        let families = c.collect();
                        families.len() == 2 && families.iter().all(|f| !f.get_metric().is_empty())
                    })
                })
            })
            .collect();
        for s in scrapers {
            assert!(s.join().unwrap(), "a scrape missed a series");
        }
    }
}
