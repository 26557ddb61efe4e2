//! `zrpc-bench load`: the Rust load generator, built from zrpc's own client (or a bare tonic
//! channel for the anchor). Closed loop (`-c` workers, `-n` calls or `--duration-ms`) or open
//! loop (`--rate` calls/s for `--duration-ms`, one task per call, never waiting for answers;
//! `--critical-every n` marks every n-th call `zrpc-tier: critical`). Prints one JSON
//! [`Summary`] line; `--records` writes every call (`start_ms latency_ms code server tier`). The Go generator (`go/gzbench`) takes the same flags and prints the same JSON.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tonic::transport::Channel;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::pb::{HelloRequest, HelloStreamRequest};

use crate::stats::{DROPPED, Summary, code_name, percentile};

/// The `load` arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LoadArgs {
    /// `zrpc` (zrpc::Client: balancer, breaker, timeout...) or `tonic` (one bare channel).
    #[arg(long, default_value = "zrpc")]
    client: String,
    /// `p2c_ewma` or `round_robin` (zrpc only).
    #[arg(long, default_value = "p2c_ewma")]
    balancer: String,
    /// Server addresses, comma-separated.
    #[arg(long, default_value = "")]
    endpoints: String,
    /// etcd hosts, comma-separated (with --key): discover the servers there.
    #[arg(long, default_value = "")]
    etcd: String,
    /// etcd key.
    #[arg(long, default_value = "")]
    key: String,
    /// Closed loop: workers.
    #[arg(short = 'c', default_value_t = 1)]
    concurrency: usize,
    /// Closed loop: calls (ignored with --duration-ms).
    #[arg(short = 'n', default_value_t = 1000)]
    calls: u64,
    /// Run for this long, ms.
    #[arg(long, default_value_t = 0)]
    duration_ms: u64,
    /// Open loop: calls per second (0: closed loop).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Calls before measuring (closed loop, same workers).
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Per-call timeout, ms (0: the client's default; zrpc's is 2000).
    #[arg(long, default_value_t = 0)]
    timeout_ms: u64,
    /// Write every call here.
    #[arg(long)]
    records: Option<PathBuf>,
    /// Tokio worker threads (0: one per CPU; 1: current-thread runtime).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Retry the first call until it succeeds or this passes, ms (discovery lag).
    #[arg(long, default_value_t = 10_000)]
    wait_ms: u64,
    /// Each call is a server stream of this many messages (`SayHelloStream`, read to its end)
    /// instead of a unary `SayHello` (0).
    #[arg(long, default_value_t = 0)]
    stream: u32,
    /// The request's name field has this many octets (0: `bench`).
    #[arg(long, default_value_t = 0)]
    payload_bytes: usize,
    /// The `--payload-bytes` name is text (words and numbers that gzip shrinks about 3x) rather
    /// than one octet repeated.
    #[arg(long)]
    text: bool,
    /// Calls compressed with gzip: tonic's own (`send_compressed` and `accept_compressed`) for
    /// `--client tonic`, `Compression: gzip` for `--client zrpc`.
    #[arg(long)]
    gzip: bool,
    /// Every n-th call is marked critical (`zrpc-tier: critical`); 0: none.
    #[arg(long, default_value_t = 0)]
    critical_every: u64,
    /// `tonic`: open loop over this many connections, calls spread in turn (as many callers
    /// would send them; one connection holds at most the server's `MaxConcurrentStreams`).
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Log the resolver's endpoint sets, failed calls and call counts to this file as the run
    /// goes (`watch_log.rs`; the `fleet` run).
    #[arg(long)]
    watch: Option<PathBuf>,
}

/// What each call sends.
#[derive(Debug, Clone)]
struct Shape {
    timeout: Option<Duration>,
    /// Messages per server stream; 0 for a unary call.
    stream: u32,
    name: String,
    /// Every n-th call is critical (0: none).
    critical_every: u64,
}

