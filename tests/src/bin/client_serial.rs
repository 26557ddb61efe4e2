//! Serial (C=1) latency and c50 throughput of the zrpc client against a bare tonic `Channel`, the
//! servers in another process.
//!
//! Two bare tonic Greeter servers run in a child process (this binary with `--serve`, on its own
//! multi-thread runtime), so the client process holds only the clients and its system calls can be
//! counted alone. Each round measures, in an order that rotates from round to round:
//! - `tonic`: a bare `tonic::transport::Channel` (`tcp_nodelay`, as tonic's examples);
//! - `tonic-dl`: the same channel, each request with a 2 s deadline (`Request::set_timeout`: the
//!   `grpc-timeout` header zrpc sends, and the timers it makes tonic's channel and server arm);
//! - `zrpc 1ep`: a zrpc client with its default layers over the first server (static
//!   `Endpoints:`, p2c_ewma, 2 s timeout);
//! - `zrpc 2ep`: the same over both servers (the transparent retry is armed);
//! - `zrpc1-nt`: `zrpc 1ep` with `Timeout: 0` (no deadline timer, no `grpc-timeout` header);
//! - `zrpc1-min`: `zrpc 1ep` with every middleware off (the balancer and its endpoint's channel);
//! - `tonic-lazy`: a bare channel built as zrpc builds an endpoint's (`connect_lazy`, a connect
//!   timeout), without zrpc's connector (only with `--kinds`);
//! - `hyper`: tonic's generated client over one hyper HTTP/2 connection, without tonic's
//!   `Channel` (its request buffer and worker task, its `grpc-timeout` and origin layers,
//!   reconnect): what the channel itself costs a call (only with `--kinds` or `--only`).
//!
//! Per round and client: the p50 of `--serial` calls made one at a time, and (with `--c50 N`) the
//! calls/s of N calls by 50 workers sharing the client. The report gives the medians over the
//! rounds and zrpc - tonic (µs) / zrpc / tonic (ratio) of those medians.
//!
//! `cargo run --release -p zrpc-tests --bin client_serial -- [--rounds 7] [--serial 5000]
//! [--c50 0] [--threads 0] [--spawn] [--kinds tonic,zrpc1,...]`
//!
//! `--spawn` makes the serial calls from a spawned task (a runtime worker thread, as the harness's
//! `zrpc-bench load` does) instead of the `block_on` future on the main thread.
//!
//! For system-call counts (`strace -f -c`), one client alone against a server started apart:
//! `client_serial --serve` prints the two addresses; then
//! `strace -f -c client_serial --only tonic|tonic-dl|zrpc1|zrpc2|zrpc1-nt --connect <a>,<b> --serial 20000`.
//! `--only` also prints the process's CPU time, run-queue wait and time slices per call (all
//! threads, `/proc/self/task/*/schedstat`) and each runtime worker's parks per call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, Write};
use std::time::Instant;

use zrpc_tests::bench::{ServeChild, arg, median, serve_or_run};
use zrpc_tests::greeter::spawn_bare_tonic;
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

#[derive(Clone)]
enum Caller {
    /// A bare channel; with `Some(t)` every request carries `grpc-timeout: t` (tonic's
    /// `Request::set_timeout`: the channel and the server each arm a timer from it).
    Tonic(
        GreeterClient<tonic::transport::Channel>,
        Option<std::time::Duration>,
    ),
    Zrpc(GreeterClient<zrpc::Client>),
    Hyper(GreeterClient<HyperConn>),
}

/// One hyper HTTP/2 connection as a tower service (hyper's `SendRequest` is not one).
#[derive(Clone)]
struct HyperConn(hyper::client::conn::http2::SendRequest<tonic::body::Body>);

impl tower::Service<http::Request<tonic::body::Body>> for HyperConn {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    // boxed: `send_request`'s future has no name
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, hyper::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), hyper::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(req))
    }
}

