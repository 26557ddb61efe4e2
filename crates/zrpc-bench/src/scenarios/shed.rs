//! Shedding: a CPU-bound handler (1 ms of spinning per call) on one pinned core, first
//! measured for capacity (closed loop), then at half capacity (unloaded latency) and at twice
//! capacity (open loop): goodput and the p99 of admitted calls, zrpc vs go-zero, both with
//! adaptive shedding on (`CpuThreshold: 900`, go-zero's default).
//!
//! Capacity is what the server completes when it is never idle: a closed loop of 8 callers
//! (8 calls queued on a core that serves one at a time) against the very server that is then
//! overloaded, after a warm-up. Rates come from the calls' own records over the send window
//! (not from the wall time of the run, which includes the last calls' tail of up to the 2 s
//! deadline): the offered rate is what the generator really sent, so the table shows that the
//! overload really was 2x, and goodput counts the calls that succeeded within the window.

use anyhow::Result;

use super::{Ctx, Gen, LoadSpec, Profile, ServerSpec, Side};
use crate::report::{Section, Table, f, ratio};
use crate::stats::{Record, percentile};

/// Calls/s over the send window `[from, to)` ms: sent (`ok_only` false) or answered OK.
fn window_rate(recs: &[Record], from: f64, to: f64, ok_only: bool) -> f64 {
    let n = recs
        .iter()
        .filter(|r| {
            if ok_only {
                let end = r.start_ms + r.latency_ms;
                r.code == 0 && end >= from && end < to
            } else {
                r.start_ms >= from && r.start_ms < to
            }
        })
        .count();
    n as f64 * 1000.0 / (to - from).max(1.0)
}