#[derive(Debug, Clone)]
enum Caller {
    Tonic(GreeterClient<Channel>),
    Zrpc(GreeterClient<zrpc::Client>),
}

/// One call: (code, server). Code [`DROPPED`] when the client's breaker refused it.
async fn call(c: &mut Caller, shape: &Shape, critical: bool) -> (u32, Option<String>) {
    if shape.stream > 0 {
        return stream(c, shape).await;
    }
    let mut req = tonic::Request::new(HelloRequest {
        name: shape.name.clone(),
    });
    if let Some(t) = shape.timeout {
        req.set_timeout(t);
    }
    if critical {
        zrpc::set_tier(&mut req, zrpc::Tier::Critical);
    }
    let res = match c {
        Caller::Tonic(g) => g.say_hello(req).await,
        Caller::Zrpc(g) => g.say_hello(req).await,
    };
    crate::watch_log::done(res.as_ref().err());
    match res {
        Ok(resp) => (
            0,
            resp.metadata()
                .get("x-server")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        ),
        Err(st) if st.message().contains("circuit breaker is open") => (DROPPED, None),
        Err(st) => (st.code() as u32, None),
    }
}

/// A server stream of `shape.stream` messages, read to its end; OK only when every message came.
async fn stream(c: &mut Caller, shape: &Shape) -> (u32, Option<String>) {
    let mut req = tonic::Request::new(HelloStreamRequest {
        name: shape.name.clone(),
        count: shape.stream,
        interval_ms: 0,
    });
    if let Some(t) = shape.timeout {
        req.set_timeout(t);
    }
    let res = match c {
        Caller::Tonic(g) => g.say_hello_stream(req).await,
        Caller::Zrpc(g) => g.say_hello_stream(req).await,
    };
    let mut body = match res {
        Ok(resp) => resp.into_inner(),
        Err(st) => return (st.code() as u32, None),
    };
    let mut got = 0u32;
    loop {
        match body.message().await {
            Ok(Some(_)) => got += 1,
            Ok(None) if got == shape.stream => return (0, None),
            Ok(None) => return (tonic::Code::DataLoss as u32, None),
            Err(st) => return (st.code() as u32, None),
        }
    }
}

/// `n` octets of text: words and numbers from a small vocabulary, picked by a fixed
/// generator (the same text every run), that gzip shrinks about 3x, as JSON or logs do.
fn text(n: usize) -> String {
    const WORDS: [&str; 16] = [
        "user", "order", "status", "shipped", "amount", "currency", "EUR", "created", "id",
        "region", "eu-west", "items", "sku", "quantity", "price", "note",
    ];
    let mut s = String::with_capacity(n + 16);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    while s.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(WORDS[(x % 16) as usize]);
        s.push_str(if x & 32 == 0 { "=" } else { " " });
        s.push_str(&(x >> 40).to_string());
        s.push(if x & 64 == 0 { ',' } else { ' ' });
    }
    s.truncate(n);
    s
}

/// Octets this process has written through system calls (`/proc/self/io` `wchar`): over a
/// run, what the client sent on its connections. (Its `rchar` does not count reads from
/// sockets.)
fn written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[derive(Debug, Clone)]
struct Rec {
    start: Duration,
    latency: Duration,
    code: u32,
    server: Option<String>,
    critical: bool,
}

/// Runs the generator and prints its summary.
pub(crate) fn run(args: LoadArgs) -> Result<()> {
    let mut rt = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    if args.threads > 1 {
        rt.worker_threads(args.threads);
    }
    let summary = rt.enable_all().build()?.block_on(load(args))?;
    println!("{}", serde_json::to_string(&summary)?);
    Ok(())
}

