//! Overload of a handler bound by a downstream resource rather than by its CPU: each call waits
//! for one of 20 places (FIFO, as a connection pool) and holds it 10 ms, so the server serves
//! about 2,000 calls/s while its CPU stays low. Open-loop load at 0.5x, 1x, 2x and 4x that
//! capacity with go-zero's 2 s client deadline, against zrpc with no shedding, with go-zero's
//! CPU shedder (the default, which does not act here), with the adaptive concurrency limit, with
//! the limit and tiers (one call in ten critical), and against a real go-zero server with the
//! same handler and its default shedder. Then the limit through spikes of 1.4x and 2x: how long
//! after the spike its limit is back within 10 % of its value before.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Result;

use super::{Ctx, Gen, LoadSpec, Profile, ServerSpec, Side, unix_ms};
use crate::charts::{self, XAxis};
use crate::proc::free_port;
use crate::report::{Section, Table, f};
use crate::stats::{Record, percentile};

/// Places of the resource, and how long a call holds one.
const SLOTS: usize = 20;
const SLOT_MS: u64 = 10;
/// Calls per second the resource serves, in theory (a server's timer adds to each hold: the
/// capacity each server really has is measured, and the load is offered in multiples of it).
const NOMINAL: f64 = SLOTS as f64 * 1000.0 / SLOT_MS as f64;
const DEADLINE_MS: u64 = 2000;
/// `ResourceExhausted`.
const REJECTED: u32 = 8;
/// `DeadlineExceeded`, the server's answer at the deadline.
const TIMED_OUT: u32 = 4;
/// `Cancelled`: tonic's client answers `Cancelled "Timeout expired"` at its own deadline.
const CANCELLED: u32 = 1;
/// The generator's code for `Unavailable "circuit breaker is open"`: the server's breaker.
const BREAKER: u32 = crate::stats::DROPPED;
/// Connections the load is spread over, as many callers would send it: one connection holds at
/// most the server's `MaxConcurrentStreams` (1000) calls, and tonic's client keeps the others
/// unsent, which would bound the server's queue by the client's.
const CONNECTIONS: usize = 8;

/// A server and what guards it.
struct Config {
    name: &'static str,
    side: Side,
    shedding: bool,
    limit: bool,
    critical_every: u64,
    /// Its server's capacity is measured (and then holds for the rows of its side).
    probe: bool,
}

const CONFIGS: [Config; 5] = [
    Config {
        name: "zrpc, no shedding (CpuThreshold: 0)",
        side: Side::Rust,
        shedding: false,
        limit: false,
        critical_every: 0,
        probe: true,
    },
    Config {
        name: "zrpc, CPU shedder (default)",
        side: Side::Rust,
        shedding: true,
        limit: false,
        critical_every: 0,
        probe: false,
    },
    Config {
        name: "zrpc, concurrency limit",
        side: Side::Rust,
        shedding: true,
        limit: true,
        critical_every: 0,
        probe: false,
    },
    Config {
        name: "zrpc, limit + tiers (10% critical)",
        side: Side::Rust,
        shedding: true,
        limit: true,
        critical_every: 10,
        probe: false,
    },
    Config {
        name: "go-zero, CPU shedder (default)",
        side: Side::Go,
        shedding: true,
        limit: false,
        critical_every: 0,
        probe: true,
    },
];

/// What one load level came to, over the steady part of its run.
#[derive(Debug, Clone, Default)]
struct Level {
    offered: f64,
    goodput: f64,
    p50: f64,
    p99: f64,
    rejected: f64,
    breaker: f64,
    timed_out: f64,
    critical: Option<f64>,
}

