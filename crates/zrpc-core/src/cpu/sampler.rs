//! Where the usage comes from (cgroup v2, cgroup v1, host) and the refreshing thread.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::parse::{self, ProcCgroup, ProcStat, Ticks};
use super::{CPU_MAX, CpuUsage, REFRESH_INTERVAL, SMOOTHING_BETA};

/// Nanoseconds per USER_HZ tick (go-zero assumes 100 ticks per second).
const NANOS_PER_TICK: f64 = 1e9 / 100.0;

/// Where the process's CPU time is read from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    /// cgroup v2: `cpu.stat` (`usage_usec`) in this directory.
    V2 { dir: PathBuf },
    /// cgroup v1: `cpuacct.usage` in this directory.
    V1 { cpuacct: PathBuf },
    /// No cgroup: the host's busy fraction from `/proc/stat`.
    Host,
}

/// Reads the files and turns two readings into a usage figure.
#[derive(Debug)]
pub(crate) struct Sampler {
    pub(crate) source: Source,
    /// The CPU limit in CPUs (min of quota and cpuset size).
    pub(crate) limit: f64,
    proc_stat: PathBuf,
    /// `/proc/self/status`, whose `Cpus_allowed_list` says which CPUs the process may run on.
    proc_status: PathBuf,
    /// The CPUs the process could run on at the last reading (`None`: unknown).
    pub(crate) allowed: Option<Vec<u32>>,
    /// Bumped whenever `allowed` changes: sums over two different sets of CPUs are not compared.
    allowed_epoch: u32,
    prev: Option<Reading>,
}

#[derive(Debug, Clone, Copy)]
struct Reading {
    stat: ProcStat,
    cgroup_ns: Option<u64>,
    allowed_epoch: u32,
}