async fn connect(args: &LoadArgs) -> Result<Caller> {
    let endpoints: Vec<String> = args
        .endpoints
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    match args.client.as_str() {
        "tonic" => {
            let first = endpoints
                .first()
                .context("--client tonic needs --endpoints host:port")?;
            let ch = tonic::transport::Endpoint::from_shared(format!("http://{first}"))?
                .tcp_nodelay(true)
                .connect()
                .await
                .with_context(|| format!("cannot connect to {first}"))?;
            let mut client = GreeterClient::new(ch);
            if args.gzip {
                let gzip = tonic::codec::CompressionEncoding::Gzip;
                client = client.send_compressed(gzip).accept_compressed(gzip);
            }
            Ok(Caller::Tonic(client))
        }
        "zrpc" => {
            let mut conf = if args.etcd.is_empty() {
                zrpc::RpcClientConf::direct(endpoints)
            } else {
                zrpc::RpcClientConf::etcd(args.etcd.split(','), args.key.clone())
            };
            conf.balancer_name = match args.balancer.as_str() {
                "p2c_ewma" => zrpc::conf::BalancerName::P2cEwma,
                "round_robin" => zrpc::conf::BalancerName::RoundRobin,
                other => bail!("--balancer {other}: expected p2c_ewma or round_robin"),
            };
            if args.timeout_ms > 0 {
                conf.timeout = args.timeout_ms;
            }
            if args.gzip {
                conf.compression = Some(zrpc::compression::Encoding::Gzip);
            }
            let client = zrpc::client(conf).await?;
            if args.watch.is_some() {
                // the client's own resolution: one etcd watch per target in a process
                let target = zrpc::resolver::Target::parse(client.target())?;
                crate::watch_log::views(zrpc::resolver::resolve(&target)?);
            }
            Ok(Caller::Zrpc(GreeterClient::new(client)))
        }
        other => bail!("--client {other}: expected zrpc or tonic"),
    }
}

async fn load(args: LoadArgs) -> Result<Summary> {
    if let Some(path) = &args.watch {
        crate::watch_log::open(path)?;
    }
    let mut caller = connect(&args).await?;
    let mut callers = vec![caller.clone()];
    for _ in 1..args.connections.max(1) {
        if args.client == "tonic" {
            callers.push(connect(&args).await?);
        }
    }
    let shape = Arc::new(Shape {
        timeout: (args.timeout_ms > 0 && args.client == "tonic")
            .then(|| Duration::from_millis(args.timeout_ms)),
        stream: args.stream,
        name: if args.payload_bytes > 0 && args.text {
            text(args.payload_bytes)
        } else if args.payload_bytes > 0 {
            "x".repeat(args.payload_bytes)
        } else {
            "bench".into()
        },
        critical_every: args.critical_every,
    });
    // The first call: wait for discovery and the connection.
    let deadline = Instant::now() + Duration::from_millis(args.wait_ms);
    loop {
        let (code, _) = call(&mut caller, &shape, false).await;
        if code == 0 || code == 13 || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if args.warmup > 0 {
        closed(
            &caller,
            args.concurrency,
            args.warmup,
            None,
            &shape,
            Instant::now(),
        )
        .await;
    }
    let cpu0 = zrpc_tests::bench::cpu_ns();
    let io0 = written();
    let t0 = Instant::now();
    let t0_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    let duration = (args.duration_ms > 0).then(|| Duration::from_millis(args.duration_ms));
    let recs = if args.rate > 0.0 {
        open(
            &callers,
            args.rate,
            duration.unwrap_or(Duration::from_secs(5)),
            &shape,
            t0,
        )
        .await
    } else {
        closed(&caller, args.concurrency, args.calls, duration, &shape, t0).await
    };
    let elapsed = t0.elapsed();
    let cpu = zrpc_tests::bench::cpu_ns().saturating_sub(cpu0);
    let wire = written().saturating_sub(io0);
    if let Some(path) = &args.records {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot write {}", path.display()))?,
        );
        for r in &recs {
            writeln!(
                f,
                "{:.3} {:.3} {} {} {}",
                r.start.as_secs_f64() * 1000.0,
                r.latency.as_secs_f64() * 1000.0,
                r.code,
                r.server.as_deref().unwrap_or("-"),
                if r.critical { "critical" } else { "-" }
            )?;
        }
        f.flush()?;
    }
    let mut summary = summarize(&recs, elapsed, cpu);
    summary.t0_unix_ms = t0_unix_ms;
    summary.messages = summary.ok * u64::from(args.stream);
    if summary.calls > 0 {
        summary.sent_per_call = wire as f64 / summary.calls as f64;
    }
    Ok(summary)
}

