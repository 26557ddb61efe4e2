//! Overhead: the server (h2load against bare tonic, zrpc full chain, zrpc minimal, go-zero with
//! matched logging and as shipped) and the client (zrpc client, a bare tonic channel, go-zero's
//! client, all against one bare tonic server): throughput, latency percentiles, CPU µs per
//! request and RSS, in pinned (server on CPU 0, load on CPU 1, one thread each) and unpinned mode.

use anyhow::Result;

use super::{Ctx, Gen, H2Amount, LoadSpec, Profile, ServerSpec, Side, h2load, h2load_sampled};
use crate::charts::{self, XAxis};
use crate::noise::Rounds;
use crate::report::{self, MISSING, Section, Table, f, round_ratio};
use crate::stats::{median, percentile};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pinned,
    Unpinned,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Pinned => "pinned",
            Mode::Unpinned => "unpinned",
        }
    }
}

const SERVERS: [(Side, Profile, &str); 6] = [
    (Side::Rust, Profile::Tonic, "bare tonic"),
    (Side::Rust, Profile::Quiet, "zrpc full chain"),
    (
        Side::Rust,
        Profile::Minimal,
        "zrpc minimal (middleware off)",
    ),
    (Side::Go, Profile::Quiet, "go-zero matched logging"),
    (Side::Rust, Profile::Shipped, "zrpc, every request logged"),
    (Side::Go, Profile::Shipped, "go-zero default (as shipped)"),
];

const CLIENTS: [Gen; 3] = [Gen::Zrpc("p2c_ewma"), Gen::Tonic, Gen::GoZero];

#[derive(Debug, Default, Clone)]
struct Acc {
    rate: Vec<f64>,
    cpu: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    p999: Vec<f64>,
    rss: f64,
    last_latencies: Vec<f64>,
    skipped: Option<String>,
}

impl Acc {
    fn rate(&self) -> f64 {
        median(self.rate.clone())
    }

    /// The rounds the noise rule keeps (a skipped subject stays as it is).
    fn kept(&self, noise: &Rounds) -> Acc {
        Acc {
            rate: noise.pick(&self.rate),
            cpu: noise.pick(&self.cpu),
            p50: noise.pick(&self.p50),
            p99: noise.pick(&self.p99),
            p999: noise.pick(&self.p999),
            ..self.clone()
        }
    }
}

/// With `ZRPC_BENCH_RUNS=<file>`, every measured server and client run is appended to that file as
/// a JSON line (rate, CPU, the noise monitor's share, a server's wait shares): the raw data behind
/// the medians, for looking into why a ratio moves between invocations.
fn trace_run(v: &serde_json::Value) {
    let Some(path) = std::env::var_os("ZRPC_BENCH_RUNS") else {
        return;
    };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = std::io::Write::write_all(&mut f, format!("{v}\n").as_bytes());
    }
}

