use std::fs;
use std::path::Path;

use super::parse::*;
use super::sampler::{Sampler, Source, smooth};
use super::*;

const PROC_STAT: &str = "cpu  37534 0 8958 64461 479 0 63 21 0 0
cpu0 18222 0 4201 33236 91 0 12 7 0 0
cpu1 19311 0 4756 31224 387 0 50 13 0 0
intr 342724 0 0
ctxt 525557
";

#[test]
fn parses_proc_stat() {
    let s = proc_stat(PROC_STAT, None).unwrap();
    assert_eq!(s.total, 37534 + 8958 + 64461 + 479 + 63);
    assert_eq!(s.idle, 64461 + 479);
    assert_eq!(s.cpus, 2);
    assert_eq!(s.allowed, None);
    assert_eq!(proc_stat("cpu 1 2 3\n", None), None);
    assert_eq!(proc_stat("intr 1\n", None), None);
    assert_eq!(proc_stat("cpu 1 2 x 4 5 6 7\n", None), None);
}

#[test]
fn sums_the_lines_of_the_allowed_cpus() {
    // Pinned to cpu1 of two: its line alone.
    let s = proc_stat(PROC_STAT, Some(&[1])).unwrap();
    assert_eq!(
        s.allowed,
        Some(Ticks {
            total: 19311 + 4756 + 31224 + 387 + 50,
            idle: 31224 + 387,
        })
    );
    // Allowed on every online CPU (or on more than are online): not pinned, no sum.
    assert_eq!(proc_stat(PROC_STAT, Some(&[0, 1])).unwrap().allowed, None);
    assert_eq!(
        proc_stat(PROC_STAT, Some(&[0, 1, 2, 3])).unwrap().allowed,
        None
    );
    // Allowed only on CPUs that are not online: no sum.
    assert_eq!(proc_stat(PROC_STAT, Some(&[7])).unwrap().allowed, None);
    // A malformed line of an allowed CPU leaves the sum out, not the whole reading.
    let bad = "cpu  2 0 0 2 0 0 0\ncpu0 1 0 0 1 0 0 0\ncpu1 1 0 x 1 0 0 0\ncpu2 0 0 0 0 0 0 0\n";
    let s = proc_stat(bad, Some(&[1])).unwrap();
    assert_eq!((s.total, s.cpus, s.allowed), (4, 3, None));
}

#[test]
fn parses_cpu_lists() {
    assert_eq!(cpu_list_count("0-1\n"), Some(2));
    assert_eq!(cpu_list_count("0-3,8,10-11"), Some(7));
    assert_eq!(cpu_list_count("5"), Some(1));
    assert_eq!(cpu_list_count(""), None);
    assert_eq!(cpu_list_count("3-1"), None);
    assert_eq!(cpu_list_count("a-b"), None);
    assert_eq!(cpu_list("3,0-2,2\n"), Some(vec![0, 1, 2, 3]));
    assert_eq!(cpu_list("0-4294967295"), None);
    let status = "Name:\tzrpc\nCpus_allowed:\t2\nCpus_allowed_list:\t1\nMems_allowed_list:\t0\n";
    assert_eq!(cpus_allowed(status), Some(vec![1]));
    assert_eq!(cpus_allowed("Name:\tzrpc\n"), None);
    assert_eq!(cpus_allowed("Cpus_allowed_list:\tgarbage\n"), None);
}

#[test]
fn parses_quotas() {
    assert_eq!(cpu_max("max 100000\n"), None);
    assert_eq!(cpu_max("150000 100000\n"), Some(1.5));
    assert_eq!(cpu_max("50000\n"), Some(0.5));
    assert_eq!(cpu_max("garbage 100000"), None);
    assert_eq!(cfs_quota("-1\n", "100000\n"), None);
    assert_eq!(cfs_quota("200000\n", "100000\n"), Some(2.0));
    assert_eq!(cfs_quota("x", "100000"), None);
}

#[test]
fn parses_usage_files() {
    let stat = "usage_usec 123456\nuser_usec 100000\nsystem_usec 23456\nnr_periods 0\n";
    assert_eq!(cpu_stat_usage_ns(stat), Some(123_456_000));
    assert_eq!(cpu_stat_usage_ns("user_usec 1\n"), None);
    assert_eq!(cpuacct_usage_ns("474378881881\n"), Some(474_378_881_881));
}