fn summarize(recs: &[Rec], elapsed: Duration, cpu_ns: u64) -> Summary {
    let mut s = Summary::default();
    let mut lat: Vec<f64> = Vec::with_capacity(recs.len());
    for r in recs {
        s.calls += 1;
        if r.code == 0 {
            s.ok += 1;
        } else {
            s.failed += 1;
        }
        if r.code == DROPPED {
            s.dropped += 1;
        }
        *s.codes.entry(code_name(r.code)).or_default() += 1;
        if let Some(srv) = &r.server {
            *s.servers.entry(srv.clone()).or_default() += 1;
        }
        lat.push(r.latency.as_secs_f64() * 1000.0);
    }
    lat.sort_by(f64::total_cmp);
    s.p50_ms = percentile(&lat, 0.5);
    s.p99_ms = percentile(&lat, 0.99);
    s.p999_ms = percentile(&lat, 0.999);
    s.elapsed_ms = elapsed.as_secs_f64() * 1000.0;
    s.cpu_us = if s.calls > 0 {
        cpu_ns as f64 / 1000.0 / s.calls as f64
    } else {
        0.0
    };
    s.rss_mb = peak_rss_mb();
    s
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn closed(
    caller: &Caller,
    workers: usize,
    calls: u64,
    duration: Option<Duration>,
    shape: &Arc<Shape>,
    t0: Instant,
) -> Vec<Rec> {
    let workers = workers.max(1);
    let per = calls.div_ceil(workers as u64);
    let end = duration.map(|d| t0 + d);
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let mut c = caller.clone();
            let shape = Arc::clone(shape);
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(if end.is_some() { 1024 } else { per as usize });
                let mut i = 0u64;
                loop {
                    match end {
                        Some(end) if Instant::now() >= end => break,
                        None if i >= per => break,
                        _ => {}
                    }
                    i += 1;
                    let start = Instant::now();
                    let (code, server) = call(&mut c, &shape, false).await;
                    out.push(Rec {
                        start: start.duration_since(t0),
                        latency: start.elapsed(),
                        code,
                        server,
                        critical: false,
                    });
                }
                out
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        if let Ok(v) = t.await {
            all.extend(v);
        }
    }
    all
}

async fn open(
    callers: &[Caller],
    rate: f64,
    duration: Duration,
    shape: &Arc<Shape>,
    t0: Instant,
) -> Vec<Rec> {
    let recs = Arc::new(Mutex::new(Vec::new()));
    let period = Duration::from_secs_f64(1.0 / rate);
    let total = (rate * duration.as_secs_f64()).round() as u64;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..total {
        tick.tick().await;
        let mut c = callers[i as usize % callers.len()].clone();
        let recs = recs.clone();
        let shape = Arc::clone(shape);
        let critical = shape.critical_every > 0 && (i + 1).is_multiple_of(shape.critical_every);
        tasks.spawn(async move {
            let start = Instant::now();
            let (code, server) = call(&mut c, &shape, critical).await;
            let rec = Rec {
                start: start.duration_since(t0),
                latency: start.elapsed(),
                code,
                server,
                critical,
            };
            recs.lock().unwrap_or_else(|e| e.into_inner()).push(rec);
        });
    }
    while tasks.join_next().await.is_some() {}
    std::mem::take(&mut *recs.lock().unwrap_or_else(|e| e.into_inner()))
}
