//! The comparison tables of `docs/balancing.md`.

use std::fmt::Write as _;
use std::time::Duration;

use crate::breaker::{BreakerRules, simulate_outage};
use crate::engine::run;
use crate::model::{Load, Report, Scenario};
use crate::policy::Policy;

/// Seeds averaged in each cell.
pub const SEEDS: [u64; 3] = [1, 2, 3];
/// Simulated time of each balancing run (as long as the real-process runs it is compared with).
pub const DURATION: Duration = Duration::from_secs(60);

/// The loads of the seed-example table.
pub const LOADS: [Load; 5] = [
    Load::Open { rps: 20.0 },
    Load::Open { rps: 200.0 },
    Load::Open { rps: 2000.0 },
    Load::Closed { clients: 1 },
    Load::Closed { clients: 20 },
];

/// A load's column title.
#[must_use]
pub fn load_name(load: Load) -> String {
    match load {
        Load::Open { rps } => format!("{rps} rps"),
        Load::Closed { clients } => format!("C={clients}"),
    }
}

/// The slow-node scenario (10/10/1000 ms) under `load` with `policy`, over [`SEEDS`]: the mean slow
/// share (percent) and the worst p99.
#[must_use]
pub fn seed_cell(policy: Policy, load: Load) -> (f64, Duration) {
    let reports: Vec<Report> = SEEDS
        .iter()
        .map(|&s| run(&Scenario::seed_example(load, DURATION, s), policy))
        .collect();
    let share = reports.iter().map(|r| r.slow_share).sum::<f64>() / reports.len() as f64;
    let p99 = reports.iter().map(|r| r.p99).max().unwrap_or_default();
    (share, p99)
}

/// The loads of the equal-servers table.
pub const EQUAL_LOADS: [Load; 4] = [
    Load::Open { rps: 20.0 },
    Load::Open { rps: 200.0 },
    Load::Closed { clients: 1 },
    Load::Closed { clients: 20 },
];

/// Three equal servers under `load` with `policy`, over [`SEEDS`]: the smallest and the largest
/// share (percent) any one server took in any seed.
#[must_use]
pub fn equal_cell(policy: Policy, load: Load) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = 0.0_f64;
    for &seed in &SEEDS {
        let r = run(&Scenario::equal(load, DURATION, seed), policy);
        for &n in &r.per_server {
            let share = n as f64 * 100.0 / r.calls.max(1) as f64;
            lo = lo.min(share);
            hi = hi.max(share);
        }
    }
    (lo, hi)
}

/// The freeze scenario: three 10 ms servers at 1000 rps, the third frozen from 10 s to 25 s
/// (SIGSTOP 15 s), 40 s in all.
#[must_use]
pub fn freeze_report(policy: Policy, seed: u64) -> Report {
    let s = Scenario::freeze(
        Load::Open { rps: 1000.0 },
        Duration::from_secs(40),
        (Duration::from_secs(10), Duration::from_secs(25)),
        seed,
    );
    run(&s, policy)
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

/// A table with a row per policy and a column per load: `cell` gives a cell's text.
fn policy_rows(out: &mut String, loads: &[Load], cell: impl Fn(Policy, Load) -> String) {
    let _ = write!(out, "| policy |");
    for &l in loads {
        let _ = write!(out, " {} |", load_name(l));
    }
    let _ = write!(out, "\n|---|");
    for _ in loads {
        let _ = write!(out, "---|");
    }
    out.push('\n');
    for p in Policy::ALL {
        let _ = write!(out, "| {} |", p.name());
        for &l in loads {
            let _ = write!(out, " {} |", cell(p, l));
        }
        out.push('\n');
    }
}

/// All tables, in Markdown.
#[must_use]
pub fn markdown() -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Seed example (two servers at 10 ms, one at 1000 ms), {} s, mean of seeds {SEEDS:?}: \
         share of calls sent to the slow server / worst p99.\n",
        DURATION.as_secs()
    );
    policy_rows(&mut out, &LOADS, |p, l| {
        let (share, p99) = seed_cell(p, l);
        format!("{share:.3}% / {}", ms(p99))
    });
    let _ = writeln!(
        out,
        "\nThree equal servers (0.3 ms plus up to 0.5 ms of jitter), {} s, seeds {SEEDS:?}: the \
         smallest..largest share of the calls any one server took (a third is even).\n",
        DURATION.as_secs()
    );
    policy_rows(&mut out, &EQUAL_LOADS, |p, l| {
        let (lo, hi) = equal_cell(p, l);
        format!("{lo:.1}..{hi:.1}%")
    });
    let _ = writeln!(
        out,
        "\nFrozen server (three servers at 10 ms, 1000 rps open loop, one SIGSTOPped from 10 s to 25 s, \
         2 s timeout, seed 1):\n\n| policy | failed calls | calls sent into the freeze | stream of calls stopped after | last (trial) call after | p99 |\n|---|---|---|---|---|---|"
    );
    for p in Policy::ALL {
        let r = freeze_report(p, 1);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            p.name(),
            r.failed,
            r.sent_while_frozen,
            secs(r.stream_into_freeze),
            secs(r.last_sent_into_freeze),
            ms(r.p99)
        );
    }
    let _ = writeln!(
        out,
        "\nBreaker, total outage of 20 s at 1000 req/s then healed (the real `GoogleBreaker`, seed 7):\n\n\
         | rules | time to >= 95 % rejection | calls reaching the dead backend (first 2 s) | time to >= 95 % success after healing |\n|---|---|---|---|"
    );
    for rules in [BreakerRules::GoZero, BreakerRules::V2] {
        let r = simulate_outage(
            rules,
            1000,
            Duration::from_secs(20),
            Duration::from_secs(20),
            7,
        );
        let _ = writeln!(
            out,
            "| {} | {} | {} ({}) | {} |",
            rules.name(),
            secs(r.time_to_open),
            r.leaked,
            r.leaked_first_2s,
            secs(r.recovered_after)
        );
    }
    out
}