#[test]
fn parses_proc_self_cgroup() {
    let v1 = "9:name=systemd:/\n3:cpuset:/pod\n2:cpu,cpuacct:/kubepods/pod1\n0::/\n";
    let cg = proc_cgroup(v1);
    assert_eq!(cg.unified.as_deref(), Some("/"));
    assert_eq!(cg.v1_path("cpu"), Some("/kubepods/pod1"));
    assert_eq!(cg.v1_path("cpuacct"), Some("/kubepods/pod1"));
    assert_eq!(cg.v1_path("cpuset"), Some("/pod"));
    assert_eq!(cg.v1_path("memory"), None);
    let v2 = proc_cgroup("0::/system.slice/app.service\n");
    assert_eq!(v2.unified.as_deref(), Some("/system.slice/app.service"));
    assert!(v2.v1.is_empty());
    assert_eq!(proc_cgroup("garbage\n"), ProcCgroup::default());
}

/// A `/proc/self/status` path that does not exist: the allowed CPUs are unknown (not pinned).
fn no_status(tmp: &tempfile::TempDir) -> std::path::PathBuf {
    tmp.path().join("no-status")
}

fn write(dir: &Path, name: &str, text: &str) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join(name), text).unwrap();
}

/// A /proc/stat with `ticks` total ticks per CPU on 4 CPUs, `busy` of them busy.
fn proc_stat_text(ticks: u64, busy: u64) -> String {
    let idle = ticks - busy;
    format!(
        "cpu  {} 0 0 {} 0 0 0 0 0 0\ncpu0 0\ncpu1 0\ncpu2 0\ncpu3 0\n",
        busy * 4,
        idle * 4
    )
}

#[test]
fn cgroup_v2_with_quota() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    let proc_stat = tmp.path().join("stat");
    let dir = root.join("app.slice");
    write(&root, "cgroup.controllers", "cpuset cpu io memory pids\n");
    write(&dir, "cpu.max", "200000 100000\n");
    write(&dir, "cpuset.cpus.effective", "0-3\n");
    write(&dir, "cpu.stat", "usage_usec 0\n");
    write(tmp.path(), "stat", &proc_stat_text(1000, 0));
    let mut s = Sampler::detect(&root, "0::/app.slice\n", &proc_stat, &no_status(&tmp)).unwrap();
    assert_eq!(s.source, Source::V2 { dir: dir.clone() });
    assert_eq!(s.limit, 2.0);
    // 1 s of wall time (100 ticks per CPU), 1.5 CPU-seconds used of a 2-CPU quota: 750.
    write(&dir, "cpu.stat", "usage_usec 1500000\n");
    write(tmp.path(), "stat", &proc_stat_text(1100, 0));
    assert_eq!(s.sample(), 750);
    // Over the limit is capped.
    write(&dir, "cpu.stat", "usage_usec 9500000\n");
    write(tmp.path(), "stat", &proc_stat_text(1200, 0));
    assert_eq!(s.sample(), 1000);
    // No time passed: 0.
    assert_eq!(s.sample(), 0);
}

#[test]
fn cgroup_v2_root_without_quota_uses_cpuset() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    let proc_stat = tmp.path().join("stat");
    write(&root, "cgroup.controllers", "cpu\n");
    write(&root, "cpu.stat", "usage_usec 0\n");
    write(&root, "cpuset.cpus.effective", "0-1\n");
    write(tmp.path(), "stat", &proc_stat_text(0, 0));
    // The process's own directory does not exist: use the root (go-zero's assumption).
    let mut s = Sampler::detect(&root, "0::/missing\n", &proc_stat, &no_status(&tmp)).unwrap();
    assert_eq!(s.source, Source::V2 { dir: root.clone() });
    assert_eq!(s.limit, 2.0);
    write(&root, "cpu.stat", "usage_usec 500000\n");
    write(tmp.path(), "stat", &proc_stat_text(100, 0));
    assert_eq!(s.sample(), 250);
}

