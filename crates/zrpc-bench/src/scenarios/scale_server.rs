//! The server side of `scale`: zrpc's full default chain beside bare tonic, both serving the
//! same hand-written service (`many-serve`), a fresh server process per run, the two kinds
//! alternating, medians over the rounds.
//! - methods per service: RSS growth from calling each of N methods once, and the server's CPU
//!   per call over a fixed number of calls spread over all N (is routing flat in N?);
//! - streams per connection: S calls held open on one connection, the RSS growth per stream,
//!   and a unary call on a second connection meanwhile.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

use super::Ctx;
use super::memory::settled_rss_kib;
use crate::many_serve::{HOLD, MAX_STREAMS, NAME};
use crate::proc::{Proc, cpu_us_of, free_port};
use crate::report::{Table, f, round_ratio};
use crate::stats::median;

/// Whose server a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Zrpc,
    Tonic,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Zrpc => "zrpc",
            Kind::Tonic => "bare tonic",
        }
    }
}

/// The two kinds in the order of `round` (alternating).
fn order(round: usize) -> [Kind; 2] {
    if round.is_multiple_of(2) {
        [Kind::Zrpc, Kind::Tonic]
    } else {
        [Kind::Tonic, Kind::Zrpc]
    }
}

/// Concurrent client tasks of the unary calls.
const TASKS: usize = 4;

/// A `many-serve` process with `methods` methods, listening; its address.
fn start(ctx: &Ctx<'_>, kind: Kind, methods: usize) -> Result<(Proc, String)> {
    let listen = format!("127.0.0.1:{}", free_port()?);
    let mut cmd = Command::new(&ctx.env.me);
    cmd.args(["many-serve", "--methods", &methods.to_string()]);
    match kind {
        Kind::Tonic => {
            cmd.args(["--kind", "tonic", "--listen", &listen]);
        }
        Kind::Zrpc => {
            // zrpc's defaults, logging as the other scenarios' quiet profile, no shedding.
            let yaml = ctx.file("many.yaml");
            std::fs::write(
                &yaml,
                format!(
                    "Name: bench.many\nListenOn: {listen}\nCpuThreshold: 0\n\
                     Log: {{Mode: console, Level: error, Stat: false}}\n"
                ),
            )?;
            cmd.args(["--kind", "zrpc", "--conf"]).arg(yaml);
        }
    }
    let mut p = Proc::spawn(&format!("many-serve {}", kind.label()), cmd, None, true)?;
    // `ready` is printed once the listener is bound: connections are accepted from then on
    p.wait_json(Duration::from_secs(20), |v| v.get("ready").is_some())?;
    Ok((p, listen))
}

/// One connection to `addr`.
async fn connect(addr: &str) -> Result<Channel> {
    Ok(Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?)
}

fn codec() -> tonic_prost::ProstCodec<(), ()> {
    tonic_prost::ProstCodec::default()
}

async fn unary(ch: Channel, path: PathAndQuery) -> Result<()> {
    let mut g = tonic::client::Grpc::new(ch);
    g.ready().await?;
    g.unary(tonic::Request::new(()), path, codec()).await?;
    Ok(())
}

