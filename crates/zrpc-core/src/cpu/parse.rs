//! Parsers for the kernel files the sampler reads. They take file contents, so they are tested
//! against fixture text.

/// The `cpu` line of `/proc/stat`, in USER_HZ ticks, plus the number of `cpuN` lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// Sum of the first seven fields (user nice system idle iowait irq softirq), like go-zero.
    pub(crate) total: u64,
    /// idle + iowait.
    pub(crate) idle: u64,
    /// Number of `cpuN` lines (host CPUs online).
    pub(crate) cpus: u32,
}

/// Parses `/proc/stat`. `None` when the `cpu` line is missing or has fewer than seven numbers.
pub(crate) fn proc_stat(text: &str) -> Option<ProcStat> {
    let mut found = None;
    let mut cpus = 0;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("cpu") => {
                let v: Vec<u64> = fields
                    .take(7)
                    .map(|f| f.parse().ok())
                    .collect::<Option<_>>()?;
                if v.len() < 7 {
                    return None;
                }
                found = Some((v.iter().sum::<u64>(), v[3] + v[4]));
            }
            Some(name) if name.starts_with("cpu") && name[3..].parse::<u32>().is_ok() => cpus += 1,
            _ => {}
        }
    }
    let (total, idle) = found?;
    Some(ProcStat {
        total,
        idle,
        cpus: cpus.max(1),
    })
}

/// Parses a CPU list such as `0-3,8,10-11` (`cpuset.cpus`): the number of CPUs. `None` on bad input;
/// an empty list counts as `None` too.
pub(crate) fn cpu_list_count(text: &str) -> Option<u32> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut count = 0u32;
    for part in text.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            Some((lo, hi)) => {
                let lo: u32 = lo.trim().parse().ok()?;
                let hi: u32 = hi.trim().parse().ok()?;
                if hi < lo {
                    return None;
                }
                count = count.checked_add(hi - lo + 1)?;
            }
            None => {
                let _: u32 = part.parse().ok()?;
                count = count.checked_add(1)?;
            }
        }
    }
    Some(count)
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
