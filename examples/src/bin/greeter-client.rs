//! The greeter client: calls `SayHello` N times through a `zrpc::client` and prints a summary.
//!
//! ```text
//! cargo run -p zrpc-examples --bin greeter-client -- -f examples/etc/greeter-client.yaml -n 1000 -c 8
//! ```
//!
//! The config is a go-zero `RpcClientConf` (`Etcd`, `Endpoints` or `Target`). The summary counts
//! calls, failures, p50/p99 and the calls each server answered (servers name themselves in the
//! `x-server` response metadata). The exit status is non-zero if any call failed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::task::JoinSet;
use zrpc_examples::greeter::SERVER_HEADER;
use zrpc_examples::pb::HelloRequest;
use zrpc_examples::pb::greeter_client::GreeterClient;
use zrpc_examples::stats::{Call, Summary};

/// Call the greeter N times and print calls, failures, p50/p99 and calls per server.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The config file: a go-zero `RpcClientConf` in YAML, JSON or TOML.
    #[arg(
        short = 'f',
        long = "file",
        default_value = "examples/etc/greeter-client.yaml"
    )]
    file: PathBuf,
    /// Number of calls.
    #[arg(short = 'n', long, default_value_t = 100)]
    calls: usize,
    /// Number of calls in flight at once.
    #[arg(short = 'c', long, default_value_t = 1)]
    concurrency: usize,
    /// The name to greet.
    #[arg(long, default_value = "zrpc")]
    name: String,
    /// Before the run, retry a first call for up to this many seconds until a server answers
    /// (useful right after the servers start, e.g. in docker-compose).
    #[arg(long, default_value_t = 0)]
    wait_secs: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run_client(Args::parse()).await {
        Ok(summary) if summary.failures == 0 => ExitCode::SUCCESS,
        Ok(summary) => {
            eprintln!(
                "error: {} of {} calls failed",
                summary.failures, summary.calls
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run_client(args: Args) -> anyhow::Result<Summary> {
    let conf: zrpc::RpcClientConf = zrpc::conf::load(&args.file)?;
    let client = zrpc::client(conf).await?;

    if args.wait_secs > 0 {
        wait_for_a_server(&client, Duration::from_secs(args.wait_secs)).await?;
    }

    eprintln!(
        "calling {}: {} calls, {} in flight",
        client.target(),
        args.calls,
        args.concurrency.max(1)
    );
    let started = Instant::now();
    let calls = run(&client, &args).await;
    let wall = started.elapsed();

    let summary = Summary::new(&calls);
    print!("{}", summary.report());
    println!(
        "wall:     {:.2} s ({:.0} calls/s)",
        wall.as_secs_f64(),
        summary.calls as f64 / wall.as_secs_f64().max(1e-9)
    );
    Ok(summary)
}

/// Runs `args.calls` calls with `args.concurrency` workers pulling from a shared counter.
async fn run(client: &zrpc::Client, args: &Args) -> Vec<Call> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = JoinSet::new();
    for _ in 0..args.concurrency.max(1) {
        let mut greeter = GreeterClient::new(client.clone());
        let next = next.clone();
        let total = args.calls;
        let name = args.name.clone();
        workers.spawn(async move {
            let mut calls = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < total {
                calls.push(call_once(&mut greeter, &name).await);
            }
            calls
        });
    }
    let mut calls = Vec::with_capacity(args.calls);
    while let Some(batch) = workers.join_next().await {
        if let Ok(batch) = batch {
            calls.extend(batch);
        }
    }
    calls
}

async fn call_once(greeter: &mut GreeterClient<zrpc::Client>, name: &str) -> Call {
    let started = Instant::now();
    let result = greeter
        .say_hello(HelloRequest {
            name: name.to_owned(),
        })
        .await;
    let latency = started.elapsed();
    match result {
        Ok(response) => Call {
            latency,
            server: Some(
                response
                    .metadata()
                    .get(SERVER_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("unknown")
                    .to_owned(),
            ),
            error: None,
        },
        Err(status) => Call {
            latency,
            server: None,
            error: Some(format!("{:?}: {}", status.code(), status.message())),
        },
    }
}

async fn wait_for_a_server(client: &zrpc::Client, within: Duration) -> anyhow::Result<()> {
    let mut greeter = GreeterClient::new(client.clone());
    let deadline = Instant::now() + within;
    loop {
        match greeter
            .say_hello(HelloRequest {
                name: "warm-up".into(),
            })
            .await
        {
            Ok(_) => return Ok(()),
            Err(status) if Instant::now() >= deadline => {
                anyhow::bail!("no server answered within {within:?}: {status}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}
