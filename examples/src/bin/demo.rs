//! The P2C+EWMA demo: three greeter servers, one of them slow, and the same load sent through a
//! `p2c_ewma` client and a `round_robin` client.
//!
//! ```text
//! cargo run --release -p zrpc-examples --bin demo
//! cargo run --release -p zrpc-examples --bin demo -- --etcd 127.0.0.1:2379
//! ```
//!
//! No etcd is needed by default: the servers run in this process on loopback and the clients get
//! their addresses as `Endpoints`. With `--etcd`, the servers register in etcd and the clients
//! discover them there, exactly as separate processes would.

use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use tokio::task::JoinSet;
use zrpc_examples::greeter::{Greeter, SERVER_HEADER};
use zrpc_examples::pb::HelloRequest;
use zrpc_examples::pb::greeter_client::GreeterClient;
use zrpc_examples::stats::{Call, Summary, fmt_duration};

/// Compare p2c_ewma and round_robin on three greeter servers, one of them slow.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Register and discover through this etcd (`host:port`) instead of direct endpoints.
    #[arg(long, value_name = "HOST:PORT")]
    etcd: Option<String>,
    /// Latency of the two fast servers, in milliseconds.
    #[arg(long, default_value_t = 2)]
    fast_ms: u64,
    /// Latency of the slow server, in milliseconds (the classic 10 ms vs 1000 ms scenario, scaled
    /// down).
    #[arg(long, default_value_t = 100)]
    slow_ms: u64,
    /// Requests per second sent through each client (open loop: the rate does not slow down
    /// when the servers do).
    #[arg(long, default_value_t = 2000)]
    rps: u64,
    /// Seconds of load per client.
    #[arg(long, default_value_t = 5)]
    secs: u64,
}

/// One of the demo's in-process servers.
#[derive(Debug)]
struct Backend {
    label: String,
    addr: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let key = format!("zrpc.demo.{}", std::process::id());

    let specs = [
        ("fast-1", args.fast_ms),
        ("fast-2", args.fast_ms),
        ("slow", args.slow_ms),
    ];
    let mut backends = Vec::new();
    let mut servers = Vec::new();
    for (name, ms) in specs {
        let server = demo_server::start(Duration::from_millis(ms), args.etcd.as_deref(), &key)
            .await
            .with_context(|| format!("starting greeter server {name}"))?;
        backends.push(Backend {
            label: format!("{name} ({ms} ms)"),
            addr: server.addr().to_owned(),
        });
        servers.push(server);
    }
    eprintln!("3 greeter servers on loopback:");
    for b in &backends {
        eprintln!("  {:<16} {}", b.label, b.addr);
    }
    let endpoints: Vec<String> = backends.iter().map(|b| b.addr.clone()).collect();
    let conf_for = |balancer: zrpc::BalancerName| match &args.etcd {
        Some(etcd) => {
            zrpc::RpcClientConf::etcd([etcd.clone()], key.clone()).with_balancer(balancer)
        }
        None => zrpc::RpcClientConf::direct(endpoints.clone()).with_balancer(balancer),
    };
    if let Some(etcd) = &args.etcd {
        eprintln!(
            "registered under {key:?} in etcd {etcd}; waiting until all three are discoverable"
        );
        wait_all_discoverable(conf_for(zrpc::BalancerName::RoundRobin), &endpoints).await?;
    }
    eprintln!(
        "load: {} requests/s for {} s through each client ({} calls)\n",
        args.rps,
        args.secs,
        args.rps * args.secs
    );

    let mut results = Vec::new();
    for balancer in [zrpc::BalancerName::P2cEwma, zrpc::BalancerName::RoundRobin] {
        let client = zrpc::client(conf_for(balancer)).await?;
        let started = Instant::now();
        let calls = run_load(client, balancer.as_str(), args.rps, args.secs).await;
        results.push((balancer, Summary::new(&calls), started.elapsed()));
    }

    for server in servers {
        server.stop().await;
    }

    print_table(&backends, &results);
    Ok(())
}

/// Sends `rps` SayHello calls per second for `secs` seconds, each on its own task, and returns
/// every call's outcome. Draws a progress line on stderr.
async fn run_load(client: zrpc::Client, label: &str, rps: u64, secs: u64) -> Vec<Call> {
    let total = usize::try_from(rps * secs).unwrap_or(usize::MAX);
    let done = Arc::new(AtomicUsize::new(0));
    let progress = tokio::spawn(progress_line(label.to_owned(), total, done.clone()));

    let mut tasks = JoinSet::new();
    let start = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_millis(1));
    let mut sent = 0usize;
    while sent < total {
        ticker.tick().await;
        let due = (start.elapsed().as_secs_f64() * rps as f64) as usize;
        while sent < due.min(total) {
            let mut greeter = GreeterClient::new(client.clone());
            let done = done.clone();
            tasks.spawn(async move {
                let t = Instant::now();
                let result = greeter
                    .say_hello(HelloRequest {
                        name: "demo".into(),
                    })
                    .await;
                done.fetch_add(1, Ordering::Relaxed);
                call_outcome(t.elapsed(), result)
            });
            sent += 1;
        }
    }
    let mut calls = Vec::with_capacity(total);
    while let Some(call) = tasks.join_next().await {
        if let Ok(call) = call {
            calls.push(call);
        }
    }
    let _ = progress.await;
    calls
}

