//! Allocations per unary call, client side and server side, with bare tonic alongside.
//!
//! A counting global allocator (`stats_alloc`, which keeps the `unsafe` of a `GlobalAlloc` out of
//! this crate) counts every allocation of the process. The servers run in a child process (this
//! binary with `--serve`), so the parent counts only the client, and the child only the servers:
//! the parent asks the child over its stdin to reset and report its own count around each run.
//!
//! Client side (counted in this process), every client calling a bare tonic server:
//! - `tonic`: a bare `tonic::transport::Channel`;
//! - `zrpc, layers off`: a zrpc client with every `Middlewares` switch off and no timeout;
//! - `zrpc, default layers`: go-zero's default chain (trace, duration, metrics, breaker, timeout);
//! - `zrpc, default, 2 endpoints`: the same over two bare servers (the balancer keeps a replay
//!   copy for its transparent retry).
//!
//! Server side (counted in the child), a bare tonic client calling:
//! - `tonic server`: a bare `tonic::transport::Server`;
//! - `zrpc server`: a zrpc server with its default chain (shedding on a fixed cool CPU).
//!
//! Calls are made one at a time after a warm-up, on a current-thread runtime, so the figures are
//! steady-state allocations per call; each figure is the median of `--rounds` runs.
//!
//! `cargo run --release -p zrpc-tests --bin alloc_count -- [--calls 2000] [--rounds 5] [--only 3]`
//!
//! `--only <i>` runs the client mode of that index alone (0 tonic, 1 layers off, 2 default layers,
//! 3 two endpoints) with no server-side mode: under `heaptrack` it gives the allocation sites of
//! that mode (`heaptrack_print --print-allocators`), which is how the per-call sites were found.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use zrpc_core::cpu::FixedCpu;
use zrpc_tests::bench::{ServeChild, arg, median, serve_or_run};
use zrpc_tests::greeter::{TestGreeter, spawn_bare_tonic, start_server_with, test_conf};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn allocations() -> usize {
    INSTRUMENTED_SYSTEM.stats().allocations + INSTRUMENTED_SYSTEM.stats().reallocations
}

fn main() {
    serve_or_run(1, serve(), measure());
}

/// The child: two bare tonic servers and a zrpc server; prints their addresses, then answers
/// `reset` (remember the count) and `count` (allocations since the reset) on stdin.
async fn serve() {
    let mut bare = Vec::new();
    for _ in 0..2 {
        bare.push(spawn_bare_tonic().await);
    }
    let zrpc = start_server_with(test_conf("alloc.rpc"), TestGreeter::new(), |s| {
        s.cpu_usage(Arc::new(FixedCpu::new(0)))
    })
    .await;
    println!("{} {} {}", bare[0], bare[1], zrpc.addr);
    std::io::stdout().flush().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut since = 0;
    while let Some(cmd) = rx.recv().await {
        match cmd.as_str() {
            "reset" => since = allocations(),
            "count" => println!("{}", allocations() - since),
            _ => break,
        }
        std::io::stdout().flush().unwrap();
    }
}

struct Servers {
    child: ServeChild,
    bare: [String; 2],
    zrpc: String,
}

impl Servers {
    fn start() -> Servers {
        let (child, line) = ServeChild::start();
        let addrs: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        assert_eq!(addrs.len(), 3, "child printed {line:?}");
        Servers {
            child,
            bare: [addrs[0].clone(), addrs[1].clone()],
            zrpc: addrs[2].clone(),
        }
    }

    fn ask(&mut self, cmd: &str) -> Option<usize> {
        self.child
            .ask(cmd, cmd == "count")
            .map(|line| line.parse().unwrap())
    }
}

async fn calls<T>(client: &mut GreeterClient<T>, n: usize)
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error:
        Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    for _ in 0..n {
        client
            .say_hello(HelloRequest { name: "b".into() })
            .await
            .unwrap();
    }
}

