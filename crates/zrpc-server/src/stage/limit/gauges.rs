//! Builds the concurrency-limit stage from the config, and its Prometheus gauges.

use std::sync::Arc;

use zrpc_core::metrics::ScrapedGauges;

use super::Shared;
use super::{LimitSettings, LimitStage};
use crate::conf::RpcServerConf;

/// The limit stage (off without an enabled `ConcurrencyLimit`), its limits starting now; per
/// method, the `described` methods have one of their own from their first call.
pub(crate) fn limit_stage(conf: &RpcServerConf, described: &[String]) -> LimitStage {
    LimitStage::new(
        conf.concurrency_limit_enabled().map(|l| LimitSettings {
            config: l.limit_config(),
            per_method: l.per_method,
        }),
        described,
        tokio::time::Instant::now().into_std(),
    )
}

/// Gauges of one server's concurrency limits (zrpc additions), read at scrape time, with a
/// const `server` label (the bound address) and a `method` label (`*` for the server's
/// limit).
pub(crate) type LimitCollector = ScrapedGauges<Arc<Shared>>;

/// The gauges of `shared`'s limits, for the server bound at `server`.
pub(crate) fn limit_gauges(shared: Arc<Shared>, server: &str) -> Option<LimitCollector> {
    ScrapedGauges::new(
        shared,
        &[("server", server)],
        &[
            (
                "rpc_server_concurrency_limit",
                "The adaptive concurrency limit (critical calls; default 3/4 of it, sheddable 1/2).",
                &["method"],
            ),
            (
                "rpc_server_concurrency_inflight",
                "Calls admitted by the concurrency limit and not ended.",
                &["method"],
            ),
            (
                "rpc_server_concurrency_min_rtt_ms",
                "The last measured minimum round-trip time (ms).",
                &["method"],
            ),
            (
                "rpc_server_concurrency_sample_rtt_ms",
                "The mean round-trip time of the last sample window (ms).",
                &["method"],
            ),
            (
                "rpc_server_concurrency_measuring",
                "1 while the minimum round-trip time is measured.",
                &["method"],
            ),
        ],
        |shared, gauges| {
            let [limit, inflight, min_rtt, sample_rtt, measuring] = gauges else {
                return;
            };
            let ms = |d: Option<std::time::Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1000.0);
            for (method, l) in shared.limits() {
                let s = l.stats();
                let m = [method.as_str()];
                limit.with_label_values(&m).set(f64::from(s.limit));
                inflight.with_label_values(&m).set(f64::from(s.inflight));
                min_rtt.with_label_values(&m).set(ms(s.min_rtt));
                sample_rtt.with_label_values(&m).set(ms(s.sample_rtt));
                measuring
                    .with_label_values(&m)
                    .set(if s.measuring { 1.0 } else { 0.0 });
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use prometheus::core::Collector;

    use super::*;

    #[tokio::test]
    async fn the_limits_are_exported_per_server_and_method() {
        let conf = RpcServerConf::new("g", "127.0.0.1:1")
            .with_concurrency_limit(crate::conf::ConcurrencyLimitConf::default());
        let stage = limit_stage(&conf, &[]);
        let shared = stage.shared().expect("on");
        let c = limit_gauges(shared, "127.0.0.1:9").expect("gauges");
        crate::metrics::register(&c, "concurrency-limit");
        let text = crate::metrics::render();
        for line in [
            "rpc_server_concurrency_limit{method=\"*\",server=\"127.0.0.1:9\"} 3",
            "rpc_server_concurrency_inflight{method=\"*\",server=\"127.0.0.1:9\"} 0",
            "rpc_server_concurrency_measuring{method=\"*\",server=\"127.0.0.1:9\"} 1",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        crate::metrics::unregister(&c);
        assert!(!crate::metrics::render().contains("127.0.0.1:9"));
        // Off without the block.
        let off = limit_stage(&RpcServerConf::new("g", "127.0.0.1:1"), &[]);
        assert!(off.shared().is_none());
    }

    #[tokio::test]
    async fn scrapes_at_the_same_time_each_see_every_series() {
        let conf = RpcServerConf::new("g", "127.0.0.1:1")
            .with_concurrency_limit(crate::conf::ConcurrencyLimitConf::default());
        let shared = limit_stage(&conf, &[]).shared().expect("on");
        let c = limit_gauges(shared, "127.0.0.1:10").expect("gauges");
        let scrapers: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    (0..2000).all(|_| c.collect().iter().all(|f| !f.get_metric().is_empty()))
                })
            })
            .collect();
        for s in scrapers {
            assert!(s.join().unwrap(), "a scrape missed a series");
        }
    }
}
