//! The standard Prometheus process metrics, Linux only: `process_cpu_seconds_total`,
//! `process_open_fds`, `process_max_fds`, `process_virtual_memory_bytes`,
//! `process_resident_memory_bytes`, `process_start_time_seconds`, `process_threads`, with the
//! names, types and help texts of the Go and Rust clients' process collectors (go-zero's
//! dashboards chart them).
//!
//! Written here rather than taken from prometheus's `process` feature: that feature pulls
//! `procfs` and its dependencies (six more crates, among them a second major version of
//! `rustix`) to read four small files, `/proc/self/stat`, `/proc/self/limits`, `/proc/self/fd`
//! and `/proc/stat`. The clock tick and page size come from `/proc/self/auxv` (what libc's
//! `sysconf` reads), so no `unsafe` call is needed.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, IntGauge, Opts};

/// Collects the process metrics of this process at each scrape.
#[derive(Debug)]
pub(crate) struct ProcessCollector {
    descs: Vec<Desc>,
    cpu: Counter,
    open_fds: IntGauge,
    max_fds: IntGauge,
    vsize: IntGauge,
    rss: IntGauge,
    start_time: Gauge,
    threads: IntGauge,
}

impl ProcessCollector {
    pub(crate) fn new() -> Self {
        let opts = |name: &str, help: &str| Opts::new(name, help);
        let int = |name: &str, help: &str| {
            IntGauge::with_opts(opts(name, help))
                .unwrap_or_else(|_| unreachable!("static metric options are valid"))
        };
        let cpu = Counter::with_opts(opts(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
        ))
        .unwrap_or_else(|_| unreachable!("static metric options are valid"));
        let start_time = Gauge::with_opts(opts(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
        ))
        .unwrap_or_else(|_| unreachable!("static metric options are valid"));
        if let Some(start) = read_stat().and_then(|s| start_time_seconds(s.start_ticks)) {
            start_time.set(start);
        }
        let mut c = ProcessCollector {
            descs: Vec::new(),
            cpu,
            open_fds: int("process_open_fds", "Number of open file descriptors."),
            max_fds: int(
                "process_max_fds",
                "Maximum number of open file descriptors.",
            ),
            vsize: int(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
            ),
            rss: int(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
            ),
            start_time,
            threads: int("process_threads", "Number of OS threads in the process."),
        };
        c.descs = c
            .collectors()
            .iter()
            .flat_map(|m| m.desc().into_iter().cloned())
            .collect();
        c
    }

    fn collectors(&self) -> [&dyn Collector; 7] {
        [
            &self.cpu,
            &self.open_fds,
            &self.max_fds,
            &self.vsize,
            &self.rss,
            &self.start_time,
            &self.threads,
        ]
    }
}

impl Collector for ProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        if let Some(s) = read_stat() {
            let (ticks, page) = auxv();
            #[allow(clippy::cast_precision_loss)]
            let cpu = (s.utime + s.stime) as f64 / ticks as f64;
            // a counter only goes up: add what was spent since the last scrape
            let past = self.cpu.get();
            if cpu > past {
                self.cpu.inc_by(cpu - past);
            }
            self.vsize.set(to_i64(s.vsize));
            self.rss.set(to_i64(s.rss_pages.saturating_mul(page)));
            self.threads.set(to_i64(s.threads));
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            // the directory handle being read is counted too, as other collectors count it
            self.open_fds.set(to_i64(dir.count() as u64));
        }
        if let Some(max) = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| max_open_files(&l))
        {
            self.max_fds.set(to_i64(max));
        }
        self.collectors().iter().flat_map(|m| m.collect()).collect()
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The fields of `/proc/self/stat` this collector reports.
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    utime: u64,
    stime: u64,
    threads: u64,
    start_ticks: u64,
    vsize: u64,
    rss_pages: u64,
}

fn read_stat() -> Option<Stat> {
    parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// Parses `/proc/<pid>/stat` (proc(5)): the command name, in parentheses, may hold spaces and
/// parentheses, so the fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // fields from 3 (state) on; field n is at index n - 3
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: num(14)?,
        stime: num(15)?,
        threads: num(20)?,
        start_ticks: num(22)?,
        vsize: num(23)?,
        rss_pages: num(24)?,
    })
}

