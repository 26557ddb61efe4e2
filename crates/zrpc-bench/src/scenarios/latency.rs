//! Latency: one call at a time (C=1) for the four client/server pairs Rust->Rust, Rust->Go,
//! Go->Rust and Go->Go (zrpc client and server with the quiet profile, go-zero's likewise), and
//! the zrpc client against a bare tonic channel, both calling one bare tonic server (what the
//! client adds to a serial call, as a p50 difference in µs).

use anyhow::Result;

use super::{Ctx, Gen, LoadSpec, Profile, ServerSpec, Side};
use crate::charts::{self, XAxis};
use crate::noise::Rounds;
use crate::report::{self, MISSING, Section, Table, f, round_ratio};
use crate::stats::median;

/// Which server a pair calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// zrpc, quiet profile.
    Zrpc,
    /// go-zero, quiet profile.
    GoZero,
    /// Bare tonic.
    Tonic,
}

const PAIRS: [(Gen, Target, &str); 6] = [
    (
        Gen::Zrpc("p2c_ewma"),
        Target::Zrpc,
        "Rust -> Rust (zrpc -> zrpc)",
    ),
    (
        Gen::Zrpc("p2c_ewma"),
        Target::GoZero,
        "Rust -> Go (zrpc -> go-zero)",
    ),
    (Gen::GoZero, Target::Zrpc, "Go -> Rust (go-zero -> zrpc)"),
    (Gen::GoZero, Target::GoZero, "Go -> Go (go-zero -> go-zero)"),
    (
        Gen::Tonic,
        Target::Tonic,
        "bare tonic channel -> bare tonic",
    ),
    (
        Gen::Zrpc("p2c_ewma"),
        Target::Tonic,
        "zrpc client (p2c_ewma) -> bare tonic",
    ),
];
/// The Go -> Go pair (the first table's reference) and the tonic pairs (the second table's).
const GO_GO: usize = 3;
const TONIC: usize = 4;
const ZRPC_TONIC: usize = 5;

/// Per pair: p50s, p99s, p99.9s, means, trimmed means (one per round) and the last round's
/// latencies.
#[derive(Debug, Clone, Default)]
struct Acc {
    p50: Vec<f64>,
    p99: Vec<f64>,
    p999: Vec<f64>,
    mean: Vec<f64>,
    trimmed: Vec<f64>,
    last: Vec<f64>,
}

/// The share of the calls cut from each end for the trimmed mean.
const TRIM: f64 = 0.05;

/// The mean of the middle of sorted latencies: [`TRIM`] of the calls cut from each end (the
/// 5% trimmed mean), NaN for none. A serial run's plain mean is what a chain of dependent calls
/// pays, but a handful of stalls of a few ms (a GC cycle, a neighbour's time slice, a timer
/// tick) in a run of thousands of 0.2-0.4 ms calls moves it by 10-30% from one round to the
/// next; this one is shown next to it. The ratios use the p50: on a busy machine the stalls
/// reach into the middle 90% too, and the p50 is the figure they move least (not one they
/// cannot move).
fn trimmed_mean(sorted: &[f64]) -> f64 {
    let cut = (sorted.len() as f64 * TRIM).floor() as usize;
    let mid = &sorted[cut.min(sorted.len())..sorted.len().saturating_sub(cut)];
    if mid.is_empty() {
        return f64::NAN;
    }
    mid.iter().sum::<f64>() / mid.len() as f64
}

impl Acc {
    fn kept(&self, noise: &Rounds) -> Acc {
        Acc {
            p50: noise.pick(&self.p50),
            p99: noise.pick(&self.p99),
            p999: noise.pick(&self.p999),
            mean: noise.pick(&self.mean),
            trimmed: noise.pick(&self.trimmed),
            last: self.last.clone(),
        }
    }
}