/// The latencies of the admitted calls (not rejected at once) started in `[from, to)` ms,
/// sorted; a call that timed out counts at the deadline.
fn admitted(recs: &[Record], from: f64, to: f64) -> Vec<f64> {
    let mut v: Vec<f64> = recs
        .iter()
        .filter(|r| r.start_ms >= from && r.start_ms < to)
        .filter(|r| r.code != REJECTED && r.code != BREAKER)
        .map(|r| r.latency_ms.min(DEADLINE_MS as f64))
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The median over the 1 s windows of `[from, to)` of their admitted calls' p99 (windows
/// with fewer than 100 admitted calls left out, all of them when none has as many): one
/// second in which a neighbour stalled the server does not decide the figure.
fn p99_per_second(recs: &[Record], from: f64, to: f64) -> f64 {
    let n = ((to - from) / 1000.0).floor().max(1.0) as usize;
    let width = (to - from) / n as f64;
    let p99s: Vec<f64> = (0..n)
        .map(|w| admitted(recs, from + w as f64 * width, from + (w + 1) as f64 * width))
        .filter(|v| v.len() >= 100)
        .map(|v| percentile(&v, 0.99))
        .collect();
    if p99s.is_empty() {
        return percentile(&admitted(recs, from, to), 0.99);
    }
    crate::stats::median(p99s)
}

/// The figures of the calls started in `[from, to)` ms; goodput counts the calls that ended
/// OK in it (a rate of answers, whenever their calls were sent).
fn level(recs: &[Record], from: f64, to: f64) -> Level {
    let secs = (to - from) / 1000.0;
    let calls: Vec<&Record> = recs
        .iter()
        .filter(|r| r.start_ms >= from && r.start_ms < to)
        .collect();
    let n = calls.len().max(1) as f64;
    let admitted = admitted(recs, from, to);
    let count = |p: &dyn Fn(&Record) -> bool| calls.iter().filter(|r| p(r)).count() as f64;
    let critical = count(&|r| r.critical);
    Level {
        offered: calls.len() as f64 / secs,
        goodput: recs
            .iter()
            .filter(|r| {
                let end = r.start_ms + r.latency_ms;
                r.code == 0 && r.latency_ms <= DEADLINE_MS as f64 && end >= from && end < to
            })
            .count() as f64
            / secs,
        p50: percentile(&admitted, 0.5),
        p99: p99_per_second(recs, from, to),
        rejected: count(&|r| r.code == REJECTED) / n,
        breaker: count(&|r| r.code == BREAKER) / n,
        timed_out: count(&|r| r.code == TIMED_OUT || r.code == CANCELLED) / n,
        critical: (critical > 0.0).then(|| count(&|r| r.critical && r.code == 0) / critical),
    }
}

fn pct(v: f64) -> String {
    format!("{}%", f(v * 100.0, if v > 0.0 && v < 0.01 { 2 } else { 1 }))
}

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let pinned = ctx.env.taskset && ctx.env.cpus >= 2;
    let (srv_cpu, load_cpu) = if pinned {
        (Some(0), Some(1))
    } else {
        (None, None)
    };
    let own_cpu = if pinned {
        1
    } else {
        u32::try_from(ctx.env.cpus).unwrap_or(1)
    };
    let loads: &[f64] = ctx.size(&[0.5, 2.0], &[0.5, 1.0, 2.0, 4.0]);
    let run_ms = ctx.size(1_500, 12_000);
    // The steady part: after the queue of the unprotected servers has filled (their calls
    // wait up to the 2 s deadline) and the limit has settled.
    let from = run_ms as f64 / 3.0;
    let mut table = Table::new(
        &format!(
            "Handler: waits for 1 of {SLOTS} places and holds it {SLOT_MS} ms ({NOMINAL:.0} \
             calls/s in theory, CPU low); open loop at multiples of the capacity measured, \
             {DEADLINE_MS} ms deadline; the last {:.0} s of {:.0} s runs",
            (run_ms as f64 - from) / 1000.0,
            run_ms as f64 / 1000.0
        ),
        &[
            "server",
            "capacity calls/s (closed loop, 40 callers, median per s)",
            "offered (x capacity)",
            "offered calls/s",
            "goodput calls/s",
            "goodput / capacity",
            "admitted p50 ms",
            "admitted p99 ms",
            "admitted p99 / unloaded",
            "rejected (ResourceExhausted)",
            "breaker open",
            "timed out",
            "critical OK",
            "limit (median)",
        ],
    );
    let pb = ctx.progress((CONFIGS.len() * loads.len()) as u64, "overload");
    let mut goodput_series = Vec::new();
    let mut p99_series = Vec::new();
    let mut lost = Vec::new();
    // The capacity each side's server really has (its timer adds to each 10 ms hold), and
    // its p99 at half of it (the unloaded p99 of every row of its side).
    let mut capacity = [NOMINAL, NOMINAL];
    let mut unloaded = [f64::NAN, f64::NAN];
    for c in &CONFIGS {
        if let (Side::Go, Err(e)) = (c.side, ctx.gozero()) {
            table.skipped_row(c.name, e);
            pb.inc(loads.len() as u64);
            continue;
        }
        let dev = if c.limit { Some(free_port()?) } else { None };
        let server = ctx.server(
            c.side,
            &ServerSpec {
                profile: Profile::Quiet,
                shedding: c.shedding,
                limit: c.limit,
                slots: SLOTS,
                slot_ms: SLOT_MS,
                cpu: srv_cpu,
                dev_port: dev,
                own_cpu,
                ..ServerSpec::default()
            },
        )?;
        let side = usize::from(c.side == Side::Go);
        if c.probe {
            // A closed loop of twice as many callers as places: the resource never idles.
            pb.set_message(format!("{}: capacity", c.name));
            let probe_ms = ctx.size(1_000, 6_000);
            let (_, recs) = ctx.load(
                Gen::Tonic,
                &LoadSpec {
                    endpoints: vec![server.addr.clone()],
                    concurrency: 2 * SLOTS,
                    duration_ms: probe_ms,
                    warmup: 500,
                    timeout_ms: DEADLINE_MS,
                    records: true,
                    cpu: load_cpu,
                    ..LoadSpec::default()
                },
            )?;
            // The median of its seconds: a second in which a neighbour stalled the server
            // does not set the capacity every load is offered in multiples of.
            let per_second: Vec<f64> = (0..probe_ms / 1000)
                .map(|s| {
                    let a = s as f64 * 1000.0;
                    recs.iter()
                        .filter(|r| {
                            let end = r.start_ms + r.latency_ms;
                            r.code == 0 && end >= a && end < a + 1000.0
                        })
                        .count() as f64
                })
                .collect();
            capacity[side] = crate::stats::median(per_second);
        }
        let capacity = capacity[side];
        let (mut goodput, mut p99) = (Vec::new(), Vec::new());
        for &load in loads {
            pb.set_message(format!("{}: {load}x", c.name));
            let poller = dev.map(Poller::start);
            let before = ctx.noise.snap();
            let result = ctx.load(
                Gen::Tonic,
                &LoadSpec {
                    endpoints: vec![server.addr.clone()],
                    rate: load * capacity,
                    duration_ms: run_ms,
                    timeout_ms: DEADLINE_MS,
                    records: true,
                    critical_every: c.critical_every,
                    connections: CONNECTIONS,
                    cpu: load_cpu,
                    ..LoadSpec::default()
                },
            );
            lost.push(ctx.noise.lost_share(&before, &ctx.noise.snap()));
            let (summary, recs) = result?;
            let l = level(&recs, from, run_ms as f64);
            let limit = poller.map(Poller::stop).and_then(|trace| {
                let t0 = summary.t0_unix_ms;
                median_in(&trace, t0 + from, t0 + run_ms as f64)
            });
            if c.probe && load == loads[0] {
                unloaded[side] = l.p99;
            }
            let base = unloaded[side];
            table.row(vec![
                c.name.into(),
                f(capacity, 0),
                format!("{load}"),
                f(l.offered, 0),
                f(l.goodput, 0),
                format!("x{:.3}", l.goodput / capacity),
                f(l.p50, 1),
                f(l.p99, 1),
                format!("x{:.2}", l.p99 / base.max(1e-3)),
                pct(l.rejected),
                pct(l.breaker),
                pct(l.timed_out),
                l.critical
                    .map_or("-".into(), |v| format!("{}%", f(v * 100.0, 2))),
                limit.map_or("-".into(), |v| f(v, 0)),
            ]);
            goodput.push((load, l.goodput / capacity));
            p99.push((load, l.p99));
            pb.inc(1);
        }
        goodput_series.push((c.name.to_owned(), goodput));
        p99_series.push((c.name.to_owned(), p99));
    }
    pb.finish_and_clear();
    let goodput_chart = "overload-goodput.svg";
    charts::lines(
        &ctx.charts.join(goodput_chart),
        "Goodput (calls OK within the 2 s deadline) by offered load, resource-bound handler",
        ("offered load, x capacity", "goodput, x capacity"),
        XAxis::Linear,
        Some((0.0, 1.1)),
        &goodput_series,
    )?;
    let p99_chart = "overload-p99.svg";
    charts::lines(
        &ctx.charts.join(p99_chart),
        "p99 latency of admitted calls by offered load (clipped at 100 ms; without a limit it \
         reaches the 2 s deadline)",
        ("offered load, x capacity", "admitted p99, ms"),
        XAxis::Linear,
        Some((0.0, 100.0)),
        &p99_series,
    )?;
    let recovery = recovery(ctx, srv_cpu, load_cpu, own_cpu, capacity[0])?;
    Ok(Section {
        title: String::new(),
        intro: format!(
            "Every server is one process, {}; the load generator sends its calls over \
             {CONNECTIONS} bare tonic connections (as {CONNECTIONS} callers would), with a 2 s \
             deadline (go-zero's default), open loop. The servers run their default chain \
             (`Timeout` 2 s; zrpc with `CpuThreshold: 900` but in the first row, go-zero with \
             its default 900). zrpc's shedder reads the server process's own CPU usage over the \
             CPUs it runs on (`serve --own-cpu`: what it reads in a container of its own), \
             because this machine is shared and its CPUs are busy with other jobs, which the \
             default reading (the host's, with no container of its own) counts; go-zero's \
             shedder reads the host's, and sheds for the neighbours' load too (the noise monitor's \
             note below says how busy the machine was); the limit's rows add \
             `ConcurrencyLimit: {{}}` (Envoy's gradient controller with its defaults, `docs/overload.md`), the tiers' row sends \
             `zrpc-tier: critical` with every tenth call. Each load level runs {:.0} s on the \
             same server process, in increasing order; the figures are taken over the calls \
             started in its last {:.0} s: goodput counts the calls answered OK (within the \
             deadline) per second, admitted calls are those not rejected at once \
             (`ResourceExhausted`, or `Unavailable` from an open breaker; a call that timed out \
             counts at its deadline). p99s are the median over the run's 1 s windows of each \
             window's p99 (a second in which a neighbour stalled the server does not decide \
             the figure); the unloaded p99 of zrpc's rows is that of zrpc without shedding at \
             0.5x, of go-zero's that of go-zero at 0.5x. Capacity: \
             a closed loop of 40 callers (twice the places, so the resource never idles) for 6 s \
             on the server without shedding (zrpc's rows) and on go-zero's, the median of its \
             seconds' OK calls; \
             each server's timer adds to the 10 ms hold, so it is below the {NOMINAL:.0} calls/s \
             of the places' arithmetic, and the load is offered in multiples of it. go-zero \
             has no tiers.",
            if pinned {
                "pinned to CPU 0, the load generator to CPU 1"
            } else {
                "unpinned (taskset or a second CPU is missing)"
            },
            run_ms as f64 / 1000.0,
            (run_ms as f64 - from) / 1000.0,
        ),
        tables: vec![table, recovery],
        charts: vec![
            ("goodput by offered load".into(), goodput_chart.into()),
            ("admitted p99 by offered load".into(), p99_chart.into()),
        ],
        notes: vec![
            format!(
                "Noise monitor: share of the machine other processes and steal took during \
                 each load run: median {}%, max {}%.",
                f(crate::stats::median(lost.clone()) * 100.0, 1),
                f(lost.iter().copied().fold(0.0, f64::max) * 100.0, 1)
            ),
            "The CPU shedder (zrpc's and go-zero's) acts only while the CPU is above \
             `CpuThreshold` (90%): a server that waits on a downstream resource stays far \
             below it, queues every call, and answers nearly all of them after their \
             deadline. The limit needs no CPU signal: it sees the calls' latency grow past \
             its measured minimum and admits about as many calls as the resource serves \
             without a queue, rejecting the rest at once."
                .to_owned(),
            "`zrpc-sim limit` runs the same scenario in simulated time with the real limit \
             (docs/overload.md): no noise, and 60 s runs that include the limit's periodic \
             measurement of its minimum round-trip time."
                .to_owned(),
        ],
    })
}

