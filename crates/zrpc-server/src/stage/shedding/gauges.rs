//! Builds the shedding stage from the config, and its Prometheus gauges.

use std::sync::Arc;
use std::time::Instant;

use zrpc_core::cpu::{CpuUsage, system_cpu};
use zrpc_core::metrics::ScrapedGauges;
use zrpc_core::shedder::{AdaptiveShedder, ShedderConfig};

use super::{SheddingSettings, SheddingStage};
use crate::conf::RpcServerConf;

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

pub(crate) fn shedding_stage(shedder: Option<&Arc<AdaptiveShedder>>) -> SheddingStage {
    SheddingStage::new(shedder.map(|s| SheddingSettings { shedder: s.clone() }))
}

/// Gauges of one server's shedder (zrpc additions), read at scrape time, with a const
/// `server` label (the bound address) so several servers in one process can coexist.
pub(crate) type ShedderCollector = ScrapedGauges<Arc<AdaptiveShedder>>;

/// The gauges of `shedder`, for the server bound at `server`.
pub(crate) fn shedder_gauges(
    shedder: Arc<AdaptiveShedder>,
    server: &str,
) -> Option<ShedderCollector> {
    ScrapedGauges::new(
        shedder,
        &[("server", server)],
        &[
            (
                "rpc_server_shedder_cpu_millicpu",
                "CPU usage seen by the shedder (millicpu).",
                &[],
            ),
            (
                "rpc_server_shedder_inflight",
                "Requests in flight counted by the shedder.",
                &[],
            ),
            (
                "rpc_server_shedder_max_flight",
                "Estimated capacity in requests in flight (Little's law).",
                &[],
            ),
            (
                "rpc_server_shedder_min_rt_ms",
                "Lowest bucket-average response time of the window (ms).",
                &[],
            ),
            (
                "rpc_server_shedder_hot",
                "1 while the CPU is over the threshold or cooling off.",
                &[],
            ),
        ],
        |shedder, gauges| {
            let [cpu, inflight, max_flight, min_rt, hot] = gauges else {
                return;
            };
            let s = shedder.stats(Instant::now());
            #[allow(clippy::cast_precision_loss)]
            {
                cpu.with_label_values(&[] as &[&str]).set(s.cpu as f64);
                inflight
                    .with_label_values(&[] as &[&str])
                    .set(s.flying as f64);
            }
            max_flight
                .with_label_values(&[] as &[&str])
                .set(s.max_flight);
            min_rt
                .with_label_values(&[] as &[&str])
                .set(s.min_rt.as_secs_f64() * 1000.0);
            hot.with_label_values(&[] as &[&str])
                .set(if s.hot { 1.0 } else { 0.0 });
        },
    )
}