/// `a[r] - b[r]` in µs (values in ms): the median over the rounds, then `(min..max)`.
fn round_diff_us(a: &[f64], b: &[f64]) -> String {
    if a.is_empty() || a.len() != b.len() {
        return "-".into();
    }
    let mut d: Vec<f64> = a
        .iter()
        .zip(b)
        .filter(|(a, b)| report::present(**a) && report::present(**b))
        .map(|(a, b)| (a - b) * 1000.0)
        .collect();
    if d.is_empty() {
        return "-".into();
    }
    d.sort_by(f64::total_cmp);
    let med = d[d.len() / 2];
    if d.len() == 1 {
        format!("{med:+.1}")
    } else {
        format!("{med:+.1} ({:+.1}..{:+.1})", d[0], d[d.len() - 1])
    }
}

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let rounds = ctx.opts.rounds;
    let secs = ctx.opts.round_secs;
    // Pinned as overhead's headline mode: each side owns a core, so the Go runtime's and
    // tokio's idle threads do not trade cores with the other side's. Pinned, the per-round
    // ratios spread about half as wide as unpinned, and two runs' medians agree better.
    let pinned = ctx.env.taskset && ctx.env.cpus >= 2;
    let (srv_cpu, load_cpu, threads) = if pinned {
        (Some(0), Some(1), 1)
    } else {
        (None, None, 0)
    };
    let spec = ServerSpec {
        profile: Profile::Quiet,
        cpu: srv_cpu,
        threads,
        ..ServerSpec::default()
    };
    let rust = ctx.server(Side::Rust, &spec)?;
    let go = ctx.server(Side::Go, &spec);
    let tonic = ctx.server(
        Side::Rust,
        &ServerSpec {
            cpu: srv_cpu,
            threads,
            ..ServerSpec::default()
        },
    )?;
    let mut table = Table::new(
        &format!("C=1, {secs} s per run, median of {rounds} alternating runs"),
        &[
            "pair",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "mean ms",
            "5% trimmed mean ms",
            "p50 vs Go -> Go (min..max)",
        ],
    );
    let mut client_table = Table::new(
        &format!(
            "zrpc client vs bare tonic channel, both calling one bare tonic server: C=1, {secs} s per run, the same alternating runs"
        ),
        &[
            "client -> server",
            "p50 ms",
            "p50 - bare tonic channel, µs (min..max)",
            "p50 vs bare tonic channel (min..max)",
            "p99 ms",
            "mean ms",
            "5% trimmed mean ms",
        ],
    );
    let pb = ctx.progress((rounds * PAIRS.len()) as u64, "latency");
    let mut acc: Vec<Acc> = vec![Acc::default(); PAIRS.len()];
    let mut skipped: Vec<Option<String>> = vec![None; PAIRS.len()];
    let mut noise = Rounds::default();
    let mut reruns = 0;
    for round in 0..rounds {
        for k in 0..PAIRS.len() {
            let i = (k + round) % PAIRS.len();
            let (client, target, name) = PAIRS[i];
            pb.set_message(name);
            let addr = match (target, &go) {
                (Target::Zrpc, _) => rust.addr.clone(),
                (Target::Tonic, _) => tonic.addr.clone(),
                (Target::GoZero, Ok(g)) => g.addr.clone(),
                (Target::GoZero, Err(e)) => {
                    skipped[i] = Some(format!("{e:#}"));
                    pb.inc(1);
                    continue;
                }
            };
            let spec = LoadSpec {
                endpoints: vec![addr],
                concurrency: 1,
                duration_ms: (secs * 1000.0).round() as u64,
                warmup: ctx.size(50, 200),
                records: true,
                cpu: load_cpu,
                threads,
                ..LoadSpec::default()
            };
            // A run that completed no call is run once more, then counts as missing (NaN: left
            // out of the medians and of that round's ratios), never an extreme ratio.
            let (result, lost) = ctx.load_rerun_empty(client, &spec, &mut reruns);
            noise.record(round, lost);
            match result {
                Ok((s, recs)) => {
                    let a = &mut acc[i];
                    let mut lat: Vec<f64> = recs.iter().map(|r| r.latency_ms).collect();
                    lat.sort_by(f64::total_cmp);
                    if s.calls == 0 || lat.is_empty() {
                        for v in [&mut a.p50, &mut a.p99, &mut a.p999, &mut a.mean] {
                            v.push(MISSING);
                        }
                        a.trimmed.push(MISSING);
                    } else {
                        a.p50.push(s.p50_ms);
                        a.p99.push(s.p99_ms);
                        a.p999.push(s.p999_ms);
                        a.mean.push(s.elapsed_ms / s.calls as f64);
                        a.trimmed.push(trimmed_mean(&lat));
                        a.last = recs.iter().map(|r| r.latency_ms).collect();
                    }
                }
                Err(e) if client == Gen::GoZero => skipped[i] = Some(format!("{e:#}")),
                Err(e) => return Err(e),
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let acc: Vec<Acc> = acc.iter().map(|a| a.kept(&noise)).collect();
    let mut series = Vec::new();
    for (i, (_, _, name)) in PAIRS.iter().enumerate() {
        if let Some(why) = &skipped[i] {
            let t = if i < TONIC {
                &mut table
            } else {
                &mut client_table
            };
            t.skipped_row(name, why);
            continue;
        }
        let a = &acc[i];
        if i < TONIC {
            table.row(vec![
                (*name).into(),
                f(median(a.p50.clone()), 3),
                f(median(a.p99.clone()), 3),
                f(median(a.p999.clone()), 3),
                f(median(a.mean.clone()), 3),
                f(median(a.trimmed.clone()), 3),
                if skipped[GO_GO].is_some() {
                    "-".into()
                } else {
                    round_ratio(&a.p50, &acc[GO_GO].p50)
                },
            ]);
        } else {
            let bare = &acc[TONIC];
            client_table.row(vec![
                (*name).into(),
                f(median(a.p50.clone()), 3),
                round_diff_us(&a.p50, &bare.p50),
                round_ratio(&a.p50, &bare.p50),
                f(median(a.p99.clone()), 3),
                f(median(a.mean.clone()), 3),
                f(median(a.trimmed.clone()), 3),
            ]);
        }
        series.push((name.to_string(), charts::cdf(&a.last)));
    }
    let chart = "latency-cdf.svg";
    charts::lines(
        &ctx.charts.join(chart),
        "Serial calls (C=1): latency CDF, last round",
        ("latency, ms (log)", "fraction of calls"),
        XAxis::Log,
        Some((0.0, 1.0)),
        &series,
    )?;
    let mut notes = vec![noise.note("serial calls")];
    if !pinned {
        notes.push(
            "unpinned: taskset or a second CPU is missing; servers and clients ran with their \
             default threads on any CPU (the figures spread more from round to round)."
                .to_owned(),
        );
    }
    let missing: usize = acc.iter().map(|a| report::missing(&a.p50)).sum();
    if missing > 0 || reruns > 0 {
        notes.push(format!(
            "{reruns} run(s) completed no call and were run again; {missing} still had none and \
             count as missing (left out of that round's ratios)."
        ));
    }
    if skipped[TONIC].is_none() && skipped[ZRPC_TONIC].is_none() {
        notes.push(format!(
            "zrpc client vs bare tonic channel, serial: p50 {} ms vs {} ms, the median per-round \
             difference is {} µs.",
            f(median(acc[ZRPC_TONIC].p50.clone()), 3),
            f(median(acc[TONIC].p50.clone()), 3),
            round_diff_us(&acc[ZRPC_TONIC].p50, &acc[TONIC].p50)
                .split_whitespace()
                .next()
                .unwrap_or("-")
        ));
    }
    Ok(Section {
        title: String::new(),
        intro: "One caller, one call at a time, over loopback. Pinned as the overhead \
                section's headline mode: every server on CPU 0 with one runtime thread \
                (GOMAXPROCS=1 for go-zero), every client on CPU 1 with one thread, so each side \
                owns a core (without taskset or a second CPU, both sides run unpinned and a note \
                says so). Every run lasts the same time; the six pairs alternate round by round (the order \
                rotates) and each table gives medians over the rounds (the noise monitor's rule \
                of the overhead section applies: busy rounds are left out whole when at least 3 \
                quiet ones remain). Mean is wall time / calls (what a chain of dependent calls \
                pays), and the 5% trimmed mean (the calls between the 5th and the 95th percentile \
                of a run, averaged) is shown next to it; neither is compared. Both move with a \
                few stalls of some ms (a GC cycle, a neighbour's time slice) among thousands of \
                sub-ms calls: the plain mean by 10-30% from round to round on a quiet machine, \
                and on a busy one (most of the machine taken by others) the stalls reach into \
                the middle 90% too. The ratios are therefore taken on the p50 (the \
                median call), round by round. \
                The second table is the client's own cost: the zrpc client (default \
                layers, one endpoint) and a bare tonic channel call the same bare tonic server; \
                the p50 difference is taken round by round (both clients ran in the same round), \
                then its median over the rounds, with its spread."
            .into(),
        tables: vec![table, client_table],
        charts: vec![("serial latency CDF".into(), chart.into())],
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trimmed_mean_cuts_five_percent_from_each_end() {
        // 100 calls of 0.2 ms and 0.3 ms, two stalls of 20 ms: the plain mean doubles, the
        // trimmed one stays with the typical call.
        let mut lat: Vec<f64> = (0..98)
            .map(|i| if i % 2 == 0 { 0.2 } else { 0.3 })
            .collect();
        lat.extend([20.0, 20.0]);
        lat.sort_by(f64::total_cmp);
        let mean = lat.iter().sum::<f64>() / lat.len() as f64;
        assert!(mean > 0.6, "{mean}");
        let t = trimmed_mean(&lat);
        assert!((0.24..0.26).contains(&t), "{t}");
        assert_eq!(trimmed_mean(&[0.5]), 0.5, "one call: nothing cut");
        assert!(trimmed_mean(&[]).is_nan());
    }

    #[test]
    fn the_p50_difference_is_the_median_of_per_round_differences_in_microseconds() {
        // Round 2 was slow for both clients: its difference is still 8 µs.
        let zrpc = [0.108, 0.508, 0.112];
        let tonic = [0.100, 0.500, 0.100];
        assert_eq!(round_diff_us(&zrpc, &tonic), "+8.0 (+8.0..+12.0)");
        assert_eq!(round_diff_us(&[0.1], &[0.105]), "-5.0");
        assert_eq!(round_diff_us(&[0.1], &[]), "-");
    }
}