/// The limit through spikes: 0.5x, then 1.4x or 2x, then 0.5x again, one server each, with
/// its `rpc_server_concurrency_limit` gauge read from its DevServer every 20 ms.
fn recovery(
    ctx: &Ctx<'_>,
    srv_cpu: Option<usize>,
    load_cpu: Option<usize>,
    own_cpu: u32,
    capacity: f64,
) -> Result<Table> {
    let mut table = Table::new(
        "The limit through a spike: 0.5x, the spike, 0.5x again (one server; the gauge read \
         every 20 ms)",
        &[
            "spike",
            "limit before (median)",
            "limit during the spike (median)",
            "limit after (median, last half)",
            "limit back to 90% of before after",
            "last call rejected after",
        ],
    );
    let phase_ms = ctx.size(1_000, 6_000);
    for &peak in ctx.size(&[2.0][..], &[1.4, 2.0][..]) {
        let dev = free_port()?;
        let server = ctx.server(
            Side::Rust,
            &ServerSpec {
                profile: Profile::Quiet,
                shedding: true,
                limit: true,
                slots: SLOTS,
                slot_ms: SLOT_MS,
                cpu: srv_cpu,
                dev_port: Some(dev),
                own_cpu,
                ..ServerSpec::default()
            },
        )?;
        let poller = Poller::start(dev);
        let spec = |load: f64| LoadSpec {
            endpoints: vec![server.addr.clone()],
            rate: load * capacity,
            duration_ms: phase_ms,
            timeout_ms: DEADLINE_MS,
            records: true,
            connections: CONNECTIONS,
            cpu: load_cpu,
            ..LoadSpec::default()
        };
        let (before, _) = ctx.load(Gen::Tonic, &spec(0.5))?;
        let (spike, _) = ctx.load(Gen::Tonic, &spec(peak))?;
        let (after, recs) = ctx.load(Gen::Tonic, &spec(0.5))?;
        let trace = poller.stop();
        let phase = phase_ms as f64;
        // The steady halves of the phases (the limit needs a few windows to settle).
        let steady = median_in(
            &trace,
            before.t0_unix_ms + phase / 2.0,
            before.t0_unix_ms + phase,
        );
        let during = median_in(
            &trace,
            spike.t0_unix_ms + phase / 2.0,
            spike.t0_unix_ms + phase,
        );
        let settled = median_in(
            &trace,
            after.t0_unix_ms + phase / 2.0,
            after.t0_unix_ms + phase,
        );
        let spike_end = spike.t0_unix_ms + phase;
        // Back within 10 % of its value before, or past it (the limit moves by steps of up to
        // a quarter and its square root per window, and can step over the band).
        let back = steady.and_then(|s| {
            trace
                .iter()
                .find(|(t, l)| *t >= spike_end && *l >= 0.9 * s)
                .map(|(t, _)| t - spike_end)
        });
        // Rejections after the spike, from its end (the generator's gap between the runs
        // counts: no call is sent in it).
        let gap = after.t0_unix_ms - spike_end;
        let last_rejected = recs
            .iter()
            .filter(|r| r.code == REJECTED)
            .map(|r| r.start_ms + gap)
            .fold(None, |m: Option<f64>, t| Some(m.map_or(t, |m| m.max(t))));
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0} ms"));
        table.row(vec![
            format!("{peak}x for {:.0} s", phase / 1000.0),
            steady.map_or("-".into(), |v| f(v, 0)),
            during.map_or("-".into(), |v| f(v, 0)),
            settled.map_or("-".into(), |v| f(v, 0)),
            back.map_or("never".into(), |v| format!("{v:.0} ms")),
            last_rejected.map_or("none".into(), |v| ms(Some(v))),
        ]);
    }
    Ok(table)
}

