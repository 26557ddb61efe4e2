//! Memory per idle connection: N HTTP/2 connections that send the client preface and a
//! SETTINGS frame, then stay silent (what a large fleet of idle clients costs a server). The
//! server's RSS growth over them, divided by N. Every subject is a fresh server process per
//! round (so no subject inherits another's freed memory), the order rotates each round, and
//! the figures are medians over the rounds with the per-round ratio's spread.

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

/// An empty SETTINGS frame with the ACK flag.
const SETTINGS_ACK: &[u8] = b"\x00\x00\x00\x04\x01\x00\x00\x00\x00";

/// Connections opened at once.
const OPENING: usize = 256;

/// One connection that completed the HTTP/2 handshake: [`HELLO`] sent, the server's SETTINGS
/// read and acknowledged, the acknowledgement of ours read. Then it is left alone.
async fn handshake(addr: std::net::SocketAddr) -> Result<tokio::net::TcpStream> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(HELLO).await?;
    let (mut theirs, mut ours) = (false, false);
    let mut head = [0u8; 9];
    while !(theirs && ours) {
        s.read_exact(&mut head).await?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0; len];
        s.read_exact(&mut payload).await?;
        match (head[3], head[4] & 1) {
            (4, 0) => {
                s.write_all(SETTINGS_ACK).await?;
                theirs = true;
            }
            (4, _) => ours = true,
            (7, _) => anyhow::bail!("GOAWAY during the handshake"),
            _ => {}
        }
    }
    Ok(s)
}

/// Opens `n` connections to `addr` ([`handshake`], [`OPENING`] at a time, bounded to 60 s);
/// they stay open while held.
fn open(rt: &tokio::runtime::Runtime, addr: &str, n: usize) -> Result<Vec<tokio::net::TcpStream>> {
    use futures_util::{StreamExt, TryStreamExt};
    let addr: std::net::SocketAddr = addr.parse().with_context(|| format!("address {addr}"))?;
    rt.block_on(async {
        let all = futures_util::stream::iter(0..n)
            .map(|_| handshake(addr))
            .buffer_unordered(OPENING)
            .try_collect::<Vec<_>>();
        tokio::time::timeout(Duration::from_secs(60), all)
            .await
            .with_context(|| format!("{n} handshakes with {addr} within 60 s"))?
            .with_context(|| format!("a handshake with {addr}"))
    })
}

/// The RSS in KiB once it stopped moving: three readings 100 ms apart within 8 KiB of each
/// other, or the last reading after `limit`.
pub(super) fn settled_rss_kib(pid: i32, limit: Duration) -> f64 {
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let server = ctx.server(side, spec)?;
    let pid = server.proc.pid();
    // A few connections first: the runtime's and allocator's one-time costs (timer wheel
    // levels, a worker thread's first allocation arena) are not a connection's.
    let warm = open(&rt, &server.addr, 10)?;
    let base = settled_rss_kib(pid, Duration::from_secs(3));
    let held = open(&rt, &server.addr, conns)?;
    std::thread::sleep(Duration::from_millis(300));
    let after = settled_rss_kib(pid, Duration::from_secs(8));
    drop(held);
    drop(warm);
    server.stop();
    Ok((base, (after - base) / conns as f64))
}

/// Raises this process's RLIMIT_NOFILE (and so its servers') soft limit to the hard one, which
/// must allow `need` descriptors.
fn raise_nofile(need: u64) -> Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    anyhow::ensure!(
        hard >= need,
        "memory needs {need} open files per process, RLIMIT_NOFILE's hard limit is {hard} \
         (raise it: ulimit -Hn, or LimitNOFILE in systemd)"
    );
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok(())
}

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let rounds = ctx.size(1, 5);
    let sizes = ctx.size([100, 1000], [500, 10_000]);
    raise_nofile(sizes[1] as u64 + 100)?;
    let subjects = subjects();
    // per[size][subject]: growth per connection, one per round
    let mut per = vec![vec![Vec::new(); subjects.len()]; sizes.len()];
    let mut base = vec![vec![Vec::new(); subjects.len()]; sizes.len()];
    let mut skipped: Vec<Option<String>> = vec![None; subjects.len()];
    let pb = ctx.progress((rounds * sizes.len() * subjects.len()) as u64, "memory");
    for round in 0..rounds {
        for (z, &conns) in sizes.iter().enumerate() {
            for k in 0..subjects.len() {
                let i = (k + round) % subjects.len();
                let (label, side, spec) = &subjects[i];
                pb.set_message(format!("{label}, {conns} connections"));
                pb.inc(1);
                if skipped[i].is_some() {
                    per[z][i].push(f64::NAN);
                    base[z][i].push(f64::NAN);
                    continue;
                }
                match measure(ctx, *side, spec, conns) {
                    Ok((b, p)) => {
                        base[z][i].push(b);
                        per[z][i].push(p);
                    }
                    Err(e) if *side == Side::Go => {
                        skipped[i] = Some(format!("{e:#}"));
                        per[z][i].push(f64::NAN);
                        base[z][i].push(f64::NAN);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    pb.finish_and_clear();
    let [small, large] = sizes;
    let mut table = Table::new(
        &format!(
            "{small} and {large} connections that completed the HTTP/2 handshake, then nothing; \
             median of {rounds} alternating rounds, a fresh server process per run"
        ),
        &[
            "server",
            &format!("KiB per connection, {small}"),
            "vs bare tonic (min..max)",
            &format!("KiB per connection, {large}"),
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
            f(median(per[0][i].clone()), 1),
            round_ratio(&per[0][i], &per[0][0]),
            f(median(per[1][i].clone()), 1),
            round_ratio(&per[1][i], &per[1][0]),
            f(median(base[0][i].clone()) / 1024.0, 1),
        ]);
    }
    Ok(Section {
        intro: format!(
            "Each server (default runtime threads, not pinned; the Rust servers as in the \
             overhead section's unpinned mode) gets 10 connections first (one-time costs of the \
             runtime and the allocator), then {small} (or, on a fresh server, {large}) more from \
             this harness, opened {OPENING} at a time on one tokio thread: each sends the HTTP/2 \
             client preface and a SETTINGS frame (push off, 64 KiB window), acknowledges the \
             server's SETTINGS and reads the acknowledgement of its own, then stays silent \
             without reading. The figure is the server process's RSS (`VmRSS`) once it stopped \
             moving, minus the RSS before them, divided by their number: the kernel's socket \
             buffers are not in it. {large} connections need {large} descriptors in this process \
             and in the server (RLIMIT_NOFILE at least {}). The repair-off row is a diagnostic: \
             zrpc with its `:authority` repair off (`Server::authority_repair(false)`).",
            large + 100
        ),
        tables: vec![table],
        ..Section::default()
    })
}
