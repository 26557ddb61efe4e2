//! CPU usage of the process's container (or host), in millicpu (0..=1000).
//!
//! Port of go-zero's `core/stat/usage.go` and `core/stat/internal/{cpu_linux,cgroup_linux}.go`:
//!
//! - A background thread refreshes the value every **250 ms** and smooths it with an exponential
//!   moving average, `cpu = cpu * 0.95 + current * 0.05` (about a 5 s average).
//! - `current` is the CPU time used by the cgroup since the previous refresh, divided by the wall time
//!   elapsed (measured, like go-zero, from the host's `/proc/stat` `cpu` line) and by the CPU limit,
//!   times 1000, capped at 1000. The limit is the cgroup quota (`cpu.max` on cgroup v2,
//!   `cpu.cfs_quota_us / cpu.cfs_period_us` on v1) when it is below the number of CPUs in the cpuset
//!   (`cpuset.cpus.effective` / `cpuset.cpus`).
//! - Without a usable cgroup the host-wide busy fraction from `/proc/stat` is used; without
//!   `/proc/stat` (non-Linux) the usage stays 0, so CPU-triggered shedding never fires (as in go-zero).
//! - **zrpc addition:** when the process may run on only some of the online CPUs (`taskset`,
//!   `numactl`, `sched_setaffinity`: `Cpus_allowed_list` in `/proc/self/status`, read at every
//!   refresh), the busy fraction of those CPUs (their `cpuN` lines in `/proc/stat`, whoever keeps
//!   them busy) is measured too, and `current` is the higher of the two figures. An unpinned
//!   process reads exactly go-zero's figure.
//!
//! Differences from go-zero, on purpose: go-zero scales by the number of CPUs in the cpuset while
//! measuring wall time across *all* host CPUs, which under-reports usage in a pinned cpuset smaller
//! than the host; here wall time is divided by the host CPU count from `/proc/stat`. The cgroup
//! directory of the process (from `/proc/self/cgroup`) is used when it exists, falling back to the
//! cgroup root as go-zero does. The smoothed value is kept as an `f64` rather than truncated to an
//! integer at every step. A server pinned to some of the CPUs reads their busy fraction as well
//! (above): go-zero reads only the container's (or host's) usage over all of its CPUs, so a server
//! pinned to one core of two that has saturated its core reads 50% and never sheds, however long
//! its queue grows (`zrpc-bench shed` shows both).
//!
//! The source is injectable: everything that needs CPU usage takes an `Arc<dyn CpuUsage>`, so tests
//! use [`FixedCpu`] and production uses [`system_cpu()`].

mod parse;
mod sampler;

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Full usage of the CPU limit, in millicpu.
pub const CPU_MAX: u64 = 1000;

/// How often the system sampler refreshes (go-zero: 250 ms).
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(250);

/// Weight of the previous value in the sampler's moving average (go-zero: 0.95).
pub const SMOOTHING_BETA: f64 = 0.95;

/// A source of CPU usage in millicpu: 0 is idle, 1000 is the whole CPU limit in use.
pub trait CpuUsage: Send + Sync + Debug {
    /// The current usage in millicpu, `0..=1000`. Must be cheap (an atomic load): it is read on the
    /// request path.
    fn millicpu(&self) -> u64;
}

/// A CPU usage value set by hand, for tests and for switching CPU-based shedding off.
///
/// # Examples
///
/// ```
/// use zrpc_core::cpu::{CpuUsage, FixedCpu};
///
/// let cpu = FixedCpu::new(950);
/// assert_eq!(cpu.millicpu(), 950);
/// cpu.set(100);
/// assert_eq!(cpu.millicpu(), 100);
/// ```
#[derive(Debug, Default)]
pub struct FixedCpu {
    value: AtomicU64,
}

impl FixedCpu {
    /// A source that reports `millicpu` (capped at [`CPU_MAX`]).
    #[must_use]
    pub fn new(millicpu: u64) -> Self {
        FixedCpu {
            value: AtomicU64::new(millicpu.min(CPU_MAX)),
        }
    }

    /// Changes the reported value (capped at [`CPU_MAX`]).
    pub fn set(&self, millicpu: u64) {
        self.value.store(millicpu.min(CPU_MAX), Ordering::Relaxed);
    }
}

impl CpuUsage for FixedCpu {
    fn millicpu(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// The process-wide CPU sampler, started on first call (one `zrpc-cpu` thread, refreshing every
/// 250 ms). Later calls return the same sampler.
///
/// On systems without `/proc/stat` no thread is started and the usage stays 0.
#[must_use]
pub fn system_cpu() -> Arc<dyn CpuUsage> {
    static SYSTEM: OnceLock<Arc<sampler::SystemCpu>> = OnceLock::new();
    let cpu: Arc<dyn CpuUsage> = SYSTEM.get_or_init(sampler::SystemCpu::start).clone();
    cpu
}

#[cfg(test)]
mod tests;
