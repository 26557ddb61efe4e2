//! Latency: one call at a time (C=1) for the four client/server pairs Rust->Rust, Rust->Go,
//! Go->Rust and Go->Go (zrpc client and server with the quiet profile, go-zero's likewise).

use anyhow::Result;

use super::{Ctx, Gen, LoadSpec, Profile, ServerSpec, Side};
use crate::charts::{self, XAxis};
use crate::report::{Section, Table, f, round_ratio};
use crate::stats::median;

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let rounds = ctx.opts.rounds;
    let calls: u64 = ctx.size(300, 4_000);
    let spec = ServerSpec {
        profile: Profile::Quiet,
        ..ServerSpec::default()
    };
    let rust = ctx.server(Side::Rust, &spec)?;
    let go = ctx.server(Side::Go, &spec);
    let pairs: [(Gen, Side, &str); 4] = [
        (
            Gen::Zrpc("p2c_ewma"),
            Side::Rust,
            "Rust -> Rust (zrpc -> zrpc)",
        ),
        (
            Gen::Zrpc("p2c_ewma"),
            Side::Go,
            "Rust -> Go (zrpc -> go-zero)",
        ),
        (Gen::GoZero, Side::Rust, "Go -> Rust (go-zero -> zrpc)"),
        (Gen::GoZero, Side::Go, "Go -> Go (go-zero -> go-zero)"),
    ];
    let mut table = Table::new(
        &format!("C=1, {calls} calls per run, median of {rounds} alternating runs"),
        &[
            "pair",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "mean ms",
            "mean vs Go -> Go (min..max)",
        ],
    );
    let pb = ctx.progress((rounds * pairs.len()) as u64, "latency");
    // Per pair: p50s, p99s, p99.9s, means (one per round) and the last round's latencies.
    type Acc = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);
    let mut acc: Vec<Acc> = vec![Acc::default(); pairs.len()];
    let mut skipped: Vec<Option<String>> = vec![None; pairs.len()];
    for round in 0..rounds {
        for k in 0..pairs.len() {
            let i = (k + round) % pairs.len();
            let (client, side, name) = pairs[i];
            pb.set_message(name);
            let addr = match (side, &go) {
                (Side::Rust, _) => rust.addr.clone(),
                (Side::Go, Ok(g)) => g.addr.clone(),
                (Side::Go, Err(e)) => {
                    skipped[i] = Some(format!("{e:#}"));
                    pb.inc(1);
                    continue;
                }
            };
            let spec = LoadSpec {
                endpoints: vec![addr],
                concurrency: 1,
                calls,
                warmup: calls / 10,
                records: true,
                ..LoadSpec::default()
            };
            match ctx.load(client, &spec) {
                Ok((s, recs)) => {
                    let a = &mut acc[i];
                    a.0.push(s.p50_ms);
                    a.1.push(s.p99_ms);
                    a.2.push(s.p999_ms);
                    a.3.push(s.elapsed_ms / s.calls.max(1) as f64);
                    a.4 = recs.iter().map(|r| r.latency_ms).collect();
                }
                Err(e) if client == Gen::GoZero => skipped[i] = Some(format!("{e:#}")),
                Err(e) => return Err(e),
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let go_go = acc[3].3.clone();
    let mut series = Vec::new();
    for (i, (_, _, name)) in pairs.iter().enumerate() {
        if let Some(why) = &skipped[i] {
            table.skipped_row(name, why);
            continue;
        }
        let a = &acc[i];
        let mean = median(a.3.clone());
        table.row(vec![
            (*name).into(),
            f(median(a.0.clone()), 3),
            f(median(a.1.clone()), 3),
            f(median(a.2.clone()), 3),
            f(mean, 3),
            if skipped[3].is_some() {
                "-".into()
            } else {
                round_ratio(&a.3, &go_go)
            },
        ]);
        series.push((name.to_string(), charts::cdf(&a.4)));
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
    Ok(Section {
        title: String::new(),
        intro: "One caller, one call at a time, over loopback; client and server unpinned. \
                Mean is wall time / calls (what a chain of dependent calls pays)."
            .into(),
        tables: vec![table],
        charts: vec![("serial latency CDF".into(), chart.into())],
        notes: Vec::new(),
    })
}
