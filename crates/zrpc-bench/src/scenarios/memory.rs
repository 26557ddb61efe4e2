//! Memory per idle connection: N HTTP/2 connections that send the client preface and a
//! SETTINGS frame, then stay silent (what a large fleet of idle clients costs a server). The
//! server's RSS growth over them, divided by N. Every subject is a fresh server process per
//! round (so no subject inherits another's freed memory), the order rotates each round, and
//! the figures are medians over the rounds with the per-round ratio's spread.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{Ctx, Profile, ServerSpec, Side};
use crate::report::{Section, Table, f, round_ratio};
use crate::stats::median;

/// The subjects: (label, side, spec). The repair-off row shows what the `:authority` inspection
/// holds per connection until the client's first request.
fn subjects() -> Vec<(&'static str, Side, ServerSpec)> {
    let quiet = ServerSpec {
        profile: Profile::Quiet,
        ..ServerSpec::default()
    };
    vec![
        ("bare tonic", Side::Rust, ServerSpec::default()),
        ("zrpc full chain", Side::Rust, quiet.clone()),
        (
            "zrpc full chain, `:authority` repair off",
            Side::Rust,
            ServerSpec {
                no_authority_repair: true,
                ..quiet.clone()
            },
        ),
        ("go-zero matched logging", Side::Go, quiet),
    ]
}

/// The client preface and a SETTINGS frame (ENABLE_PUSH 0, INITIAL_WINDOW_SIZE 64 KiB), as a
/// gRPC client opens a connection.
const HELLO: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\
    \x00\x00\x0c\x04\x00\x00\x00\x00\x00\
    \x00\x02\x00\x00\x00\x00\
    \x00\x04\x00\x00\xff\xff";

/// Opens `n` connections to `addr`, each sending [`HELLO`]; they stay open while held.
fn open(addr: &str, n: usize) -> Result<Vec<TcpStream>> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
            s.write_all(HELLO)?;
            Ok(s)
        })
        .collect()
}

/// The RSS in KiB once it stopped moving: three readings 100 ms apart within 8 KiB of each
/// other, or the last reading after `limit`.
fn settled_rss_kib(pid: i32, limit: Duration) -> f64 {
    let read = || crate::proc::rss_mb_of(pid) * 1024.0;
    let deadline = Instant::now() + limit;
    let mut last = read();
    let mut same = 0;
    while Instant::now() < deadline && same < 3 {
        std::thread::sleep(Duration::from_millis(100));
        let now = read();
        if (now - last).abs() <= 8.0 {
            same += 1;
        } else {
            same = 0;
        }
        last = now;
    }
    last
}

/// One subject's measurement: (baseline RSS KiB, growth per connection KiB).
fn measure(ctx: &Ctx<'_>, side: Side, spec: &ServerSpec, conns: usize) -> Result<(f64, f64)> {
    let server = ctx.server(side, spec)?;
    let pid = server.proc.pid();
    // A few connections first: the runtime's and allocator's one-time costs (timer wheel
    // levels, a worker thread's first allocation arena) are not a connection's.
    let warm = open(&server.addr, 10)?;
    let base = settled_rss_kib(pid, Duration::from_secs(3));
    let held = open(&server.addr, conns)?;
    std::thread::sleep(Duration::from_millis(300));
    let after = settled_rss_kib(pid, Duration::from_secs(5));
    drop(held);
    drop(warm);
    server.stop();
    Ok((base, (after - base) / conns as f64))
}

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let rounds = ctx.size(1, 9);
    let conns = ctx.size(100, 500);
    let subjects = subjects();
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); subjects.len()];
    let mut base: Vec<Vec<f64>> = vec![Vec::new(); subjects.len()];
    let mut skipped: Vec<Option<String>> = vec![None; subjects.len()];
    let pb = ctx.progress((rounds * subjects.len()) as u64, "memory");
    for round in 0..rounds {
        for k in 0..subjects.len() {
            let i = (k + round) % subjects.len();
            let (label, side, spec) = &subjects[i];
            pb.set_message(*label);
            pb.inc(1);
            if skipped[i].is_some() {
                per[i].push(f64::NAN);
                base[i].push(f64::NAN);
                continue;
            }
            match measure(ctx, *side, spec, conns) {
                Ok((b, p)) => {
                    base[i].push(b);
                    per[i].push(p);
                }
                Err(e) if *side == Side::Go => {
                    skipped[i] = Some(format!("{e:#}"));
                    per[i].push(f64::NAN);
                    base[i].push(f64::NAN);
                }
                Err(e) => return Err(e),
            }
        }
    }
    pb.finish_and_clear();
    let mut table = Table::new(
        &format!(
            "{conns} connections that sent the preface and SETTINGS, then nothing; median of \
             {rounds} alternating rounds, a fresh server process per run"
        ),
        &[
            "server",
            "RSS growth per connection, KiB",
            "vs bare tonic (min..max)",
            "RSS before them (10 connections open), MiB",
        ],
    );
    for (i, (label, ..)) in subjects.iter().enumerate() {
        if let Some(why) = &skipped[i] {
            table.skipped_row(label, why);
            continue;
        }
        table.row(vec![
            (*label).to_owned(),
            f(median(per[i].clone()), 1),
            round_ratio(&per[i], &per[0]),
            f(median(base[i].clone()) / 1024.0, 1),
        ]);
    }
    Ok(Section {
        intro: format!(
            "Each server (default runtime threads, not pinned; the Rust servers as in the \
             overhead section's unpinned mode) gets 10 connections first (one-time costs of the \
             runtime and the allocator), then {conns} more from this harness that each send the \
             HTTP/2 client preface and a SETTINGS frame (push off, 64 KiB window) and then stay \
             silent without reading. The figure is the server process's RSS (`VmRSS`) once it \
             stopped moving, minus the RSS before the {conns}, divided by {conns}: the kernel's \
             socket buffers are not in it. The repair-off row is a diagnostic: zrpc with its \
             `:authority` repair off (`Server::authority_repair(false)`), which holds nothing \
             per connection."
        ),
        tables: vec![table],
        ..Section::default()
    })
}
