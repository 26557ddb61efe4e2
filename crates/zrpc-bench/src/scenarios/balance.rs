//! Balance: the slow-node scenario. Servers A and B answer in 10 ms, C in 1000 ms (fresh servers for
//! every run, so that each client starts cold). Open loop at 20/200/2000 calls/s and closed loop
//! at C=1 and C=20, for zrpc's p2c_ewma, zrpc's round_robin and go-zero's client: the share of
//! calls sent to C, latency percentiles, failures.

use anyhow::Result;

use super::{Ctx, Gen, LoadSpec, Profile, ServerSpec, Side};
use crate::charts::{self, XAxis};
use crate::report::{Section, Table, f};
use crate::stats::Record;

const CLIENTS: [Gen; 3] = [Gen::Zrpc("p2c_ewma"), Gen::Zrpc("round_robin"), Gen::GoZero];

#[derive(Debug, Clone, Copy)]
enum Load {
    Open(f64),
    Closed(usize),
}

impl Load {
    fn name(self) -> String {
        match self {
            Load::Open(r) => format!("open {r:.0}/s"),
            Load::Closed(c) => format!("closed C={c}"),
        }
    }
}

/// Share of calls sent to `slow` per `bucket_ms` window: (window end s, share %).
fn share_over_time(recs: &[Record], slow: &str, bucket_ms: f64) -> Vec<(f64, f64)> {
    let Some(last) = recs.iter().map(|r| r.start_ms).reduce(f64::max) else {
        return Vec::new();
    };
    let n = (last / bucket_ms).floor() as usize + 1;
    let mut tot = vec![0u64; n];
    let mut hit = vec![0u64; n];
    for r in recs {
        let b = (r.start_ms / bucket_ms) as usize;
        tot[b] += 1;
        if r.server == slow {
            hit[b] += 1;
        }
    }
    (0..n)
        .filter(|&b| tot[b] > 0)
        .map(|b| {
            (
                (b as f64 + 1.0) * bucket_ms / 1000.0,
                hit[b] as f64 * 100.0 / tot[b] as f64,
            )
        })
        .collect()
}

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let ms = |quick, full| {
        ctx.opts
            .balance_secs
            .map_or(ctx.size(quick, full), |s| s * 1000)
    };
    let loads: Vec<(Load, u64)> = vec![
        (Load::Open(20.0), ms(500, 10_000)),
        (Load::Open(200.0), ms(500, 8_000)),
        (Load::Open(2000.0), ms(500, 5_000)),
        (Load::Closed(1), ms(500, 8_000)),
        (Load::Closed(20), ms(500, 6_000)),
    ];
    let wanted = &ctx.opts.balance_clients;
    let clients: Vec<Gen> = CLIENTS
        .into_iter()
        .filter(|c| {
            let name = match c {
                Gen::Zrpc(b) => *b,
                Gen::GoZero => "go-zero",
                Gen::Tonic => "tonic",
            };
            wanted.is_empty() || wanted.iter().any(|w| w == name)
        })
        .collect();
    let mut table = Table::new(
        "A, B: 10 ms; C: 1000 ms. One run per cell, fresh servers per run",
        &[
            "load",
            "client",
            "calls",
            "share to C",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "failed",
        ],
    );
    let pb = ctx.progress((loads.len() * clients.len()) as u64, "balance");
    let mut share_series = Vec::new();
    let mut cdf_series = Vec::new();
    for (load, ms) in &loads {
        for &client in &clients {
            pb.set_message(format!("{} {}", load.name(), client.label()));
            if let (Gen::GoZero, Err(e)) = (client, ctx.gozero()) {
                table.skipped_row(&format!("{} | {}", load.name(), client.label()), e);
                pb.inc(1);
                continue;
            }
            // zrpc servers with every middleware off: a bare tonic server would refuse the
            // go-zero client's multi-address `:authority` (see docs/migrating-from-go-zero.md),
            // which zrpc repairs; the balancer under test is the client's.
            let spec = |delay_ms| ServerSpec {
                profile: Profile::Minimal,
                delay_ms,
                ..ServerSpec::default()
            };
            let a = ctx.server(Side::Rust, &spec(10))?;
            let b = ctx.server(Side::Rust, &spec(10))?;
            let c = ctx.server(Side::Rust, &spec(1000))?;
            let mut ls = LoadSpec {
                endpoints: vec![a.addr.clone(), b.addr.clone(), c.addr.clone()],
                duration_ms: *ms,
                records: true,
                ..LoadSpec::default()
            };
            match load {
                Load::Open(r) => ls.rate = *r,
                Load::Closed(n) => ls.concurrency = *n,
            }
            let (s, recs) = ctx.load(client, &ls)?;
            let to_c = s.servers.get(&c.addr).copied().unwrap_or(0);
            table.row(vec![
                load.name(),
                client.label(),
                s.calls.to_string(),
                format!("{}%", f(to_c as f64 * 100.0 / s.calls.max(1) as f64, 3)),
                f(s.p50_ms, 1),
                f(s.p99_ms, 1),
                f(s.p999_ms, 1),
                s.failed.to_string(),
            ]);
            if matches!(load, Load::Open(r) if *r >= 2000.0) {
                share_series.push((client.label(), share_over_time(&recs, &c.addr, 250.0)));
            }
            if matches!(load, Load::Open(r) if (*r - 200.0).abs() < 1.0) {
                let lat: Vec<f64> = recs.iter().map(|r| r.latency_ms).collect();
                cdf_series.push((client.label(), charts::cdf(&lat)));
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let share = "balance-share-2000rps.svg";
    charts::lines(
        &ctx.charts.join(share),
        "Share of calls sent to the slow node C over time, open loop 2000/s (250 ms windows)",
        ("time since start, s", "share to C, %"),
        XAxis::Linear,
        None,
        &share_series,
    )?;
    let cdf = "balance-cdf-200rps.svg";
    charts::lines(
        &ctx.charts.join(cdf),
        "Latency CDF, open loop 200/s",
        ("latency, ms (log)", "fraction of calls"),
        XAxis::Log,
        Some((0.0, 1.0)),
        &cdf_series,
    )?;
    Ok(Section {
        title: String::new(),
        intro: "Three zrpc servers with every middleware off, on loopback (the same for every \
                client; the balancer under test is the client's). Open loop: calls are sent on schedule \
                whatever the answers; closed loop: C callers, each waiting for its answer. \
                Client timeout 2 s (both clients' default)."
            .into(),
        tables: vec![table],
        charts: vec![
            ("share to the slow node over time".into(), share.into()),
            ("latency CDF at 200/s".into(), cdf.into()),
        ],
        notes: Vec::new(),
    })
}
