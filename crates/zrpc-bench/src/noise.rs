//! The noise monitor: how much of the machine other processes took while a run was measured.
//!
//! Around every measured run the harness reads the machine's CPU time (`/proc/stat`: user, nice
//! and system time of all CPUs, and steal time, which the hypervisor gave to another guest) and
//! the CPU time of everything that is the run itself: this process and its waited-for children
//! (`/proc/self/stat`: utime, stime, cutime, cstime; h2load and the load generators are reaped
//! before the run ends), every live child (the servers), and the kernel's `ksoftirqd` threads
//! (loopback traffic of the run). What remains, plus steal, is what other processes took:
//! divided by the run's wall time and the CPU count it is the share of the machine the run did
//! not have. Interrupt and softirq time outside `ksoftirqd` is left out on both sides.
//!
//! The rule that uses it is fixed in advance and symmetric: a round (every subject once) is
//! **busy** when one of its runs lost more than [`BUSY_SHARE`] of the machine; the medians and
//! spreads are taken over the quiet rounds when at least [`MIN_QUIET`] of them remain, over every
//! round otherwise; whole rounds are dropped (all subjects alike) and the report says how many.
//!
//! Pinned runs have a second, sharper signal: a pinned process owns one core, so what costs it
//! is another task on *that* core, which may be a small share of the machine (10% of one core
//! is 5% of two). There the scheduler's own count is used: the time the pinned server's and
//! the pinned load generator's threads were runnable but waited for their CPU, as a share of
//! the CPU time they asked for ([`Rounds::record_wait`]). A round is **contended** when one of
//! its runs waited more than [`CONTENDED_SHARE`]; contended rounds are left out by the same rule
//! as busy ones (whole, all subjects alike, only when [`MIN_QUIET`] rounds remain). Unpinned runs
//! do not use it: there the servers' and h2load's threads share the two cores by design, and
//! their wait measures that, not a neighbour.

use std::time::Instant;

/// A run that lost more than this share of the machine (others' CPU + steal) makes its round busy.
pub(crate) const BUSY_SHARE: f64 = 0.10;

/// A pinned run whose server or load generator waited for its core more than this share of the
/// CPU time it asked for makes its round contended.
pub(crate) const CONTENDED_SHARE: f64 = 0.10;

/// Busy rounds are left out only when at least this many quiet rounds remain.
pub(crate) const MIN_QUIET: usize = 3;

/// The machine's CPU counters at one instant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot {
    at: Instant,
    /// user + nice + system of all CPUs, µs.
    busy_us: f64,
    /// steal of all CPUs, µs.
    steal_us: f64,
    /// The run's own processes and threads, µs.
    ours_us: f64,
}

/// Reads the counters.
#[derive(Debug, Clone)]
pub(crate) struct Monitor {
    cpus: f64,
    ksoftirqd: Vec<i32>,
}