/// The p99 latency of the OK calls, taken per 1 s window of start times over `[from, to)` ms,
/// then the median over the windows: one second in which a neighbour stalled the server moves
/// one window's p99, not the figure (a plain p99 of a few thousand calls is its 30 worst).
fn windowed_p99(recs: &[Record], from: f64, to: f64) -> f64 {
    let windows = ((to - from) / 1000.0).floor().max(1.0) as usize;
    let width = (to - from) / windows as f64;
    let mut p99s: Vec<f64> = (0..windows)
        .filter_map(|w| {
            let (a, b) = (from + w as f64 * width, from + (w + 1) as f64 * width);
            let mut lat: Vec<f64> = recs
                .iter()
                .filter(|r| r.code == 0 && r.start_ms >= a && r.start_ms < b)
                .map(|r| r.latency_ms)
                .collect();
            lat.sort_by(f64::total_cmp);
            (!lat.is_empty()).then(|| percentile(&lat, 0.99))
        })
        .collect();
    p99s.sort_by(f64::total_cmp);
    p99s.get(p99s.len() / 2).copied().unwrap_or(0.0)
}

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let pinned = ctx.env.taskset && ctx.env.cpus >= 2;
    let (srv_cpu, load_cpu) = if pinned {
        (Some(0), Some(1))
    } else {
        (None, None)
    };
    let spin_us = 1000;
    let mut table = Table::new(
        "Handler: 1 ms CPU per call, server on one core; offered load open loop",
        &[
            "server",
            "capacity calls/s (closed loop C=8)",
            "calls shed while probing",
            "unloaded p99 ms (0.5x)",
            "offered calls/s (sent)",
            "offered / capacity",
            "goodput calls/s",
            "goodput / capacity",
            "admitted p99 ms",
            "admitted p99 vs unloaded",
            "shed (ResourceExhausted)",
            "other failures",
        ],
    );
    let sides = [(Side::Rust, "zrpc"), (Side::Go, "go-zero")];
    let pb = ctx.progress(sides.len() as u64 * 3, "shed");
    let mut lost = Vec::new();
    for (side, name) in sides {
        if let (Side::Go, Err(e)) = (side, ctx.gozero()) {
            table.skipped_row(name, e);
            pb.inc(3);
            continue;
        }
        let server = ctx.server(
            side,
            &ServerSpec {
                profile: Profile::Quiet,
                spin_us,
                shedding: true,
                cpu: srv_cpu,
                threads: 1,
                ..ServerSpec::default()
            },
        )?;
        let base = LoadSpec {
            endpoints: vec![server.addr.clone()],
            timeout_ms: 2000,
            cpu: load_cpu,
            threads: 1,
            ..LoadSpec::default()
        };
        pb.set_message(format!("{name}: capacity"));
        let (cap, _) = ctx.load(
            Gen::Tonic,
            &LoadSpec {
                concurrency: 8,
                duration_ms: ctx.size(700, 4_000),
                warmup: 200,
                ..base.clone()
            },
        )?;
        let capacity = cap.ok as f64 * 1000.0 / cap.elapsed_ms.max(1.0);
        let probe_shed = cap.failed;
        pb.inc(1);
        pb.set_message(format!("{name}: 0.5x"));
        // Ten per-second p99s (was five): the unloaded p99 of a 1 ms handler is a few ms, so a
        // neighbour's time slice on the server's core moves one second's p99 by half of it;
        // the median of ten such seconds moves less than the median of five.
        let unloaded_ms = ctx.size(1_000, 10_000);
        let (_, recs) = ctx.load(
            Gen::Tonic,
            &LoadSpec {
                rate: (capacity * 0.5).max(10.0),
                duration_ms: unloaded_ms,
                records: true,
                ..base.clone()
            },
        )?;
        let unloaded_p99 = windowed_p99(&recs, 0.0, unloaded_ms as f64);
        pb.inc(1);
        pb.set_message(format!("{name}: 2x"));
        let offered = (capacity * 2.0).max(20.0);
        let window_ms = ctx.size(1_500, 10_000);
        let before = ctx.noise.snap();
        let result = ctx.load(
            Gen::Tonic,
            &LoadSpec {
                rate: offered,
                duration_ms: window_ms,
                records: true,
                ..base.clone()
            },
        );
        lost.push(format!(
            "{name} {:.1}%",
            ctx.noise.lost_share(&before, &ctx.noise.snap()) * 100.0
        ));
        let (s, recs) = result?;
        // The first 20% of the window: the shedder's CPU reading and the queue build up.
        let from = window_ms as f64 * 0.2;
        let sent = window_rate(&recs, from, window_ms as f64, false);
        let admitted_p99 = windowed_p99(&recs, from, window_ms as f64);
        let goodput = window_rate(&recs, from, window_ms as f64, true);
        let shed = s.codes.get("ResourceExhausted").copied().unwrap_or(0);
        let other = s.failed - shed;
        table.row(vec![
            name.into(),
            f(capacity, 0),
            format!("{probe_shed} of {}", cap.calls),
            f(unloaded_p99, 1),
            f(sent, 0),
            ratio(sent, capacity),
            f(goodput, 0),
            ratio(goodput, capacity),
            f(admitted_p99, 1),
            ratio(admitted_p99, unloaded_p99),
            format!(
                "{shed} ({}%)",
                f(shed as f64 * 100.0 / s.calls.max(1) as f64, 1)
            ),
            format!("{other} of {}", s.calls),
        ]);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let mut notes = vec![format!(
        "Noise monitor: share of the machine other processes and steal took during the 2x run: \
         {}. Both shedders read the whole machine's CPU, so this share moves when they shed.",
        lost.join(", ")
    )];
    if !pinned {
        notes.push("unpinned: taskset or a second CPU is missing, so the server's core is shared with the load generator".into());
    }
    Ok(Section {
        title: String::new(),
        intro: "Both servers run their full default chain with adaptive shedding on \
                (`CpuThreshold: 900`) and a 2 s server timeout; the load generator is a bare \
                tonic channel with a 2 s deadline, on the other core. Both shedders read the \
                machine's (cgroup's) CPU usage, not the pinned core's, so on a 2-core box a \
                saturated core alone may not reach their 90% threshold: the table shows what \
                each server actually did. Capacity: a closed loop of 8 callers on the same \
                server (never idle), OK calls per second. At 2x the rates are taken from the \
                calls' records over the steady part of the window (its last 80%): sent calls \
                per second (offered / capacity shows the overload really was 2x) and calls \
                answered OK per second (goodput). Both p99s are taken per second of \
                send time (the admitted one over the steady part), then the median over those \
                seconds: one second in which a neighbour stalled the server does not decide the \
                figure."
            .into(),
        tables: vec![table],
        charts: Vec::new(),
        notes,
    })
}