/// A plain TCP connection to `addr` (no delay), with hyper's HTTP/2 handshake; its
/// connection task spawned.
async fn hyper_conn(addr: &str) -> HyperConn {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (send, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    HyperConn(send)
}

impl Caller {
    async fn call(&mut self) {
        let req = HelloRequest { name: "b".into() };
        match self {
            Caller::Tonic(c, timeout) => {
                let mut req = tonic::Request::new(req);
                if let Some(t) = timeout {
                    req.set_timeout(*t);
                }
                drop(c.say_hello(req).await.unwrap());
            }
            Caller::Zrpc(c) => drop(c.say_hello(req).await.unwrap()),
            Caller::Hyper(c) => drop(c.say_hello(req).await.unwrap()),
        }
    }
}

fn num(name: &str, default: usize) -> usize {
    arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    serve_or_run(num("--threads", 0), serve(), run());
}

/// Two bare tonic servers; prints their addresses, runs until stdin closes.
async fn serve() {
    let mut addrs = Vec::new();
    for _ in 0..2 {
        addrs.push(spawn_bare_tonic().await.to_string());
    }
    println!("{}", addrs.join(","));
    std::io::stdout().flush().unwrap();
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
            line.clear();
        }
    })
    .await
    .unwrap();
}

async fn connect(kind: &str, addrs: &[String]) -> Caller {
    match kind {
        "tonic-lazy" => Caller::Tonic(
            // the channel zrpc builds per endpoint, minus zrpc's connector: lazily connected,
            // with a connect timeout
            GreeterClient::new(
                tonic::transport::Endpoint::from_shared(format!("http://{}", addrs[0]))
                    .unwrap()
                    .tcp_nodelay(true)
                    .connect_timeout(std::time::Duration::from_secs(3))
                    .connect_lazy(),
            ),
            None,
        ),
        "tonic" | "tonic-dl" => Caller::Tonic(
            GreeterClient::new(
                tonic::transport::Endpoint::from_shared(format!("http://{}", addrs[0]))
                    .unwrap()
                    .tcp_nodelay(true)
                    .connect()
                    .await
                    .unwrap(),
            ),
            (kind == "tonic-dl").then_some(std::time::Duration::from_secs(2)),
        ),
        "zrpc1" | "zrpc2" | "zrpc1-nt" | "zrpc1-min" => {
            let n = if kind == "zrpc2" { 2 } else { 1 };
            let mut conf = zrpc::RpcClientConf::direct(addrs[..n].iter().cloned());
            if kind == "zrpc1-nt" {
                // no timer and no grpc-timeout header: what the deadline costs
                conf = conf.with_timeout(std::time::Duration::ZERO);
            }
            if kind == "zrpc1-min" {
                // every middleware off: the balancer and the endpoint's channel alone
                let mut m = zrpc::ClientMiddlewaresConf::default();
                m.trace = false;
                m.duration = false;
                m.prometheus = false;
                m.breaker = false;
                m.timeout = false;
                conf = conf.with_middlewares(m);
            }
            Caller::Zrpc(GreeterClient::new(zrpc::client(conf).await.unwrap()))
        }
        "hyper" => Caller::Hyper(GreeterClient::with_origin(
            hyper_conn(&addrs[0]).await,
            format!("http://{}", addrs[0]).parse().unwrap(),
        )),
        other => panic!(
            "unknown client {other:?}: tonic, tonic-dl, tonic-lazy, hyper, zrpc1, zrpc1-nt, zrpc1-min or zrpc2"
        ),
    }
}

/// The p50 of `n` serial calls, µs. With `--spawn` the calls are made by a spawned task (on a
/// runtime worker thread, as `zrpc-bench load` makes them), else by the `block_on` future on the
/// main thread.
async fn serial(c: &mut Caller, n: usize) -> f64 {
    if std::env::args().any(|a| a == "--spawn") {
        let mut c2 = c.clone();
        return tokio::spawn(async move { serial_here(&mut c2, n).await })
            .await
            .unwrap();
    }
    serial_here(c, n).await
}

async fn serial_here(c: &mut Caller, n: usize) -> f64 {
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        c.call().await;
        took.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    median(took)
}

