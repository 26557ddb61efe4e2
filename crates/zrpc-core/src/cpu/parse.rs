//! Parsers for the kernel files the sampler reads. They take file contents, so they are tested
//! against fixture text.

/// Busy and total ticks of a set of CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Ticks {
    /// Sum of the first seven fields (user nice system idle iowait irq softirq), like go-zero.
    pub(crate) total: u64,
    /// idle + iowait.
    pub(crate) idle: u64,
}

/// The `cpu` line of `/proc/stat`, in USER_HZ ticks, plus the number of `cpuN` lines, and the sum
/// of the `cpuN` lines of the CPUs the process may run on when that is fewer than all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// Sum of the first seven fields of the `cpu` line.
    pub(crate) total: u64,
    /// idle + iowait of the `cpu` line.
    pub(crate) idle: u64,
    /// Number of `cpuN` lines (host CPUs online).
    pub(crate) cpus: u32,
    /// The `cpuN` lines of the `allowed` CPUs summed, when they are some but not all of the online
    /// CPUs (a pinned process); `None` otherwise.
    pub(crate) allowed: Option<Ticks>,
}

/// The first seven numbers of a `/proc/stat` CPU line (after its name). `None` when fewer or
/// not numbers.
fn ticks<'a>(fields: impl Iterator<Item = &'a str>) -> Option<Ticks> {
    let mut v = [0u64; 7];
    let mut n = 0;
    for (slot, f) in v.iter_mut().zip(fields) {
        *slot = f.parse().ok()?;
        n += 1;
    }
    (n == 7).then(|| Ticks {
        total: v.iter().fold(0, |a: u64, b| a.saturating_add(*b)),
        idle: v[3].saturating_add(v[4]),
    })
}

/// Parses `/proc/stat`. `None` when the `cpu` line is missing or has fewer than seven numbers.
/// `allowed` (sorted CPU numbers, from [`cpus_allowed`]) selects the `cpuN` lines summed into
/// [`ProcStat::allowed`]; a malformed `cpuN` line among them leaves that sum out.
pub(crate) fn proc_stat(text: &str, allowed: Option<&[u32]>) -> Option<ProcStat> {
    let mut found = None;
    let mut cpus = 0;
    let mut sum = Some((Ticks::default(), 0u32));
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("cpu") => found = Some(ticks(fields)?),
            Some(name) if name.starts_with("cpu") => {
                let Ok(id) = name[3..].parse::<u32>() else {
                    continue;
                };
                cpus += 1;
                if allowed.is_some_and(|a| a.binary_search(&id).is_ok()) {
                    sum = match (sum, ticks(fields)) {
                        (Some((acc, n)), Some(t)) => Some((
                            Ticks {
                                total: acc.total.saturating_add(t.total),
                                idle: acc.idle.saturating_add(t.idle),
                            },
                            n + 1,
                        )),
                        _ => None,
                    };
                }
            }
            _ => {}
        }
    }
    let Ticks { total, idle } = found?;
    let allowed = sum.and_then(|(t, n)| (n > 0 && n < cpus).then_some(t));
    Some(ProcStat {
        total,
        idle,
        cpus: cpus.max(1),
        allowed,
    })
}

/// The most CPU numbers a list may name (the kernel's `NR_CPUS` limit is 8192): a longer range is
/// treated as malformed rather than expanded.
const MAX_CPUS: u32 = 1 << 16;

/// Parses a CPU list such as `0-3,8,10-11` (`cpuset.cpus`, `Cpus_allowed_list`): the CPU numbers,
/// sorted, without duplicates. `None` on bad input; an empty list counts as `None` too.
pub(crate) fn cpu_list(text: &str) -> Option<Vec<u32>> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.trim().parse().ok()?, hi.trim().parse().ok()?),
            None => {
                let cpu: u32 = part.parse().ok()?;
                (cpu, cpu)
            }
        };
        if hi < lo || hi >= MAX_CPUS {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// The number of CPUs in a CPU list (see [`cpu_list`]).
pub(crate) fn cpu_list_count(text: &str) -> Option<u32> {
    u32::try_from(cpu_list(text)?.len()).ok()
}

/// The CPUs the process may run on, from `/proc/self/status` (`Cpus_allowed_list:`, set by
/// `taskset`, `numactl` or `sched_setaffinity`).
pub(crate) fn cpus_allowed(status: &str) -> Option<Vec<u32>> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .and_then(cpu_list)
}

/// Parses cgroup v2 `cpu.max` (`"max 100000"` or `"150000 100000"`): the quota in CPUs, `None` when
/// unlimited or malformed.
pub(crate) fn cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let quota = fields.next()?;
    let period: f64 = fields.next().map_or(Some(100_000.0), |p| p.parse().ok())?;
    if quota == "max" || period <= 0.0 {
        return None;
    }
    let quota: f64 = quota.parse().ok()?;
    (quota > 0.0).then_some(quota / period)
}

/// cgroup v1 quota from `cpu.cfs_quota_us` and `cpu.cfs_period_us`: CPUs, `None` when unlimited
/// (`-1`) or malformed.
pub(crate) fn cfs_quota(quota_us: &str, period_us: &str) -> Option<f64> {
    let quota: i64 = quota_us.trim().parse().ok()?;
    let period: i64 = period_us.trim().parse().ok()?;
    (quota > 0 && period > 0).then(|| quota as f64 / period as f64)
}

/// cgroup v2 `cpu.stat`: `usage_usec` in nanoseconds.
pub(crate) fn cpu_stat_usage_ns(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(char::is_whitespace)?;
        if key == "usage_usec" {
            value.trim().parse::<u64>().ok()?.checked_mul(1000)
        } else {
            None
        }
    })
}

/// cgroup v1 `cpuacct.usage`: nanoseconds.
pub(crate) fn cpuacct_usage_ns(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// What `/proc/self/cgroup` says about the process's CPU cgroups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProcCgroup {
    /// The cgroup v2 path (`0::/path`), if any.
    pub(crate) unified: Option<String>,
    /// cgroup v1 `(controller, path)` pairs for `cpu*` controllers, one per controller name
    /// (`cpu,cpuacct` gives both `cpu` and `cpuacct`).
    pub(crate) v1: Vec<(String, String)>,
}

impl ProcCgroup {
    /// The v1 path of `controller`.
    pub(crate) fn v1_path(&self, controller: &str) -> Option<&str> {
        self.v1
            .iter()
            .find(|(c, _)| c == controller)
            .map(|(_, p)| p.as_str())
    }
}

/// Parses `/proc/self/cgroup` (`hierarchy-id:controllers:path` lines). Malformed lines are skipped.
pub(crate) fn proc_cgroup(text: &str) -> ProcCgroup {
    let mut out = ProcCgroup::default();
    for line in text.lines() {
        let mut cols = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (cols.next(), cols.next(), cols.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            out.unified = Some(path.to_owned());
            continue;
        }
        for c in controllers.split(',') {
            if c.starts_with("cpu") && out.v1_path(c).is_none() {
                out.v1.push((c.to_owned(), path.to_owned()));
            }
        }
    }
    out
}
