//! Latency: one call at a time (C=1) for the four client/server pairs Rust->Rust, Rust->Go,
//! Go->Rust and Go->Go (zrpc client and server with the quiet profile, go-zero's likewise), and
//! the zrpc client against a bare tonic channel, both calling one bare tonic server (what the
//! client adds to a serial call: issue 13's "serial p50 <= tonic + 10 µs").

use anyhow::Result;

use super::{Ctx, Gen, LoadSpec, Profile, ServerSpec, Side};
use crate::charts::{self, XAxis};
use crate::noise::Rounds;
use crate::report::{Section, Table, f, round_ratio};
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

/// Per pair: p50s, p99s, p99.9s, means (one per round) and the last round's latencies.
#[derive(Debug, Clone, Default)]
struct Acc {
    p50: Vec<f64>,
    p99: Vec<f64>,
    p999: Vec<f64>,
    mean: Vec<f64>,
    last: Vec<f64>,
}

impl Acc {
    fn kept(&self, noise: &Rounds) -> Acc {
        Acc {
            p50: noise.pick(&self.p50),
            p99: noise.pick(&self.p99),
            p999: noise.pick(&self.p999),
            mean: noise.pick(&self.mean),
            last: self.last.clone(),
        }
    }
}

/// `a[r] - b[r]` in µs (values in ms): the median over the rounds, then `(min..max)`.
fn round_diff_us(a: &[f64], b: &[f64]) -> String {
    if a.is_empty() || a.len() != b.len() {
        return "-".into();
    }
    let mut d: Vec<f64> = a.iter().zip(b).map(|(a, b)| (a - b) * 1000.0).collect();
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
    let spec = ServerSpec {
        profile: Profile::Quiet,
        ..ServerSpec::default()
    };
    let rust = ctx.server(Side::Rust, &spec)?;
    let go = ctx.server(Side::Go, &spec);
    let tonic = ctx.server(Side::Rust, &ServerSpec::default())?;
    let mut table = Table::new(
        &format!("C=1, {secs} s per run, median of {rounds} alternating runs"),
        &[
            "pair",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "mean ms",
            "mean vs Go -> Go (min..max)",
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
            "mean vs bare tonic channel (min..max)",
        ],
    );
    let pb = ctx.progress((rounds * PAIRS.len()) as u64, "latency");
    let mut acc: Vec<Acc> = vec![Acc::default(); PAIRS.len()];
    let mut skipped: Vec<Option<String>> = vec![None; PAIRS.len()];
    let mut noise = Rounds::default();
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
                ..LoadSpec::default()
            };
            let before = ctx.noise.snap();
            let result = ctx.load(client, &spec);
            noise.record(round, ctx.noise.lost_share(&before, &ctx.noise.snap()));
            match result {
                Ok((s, recs)) => {
                    let a = &mut acc[i];
                    a.p50.push(s.p50_ms);
                    a.p99.push(s.p99_ms);
                    a.p999.push(s.p999_ms);
                    a.mean.push(s.elapsed_ms / s.calls.max(1) as f64);
                    a.last = recs.iter().map(|r| r.latency_ms).collect();
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
                if skipped[GO_GO].is_some() {
                    "-".into()
                } else {
                    round_ratio(&a.mean, &acc[GO_GO].mean)
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
                round_ratio(&a.mean, &bare.mean),
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
        intro: "One caller, one call at a time, over loopback; client and server unpinned. Every \
                run lasts the same time; the six pairs alternate round by round (the order \
                rotates) and each table gives medians over the rounds (the noise monitor's rule \
                of the overhead section applies: busy rounds are left out whole when at least 3 \
                quiet ones remain). Mean is wall time / calls (what a chain of dependent calls \
                pays). The second table is the client's own cost: the zrpc client (default \
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
    fn the_p50_difference_is_the_median_of_per_round_differences_in_microseconds() {
        // Round 2 was slow for both clients: its difference is still 8 µs.
        let zrpc = [0.108, 0.508, 0.112];
        let tonic = [0.100, 0.500, 0.100];
        assert_eq!(round_diff_us(&zrpc, &tonic), "+8.0 (+8.0..+12.0)");
        assert_eq!(round_diff_us(&[0.1], &[0.105]), "-5.0");
        assert_eq!(round_diff_us(&[0.1], &[]), "-");
    }
}