/// Calls/s of `n` calls by 50 workers sharing `c`.
async fn c50(c: &Caller, n: usize) -> f64 {
    let per = n / 50;
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let mut c = c.clone();
            tokio::spawn(async move {
                for _ in 0..per {
                    c.call().await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    #[allow(clippy::cast_precision_loss)]
    let rate = (per * 50) as f64 / t0.elapsed().as_secs_f64();
    rate
}

async fn run() {
    let serial_n = num("--serial", 5_000);
    let mut _server = None;
    let addrs: Vec<String> = match arg("--connect") {
        Some(a) => a.split(',').map(str::to_owned).collect(),
        None => {
            let (child, line) = ServeChild::start();
            _server = Some(child);
            line.split(',').map(str::to_owned).collect()
        }
    };
    if let Some(only) = arg("--only") {
        let mut c = connect(&only, &addrs).await;
        serial(&mut c, 500).await;
        let before = Parks::now();
        let sched = schedstat();
        let p50 = serial(&mut c, serial_n).await;
        let parks = Parks::now().per_call_since(&before, serial_n);
        let after = schedstat();
        #[allow(clippy::cast_precision_loss)]
        let per = |a: u64, b: u64| (a - b) as f64 / serial_n as f64 / 1e3;
        println!(
            "{only}: serial p50 {p50:.1} us over {serial_n} calls; CPU {:.2} us, run-queue wait {:.2} us, slices {:.2} per call (all threads); {parks}",
            per(after.0, sched.0),
            per(after.1, sched.1),
            per(after.2 * 1000, sched.2 * 1000),
        );
        return;
    }
    let rounds = num("--rounds", 7);
    let c50_n = num("--c50", 0);
    let kinds: Vec<String> = match arg("--kinds") {
        Some(k) => k.split(',').map(str::to_owned).collect(),
        None => ["tonic", "tonic-dl", "zrpc1", "zrpc2", "zrpc1-nt"]
            .map(str::to_owned)
            .to_vec(),
    };
    let mut clients = Vec::new();
    for k in &kinds {
        let mut c = connect(k, &addrs).await;
        serial(&mut c, 1_000).await;
        if c50_n > 0 {
            c50(&c, 5_000).await;
        }
        clients.push(c);
    }
    let mut p50 = vec![Vec::new(); kinds.len()];
    let mut rate = vec![Vec::new(); kinds.len()];
    for round in 0..rounds {
        for j in 0..kinds.len() {
            let i = (round + j) % kinds.len();
            p50[i].push(serial(&mut clients[i], serial_n).await);
            if c50_n > 0 {
                rate[i].push(c50(&clients[i], c50_n).await);
            }
        }
    }
    println!(
        "serial p50 (us), median of {rounds} rotating rounds of {serial_n} calls; servers: 2 bare tonic in a child process"
    );
    let t = median(p50[0].clone());
    for (i, k) in kinds.iter().enumerate() {
        let m = median(p50[i].clone());
        println!(
            "  {k:8} {m:7.1}  {:+6.1} vs tonic  rounds {:.1?}",
            m - t,
            p50[i]
        );
    }
    if c50_n > 0 {
        println!("c50 calls/s, median of {rounds} rounds of {c50_n} calls");
        let t = median(rate[0].clone());
        for (i, k) in kinds.iter().enumerate() {
            let m = median(rate[i].clone());
            println!(
                "  {k:8} {m:8.0}  {:.3}x tonic  rounds {:.0?}",
                m / t,
                rate[i]
            );
        }
    }
}

/// The runtime's per-worker park counts and busy time (tokio's stable metrics), to tell how
/// often each worker thread went to sleep and was woken again per call.
struct Parks(Vec<(u64, u64, std::time::Duration)>);

impl Parks {
    fn now() -> Parks {
        let m = tokio::runtime::Handle::current().metrics();
        Parks(
            (0..m.num_workers())
                .map(|w| {
                    (
                        m.worker_park_count(w),
                        m.worker_park_unpark_count(w),
                        m.worker_total_busy_duration(w),
                    )
                })
                .collect(),
        )
    }

    fn per_call_since(&self, before: &Parks, calls: usize) -> String {
        #[allow(clippy::cast_precision_loss)]
        let n = calls as f64;
        self.0
            .iter()
            .zip(&before.0)
            .enumerate()
            .map(|(w, (a, b))| {
                format!(
                    "worker {w}: parks {:.2} unparks {:.2} busy {:.1} us per call",
                    (a.0 - b.0) as f64 / n,
                    (a.1 - b.1) as f64 / n,
                    (a.2 - b.2).as_secs_f64() * 1e6 / n
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// This process's CPU time, run-queue wait (ns) and time slices, summed over its threads
/// (`/proc/self/task/*/schedstat`).
fn schedstat() -> (u64, u64, u64) {
    let mut sum = (0, 0, 0);
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) else {
            continue;
        };
        let v: Vec<u64> = s
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [cpu, wait, slices] = v[..] {
            sum = (sum.0 + cpu, sum.1 + wait, sum.2 + slices);
        }
    }
    sum
}
