//! Load bench: per-request overhead of zrpc's full server chain vs bare tonic.
//!
//! Two in-process servers serve the same Greeter on loopback: bare
//! `tonic::transport::Server` and a zrpc `Server` with go-zero's default chain (trace,
//! recover, stat, metrics, breaker, shedding on the real CPU sampler, 2 s timeout, health).
//! One tonic client per server sends `--calls` unary calls, sequentially (latency) and with
//! `--concurrency` workers on one HTTP/2 connection (throughput). Rounds alternate between
//! the two servers to spread machine noise.
//!
//! `cargo run --release -p zrpc-tests --bin server_overhead -- --calls 20000 --rounds 3 [--single-thread]`
//!
//! `--h2load [--workers 1]`: throughput under h2load instead, bare tonic vs the zrpc full and
//! minimal chains (and external greeter-server builds), see `h2load.rs`.
//!
//! `--with-logs` installs a JSON `tracing` subscriber at info, as `Server::serve` does, so the
//! per-RPC span is really recorded. With `--single-thread` the client and the servers share one thread, so the sequential
//! figure is the CPU cost of a call (client + server), free of cross-thread wake-ups.
#![allow(clippy::unwrap_used)]

mod h2load;

use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use zrpc_core::cpu::FixedCpu;
use zrpc_tests::greeter::{TestGreeter, start_server_with};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

type Client = GreeterClient<tonic::transport::Channel>;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn sequential(client: &Client, calls: usize) -> Duration {
    let mut c = client.clone();
    let t0 = Instant::now();
    for _ in 0..calls {
        c.say_hello(HelloRequest { name: "b".into() })
            .await
            .unwrap();
    }
    t0.elapsed()
}