fn read(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// `root/path` when that directory exists (the process's own cgroup), else `root` (go-zero's
/// container assumption).
fn cgroup_dir(root: &Path, path: Option<&str>, probe: &str) -> PathBuf {
    if let Some(p) = path {
        let dir = root.join(p.trim_start_matches('/'));
        if dir.join(probe).exists() {
            return dir;
        }
    }
    root.to_path_buf()
}

impl Sampler {
    /// Detects the source from the cgroup mount `root` (`/sys/fs/cgroup`), the contents of
    /// `/proc/self/cgroup` and the paths of `/proc/stat` and `/proc/self/status`. `None` when
    /// `/proc/stat` is unreadable.
    pub(crate) fn detect(
        root: &Path,
        proc_cgroup: &str,
        proc_stat: &Path,
        proc_status: &Path,
    ) -> Option<Sampler> {
        let stat = parse::proc_stat(&read(proc_stat)?, None)?;
        let host_cpus = f64::from(stat.cpus);
        let cg: ProcCgroup = parse::proc_cgroup(proc_cgroup);
        let (source, quota, cpuset) = if root.join("cgroup.controllers").exists() {
            let dir = cgroup_dir(root, cg.unified.as_deref(), "cpu.stat");
            let quota = read(&dir.join("cpu.max")).and_then(|t| parse::cpu_max(&t));
            let cpuset =
                read(&dir.join("cpuset.cpus.effective")).and_then(|t| parse::cpu_list_count(&t));
            (Source::V2 { dir }, quota, cpuset)
        } else if cg.v1_path("cpuacct").is_some() || root.join("cpuacct").exists() {
            let v1 =
                |ctrl: &str, probe: &str| cgroup_dir(&root.join(ctrl), cg.v1_path(ctrl), probe);
            let cpu = v1("cpu", "cpu.cfs_quota_us");
            let quota = match (
                read(&cpu.join("cpu.cfs_quota_us")),
                read(&cpu.join("cpu.cfs_period_us")),
            ) {
                (Some(q), Some(p)) => parse::cfs_quota(&q, &p),
                _ => None,
            };
            let cpuset_dir = v1("cpuset", "cpuset.cpus");
            let cpuset = read(&cpuset_dir.join("cpuset.cpus"))
                .or_else(|| read(&cpuset_dir.join("cpuset.effective_cpus")))
                .and_then(|t| parse::cpu_list_count(&t));
            let cpuacct = v1("cpuacct", "cpuacct.usage");
            (Source::V1 { cpuacct }, quota, cpuset)
        } else {
            (Source::Host, None, None)
        };
        let cores = cpuset.map_or(host_cpus, f64::from);
        let limit = quota.map_or(cores, |q| q.min(cores)).max(0.01);
        let mut sampler = Sampler {
            source,
            limit,
            proc_stat: proc_stat.to_path_buf(),
            proc_status: proc_status.to_path_buf(),
            allowed: None,
            allowed_epoch: 0,
            prev: None,
        };
        // A cgroup whose usage file is unreadable is useless: fall back to the host.
        if sampler.source != Source::Host && sampler.cgroup_ns().is_none() {
            sampler.source = Source::Host;
            sampler.limit = host_cpus;
        }
        sampler.prev = sampler.reading();
        Some(sampler)
    }

    fn cgroup_ns(&self) -> Option<u64> {
        match &self.source {
            Source::V2 { dir } => parse::cpu_stat_usage_ns(&read(&dir.join("cpu.stat"))?),
            Source::V1 { cpuacct } => {
                parse::cpuacct_usage_ns(&read(&cpuacct.join("cpuacct.usage"))?)
            }
            Source::Host => None,
        }
    }

    /// Reads the files once. The allowed CPUs are read every time: `taskset -p` can change them
    /// while the process runs.
    fn reading(&mut self) -> Option<Reading> {
        let allowed = read(&self.proc_status).and_then(|t| parse::cpus_allowed(&t));
        if allowed != self.allowed {
            self.allowed = allowed;
            self.allowed_epoch = self.allowed_epoch.wrapping_add(1);
        }
        let stat = parse::proc_stat(&read(&self.proc_stat)?, self.allowed.as_deref())?;
        let cgroup_ns = match self.source {
            Source::Host => None,
            _ => Some(self.cgroup_ns()?),
        };
        Some(Reading {
            stat,
            cgroup_ns,
            allowed_epoch: self.allowed_epoch,
        })
    }

    /// The usage in millicpu since the previous call (0 when nothing can be read or no time passed).
    pub(crate) fn sample(&mut self) -> u64 {
        let Some(cur) = self.reading() else {
            return 0;
        };
        let usage = self.prev.map_or(0, |prev| usage(prev, cur, self.limit));
        self.prev = Some(cur);
        usage
    }
}

/// The busy fraction of a set of CPUs between two readings of its ticks.
fn busy(prev: Ticks, cur: Ticks) -> Option<f64> {
    let total = cur.total.saturating_sub(prev.total);
    let idle = cur.idle.saturating_sub(prev.idle);
    (total > 0).then(|| total.saturating_sub(idle) as f64 / total as f64)
}

/// Millicpu between two readings: the cgroup's (or host's) figure, or the busy fraction of the
/// CPUs the process is pinned to when that is higher.
fn usage(prev: Reading, cur: Reading, limit: f64) -> u64 {
    let total = cur.stat.total.saturating_sub(prev.stat.total);
    if total == 0 {
        return 0;
    }
    let pinned = match (prev.stat.allowed, cur.stat.allowed) {
        (Some(p), Some(c)) if prev.allowed_epoch == cur.allowed_epoch => busy(p, c),
        _ => None,
    };
    let fraction = match (prev.cgroup_ns, cur.cgroup_ns) {
        (Some(p), Some(c)) => {
            // Wall time per CPU: all host ticks / host CPUs.
            let wall_ns = total as f64 * NANOS_PER_TICK / f64::from(cur.stat.cpus);
            c.saturating_sub(p) as f64 / wall_ns / limit
        }
        _ => {
            let idle = cur.stat.idle.saturating_sub(prev.stat.idle);
            total.saturating_sub(idle) as f64 / total as f64
        }
    };
    let fraction = pinned.map_or(fraction, |p| p.max(fraction));
    ((fraction * CPU_MAX as f64).round() as u64).min(CPU_MAX)
}

/// Applies go-zero's smoothing to the stored value (f64 bits).
pub(crate) fn smooth(prev: f64, cur: u64) -> f64 {
    prev * SMOOTHING_BETA + cur as f64 * (1.0 - SMOOTHING_BETA)
}

/// The process-wide sampler: a thread writes, readers load an atomic.
#[derive(Debug, Default)]
pub(crate) struct SystemCpu {
    bits: AtomicU64,
}

impl SystemCpu {
    /// Detects the source and starts the refresh thread (none when nothing can be read).
    pub(crate) fn start() -> Arc<SystemCpu> {
        let cpu = Arc::new(SystemCpu::default());
        let proc_cgroup = read(Path::new("/proc/self/cgroup")).unwrap_or_default();
        let Some(mut sampler) = Sampler::detect(
            Path::new("/sys/fs/cgroup"),
            &proc_cgroup,
            Path::new("/proc/stat"),
            Path::new("/proc/self/status"),
        ) else {
            tracing::info!("cpu usage unavailable (no /proc/stat): CPU-based shedding is off");
            return cpu;
        };
        tracing::debug!(
            source = ?sampler.source,
            limit = sampler.limit,
            allowed_cpus = ?sampler.allowed,
            "cpu sampler started"
        );
        let weak = Arc::downgrade(&cpu);
        let spawned = std::thread::Builder::new()
            .name("zrpc-cpu".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(REFRESH_INTERVAL);
                    let Some(cpu) = weak.upgrade() else { return };
                    let cur = sampler.sample();
                    let prev = f64::from_bits(cpu.bits.load(Ordering::Relaxed));
                    cpu.bits
                        .store(smooth(prev, cur).to_bits(), Ordering::Relaxed);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the cpu sampler thread: CPU-based shedding is off");
        }
        cpu
    }
}

impl CpuUsage for SystemCpu {
    fn millicpu(&self) -> u64 {
        let v = f64::from_bits(self.bits.load(Ordering::Relaxed));
        (v.round() as u64).min(CPU_MAX)
    }
}
