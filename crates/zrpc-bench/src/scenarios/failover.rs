//! Failover: three zrpc servers registered in a real etcd, an open loop through each client
//! (zrpc's, go-zero's) discovering them there; one server is killed (SIGKILL), frozen (SIGSTOP)
//! or stopped gracefully (SIGTERM) mid-run: per fault, failed calls and the time until the last
//! call sent to the victim. Then registration: a server started under load, and the time from
//! its process start to its first request.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{Ctx, Gen, LoadSpec, Profile, ServerSpec, Side, start_etcd, unix_ms as now_unix_ms};
use crate::proc::Signal;
use crate::report::{Section, Table, f};

/// A cell when nothing happened after the event (calls in flight at the event do not count).
const NONE_AFTER: &str = "none after the event";

const CLIENTS: [Gen; 2] = [Gen::Zrpc("p2c_ewma"), Gen::GoZero];

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let (etcd_proc, etcd) = match start_etcd(ctx) {
        Ok(e) => e,
        Err(e) => {
            let mut t = Table::new("", &["event", "client"]);
            t.skipped_row("all", format!("{e:#}"));
            return Ok(Section {
                tables: vec![t],
                ..Section::default()
            });
        }
    };
    let rate: f64 = ctx.size(100.0, 200.0);
    let duration: u64 = ctx.size(1_600, 8_000);
    let event_after = Duration::from_millis(ctx.size(500, 2_500));
    let events = [
        (Signal::SIGKILL, "kill -9"),
        (Signal::SIGSTOP, "SIGSTOP (frozen)"),
        (Signal::SIGTERM, "graceful stop (SIGTERM)"),
    ];
    let mut table = Table::new(
        &format!(
            "Open loop {rate:.0}/s for {:.1} s through etcd discovery; the event hits one of three servers {:.1} s after each has answered",
            duration as f64 / 1000.0,
            event_after.as_secs_f64()
        ),
        &[
            "event",
            "client",
            "calls",
            "failed",
            "last call to the victim started, ms after the event",
            "last answer from the victim, ms after the event",
            "last failed call started, ms after the event",
        ],
    );
    let mut reg = Table::new(
        "Registration: a fourth server started under load (open loop, two servers already serving)",
        &[
            "client",
            "process start -> listening, ms",
            "process start -> first request, ms",
            "its share of the calls after it started",
        ],
    );
    let pb = ctx.progress(
        (events.len() * CLIENTS.len() + CLIENTS.len()) as u64,
        "failover",
    );
    let mut n = 0;
    for (sig, what) in events {
        for client in CLIENTS {
            pb.set_message(format!("{what}: {}", client.label()));
            if let (Gen::GoZero, Err(e)) = (client, ctx.gozero()) {
                table.skipped_row(&format!("{what} | {}", client.label()), e);
                pb.inc(1);
                continue;
            }
            n += 1;
            let key = format!("bench.failover.{n}");
            let spec = ServerSpec {
                profile: Profile::Quiet,
                etcd: Some((etcd.clone(), key.clone())),
                ..ServerSpec::default()
            };
            let mut servers = (0..3)
                .map(|_| ctx.server(Side::Rust, &spec))
                .collect::<Result<Vec<_>>>()?;
            let running = ctx.start_load(
                client,
                &LoadSpec {
                    etcd: Some((etcd.clone(), key.clone())),
                    rate,
                    duration_ms: duration,
                    records: true,
                    ..LoadSpec::default()
                },
            )?;
            // Wait until the load is flowing to every server, then strike.
            let deadline = Instant::now() + Duration::from_secs(20);
            for s in &mut servers {
                while s.first_call_ms().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            std::thread::sleep(event_after);
            let victim = servers[0].addr.clone();
            let event_unix = now_unix_ms();
            servers[0].proc.signal(sig);
            let (s, recs) = running.wait().context("failover load")?;
            let event_ms = event_unix - s.t0_unix_ms;
            let last_answer = recs
                .iter()
                .filter(|r| r.server == victim && r.start_ms + r.latency_ms >= event_ms)
                .map(|r| r.start_ms + r.latency_ms - event_ms)
                .reduce(f64::max);
            // A failed call has no `x-server`; the two other servers stay healthy, so a call
            // that failed after the event is counted as one sent to the victim.
            let last_call = recs
                .iter()
                .filter(|r| r.start_ms >= event_ms && (r.server == victim || r.code != 0))
                .map(|r| r.start_ms - event_ms)
                .reduce(f64::max);
            let last_fail = recs
                .iter()
                .filter(|r| r.code != 0 && r.start_ms >= event_ms - 1.0)
                .map(|r| r.start_ms - event_ms)
                .reduce(f64::max);
            table.row(vec![
                what.into(),
                client.label(),
                s.calls.to_string(),
                s.failed.to_string(),
                last_call.map_or(NONE_AFTER.into(), |v| f(v, 0)),
                last_answer.map_or(NONE_AFTER.into(), |v| f(v, 0)),
                last_fail.map_or(NONE_AFTER.into(), |v| f(v, 0)),
            ]);
            drop(servers);
            pb.inc(1);
        }
    }
    for client in CLIENTS {
        pb.set_message(format!("registration: {}", client.label()));
        if let (Gen::GoZero, Err(e)) = (client, ctx.gozero()) {
            reg.skipped_row(&client.label(), e);
            pb.inc(1);
            continue;
        }
        n += 1;
        let key = format!("bench.failover.{n}");
        let spec = ServerSpec {
            profile: Profile::Quiet,
            etcd: Some((etcd.clone(), key.clone())),
            ..ServerSpec::default()
        };
        let mut servers = (0..2)
            .map(|_| ctx.server(Side::Rust, &spec))
            .collect::<Result<Vec<_>>>()?;
        let running = ctx.start_load(
            client,
            &LoadSpec {
                etcd: Some((etcd.clone(), key.clone())),
                rate,
                duration_ms: duration,
                records: true,
                ..LoadSpec::default()
            },
        )?;
        let deadline = Instant::now() + Duration::from_secs(20);
        for s in &mut servers {
            while s.first_call_ms().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        std::thread::sleep(event_after);
        let start_unix = now_unix_ms();
        let mut fresh = ctx.server(Side::Rust, &spec)?;
        let (s, recs) = running.wait()?;
        let first = fresh.first_call_ms();
        let since = start_unix - s.t0_unix_ms;
        let after: Vec<_> = recs.iter().filter(|r| r.start_ms >= since).collect();
        let to_fresh = after.iter().filter(|r| r.server == fresh.addr).count();
        reg.row(vec![
            client.label(),
            fresh.ready_ms().map_or("-".into(), |v| f(v, 0)),
            first.map_or("no request".into(), |v| f(v, 0)),
            format!(
                "{}% (an even share is 33%)",
                f(to_fresh as f64 * 100.0 / after.len().max(1) as f64, 1)
            ),
        ]);
        drop(fresh);
        drop(servers);
        pb.inc(1);
    }
    pb.finish_and_clear();
    drop(etcd_proc);
    Ok(Section {
        title: String::new(),
        intro: "Servers: zrpc, quiet profile, registered in one etcd (lease TTL 10 s, go-zero's \
                key layout); both clients discover them there. Client timeout 2 s (both \
                defaults). \"Last call to the victim\" is when the client last sent it a call: \
                the start of the last call it answered or of the last failed call (a failed call \
                names no server; the two others stay healthy, so it is counted as the \
                victim's). \"Last answer from the victim\" is when its last answer arrived (a \
                graceful stop keeps serving through its 1 s wrap-up). Registration is timed \
                from the moment the harness started the server process (its start-up, \
                listening, etcd registration, the client's discovery and connection), on this \
                machine's debug or release build of the server."
            .into(),
        tables: vec![table, reg],
        charts: Vec::new(),
        notes: Vec::new(),
    })
}
