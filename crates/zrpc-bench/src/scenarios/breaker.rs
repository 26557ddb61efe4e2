//! Breaker: an open loop at 1000 calls/s against one backend that fails every call (Internal)
//! for 20 s from its first call, then heals. zrpc's client vs go-zero's client: time to the
//! first call the client's breaker drops, calls that still reached the dead backend, and time
//! after healing until >= 95% of calls succeed.

use anyhow::Result;

use super::{Ctx, Gen, LoadSpec, Profile, ServerSpec, Side};
use crate::charts::{self, XAxis};
use crate::report::{Section, Table, f};
use crate::stats::{DROPPED, Record};

const CLIENTS: [Gen; 2] = [Gen::Zrpc("p2c_ewma"), Gen::GoZero];
const BUCKET_MS: f64 = 200.0;

/// Per window: (end s, ok %, dropped %).
fn timeline(recs: &[Record]) -> Vec<(f64, f64, f64)> {
    let Some(last) = recs.iter().map(|r| r.start_ms).reduce(f64::max) else {
        return Vec::new();
    };
    let n = (last / BUCKET_MS) as usize + 1;
    let mut t = vec![(0u64, 0u64, 0u64); n];
    for r in recs {
        let b = &mut t[(r.start_ms / BUCKET_MS) as usize];
        b.0 += 1;
        if r.code == 0 {
            b.1 += 1;
        }
        if r.code == DROPPED {
            b.2 += 1;
        }
    }
    t.iter()
        .enumerate()
        .filter(|(_, b)| b.0 > 0)
        .map(|(i, b)| {
            (
                (i as f64 + 1.0) * BUCKET_MS / 1000.0,
                b.1 as f64 * 100.0 / b.0 as f64,
                b.2 as f64 * 100.0 / b.0 as f64,
            )
        })
        .collect()
}

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let fail_ms: u64 = ctx.size(2_000, 20_000);
    let heal_ms: u64 = ctx.size(2_000, 10_000);
    let rate: f64 = ctx.size(300.0, 1000.0);
    let mut table = Table::new(
        &format!(
            "Open loop {rate:.0}/s; the backend fails 100% for {} s, then heals; {} s observed after healing",
            fail_ms / 1000,
            heal_ms / 1000
        ),
        &[
            "client",
            "time to first drop, ms",
            "calls during the outage",
            "of them reached the dead backend",
            "time to >= 95% success after healing, ms",
            "success after healing",
        ],
    );
    let pb = ctx.progress(CLIENTS.len() as u64, "breaker");
    let mut series = Vec::new();
    for client in CLIENTS {
        pb.set_message(client.label());
        if let (Gen::GoZero, Err(e)) = (client, ctx.gozero()) {
            table.skipped_row(&client.label(), e);
            pb.inc(1);
            continue;
        }
        let backend = ctx.server(
            Side::Rust,
            &ServerSpec {
                profile: Profile::Tonic,
                fail_ms,
                ..ServerSpec::default()
            },
        )?;
        let (_, recs) = ctx.load(
            client,
            &LoadSpec {
                endpoints: vec![backend.addr.clone()],
                rate,
                duration_ms: fail_ms + heal_ms,
                records: true,
                ..LoadSpec::default()
            },
        )?;
        let stopped = backend.stop();
        let reached = stopped
            .as_ref()
            .and_then(|v| v["failed_phase_calls"].as_u64())
            .unwrap_or(0);
        let fail = fail_ms as f64;
        let first_drop = recs
            .iter()
            .filter(|r| r.code == DROPPED)
            .map(|r| r.start_ms)
            .reduce(f64::min);
        let during = recs.iter().filter(|r| r.start_ms < fail).count();
        let tl = timeline(&recs);
        let recovered = tl
            .iter()
            .find(|(end, ok, _)| *end * 1000.0 > fail + BUCKET_MS && *ok >= 95.0)
            .map(|(end, _, _)| end * 1000.0 - fail);
        let after: Vec<&Record> = recs.iter().filter(|r| r.start_ms >= fail).collect();
        let after_ok = after.iter().filter(|r| r.code == 0).count();
        table.row(vec![
            client.label(),
            first_drop.map_or("never".into(), |v| f(v, 0)),
            during.to_string(),
            format!(
                "{reached} ({}%)",
                f(reached as f64 * 100.0 / during.max(1) as f64, 1)
            ),
            recovered.map_or("not within the run".into(), |v| format!("<= {}", f(v, 0))),
            format!(
                "{}%",
                f(after_ok as f64 * 100.0 / after.len().max(1) as f64, 1)
            ),
        ]);
        series.push((
            format!("{}: success %", client.label()),
            tl.iter().map(|p| (p.0, p.1)).collect(),
        ));
        series.push((
            format!("{}: dropped by breaker %", client.label()),
            tl.iter().map(|p| (p.0, p.2)).collect(),
        ));
        pb.inc(1);
    }
    pb.finish_and_clear();
    let chart = "breaker-timeline.svg";
    charts::lines(
        &ctx.charts.join(chart),
        &format!(
            "Breaker timeline ({} ms windows); the backend heals at {} s",
            BUCKET_MS,
            fail_ms / 1000
        ),
        ("time since start, s", "% of calls"),
        XAxis::Linear,
        Some((0.0, 100.0)),
        &series,
    )?;
    Ok(Section {
        title: String::new(),
        intro: "One bare tonic backend that answers `Internal` to every call for the outage \
                (counted from its first call), then OK. \"Reached the dead backend\" is the \
                backend's own count of calls it failed; the rest were dropped by the client's \
                breaker before leaving the process. The time to 95% success is measured in \
                200 ms windows (an upper bound at that resolution)."
            .into(),
        tables: vec![table],
        charts: vec![("breaker timeline".into(), chart.into())],
        notes: Vec::new(),
    })
}
