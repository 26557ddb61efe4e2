//! Builds the concurrency-limit stage from the config, and its Prometheus gauges.

use std::sync::{Arc, Mutex};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};

use super::Shared;
use super::{LimitSettings, LimitStage};
use crate::conf::RpcServerConf;
use crate::layers::StreamingMethods;

/// The limit stage (off without an enabled `ConcurrencyLimit`), its limits starting now.
pub(crate) fn limit_stage(conf: &RpcServerConf, streaming: &StreamingMethods) -> LimitStage {
    LimitStage::new(
        conf.concurrency_limit_enabled().map(|l| LimitSettings {
            config: l.limit_config(),
            per_method: l.per_method,
            streaming: streaming.clone(),
        }),
        tokio::time::Instant::now().into_std(),
    )
}

/// Gauges of one server's concurrency limits (zrpc additions), read at scrape time, with a
/// const `server` label (the bound address) and a `method` label (`*` for the server's
/// limit).
#[derive(Debug, Clone)]
pub(crate) struct LimitCollector {
    shared: Arc<Shared>,
    limit: GaugeVec,
    inflight: GaugeVec,
    min_rtt_ms: GaugeVec,
    sample_rtt_ms: GaugeVec,
    measuring: GaugeVec,
    // `collect` resets and refills the vectors: two scrapes at once would see each other's
    // empty vectors.
    scrape: Arc<Mutex<()>>,
}

impl LimitCollector {
    pub(crate) fn new(shared: Arc<Shared>, server: &str) -> Option<Self> {
        let g = |name: &str, help: &str| {
            GaugeVec::new(
                Opts::new(name, help).const_label("server", server),
                &["method"],
            )
            .ok()
        };
        Some(Self {
            shared,
            limit: g(
                "rpc_server_concurrency_limit",
                "The adaptive concurrency limit (critical calls; default 3/4 of it, sheddable 1/2).",
            )?,
            inflight: g(
                "rpc_server_concurrency_inflight",
                "Calls admitted by the concurrency limit and not ended.",
            )?,
            min_rtt_ms: g(
                "rpc_server_concurrency_min_rtt_ms",
                "The last measured minimum round-trip time (ms).",
            )?,
            sample_rtt_ms: g(
                "rpc_server_concurrency_sample_rtt_ms",
                "The mean round-trip time of the last sample window (ms).",
            )?,
            measuring: g(
                "rpc_server_concurrency_measuring",
                "1 while the minimum round-trip time is measured.",
            )?,
            scrape: Arc::default(),
        })
    }

    fn gauges(&self) -> [&GaugeVec; 5] {
        [
            &self.limit,
            &self.inflight,
            &self.min_rtt_ms,
            &self.sample_rtt_ms,
            &self.measuring,
        ]
    }

    /// Registers in the zrpc registry.
    pub(crate) fn register(&self) {
        if let Err(e) = crate::metrics::registry().register(Box::new(self.clone())) {
            tracing::warn!(target: "zrpc::metrics", "cannot register concurrency-limit gauges: {e}");
        }
    }

    /// Unregisters (at shutdown).
    pub(crate) fn unregister(&self) {
        let _ = crate::metrics::registry().unregister(Box::new(self.clone()));
    }
}

impl Collector for LimitCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.gauges()
            .into_iter()
            .flat_map(Collector::desc)
            .collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _one_scrape = self
            .scrape
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for g in self.gauges() {
            g.reset();
        }
        let ms = |d: Option<std::time::Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        for (method, l) in self.shared.limits() {
            let s = l.stats();
            let m = [method.as_str()];
            self.limit.with_label_values(&m).set(f64::from(s.limit));
            self.inflight
                .with_label_values(&m)
                .set(f64::from(s.inflight));
            self.min_rtt_ms.with_label_values(&m).set(ms(s.min_rtt));
            self.sample_rtt_ms
                .with_label_values(&m)
                .set(ms(s.sample_rtt));
            self.measuring
                .with_label_values(&m)
                .set(if s.measuring { 1.0 } else { 0.0 });
        }
        self.gauges()
            .into_iter()
            .flat_map(Collector::collect)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_limits_are_exported_per_server_and_method() {
        let conf = RpcServerConf::new("g", "127.0.0.1:1")
            .with_concurrency_limit(crate::conf::ConcurrencyLimitConf::default());
        let stage = limit_stage(&conf, &StreamingMethods::default());
        let shared = stage.shared().expect("on");
        let c = LimitCollector::new(shared, "127.0.0.1:9").expect("gauges");
        c.register();
        let text = crate::metrics::render();
        for line in [
            "rpc_server_concurrency_limit{method=\"*\",server=\"127.0.0.1:9\"} 3",
            "rpc_server_concurrency_inflight{method=\"*\",server=\"127.0.0.1:9\"} 0",
            "rpc_server_concurrency_measuring{method=\"*\",server=\"127.0.0.1:9\"} 1",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        c.unregister();
        assert!(!crate::metrics::render().contains("127.0.0.1:9"));
        // Off without the block.
        let off = limit_stage(
            &RpcServerConf::new("g", "127.0.0.1:1"),
            &StreamingMethods::default(),
        );
        assert!(off.shared().is_none());
    }

    #[tokio::test]
    async fn scrapes_at_the_same_time_each_see_every_series() {
        let conf = RpcServerConf::new("g", "127.0.0.1:1")
            .with_concurrency_limit(crate::conf::ConcurrencyLimitConf::default());
        let shared = limit_stage(&conf, &StreamingMethods::default())
            .shared()
            .expect("on");
        let c = LimitCollector::new(shared, "127.0.0.1:10").expect("gauges");
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