/// `calls` unary calls over `paths` round-robin (call k to `paths[k % len]`), [`TASKS`] at a
/// time.
async fn calls(ch: &Channel, paths: &[PathAndQuery], calls: usize) -> Result<()> {
    let mut set = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let (ch, paths) = (ch.clone(), paths.to_vec());
        set.spawn(async move {
            for k in (t..calls).step_by(TASKS) {
                unary(ch.clone(), paths[k % paths.len()].clone()).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}

fn path(method: &str) -> PathAndQuery {
    PathAndQuery::try_from(format!("/{NAME}/{method}"))
        .unwrap_or_else(|_| PathAndQuery::from_static("/"))
}

/// The figures of one methods run: (RSS growth KiB calling `M1` .. `M<N-1>` once, CPU µs per call).
fn methods_run(
    ctx: &Ctx<'_>,
    rt: &tokio::runtime::Runtime,
    kind: Kind,
    n: usize,
    timed: usize,
) -> Result<(f64, f64)> {
    let (server, addr) = start(ctx, kind, n)?;
    let pid = server.pid();
    let paths: Vec<PathAndQuery> = (0..n).map(|i| path(&format!("M{i}"))).collect();
    rt.block_on(async {
        let ch = connect(&addr).await?;
        // Warm-up on M0 only: the runtime's, the connection's and the first method's one-time
        // costs; the others are first called below.
        calls(&ch, &paths[..1], ctx.size(200, 2_000)).await?;
        let before = settled_rss_kib(pid, Duration::from_secs(3));
        calls(&ch, &paths, n).await?;
        let growth = settled_rss_kib(pid, Duration::from_secs(3)) - before;
        let cpu = cpu_us_of(pid);
        calls(&ch, &paths, timed).await?;
        Ok((growth, (cpu_us_of(pid) - cpu) / timed as f64))
    })
}

pub(super) fn methods(ctx: &Ctx<'_>) -> Result<(Table, Vec<String>)> {
    let sizes = ctx.size(vec![1, 100], vec![1, 100, 1_000, 10_000]);
    let rounds = ctx.size(1, 3);
    let timed = ctx.size(2_000, 20_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let k = sizes.len();
    // per kind (zrpc 0, tonic 1): per size, per round
    let mut growth = [vec![vec![]; k], vec![vec![]; k]];
    let mut cpu = [vec![vec![]; k], vec![vec![]; k]];
    let pb = ctx.progress((rounds * k) as u64, "srv methods");
    for round in 0..rounds {
        for j in 0..k {
            let i = (j + round) % k;
            pb.inc(1);
            for kind in order(round) {
                let (g, c) = methods_run(ctx, &rt, kind, sizes[i], timed)
                    .with_context(|| format!("{} with {} methods", kind.label(), sizes[i]))?;
                growth[kind as usize][i].push(g);
                cpu[kind as usize][i].push(c);
            }
        }
    }
    pb.finish_and_clear();
    let mut t = Table::new(
        &format!(
            "Server, methods per service: one service of N unary methods (`{NAME}`, hand-written, \
             an empty answer), zrpc's full default chain beside bare tonic; per N, {rounds} \
             alternating rounds of a fresh server process each, one connection, {TASKS} calls \
             at a time; medians"
        ),
        &[
            "methods",
            "server",
            "RSS growth calling each method once, KiB",
            "per method beyond the first, bytes",
            "server CPU per call, µs",
            "CPU per call vs bare tonic (min..max)",
            "CPU per call vs 1 method (min..max)",
        ],
    );
    for (i, &n) in sizes.iter().enumerate() {
        for kind in [Kind::Zrpc, Kind::Tonic] {
            let c = kind as usize;
            let g = median(growth[c][i].clone());
            t.row(vec![
                n.to_string(),
                kind.label().into(),
                f(g, 0),
                if n > 1 {
                    f(g * 1024.0 / (n - 1) as f64, 0)
                } else {
                    "-".into()
                },
                f(median(cpu[c][i].clone()), 1),
                if kind == Kind::Zrpc {
                    round_ratio(&cpu[0][i], &cpu[1][i])
                } else {
                    "-".into()
                },
                if i == 0 {
                    "-".into()
                } else {
                    round_ratio(&cpu[c][i], &cpu[c][0])
                },
            ]);
        }
    }
    let notes = vec![format!(
        "Methods: a warm-up of {} calls to M0, then the RSS (settled: three readings 100 ms \
         apart within 8 KiB) before and after one call to each of M0..M<N-1> (what a method \
         costs a server once called: zrpc's per-method breaker and metric label sets, for \
         instance), then the server's CPU time (`/proc/<pid>/stat` utime + stime, 10 ms \
         ticks) over {timed} calls spread round-robin over all N. Both servers have {} worker \
         threads (one per CPU); the client runs in the harness. RSS moves in 4 KiB pages: at \
         100 methods the per-method figure is within a page or two of noise.",
        ctx.size(200, 2_000),
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
    )];
    Ok((t, notes))
}

/// The figures of one streams run: (RSS growth KiB over the open streams, the answer of a
/// unary call on a second connection meanwhile).
fn streams_run(
    ctx: &Ctx<'_>,
    rt: &tokio::runtime::Runtime,
    kind: Kind,
    s: usize,
) -> Result<(f64, String)> {
    let (server, addr) = start(ctx, kind, 1)?;
    let pid = server.pid();
    rt.block_on(async {
        let ch = connect(&addr).await?;
        let open = |count: usize| {
            let ch = ch.clone();
            async move {
                let mut set = tokio::task::JoinSet::new();
                for _ in 0..count {
                    let ch = ch.clone();
                    set.spawn(async move {
                        let mut g = tonic::client::Grpc::new(ch);
                        g.ready().await?;
                        let r = g
                            .server_streaming(
                                tonic::Request::new(()),
                                PathAndQuery::from_static(HOLD),
                                codec(),
                            )
                            .await?;
                        anyhow::Ok(r.into_inner())
                    });
                }
                let mut held = Vec::with_capacity(count);
                while let Some(r) = set.join_next().await {
                    held.push(r??);
                }
                anyhow::Ok(held)
            }
        };
        // Warm-up: unary calls, and ten streams opened and closed.
        calls(&ch, &[path("M0")], 200).await?;
        drop(open(10).await?);
        let before = settled_rss_kib(pid, Duration::from_secs(3));
        let held = tokio::time::timeout(Duration::from_secs(60), open(s))
            .await
            .with_context(|| format!("{s} streams did not all get their headers in 60 s"))??;
        let growth = settled_rss_kib(pid, Duration::from_secs(3)) - before;
        let second = tokio::time::timeout(Duration::from_secs(5), async {
            unary(connect(&addr).await?, path("M0")).await
        })
        .await;
        let answer = match second {
            Ok(Ok(())) => "answered".to_owned(),
            Ok(Err(e)) => format!("no: {e:#}"),
            Err(_) => "no answer in 5 s".to_owned(),
        };
        drop(held);
        Ok((growth, answer))
    })
}

pub(super) fn streams(ctx: &Ctx<'_>) -> Result<(Table, Vec<String>)> {
    let sizes = ctx.size(vec![10], vec![10, 100, 1_000]);
    let rounds = ctx.size(1, 3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let k = sizes.len();
    let mut growth = [vec![vec![]; k], vec![vec![]; k]];
    let mut answers = [vec![String::new(); k], vec![String::new(); k]];
    let pb = ctx.progress((rounds * k) as u64, "srv streams");
    for round in 0..rounds {
        for j in 0..k {
            let i = (j + round) % k;
            pb.inc(1);
            for kind in order(round) {
                let (g, a) = streams_run(ctx, &rt, kind, sizes[i])
                    .with_context(|| format!("{} with {} streams", kind.label(), sizes[i]))?;
                growth[kind as usize][i].push(g);
                let seen = &mut answers[kind as usize][i];
                if seen.is_empty() || seen == "answered" {
                    *seen = a;
                }
            }
        }
    }
    pb.finish_and_clear();
    let mut t = Table::new(
        &format!(
            "Server, streams per connection: S calls held open on one connection (a method \
             that sends its response headers, then a body that never ends), zrpc's full \
             default chain beside bare tonic, both at SETTINGS_MAX_CONCURRENT_STREAMS \
             {MAX_STREAMS}; {rounds} alternating rounds of a fresh server process each; medians"
        ),
        &[
            "open streams",
            "server",
            "RSS growth, KiB",
            "per open stream, bytes",
            "unary call on a second connection meanwhile",
        ],
    );
    for (i, &s) in sizes.iter().enumerate() {
        for kind in [Kind::Zrpc, Kind::Tonic] {
            let c = kind as usize;
            let g = median(growth[c][i].clone());
            t.row(vec![
                s.to_string(),
                kind.label().into(),
                f(g, 0),
                f(g * 1024.0 / s as f64, 0),
                answers[c][i].clone(),
            ]);
        }
    }
    let notes = vec![
        "Streams: a warm-up of 200 unary calls and ten streams opened and closed, then the RSS \
         (settled) before opening the S streams and once every one got its response headers. \
         zrpc declares the held method streaming (`streaming_method`), as a service without a \
         descriptor set does, so its `Timeout` does not cut it. At 10 streams the growth is \
         within a page or two of noise."
            .into(),
    ];
    Ok((t, notes))
}