#[test]
fn cgroup_v1_with_quota() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    let proc_stat = tmp.path().join("stat");
    write(&root.join("cpu"), "cpu.cfs_quota_us", "50000\n");
    write(&root.join("cpu"), "cpu.cfs_period_us", "100000\n");
    write(&root.join("cpuset"), "cpuset.cpus", "0-3\n");
    write(&root.join("cpuacct"), "cpuacct.usage", "1000000000\n");
    write(tmp.path(), "stat", &proc_stat_text(0, 0));
    let text = "4:cpuset:/\n3:cpu,cpuacct:/\n0::/\n";
    let mut s = Sampler::detect(&root, text, &proc_stat, &no_status(&tmp)).unwrap();
    assert_eq!(
        s.source,
        Source::V1 {
            cpuacct: root.join("cpuacct")
        }
    );
    assert_eq!(s.limit, 0.5);
    // 0.25 CPU-seconds in 1 s against a 0.5 CPU quota: 500.
    write(&root.join("cpuacct"), "cpuacct.usage", "1250000000\n");
    write(tmp.path(), "stat", &proc_stat_text(100, 0));
    assert_eq!(s.sample(), 500);
}

#[test]
fn cgroup_v1_unlimited_uses_cpuset() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    let proc_stat = tmp.path().join("stat");
    write(&root.join("cpu"), "cpu.cfs_quota_us", "-1\n");
    write(&root.join("cpu"), "cpu.cfs_period_us", "100000\n");
    write(&root.join("cpuset"), "cpuset.cpus", "0-1\n");
    write(&root.join("cpuacct"), "cpuacct.usage", "0\n");
    write(tmp.path(), "stat", &proc_stat_text(0, 0));
    let s = Sampler::detect(
        &root,
        "2:cpu,cpuacct:/\n1:cpuset:/\n",
        &proc_stat,
        &no_status(&tmp),
    )
    .unwrap();
    assert_eq!(s.limit, 2.0);
}

#[test]
fn host_fallback_uses_busy_fraction() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("no-cgroup");
    let proc_stat = tmp.path().join("stat");
    write(tmp.path(), "stat", &proc_stat_text(1000, 100));
    let mut s = Sampler::detect(&root, "", &proc_stat, &no_status(&tmp)).unwrap();
    assert_eq!(s.source, Source::Host);
    write(tmp.path(), "stat", &proc_stat_text(1100, 130));
    assert_eq!(s.sample(), 300);
}

/// A /proc/stat of 4 CPUs with `busy` and `idle` ticks per CPU.
fn per_cpu_stat(cpus: [(u64, u64); 4]) -> String {
    let (busy, idle) = cpus
        .iter()
        .fold((0, 0), |(b, i), (cb, ci)| (b + cb, i + ci));
    let mut text = format!("cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\n");
    for (n, (b, i)) in cpus.iter().enumerate() {
        text.push_str(&format!("cpu{n} {b} 0 0 {i} 0 0 0 0 0 0\n"));
    }
    text
}

fn status(cpus: &str) -> String {
    format!("Name:\tzrpc\nCpus_allowed_list:\t{cpus}\n")
}

#[test]
fn a_pinned_process_reads_its_own_cpus_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("no-cgroup");
    let proc_stat = tmp.path().join("stat");
    let proc_status = tmp.path().join("status");
    write(tmp.path(), "status", &status("2"));
    write(tmp.path(), "stat", &per_cpu_stat([(0, 0); 4]));
    let mut s = Sampler::detect(&root, "", &proc_stat, &proc_status).unwrap();
    assert_eq!(s.source, Source::Host);
    assert_eq!(s.allowed.as_deref(), Some(&[2][..]));
    // cpu2 fully busy, the three others idle: the host is 25% busy, the pinned CPU 100%.
    write(
        tmp.path(),
        "stat",
        &per_cpu_stat([(0, 100), (0, 100), (100, 0), (0, 100)]),
    );
    assert_eq!(s.sample(), 1000);
    // The host busier than the pinned CPU: the higher figure.
    write(
        tmp.path(),
        "stat",
        &per_cpu_stat([(100, 100), (100, 100), (150, 50), (0, 200)]),
    );
    assert_eq!(s.sample(), 625);
    // Pinned to cpu0 instead while running (`taskset -p`): the first interval over the new set
    // is not compared with the old set's sum (cpu0 now against cpu2 before would read 667), so
    // the host's figure only; the next interval reads cpu0.
    write(tmp.path(), "status", &status("0"));
    write(
        tmp.path(),
        "stat",
        &per_cpu_stat([(250, 100), (100, 250), (150, 200), (0, 350)]),
    );
    assert_eq!(s.sample(), 250);
    assert_eq!(s.allowed.as_deref(), Some(&[0][..]));
    write(
        tmp.path(),
        "stat",
        &per_cpu_stat([(340, 110), (100, 350), (150, 300), (0, 450)]),
    );
    assert_eq!(s.sample(), 900);
    // Unpinned: the host's figure, as go-zero reads it.
    write(tmp.path(), "status", &status("0-3"));
    write(
        tmp.path(),
        "stat",
        &per_cpu_stat([(440, 110), (100, 450), (150, 400), (0, 550)]),
    );
    assert_eq!(s.sample(), 250);
}

