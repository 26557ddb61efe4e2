//! Scrape-time gauges of the breaker registry (zrpc additions).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use zrpc_core::breaker::BreakerRegistry;
use zrpc_core::metrics::ScrapedGauges;

/// `rpc_server_breaker_drop_ratio{method}` and `rpc_server_breaker_requests{method,outcome}`
/// (the window's accepts, failures and drops) of every breaker in a registry, read at
/// scrape time, with a `registry` const label: `global` for the process-wide registry
/// (the default), an id for a server-specific one.
fn breaker_gauges(
    registry: &Arc<BreakerRegistry>,
    label: &str,
) -> Option<ScrapedGauges<Arc<BreakerRegistry>>> {
    ScrapedGauges::new(
        // Held for as long as the gauges are registered (for good): the registry's address,
        // the key of `register_breakers`, is never reused.
        Arc::clone(registry),
        &[("registry", label)],
        &[
            (
                "rpc_server_breaker_drop_ratio",
                "Probability that the method's breaker rejects a request now.",
                &["method"],
            ),
            (
                "rpc_server_breaker_requests",
                "Requests in the method breaker's 10 s window, by outcome.",
                &["method", "outcome"],
            ),
        ],
        |registry, gauges| {
            let [drop_ratio, requests] = gauges else {
                return;
            };
            let now = Instant::now();
            for name in registry.names() {
                let b = registry.get(&name);
                drop_ratio
                    .with_label_values(&[&name])
                    .set(b.drop_ratio(now));
                let s = b.stats(now);
                #[allow(clippy::cast_precision_loss)]
                for (outcome, v) in [
                    ("accept", s.accepts),
                    ("failure", s.failures),
                    ("drop", s.drops),
                ] {
                    requests.with_label_values(&[&name, outcome]).set(v as f64);
                }
            }
        },
    )
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
    if let Some(gauges) = breaker_gauges(registry, &label) {
        crate::metrics::register(&gauges, "breaker");
    }
}

#[cfg(test)]
mod tests {
    use prometheus::core::Collector;

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
        let c = breaker_gauges(&reg, "both").unwrap();
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