fn call_outcome(
    latency: Duration,
    result: Result<zrpc::tonic::Response<zrpc_examples::pb::HelloReply>, zrpc::tonic::Status>,
) -> Call {
    match result {
        Ok(response) => Call {
            latency,
            server: response
                .metadata()
                .get(SERVER_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            error: None,
        },
        Err(status) => Call {
            latency,
            server: None,
            error: Some(format!("{:?}: {}", status.code(), status.message())),
        },
    }
}

/// Redraws `label [#####.....] 45% 4500/10000` on stderr every 100 ms until `done` reaches
/// `total` (only the final line when stderr is not a terminal).
async fn progress_line(label: String, total: usize, done: Arc<AtomicUsize>) {
    const WIDTH: usize = 30;
    let redraw = std::io::stderr().is_terminal();
    loop {
        let n = done.load(Ordering::Relaxed).min(total);
        if redraw || n >= total {
            let filled = (n * WIDTH).checked_div(total).unwrap_or(WIDTH);
            eprint!(
                "\r{label:<12} [{}{}] {:3}% {n}/{total}",
                "#".repeat(filled),
                ".".repeat(WIDTH - filled),
                (n * 100).checked_div(total).unwrap_or(100),
            );
        }
        if n >= total {
            eprintln!();
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Calls through a round_robin client until every server has answered (etcd mode only: the
/// servers register asynchronously).
async fn wait_all_discoverable(
    conf: zrpc::RpcClientConf,
    endpoints: &[String],
) -> anyhow::Result<()> {
    let client = zrpc::client(conf).await?;
    let mut greeter = GreeterClient::new(client);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut seen = std::collections::HashSet::new();
    while seen.len() < endpoints.len() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {} servers became discoverable in etcd within 15 s",
            seen.len(),
            endpoints.len()
        );
        let reply = greeter
            .say_hello(HelloRequest {
                name: "warm-up".into(),
            })
            .await;
        if let Some(server) = reply.ok().and_then(|r| {
            r.metadata()
                .get(SERVER_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        }) {
            seen.insert(server);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn print_table(backends: &[Backend], results: &[(zrpc::BalancerName, Summary, Duration)]) {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let col = |f: &dyn Fn(&Summary, Duration) -> String| -> Vec<String> {
        results.iter().map(|(_, s, wall)| f(s, *wall)).collect()
    };
    rows.push(("calls".into(), col(&|s, _| s.calls.to_string())));
    rows.push(("failures".into(), col(&|s, _| s.failures.to_string())));
    for b in backends {
        rows.push((
            format!("share {}", b.label),
            col(&|s, _| format!("{:.1}%", 100.0 * s.share(&b.addr))),
        ));
    }
    rows.push(("p50".into(), col(&|s, _| fmt_duration(s.p50))));
    rows.push(("p99".into(), col(&|s, _| fmt_duration(s.p99))));
    rows.push(("wall time".into(), col(&|_, wall| fmt_duration(wall))));

    println!();
    print!("{:<24}", "");
    for (balancer, _, _) in results {
        print!("{:>14}", balancer.as_str());
    }
    println!();
    for (name, cells) in rows {
        print!("{name:<24}");
        for cell in cells {
            print!("{cell:>14}");
        }
        println!();
    }
    if let Some(slow) = backends.last() {
        println!();
        for (balancer, s, _) in results {
            println!(
                "{:<12} sent {:.1}% of the calls to the slow server",
                balancer.as_str(),
                100.0 * s.share(&slow.addr)
            );
        }
    }
}

/// Starting and stopping the demo's in-process greeter servers with `zrpc::server`.
mod demo_server {
    use super::*;

    /// A running in-process greeter server.
    #[derive(Debug)]
    pub(crate) struct DemoServer {
        addr: String,
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    }

    impl DemoServer {
        /// The address the server listens on (and registers, with `--etcd`).
        pub(crate) fn addr(&self) -> &str {
            &self.addr
        }

        /// Graceful shutdown: deregisters (with `--etcd`) and drains.
        pub(crate) async fn stop(self) {
            let _ = self.stop.send(());
            let _ = self.task.await;
        }
    }

    /// Starts a greeter answering after `delay` on a free loopback port; with `etcd`, it
    /// registers under `key` there.
    pub(crate) async fn start(
        delay: Duration,
        etcd: Option<&str>,
        key: &str,
    ) -> anyhow::Result<DemoServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let mut conf = zrpc::RpcServerConf::new("greeter.demo", addr.clone()).with_shutdown(
            zrpc::ShutdownConf::new(Duration::ZERO, Duration::from_secs(2)),
        );
        if let Some(etcd) = etcd {
            conf = conf.with_etcd(zrpc::EtcdConf::new([etcd.to_owned()], key));
        }
        let server = zrpc::server(conf)?.add_service(Greeter::new(&addr, delay).into_service());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(e) = server.serve_with_listener(listener, shutdown).await {
                eprintln!("greeter server error: {e}");
            }
        });
        Ok(DemoServer { addr, stop, task })
    }
}
