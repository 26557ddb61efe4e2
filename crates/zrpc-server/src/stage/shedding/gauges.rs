//! Builds the shedding stage from the config, and its Prometheus gauges.

use std::sync::Arc;
use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Gauge, Opts};
use zrpc_core::cpu::{CpuUsage, system_cpu};
use zrpc_core::shedder::{AdaptiveShedder, ShedderConfig};

use super::{SheddingSettings, SheddingStage};
use crate::conf::RpcServerConf;
use crate::layers::StreamingMethods;

/// The server's shedder (`None` when `CpuThreshold` is 0), reading `cpu` (`None` = the
/// process-wide sampler).
pub(crate) fn shedder(
    conf: &RpcServerConf,
    cpu: Option<Arc<dyn CpuUsage>>,
) -> Option<Arc<AdaptiveShedder>> {
    if conf.cpu_threshold == 0 {
        return None;
    }
    let mut cfg = ShedderConfig::default();
    cfg.cpu_threshold = conf.cpu_threshold;
    let cpu = cpu.unwrap_or_else(system_cpu);
    Some(Arc::new(AdaptiveShedder::new(cfg, cpu)))
}

pub(crate) fn shedding_stage(
    shedder: Option<&Arc<AdaptiveShedder>>,
    streaming: &StreamingMethods,
) -> SheddingStage {
    SheddingStage::new(shedder.map(|s| SheddingSettings {
        shedder: s.clone(),
        streaming: streaming.clone(),
    }))
}

/// Gauges of one server's shedder (zrpc additions), read at scrape time, with a const
/// `server` label (the bound address) so several servers in one process can coexist.
#[derive(Debug, Clone)]
pub(crate) struct ShedderCollector {
    shedder: Arc<AdaptiveShedder>,
    cpu: Gauge,
    inflight: Gauge,
    max_flight: Gauge,
    min_rt_ms: Gauge,
    hot: Gauge,
}

impl ShedderCollector {
    pub(crate) fn new(shedder: Arc<AdaptiveShedder>, server: &str) -> Option<Self> {
        let g = |name: &str, help: &str| {
            Gauge::with_opts(Opts::new(name, help).const_label("server", server)).ok()
        };
        Some(Self {
            shedder,
            cpu: g(
                "rpc_server_shedder_cpu_millicpu",
                "CPU usage seen by the shedder (millicpu).",
            )?,
            inflight: g(
                "rpc_server_shedder_inflight",
                "Requests in flight counted by the shedder.",
            )?,
            max_flight: g(
                "rpc_server_shedder_max_flight",
                "Estimated capacity in requests in flight (Little's law).",
            )?,
            min_rt_ms: g(
                "rpc_server_shedder_min_rt_ms",
                "Lowest bucket-average response time of the window (ms).",
            )?,
            hot: g(
                "rpc_server_shedder_hot",
                "1 while the CPU is over the threshold or cooling off.",
            )?,
        })
    }

    fn gauges(&self) -> [&Gauge; 5] {
        [
            &self.cpu,
            &self.inflight,
            &self.max_flight,
            &self.min_rt_ms,
            &self.hot,
        ]
    }

    /// Registers in the zrpc registry.
    pub(crate) fn register(&self) {
        if let Err(e) = crate::metrics::registry().register(Box::new(self.clone())) {
            tracing::warn!(target: "zrpc::metrics", "cannot register shedder gauges: {e}");
        }
    }

    /// Unregisters (at shutdown).
    pub(crate) fn unregister(&self) {
        let _ = crate::metrics::registry().unregister(Box::new(self.clone()));
    }
}

impl Collector for ShedderCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.gauges()
            .into_iter()
            .flat_map(Collector::desc)
            .collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let s = self.shedder.stats(Instant::now());
        #[allow(clippy::cast_precision_loss)]
        {
            self.cpu.set(s.cpu as f64);
            self.inflight.set(s.flying as f64);
        }
        self.max_flight.set(s.max_flight);
        self.min_rt_ms.set(s.min_rt.as_secs_f64() * 1000.0);
        self.hot.set(if s.hot { 1.0 } else { 0.0 });
        self.gauges()
            .into_iter()
            .flat_map(Collector::collect)
            .collect()
    }
}