async fn concurrent(client: &Client, calls: usize, workers: usize) -> Duration {
    let per = calls / workers;
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let mut c = client.clone();
            tokio::spawn(async move {
                for _ in 0..per {
                    c.say_hello(HelloRequest { name: "b".into() })
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    t0.elapsed()
}

fn main() {
    if std::env::args().any(|a| a == "--h2load") {
        let workers = arg("--workers", 1);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(h2load::run());
        return;
    }
    let single = std::env::args().any(|a| a == "--single-thread");
    let rt = if single {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    let rt = rt.unwrap();
    if std::env::args().any(|a| a == "--with-logs") {
        // As `Server::serve` sets up logging in production: JSON at info (to a sink here).
        tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .init();
        println!("logging: JSON subscriber at info (spans recorded)");
    }
    println!(
        "runtime: {}",
        if single {
            "current_thread (client and servers on one thread: CPU cost per call)"
        } else {
            "multi_thread"
        }
    );
    rt.block_on(run());
}

async fn run() {
    let calls = arg("--calls", 20_000);
    let rounds = arg("--rounds", 3);
    let workers = arg("--concurrency", 32);

    // Bare tonic.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bare_addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TestGreeter::new().into_service())
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            ),
    );
    // zrpc, default chain; the shedder reads a fixed cool CPU so that the machine's load
    // (other builds) does not shed the bench itself: the per-call work is the same.
    let mut conf = zrpc_tests::greeter::test_conf("bench.rpc");
    // `--disable trace,breaker,...` switches stages off in the "chain" server, to attribute cost.
    let args: Vec<String> = std::env::args().collect();
    if let Some(list) = args
        .iter()
        .position(|a| a == "--disable")
        .and_then(|i| args.get(i + 1))
    {
        for stage in list.split(',') {
            match stage {
                "trace" => conf.middlewares.trace = false,
                "recover" => conf.middlewares.recover = false,
                "stat" => conf.middlewares.stat = false,
                "metrics" => conf.middlewares.prometheus = false,
                "breaker" => conf.middlewares.breaker = false,
                "shedding" => conf.cpu_threshold = 0,
                "timeout" => conf = conf.with_timeout(Duration::ZERO),
                other => panic!("unknown stage {other}"),
            }
        }
        println!("chain without: {list}");
    }
    let zrpc = start_server_with(conf, TestGreeter::new(), |s| {
        s.cpu_usage(std::sync::Arc::new(FixedCpu::new(0)))
    })
    .await;
    // zrpc with every stage off (the plumbing alone).
    let mut off = zrpc_tests::greeter::test_conf("bench-off.rpc").with_timeout(Duration::ZERO);
    off.cpu_threshold = 0;
    off.middlewares.trace = false;
    off.middlewares.recover = false;
    off.middlewares.stat = false;
    off.middlewares.prometheus = false;
    off.middlewares.breaker = false;
    // `--plumbing-off keepalive,handshake,budget,recv-timeout,streams,authority` switches
    // transport features off in the "all stages off" server too, to attribute plumbing cost.
    let mut repair = true;
    if let Some(list) = args
        .iter()
        .position(|a| a == "--plumbing-off")
        .and_then(|i| args.get(i + 1))
    {
        let t = &mut off.transport;
        for part in list.split(',') {
            match part {
                "keepalive" => t.keepalive_time = Duration::ZERO,
                "handshake" => t.handshake_timeout = Duration::ZERO,
                "budget" => t.max_buffered_request_bytes = 0,
                "recv-timeout" => t.message_receive_timeout = Duration::ZERO,
                "streams" => t.max_concurrent_streams = u32::MAX,
                "authority" => repair = false,
                other => panic!("unknown plumbing part {other}"),
            }
        }
        println!("all-stages-off server also without: {list}");
    }
    let zrpc_off = start_server_with(off, TestGreeter::new(), |s| s.authority_repair(repair)).await;

    let bare: Client = GreeterClient::connect(format!("http://{bare_addr}"))
        .await
        .unwrap();
    let chain: Client = zrpc.client().await;
    let plain: Client = zrpc_off.client().await;
    // Warm up.
    sequential(&bare, 2000).await;
    sequential(&chain, 2000).await;
    sequential(&plain, 2000).await;

    let (mut seq_bare, mut seq_chain, mut con_bare, mut con_chain) = (
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
    );
    let (mut seq_off, mut con_off) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..rounds {
        seq_bare += sequential(&bare, calls).await;
        seq_chain += sequential(&chain, calls).await;
        seq_off += sequential(&plain, calls).await;
        con_bare += concurrent(&bare, calls, workers).await;
        con_chain += concurrent(&chain, calls, workers).await;
        con_off += concurrent(&plain, calls, workers).await;
    }
    #[allow(clippy::cast_precision_loss)]
    let n = (calls * rounds) as f64;
    let us = |d: Duration| d.as_secs_f64() * 1e6 / n;
    let rps = |d: Duration| n / d.as_secs_f64();
    println!("{calls} calls x {rounds} rounds, unary over loopback");
    println!(
        "sequential : bare {:.1} us/call, zrpc chain {:.1} us/call, overhead {:+.1} us/call ({:+.1}%)",
        us(seq_bare),
        us(seq_chain),
        us(seq_chain) - us(seq_bare),
        (us(seq_chain) / us(seq_bare) - 1.0) * 100.0
    );
    println!(
        "concurrent ({workers} workers, 1 connection): bare {:.0} calls/s, zrpc chain {:.0} calls/s ({:+.1}%), {:+.2} us/call of CPU-bound time",
        rps(con_bare),
        rps(con_chain),
        (rps(con_chain) / rps(con_bare) - 1.0) * 100.0,
        us(con_chain) - us(con_bare)
    );
    println!(
        "zrpc, all stages off: sequential {:.1} us/call, concurrent {:.0} calls/s",
        us(seq_off),
        rps(con_off)
    );
    zrpc.shutdown().await.unwrap();
    zrpc_off.shutdown().await.unwrap();
}