/// Allocations per call of this process over `n` calls (after a warm-up).
async fn client_side<T>(mut client: GreeterClient<T>, n: usize) -> f64
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error:
        Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    calls(&mut client, 200).await;
    let region = Region::new(GLOBAL);
    calls(&mut client, n).await;
    let s = region.change();
    #[allow(clippy::cast_precision_loss)]
    let per = (s.allocations + s.reallocations) as f64 / n as f64;
    per
}

/// Allocations per call of the child (the server) over `n` calls of a bare tonic client.
async fn server_side(servers: &mut Servers, addr: &str, n: usize) -> f64 {
    let mut client = GreeterClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    calls(&mut client, 200).await;
    servers.ask("reset");
    calls(&mut client, n).await;
    // let the server finish the last response's bookkeeping
    tokio::time::sleep(Duration::from_millis(20)).await;
    let total = servers.ask("count").unwrap();
    #[allow(clippy::cast_precision_loss)]
    let per = total as f64 / n as f64;
    per
}

fn zrpc_conf(addrs: &[&str], layers: bool) -> zrpc::RpcClientConf {
    let mut conf = zrpc::RpcClientConf::direct(addrs.iter().copied());
    if !layers {
        conf = conf
            .with_middlewares(zrpc::ClientMiddlewaresConf::none())
            .with_timeout(Duration::ZERO);
    }
    conf
}

async fn measure() {
    let n: usize = arg("--calls").and_then(|v| v.parse().ok()).unwrap_or(2000);
    let rounds: usize = arg("--rounds").and_then(|v| v.parse().ok()).unwrap_or(5);
    let mut servers = Servers::start();
    let [a, b] = servers.bare.clone();
    let z = servers.zrpc.clone();

    let names = [
        "client: tonic Channel",
        "client: zrpc, layers off",
        "client: zrpc, default layers",
        "client: zrpc, default layers, 2 endpoints",
        "server: tonic",
        "server: zrpc default chain",
    ];
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    if let Some(only) = arg("--only").and_then(|v| v.parse::<usize>().ok()) {
        let per = match only {
            0 => {
                client_side(
                    GreeterClient::connect(format!("http://{a}")).await.unwrap(),
                    n,
                )
                .await
            }
            1 | 2 => {
                let c = zrpc::client(zrpc_conf(&[&a], only == 2)).await.unwrap();
                client_side(GreeterClient::new(c), n).await
            }
            _ => {
                let c = zrpc::client(zrpc_conf(&[&a, &b], true)).await.unwrap();
                client_side(GreeterClient::new(c), n).await
            }
        };
        println!("{:<44} {per:>6.1}", names[only.min(3)]);
        return;
    }
    for _ in 0..rounds {
        let tonic = GreeterClient::connect(format!("http://{a}")).await.unwrap();
        figures[0].push(client_side(tonic, n).await);
        let off = zrpc::client(zrpc_conf(&[&a], false)).await.unwrap();
        figures[1].push(client_side(GreeterClient::new(off), n).await);
        let on = zrpc::client(zrpc_conf(&[&a], true)).await.unwrap();
        figures[2].push(client_side(GreeterClient::new(on), n).await);
        let two = zrpc::client(zrpc_conf(&[&a, &b], true)).await.unwrap();
        figures[3].push(client_side(GreeterClient::new(two), n).await);
        figures[4].push(server_side(&mut servers, &a, n).await);
        figures[5].push(server_side(&mut servers, &z, n).await);
    }
    println!("allocations per unary call (median of {rounds} rounds of {n} sequential calls)");
    let tonic = median(figures[0].clone());
    let tonic_server = median(figures[4].clone());
    for (i, (name, v)) in names.iter().zip(figures).enumerate() {
        let m = median(v.clone());
        let base = if i < 4 { tonic } else { tonic_server };
        println!(
            "{name:<44} {m:>6.1}  ({:+.1} vs tonic; rounds {v:.1?})",
            m - base
        );
    }
}