impl Monitor {
    /// A monitor for this machine (`cpus` online).
    pub(crate) fn new(cpus: usize) -> Monitor {
        let ksoftirqd = std::fs::read_dir("/proc")
            .map(|dir| {
                dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                    .filter(|pid| {
                        std::fs::read_to_string(format!("/proc/{pid}/comm"))
                            .is_ok_and(|c| c.starts_with("ksoftirqd/"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Monitor {
            cpus: cpus.max(1) as f64,
            ksoftirqd,
        }
    }

    /// The counters now.
    pub(crate) fn snap(&self) -> Snapshot {
        let (busy_us, steal_us) = machine_us();
        let ours_us = crate::proc::self_and_children_cpu_us()
            + self
                .ksoftirqd
                .iter()
                .map(|p| crate::proc::cpu_us_of(*p))
                .sum::<f64>();
        Snapshot {
            at: Instant::now(),
            busy_us,
            steal_us,
            ours_us,
        }
    }

    /// The share of the machine (0..1) that others and steal took between `a` and `b`.
    pub(crate) fn lost_share(&self, a: &Snapshot, b: &Snapshot) -> f64 {
        let wall_us = b.at.duration_since(a.at).as_secs_f64() * 1e6;
        if wall_us <= 0.0 {
            return 0.0;
        }
        let others = ((b.busy_us - a.busy_us) - (b.ours_us - a.ours_us)).max(0.0);
        let steal = (b.steal_us - a.steal_us).max(0.0);
        ((others + steal) / (wall_us * self.cpus)).clamp(0.0, 1.0)
    }
}

/// user + nice + system and steal of the `cpu` line of `/proc/stat`, µs (0 when unreadable).
fn machine_us() -> (f64, f64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    parse_stat_cpu(&text, crate::proc::clock_ticks())
}

fn parse_stat_cpu(text: &str, ticks_per_s: f64) -> (f64, f64) {
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return (0.0, 0.0);
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0.0) * 1e6 / ticks_per_s;
    // user nice system idle iowait irq softirq steal (guest time is already inside user).
    (at(0) + at(1) + at(2), at(7))
}

/// The noise of the rounds of one comparison: per round, the largest share any of its runs lost,
/// and (pinned runs) the largest share of its demand a pinned process waited for its core.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rounds {
    worst: Vec<f64>,
    wait: Vec<f64>,
}

impl Rounds {
    /// Records one run of round `round`.
    pub(crate) fn record(&mut self, round: usize, share: f64) {
        grow(&mut self.worst, round);
        self.worst[round] = self.worst[round].max(share);
    }

    /// Records the run-queue wait share of a pinned process in a run of round `round`.
    pub(crate) fn record_wait(&mut self, round: usize, share: f64) {
        grow(&mut self.wait, round);
        self.wait[round] = self.wait[round].max(share);
    }

    fn rounds(&self) -> usize {
        self.worst.len().max(self.wait.len())
    }

    fn busy(&self, r: usize) -> bool {
        self.worst.get(r).is_some_and(|w| *w > BUSY_SHARE)
    }

    fn contended(&self, r: usize) -> bool {
        self.wait.get(r).is_some_and(|w| *w > CONTENDED_SHARE)
    }

    /// How many of the rounds so far are neither busy nor contended.
    pub(crate) fn quiet(&self) -> usize {
        (0..self.rounds())
            .filter(|&r| !self.busy(r) && !self.contended(r))
            .count()
    }

    /// The rounds the medians use (indices), by the fixed rule of this module.
    pub(crate) fn kept(&self) -> Vec<usize> {
        let n = self.rounds();
        let quiet: Vec<usize> = (0..n)
            .filter(|&r| !self.busy(r) && !self.contended(r))
            .collect();
        if quiet.len() >= MIN_QUIET || quiet.len() == n {
            quiet
        } else {
            (0..n).collect()
        }
    }

    /// The values of the kept rounds of a per-round series (a series that does not have one
    /// value per round, e.g. a skipped subject's, is returned as it is).
    pub(crate) fn pick(&self, series: &[f64]) -> Vec<f64> {
        if series.len() != self.rounds() {
            return series.to_vec();
        }
        self.kept().into_iter().map(|r| series[r]).collect()
    }

    /// One line for the report: the noise seen and what the rule did with it.
    pub(crate) fn note(&self, what: &str) -> String {
        let n = self.rounds();
        let busy = (0..n).filter(|&r| self.busy(r)).count();
        let contended = (0..n).filter(|&r| self.contended(r)).count();
        let left_out = (0..n)
            .filter(|&r| self.busy(r) || self.contended(r))
            .count();
        let (med, max) = median_max(&self.worst);
        let verdict = if left_out == 0 {
            "every round is used".to_owned()
        } else if self.kept().len() < n {
            format!(
                "the medians and spreads use the {} other rounds",
                n - left_out
            )
        } else {
            format!("fewer than {MIN_QUIET} rounds were left, so every round is used")
        };
        let waited = if self.wait.is_empty() {
            String::new()
        } else {
            let (wmed, wmax) = median_max(&self.wait);
            format!(
                "; the pinned processes waited for their core {:.1}% of the CPU time they asked \
                 for (the run that waited most in a round: median over rounds; worst {:.1}%), \
                 {contended} of {n} rounds contended (> {:.0}%)",
                wmed * 100.0,
                wmax * 100.0,
                CONTENDED_SHARE * 100.0
            )
        };
        format!(
            "Noise monitor, {what}: the busiest run of a round lost {:.1}% of the machine to other \
             processes and steal (median over rounds; worst {:.1}%); {busy} of {n} rounds busy \
             (> {:.0}%){waited}; {verdict}.",
            med * 100.0,
            max * 100.0,
            BUSY_SHARE * 100.0
        )
    }
}

fn grow(v: &mut Vec<f64>, round: usize) {
    if v.len() <= round {
        v.resize(round + 1, 0.0);
    }
}

/// The (upper) median and the largest value; 0 for none.
fn median_max(v: &[f64]) -> (f64, f64) {
    let mut sorted = v.to_vec();
    sorted.sort_by(f64::total_cmp);
    (
        sorted.get(sorted.len() / 2).copied().unwrap_or(0.0),
        sorted.last().copied().unwrap_or(0.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_line_gives_busy_and_steal_time() {
        let stat = "cpu  100 20 30 1000 5 6 7 40 9 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n";
        let (busy, steal) = parse_stat_cpu(stat, 100.0);
        assert_eq!(busy, 1.5e6, "(100 + 20 + 30) ticks of 10 ms");
        assert_eq!(steal, 0.4e6);
        assert_eq!(parse_stat_cpu("intr 1 2\n", 100.0), (0.0, 0.0));
    }

    #[test]
    fn the_lost_share_is_others_and_steal_over_the_machine() {
        let m = Monitor {
            cpus: 2.0,
            ksoftirqd: Vec::new(),
        };
        let t = Instant::now();
        let a = Snapshot {
            at: t,
            busy_us: 0.0,
            steal_us: 0.0,
            ours_us: 0.0,
        };
        // 1 s on 2 CPUs: the machine was busy 1.9 s, 1.5 s of it ours; 0.1 s stolen.
        let b = Snapshot {
            at: t + std::time::Duration::from_secs(1),
            busy_us: 1.9e6,
            steal_us: 0.1e6,
            ours_us: 1.5e6,
        };
        assert!((m.lost_share(&a, &b) - 0.25).abs() < 1e-9);
        // Ours read a tick above the machine's: no negative noise.
        let c = Snapshot {
            ours_us: 2.0e6,
            steal_us: 0.0,
            ..b
        };
        assert_eq!(m.lost_share(&a, &c), 0.0);
        assert_eq!(m.lost_share(&a, &a), 0.0, "no time passed");
    }

    #[test]
    fn the_monitor_reads_this_machine() {
        let m = Monitor::new(2);
        let a = m.snap();
        let b = m.snap();
        let share = m.lost_share(&a, &b);
        assert!((0.0..=1.0).contains(&share), "{share}");
        assert!(b.busy_us >= a.busy_us);
        assert!(b.ours_us >= a.ours_us);
    }

    #[test]
    fn busy_rounds_are_dropped_whole_only_when_enough_quiet_ones_remain() {
        let mut r = Rounds::default();
        for (round, share) in [(0, 0.01), (1, 0.30), (2, 0.02), (3, 0.05), (4, 0.5)] {
            r.record(round, share);
            // A quieter run of the same round does not hide its busiest one.
            r.record(round, 0.0);
        }
        assert_eq!(r.kept(), vec![0, 2, 3]);
        assert_eq!(r.pick(&[1.0, 2.0, 3.0, 4.0, 5.0]), vec![1.0, 3.0, 4.0]);
        assert_eq!(r.pick(&[]), Vec::<f64>::new(), "a skipped subject");
        assert!(
            r.note("servers").contains("2 of 5 rounds busy"),
            "{}",
            r.note("x")
        );
        assert!(r.note("servers").contains("use the 3 other rounds"));

        let mut r = Rounds::default();
        for (round, share) in [(0, 0.01), (1, 0.30), (2, 0.02), (3, 0.5)] {
            r.record(round, share);
        }
        assert_eq!(r.kept(), vec![0, 1, 2, 3], "2 quiet rounds are too few");
        assert!(r.note("x").contains("every round is used"));

        let mut r = Rounds::default();
        r.record(0, 0.0);
        assert_eq!(r.kept(), vec![0], "one quiet round (--quick) is kept");
    }

    #[test]
    fn contended_pinned_rounds_are_dropped_by_the_same_rule() {
        let mut r = Rounds::default();
        for round in 0..5 {
            r.record(round, 0.01);
            r.record_wait(round, 0.02);
        }
        // Round 1: a pinned process waited 30% of its demand (a neighbour on its core) while the
        // machine as a whole lost only 1%; round 3: busy.
        r.record_wait(1, 0.30);
        r.record(3, 0.50);
        assert_eq!(r.kept(), vec![0, 2, 4]);
        assert_eq!(r.quiet(), 3);
        let note = r.note("pinned servers");
        assert!(note.contains("1 of 5 rounds busy"), "{note}");
        assert!(note.contains("1 of 5 rounds contended (> 10%)"), "{note}");
        assert!(note.contains("use the 3 other rounds"), "{note}");
        // Without pinned runs the note says nothing about waiting.
        let mut r = Rounds::default();
        r.record(0, 0.0);
        assert!(!r.note("x").contains("waited"));
    }
}