/// The soft limit of `Max open files` in `/proc/<pid>/limits` (`None` when unlimited).
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The process start, in seconds since the epoch: boot time (`btime` of `/proc/stat`) plus the
/// start in clock ticks after boot.
fn start_time_seconds(start_ticks: u64) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let btime: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let (ticks, _) = auxv();
    #[allow(clippy::cast_precision_loss)]
    let start = btime as f64 + start_ticks as f64 / ticks as f64;
    // a clock far off could make it negative or future: keep it plausible
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    (start > 0.0 && start <= now + 1.0).then_some(start)
}

/// Clock ticks per second and page size, from the auxiliary vector (`AT_CLKTCK`, `AT_PAGESZ`),
/// read once; Linux's usual 100 and 4096 if it cannot be read.
fn auxv() -> (u64, u64) {
    static AUXV: OnceLock<(u64, u64)> = OnceLock::new();
    *AUXV.get_or_init(|| {
        let bytes = std::fs::read("/proc/self/auxv").unwrap_or_default();
        parse_auxv(&bytes)
    })
}

const AT_PAGESZ: u64 = 6;
const AT_CLKTCK: u64 = 17;

/// Parses an auxiliary vector: (type, value) pairs of native-endian machine words.
fn parse_auxv(bytes: &[u8]) -> (u64, u64) {
    const WORD: usize = std::mem::size_of::<usize>();
    let word = |b: &[u8]| -> u64 {
        let mut buf = [0u8; WORD];
        buf.copy_from_slice(b);
        usize::from_ne_bytes(buf) as u64
    };
    let (mut ticks, mut page) = (100, 4096);
    for pair in bytes.chunks_exact(2 * WORD) {
        let (key, value) = (word(&pair[..WORD]), word(&pair[WORD..]));
        match key {
            AT_CLKTCK if value > 0 => ticks = value,
            AT_PAGESZ if value > 0 => page = value,
            _ => {}
        }
    }
    (ticks, page)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(families: &[MetricFamily], name: &str) -> f64 {
        let f = families.iter().find(|f| f.name() == name).unwrap();
        let m = &f.get_metric()[0];
        if f.get_field_type() == prometheus::proto::MetricType::COUNTER {
            m.get_counter().get_value()
        } else {
            m.get_gauge().get_value()
        }
    }

    #[test]
    fn process_families_have_plausible_values() {
        let families = ProcessCollector::new().collect();
        assert_eq!(families.len(), 7);
        assert!(value(&families, "process_resident_memory_bytes") > 0.0);
        assert!(value(&families, "process_virtual_memory_bytes") > 0.0);
        let start = value(&families, "process_start_time_seconds");
        assert!(start > 1.5e9, "{start}");
        assert!(value(&families, "process_cpu_seconds_total") >= 0.0);
        assert!(value(&families, "process_open_fds") >= 3.0);
        assert!(value(&families, "process_max_fds") >= value(&families, "process_open_fds"));
        assert!(value(&families, "process_threads") >= 1.0);
    }

    #[test]
    fn process_families_are_served_by_the_zrpc_registry() {
        let text = crate::metrics::render();
        for name in [
            "process_cpu_seconds_total",
            "process_open_fds",
            "process_max_fds",
            "process_virtual_memory_bytes",
            "process_resident_memory_bytes",
            "process_start_time_seconds",
            "process_threads",
        ] {
            assert!(text.contains(&format!("\n{name} ")), "{name} in {text}");
        }
        assert!(text.contains("# TYPE process_cpu_seconds_total counter"));
        assert!(text.contains("# TYPE process_resident_memory_bytes gauge"));
    }

    #[test]
    fn parses_stat_with_a_command_holding_parentheses() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1234 \
                    987654 321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                utime: 250,
                stime: 50,
                threads: 7,
                start_ticks: 1234,
                vsize: 987_654,
                rss_pages: 321,
            })
        );
        assert_eq!(parse_stat("42 (x) S 1"), None);
    }

    #[test]
    fn reads_the_soft_open_files_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63422                63422                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(
            max_open_files(
                "Max open files            unlimited            unlimited            files"
            ),
            None
        );
    }

    #[test]
    fn reads_clock_ticks_and_page_size_from_the_aux_vector() {
        let mut bytes = Vec::new();
        for (k, v) in [(AT_PAGESZ, 16384_usize as u64), (AT_CLKTCK, 250), (0, 0)] {
            bytes.extend_from_slice(&(k as usize).to_ne_bytes());
            bytes.extend_from_slice(&(v as usize).to_ne_bytes());
        }
        assert_eq!(parse_auxv(&bytes), (250, 16384));
        assert_eq!(parse_auxv(&[]), (100, 4096));
        assert!(auxv().0 > 0 && auxv().1 >= 4096);
    }
}