/// The median of a gauge trace's values in `[a, b)` (unix ms).
fn median_in(trace: &[(f64, f64)], a: f64, b: f64) -> Option<f64> {
    let mut v: Vec<f64> = trace
        .iter()
        .filter(|(t, _)| *t >= a && *t < b)
        .map(|(_, l)| *l)
        .collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Reads a zrpc server's `rpc_server_concurrency_limit{method="*"}` from its DevServer every
/// 20 ms, in a thread, as (unix ms, limit).
struct Poller {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(f64, f64)>>,
}

impl Poller {
    fn start(port: u16) -> Poller {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut out = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                if let Some(l) = scrape(port) {
                    out.push((unix_ms(), l));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            out
        });
        Poller { stop, thread }
    }

    fn stop(self) -> Vec<(f64, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// One scrape of the limit gauge.
fn scrape(port: u16) -> Option<f64> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find(|l| l.starts_with("rpc_server_concurrency_limit{method=\"*\""))?
        .rsplit_once(' ')?
        .1
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(start_ms: f64, latency_ms: f64, code: u32, critical: bool) -> Record {
        Record {
            start_ms,
            latency_ms,
            code,
            server: "-".into(),
            critical,
        }
    }

    #[test]
    fn a_level_counts_goodput_admitted_latency_rejections_and_critical_calls() {
        let mut recs = vec![
            rec(10.0, 5.0, 0, false),
            rec(20.0, 7.0, 0, true),
            rec(30.0, 0.2, REJECTED, false),
            rec(40.0, 2000.5, TIMED_OUT, true),
            // outside the window
            rec(1500.0, 1.0, 0, false),
        ];
        recs.extend((0..6).map(|i| rec(50.0 + f64::from(i), 9.0, 0, false)));
        let l = level(&recs, 0.0, 1000.0);
        assert!((l.offered - 10.0).abs() < 1e-9);
        // 8 OK calls end in the window
        assert!((l.goodput - 8.0).abs() < 1e-9, "{l:?}");
        assert!((l.rejected - 0.1).abs() < 1e-9);
        assert!((l.timed_out - 0.1).abs() < 1e-9);
        assert_eq!(l.critical, Some(0.5));
        // admitted: 8 OK calls and the timeout (at the deadline)
        assert_eq!(l.p50, 9.0);
        assert_eq!(l.p99, 2000.0);
    }
}