#[test]
fn a_pinned_process_in_a_cgroup_takes_the_higher_figure() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    let proc_stat = tmp.path().join("stat");
    let proc_status = tmp.path().join("status");
    let dir = root.join("app.slice");
    write(&root, "cgroup.controllers", "cpuset cpu\n");
    write(&dir, "cpu.max", "100000 100000\n");
    write(&dir, "cpu.stat", "usage_usec 0\n");
    write(tmp.path(), "status", &status("0-1"));
    write(tmp.path(), "stat", &per_cpu_stat([(0, 0); 4]));
    let mut s = Sampler::detect(&root, "0::/app.slice\n", &proc_stat, &proc_status).unwrap();
    assert_eq!(s.limit, 1.0);
    // 1 s of wall time; the cgroup used 0.8 CPU-seconds of its 1-CPU quota (800), its two CPUs
    // were 40% busy: the quota binds.
    write(&dir, "cpu.stat", "usage_usec 800000\n");
    write(
        tmp.path(),
        "stat",
        &per_cpu_stat([(40, 60), (40, 60), (0, 100), (0, 100)]),
    );
    assert_eq!(s.sample(), 800);
    // The cgroup used little, but its CPUs are taken by others: the pinned CPUs bind.
    write(&dir, "cpu.stat", "usage_usec 900000\n");
    write(
        tmp.path(),
        "stat",
        &per_cpu_stat([(135, 65), (135, 65), (0, 200), (0, 200)]),
    );
    assert_eq!(s.sample(), 950);
}

#[test]
fn unreadable_cgroup_usage_falls_back_to_host() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cgroup");
    let proc_stat = tmp.path().join("stat");
    write(&root, "cgroup.controllers", "cpu\n");
    write(tmp.path(), "stat", &proc_stat_text(0, 0));
    let s = Sampler::detect(&root, "0::/\n", &proc_stat, &no_status(&tmp)).unwrap();
    assert_eq!(s.source, Source::Host);
    assert_eq!(s.limit, 4.0);
}

#[test]
fn no_proc_stat_no_sampler() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(
        Sampler::detect(
            tmp.path(),
            "",
            &tmp.path().join("missing"),
            &no_status(&tmp)
        )
        .is_none()
    );
}

#[test]
fn smoothing_follows_go_zero_beta() {
    let mut v = 0.0;
    for _ in 0..20 {
        v = smooth(v, 1000);
    }
    // 1 - 0.95^20 of the way to 1000 after 20 refreshes (5 s).
    assert!((v - 1000.0 * (1.0 - 0.95f64.powi(20))).abs() < 1e-9);
    assert_eq!(smooth(500.0, 500), 500.0);
}

#[test]
fn fixed_cpu_is_capped_and_settable() {
    let c = FixedCpu::new(5000);
    assert_eq!(c.millicpu(), CPU_MAX);
    c.set(10);
    assert_eq!(c.millicpu(), 10);
    assert_eq!(FixedCpu::default().millicpu(), 0);
}

#[test]
fn system_cpu_is_shared_and_in_range() {
    let a = system_cpu();
    let b = system_cpu();
    assert!(a.millicpu() <= CPU_MAX);
    assert!(std::ptr::eq(
        Arc::as_ptr(&a).cast::<u8>(),
        Arc::as_ptr(&b).cast::<u8>()
    ));
}

#[cfg(target_os = "linux")]
#[test]
fn detects_this_machine() {
    let text = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    if let Some(mut s) = Sampler::detect(
        Path::new("/sys/fs/cgroup"),
        &text,
        Path::new("/proc/stat"),
        Path::new("/proc/self/status"),
    ) {
        assert!(s.limit > 0.0);
        assert!(s.sample() <= CPU_MAX);
    }
}