/// With `ZRPC_BENCH_PARTS=<comma-separated>` only these parts of `overhead` run (`pinned`,
/// `unpinned`, `servers`, `clients`, `callgrind`; a mode and a kind are both needed, e.g.
/// `pinned,servers`): a development aid for looking into one table row group twice in a few
/// minutes. Unset: everything. The parts left out are reported as skipped.
fn part(name: &str) -> bool {
    match std::env::var("ZRPC_BENCH_PARTS") {
        Ok(v) => v.split(',').any(|p| p.trim() == name),
        Err(_) => true,
    }
}

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    // Timing-based runs, many and short: every subject is measured for the same time, and the
    // runs of a round are close in time (6 x 0.25 s), so that the host's speed, which drifts
    // over about a second, is as alike as it gets for the runs a per-round ratio divides; the
    // median of many such ratios moves less between two invocations than one of a few (see
    // the default round count in main.rs).
    let rounds = ctx.opts.overhead_rounds;
    let secs = ctx.opts.overhead_secs;
    // Before every measured h2load run: connections made and streams ramped up outside the
    // measured window.
    let run_warm_up = ctx.size(0.05, 0.1);
    let warmup_secs = ctx.size(0.2, 1.0);
    let calls_warmup: u64 = ctx.size(500, 2_000);
    let mut modes = vec![Mode::Pinned, Mode::Unpinned];
    let mut notes = Vec::new();
    if !ctx.env.taskset || ctx.env.cpus < 2 {
        modes.retain(|m| *m == Mode::Unpinned);
        notes.push("skipped: pinned mode (needs taskset and 2 CPUs)".to_owned());
    }
    modes.retain(|m| part(m.name()));
    for skipped in ["pinned", "unpinned", "servers", "clients", "callgrind"] {
        if !part(skipped) {
            notes.push(format!("skipped: {skipped} (ZRPC_BENCH_PARTS)"));
        }
    }
    let steps = modes.len() as u64 * rounds as u64 * (SERVERS.len() + CLIENTS.len()) as u64;
    let pb = ctx.progress(steps, "overhead");
    let mut server_table = Table::new(
        &format!(
            "Server: h2load -c 10 -m 50 --warm-up-time {run_warm_up} s -D {secs} s per run, median of {rounds} alternating runs (up to {} when rounds are left out)",
            rounds + rounds / 2
        ),
        &[
            "mode",
            "server",
            "req/s",
            "vs bare tonic (min..max)",
            "vs go-zero, same logging (min..max)",
            "server CPU µs/req",
            "CPU/req vs bare tonic (min..max)",
            "CPU/req vs go-zero, same logging (min..max)",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "server RSS MB",
        ],
    );
    let mut client_table = Table::new(
        &format!(
            "Client: 50 concurrent callers, {secs} s per run against one bare tonic server, median of {rounds} alternating runs"
        ),
        &[
            "mode",
            "client",
            "calls/s",
            "vs bare tonic (min..max)",
            "vs go-zero client (min..max)",
            "client CPU µs/call",
            "CPU/call vs bare tonic (min..max)",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "client RSS MB",
        ],
    );
    let mut cdf_series = Vec::new();
    let mut notes_noise = Vec::new();
    for &mode in &modes {
        let (srv_cpu, load_cpu, threads, h2_threads) = match mode {
            Mode::Pinned => (Some(0), Some(1), 1, 1),
            Mode::Unpinned => (None, None, 0, 2),
        };
        // ---- servers ----
        if part("servers") {
            let mut accs: Vec<Acc> = vec![Acc::default(); SERVERS.len()];
            let mut servers = Vec::new();
            for (i, (side, profile, _)) in SERVERS.iter().enumerate() {
                let spec = ServerSpec {
                    profile: *profile,
                    cpu: srv_cpu,
                    threads,
                    ..ServerSpec::default()
                };
                match ctx.server(*side, &spec) {
                    Ok(s) => servers.push(Some(s)),
                    Err(e) => {
                        accs[i].skipped = Some(format!("{e:#}"));
                        servers.push(None);
                    }
                }
            }
            // A discarded warm-up round: connection pools, allocator and caches settle first.
            for s in servers.iter().flatten() {
                pb.set_message(format!("{} warm-up", mode.name()));
                h2load(
                    ctx,
                    &s.addr,
                    (10, 50, H2Amount::Secs(warmup_secs), h2_threads),
                    load_cpu,
                )?;
            }
            let mut noise = Rounds::default();
            // Per run: the share of its demand for CPU the server waited for a CPU.
            let mut waited = Vec::new();
            let mut reruns = 0;
            // More rounds only where needed: when busy or contended rounds were left out,
            // rounds are added until `rounds` quiet ones were measured, at most half as many
            // again (the time a busy machine may add to `all` is bounded; on a quiet one
            // nothing is added).
            let max_rounds = rounds + rounds / 2;
            let mut round = 0;
            while round < rounds || (noise.quiet() < rounds && round < max_rounds) {
                if round >= rounds {
                    pb.inc_length(SERVERS.len() as u64);
                }
                for k in 0..SERVERS.len() {
                    // Rotate the order each round so that no subject always runs first.
                    let i = (k + round) % SERVERS.len();
                    let Some(s) = &servers[i] else { continue };
                    pb.set_message(format!("{} server: {}", mode.name(), SERVERS[i].2));
                    // A run that completed no request is run once more; if it again completes
                    // none, the round has no figure for this subject (MISSING: left out of its
                    // medians and of every per-round ratio it is part of), never a ratio of 0 or
                    // infinity.
                    let mut attempt = 0;
                    let (run, cpu, lost) = loop {
                        let before = ctx.noise.snap();
                        let cpu0 = s.proc.cpu_us();
                        let run = h2load_sampled(
                            ctx,
                            &s.addr,
                            (
                                10,
                                50,
                                H2Amount::WarmSecs {
                                    warm_up: run_warm_up,
                                    secs,
                                },
                                h2_threads,
                            ),
                            load_cpu,
                            Some(s.proc.pid()),
                        )?;
                        let lost = ctx.noise.lost_share(&before, &ctx.noise.snap());
                        let cpu = (s.proc.cpu_us() - cpu0) / run.requests.max(1) as f64;
                        attempt += 1;
                        if run.requests > 0 && run.rate > 0.0 || attempt == 2 {
                            break (run, cpu, lost);
                        }
                        reruns += 1;
                    };
                    noise.record(round, lost);
                    // CPU per request in the steady state (the scheduler's ns counters over the
                    // middle of the measured window); the tick-based figure of the whole h2load run
                    // when the kernel has no such counters.
                    let cpu = match run.server {
                        Some(w) => {
                            waited.push(w.wait_share());
                            if mode == Mode::Pinned {
                                // Pinned: each side owns its core; a wait is a neighbour on it.
                                noise.record_wait(round, w.wait_share().max(w.load_wait_share()));
                            }
                            w.cpu_us_per_request(run.rate)
                        }
                        None => cpu,
                    };
                    trace_run(&serde_json::json!({
                        "mode": mode.name(), "round": round, "subject": SERVERS[i].2,
                        "rate": run.rate, "requests": run.requests, "cpu_us": cpu, "lost": lost,
                        "wait": run.server.map(|w| w.wait_share()),
                        "load_wait": run.server.map(|w| w.load_wait_share()),
                        "load_run_s": run.server.map(|w| w.load_run_s),
                        "secs": run.server.map(|w| w.secs),
                    }));
                    let mut lat = run.latencies;
                    lat.sort_by(f64::total_cmp);
                    let a = &mut accs[i];
                    if run.requests == 0 || run.rate <= 0.0 {
                        a.rate.push(MISSING);
                        a.cpu.push(MISSING);
                        a.p50.push(MISSING);
                        a.p99.push(MISSING);
                        a.p999.push(MISSING);
                    } else {
                        a.rate.push(run.rate);
                        a.cpu.push(cpu);
                        a.p50.push(percentile(&lat, 0.5));
                        a.p99.push(percentile(&lat, 0.99));
                        a.p999.push(percentile(&lat, 0.999));
                        a.last_latencies = lat;
                    }
                    pb.inc(1);
                }
                round += 1;
            }
            for (i, s) in servers.iter().enumerate() {
                if let Some(s) = s {
                    accs[i].rss = s.proc.rss_mb();
                }
            }
            drop(servers);
            notes_noise.push(noise.note(&format!("{} servers", mode.name())));
            if !waited.is_empty() {
                waited.sort_by(f64::total_cmp);
                notes_noise.push(format!(
                    "{} servers: of the CPU time a server's threads asked for in a measured window \
                 (on a CPU or runnable in a run queue), the share they waited for a CPU while \
                 another task had it: {:.1}% (median over the runs; max {:.1}%), from the \
                 scheduler's counters{}.",
                    mode.name(),
                    percentile(&waited, 0.5) * 100.0,
                    waited.last().copied().unwrap_or(0.0) * 100.0,
                    if mode == Mode::Pinned {
                        ""
                    } else {
                        " (unpinned, the servers' and h2load's threads share the two cores by \
                     design: this is mostly that, not a neighbour)"
                    }
                ));
            }
            let missing: usize = accs.iter().map(|a| report::missing(&a.rate)).sum();
            if missing > 0 || reruns > 0 {
                notes_noise.push(format!(
                "{} servers: {reruns} run(s) completed no request and were run again; {missing} \
                 still had none and count as missing (left out of that round's ratios).",
                mode.name()
            ));
            }
            let accs: Vec<Acc> = accs.iter().map(|a| a.kept(&noise)).collect();
            let bare = &accs[0];
            for (i, (_, profile, name)) in SERVERS.iter().enumerate() {
                let a = &accs[i];
                if let Some(why) = &a.skipped {
                    server_table.skipped_row(&format!("{} | {name}", mode.name()), why);
                    continue;
                }
                // The go-zero server with the same logging profile.
                let go = match profile {
                    Profile::Shipped => &accs[5],
                    _ => &accs[3],
                };
                server_table.row(vec![
                    mode.name().into(),
                    (*name).into(),
                    f(a.rate(), 0),
                    round_ratio(&a.rate, &bare.rate),
                    if SERVERS[i].0 == Side::Go || *profile == Profile::Minimal {
                        "-".into()
                    } else {
                        round_ratio(&a.rate, &go.rate)
                    },
                    f(median(a.cpu.clone()), 1),
                    round_ratio(&a.cpu, &bare.cpu),
                    if SERVERS[i].0 == Side::Go || *profile == Profile::Minimal {
                        "-".into()
                    } else {
                        round_ratio(&a.cpu, &go.cpu)
                    },
                    f(median(a.p50.clone()), 2),
                    f(median(a.p99.clone()), 2),
                    f(median(a.p999.clone()), 2),
                    f(a.rss, 1),
                ]);
                if mode == Mode::Pinned || modes.len() == 1 {
                    cdf_series.push((name.to_string(), charts::cdf(&a.last_latencies)));
                }
            }
        }
        // ---- clients ----
        if !part("clients") {
            continue;
        }
        let server = ctx.server(
            Side::Rust,
            &ServerSpec {
                profile: Profile::Tonic,
                cpu: srv_cpu,
                threads,
                ..ServerSpec::default()
            },
        )?;
        let mut caccs: Vec<Acc> = vec![Acc::default(); CLIENTS.len()];
        let mut noise = Rounds::default();
        let mut client_reruns = 0;
        for round in 0..rounds {
            for k in 0..CLIENTS.len() {
                let i = (k + round) % CLIENTS.len();
                let client = CLIENTS[i];
                pb.set_message(format!("{} client: {}", mode.name(), client.label()));
                let spec = LoadSpec {
                    endpoints: vec![server.addr.clone()],
                    concurrency: 50,
                    duration_ms: (secs * 1000.0).round() as u64,
                    warmup: calls_warmup,
                    cpu: load_cpu,
                    threads,
                    ..LoadSpec::default()
                };
                // As for the servers: a run that completed no call is run once more, then
                // counts as missing.
                let (result, lost) = ctx.load_rerun_empty(client, &spec, &mut client_reruns);
                noise.record(round, lost);
                match result {
                    Ok((s, _)) if s.calls == 0 || s.rate() <= 0.0 => {
                        let a = &mut caccs[i];
                        for v in [&mut a.rate, &mut a.cpu, &mut a.p50, &mut a.p99, &mut a.p999] {
                            v.push(MISSING);
                        }
                    }
                    Ok((s, _)) => {
                        trace_run(&serde_json::json!({
                            "mode": mode.name(), "round": round, "subject": client.label(),
                            "rate": s.rate(), "calls": s.calls, "cpu_us": s.cpu_us, "lost": lost,
                        }));
                        let a = &mut caccs[i];
                        a.rate.push(s.rate());
                        a.cpu.push(s.cpu_us);
                        a.p50.push(s.p50_ms);
                        a.p99.push(s.p99_ms);
                        a.p999.push(s.p999_ms);
                        a.rss = a.rss.max(s.rss_mb);
                    }
                    Err(e) if client == Gen::GoZero => caccs[i].skipped = Some(format!("{e:#}")),
                    Err(e) => return Err(e),
                }
                pb.inc(1);
            }
        }
        drop(server);
        notes_noise.push(noise.note(&format!("{} clients", mode.name())));
        let missing: usize = caccs.iter().map(|a| report::missing(&a.rate)).sum();
        if missing > 0 || client_reruns > 0 {
            notes_noise.push(format!(
                "{} clients: {client_reruns} run(s) completed no call and were run again; \
                 {missing} still had none and count as missing.",
                mode.name()
            ));
        }
        let caccs: Vec<Acc> = caccs.iter().map(|a| a.kept(&noise)).collect();
        let (bare, go) = (&caccs[1], &caccs[2]);
        for (i, client) in CLIENTS.iter().enumerate() {
            let a = &caccs[i];
            if let Some(why) = &a.skipped {
                client_table.skipped_row(&format!("{} | {}", mode.name(), client.label()), why);
                continue;
            }
            client_table.row(vec![
                mode.name().into(),
                client.label(),
                f(a.rate(), 0),
                round_ratio(&a.rate, &bare.rate),
                if *client == Gen::GoZero || go.skipped.is_some() {
                    "-".into()
                } else {
                    round_ratio(&a.rate, &go.rate)
                },
                f(median(a.cpu.clone()), 1),
                round_ratio(&a.cpu, &bare.cpu),
                f(median(a.p50.clone()), 2),
                f(median(a.p99.clone()), 2),
                f(median(a.p999.clone()), 2),
                f(a.rss, 1),
            ]);
        }
    }
    pb.finish_and_clear();
    notes.extend(notes_noise);
    eprintln!("overhead: instructions per request under callgrind");
    let (instructions, client_instructions) = if part("callgrind") {
        (
            super::instructions::table(ctx, &SERVERS),
            super::instructions::client_table(ctx, &CLIENTS),
        )
    } else {
        let mut t = Table::new(
            "Instructions per request under callgrind",
            &["server", "instructions/request"],
        );
        t.skipped_row("every server", "ZRPC_BENCH_PARTS leaves out callgrind");
        let mut c = Table::new(
            "Client instructions per call under callgrind",
            &["client", "instructions/call"],
        );
        c.skipped_row("every client", "ZRPC_BENCH_PARTS leaves out callgrind");
        (t, c)
    };
    let chart = "overhead-server-cdf.svg";
    charts::lines(
        &ctx.charts.join(chart),
        "Server latency under h2load (-c 10 -m 50), last round",
        ("latency, ms (log)", "fraction of requests"),
        XAxis::Log,
        Some((0.0, 1.0)),
        &cdf_series,
    )?;
    Ok(Section {
        title: String::new(),
        intro: format!(
            "Servers run as separate processes; every run lasts the same time (h2load `-D`, \
             the client generators' `--duration-ms`), so that a neighbour's burst costs \
             every subject alike and is averaged over the run. CPU is the server process's \
             user+system time (from `/proc`) divided by the requests of the run; RSS is \
             read after the runs. \"Matched logging\" is the quiet profile on both sides \
             (`Log.Level: error`, request content not logged, `CpuThreshold: 0`, breaker, \
             timeout 2 s, recover, trace, metrics on); \"as shipped\" logs every request at \
             info on both sides, to /dev/null. Pinned: server on CPU 0 with one thread \
             (`GOMAXPROCS=1` for Go, one tokio thread for Rust), load generator on CPU 1 \
             with one thread. The client generators are this binary's `load` (zrpc client / \
             bare tonic channel) and `gzbench load` (go-zero client), with the same closed \
             loop. **Pinned mode is the headline** (each side owns a core, so a neighbour \
             moves both less). Every comparison runs its subjects in many short alternating \
             rounds (the order rotates each round) after a discarded warm-up run per server, \
             so that the runs a per-round ratio divides are seconds apart and the host's \
             drifting speed is nearly the same for both; a ratio is the median of the \
             per-round ratios, with their min..max over the rounds in parentheses: that \
             spread is the noise, and the median of many rounds moves much less than it. \
             Every h2load run warms up (connections made, streams ramped up) before its \
             measured window; the server's CPU per request is its CPU time in the middle of \
             that window (the scheduler's nanosecond counters, `/proc/<pid>/task/*/schedstat`) \
             over the requests h2load measured in it: the steady state only. The noise monitor (notes \
             below the tables) measures, around every run, the CPU time other processes \
             took and the hypervisor's steal (`/proc/stat` minus this harness and its \
             children); a round is busy when one of its runs lost more than {:.0}% of the \
             machine, and busy rounds are left out whole, all subjects alike, when at least \
             {} quiet rounds remain (the notes give the count). A pinned process owns one \
             core, so a neighbour on that core costs it more than its share of the machine \
             shows: for the pinned servers a round is also left out, by the same rule, when \
             in one of its runs the server or h2load waited for its core more than {:.0}% of \
             the CPU time it asked for (the scheduler's run-queue wait; the notes give the \
             count of these contended rounds). A run that completed no request is run once \
             more, then counts as missing for that round (never a ratio of 0 or infinity). \
             CPU time per request moves less than throughput when the machine is busy; the \
             callgrind tables (servers, and clients calling a bare tonic server) do not move \
             at all.",
            crate::noise::BUSY_SHARE * 100.0,
            crate::noise::MIN_QUIET,
            crate::noise::CONTENDED_SHARE * 100.0
        ),
        tables: vec![
            server_table,
            client_table,
            instructions,
            client_instructions,
        ],
        charts: vec![("server latency CDF".into(), chart.into())],
        notes,
    })
}
