//! Load bench: the zrpc client against a bare tonic `Channel`, calling the same bare tonic server.
//!
//! One in-process bare tonic server (and a second one for `--endpoints 2`) serves the Greeter on
//! loopback. Each round measures, alternating, a bare tonic client and a zrpc client with its
//! default layers (trace, duration, metrics, breaker, timeout; p2c_ewma):
//! - throughput: `--calls` unary calls by `--concurrency` workers sharing the client;
//! - latency: `--serial` calls one at a time, the p50 of their durations.
//!
//! The report gives the median over the rounds of each figure and the zrpc/tonic ratio of the
//! medians (the machine is shared and noisy: alternating rounds and medians spread the noise).
//!
//! `cargo run --release -p zrpc-tests --bin client_overhead -- [--calls 50000] [--concurrency 50]
//! [--serial 5000] [--rounds 5] [--endpoints 1|2] [--layers default|off]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use zrpc_tests::bench::{arg, median};
use zrpc_tests::greeter::spawn_bare_tonic;
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

type Tonic = GreeterClient<tonic::transport::Channel>;
type Zrpc = GreeterClient<zrpc::Client>;

/// Sends `calls` calls with `workers` concurrent callers sharing `client`; calls per second.
macro_rules! throughput {
    ($client:expr, $calls:expr, $workers:expr) => {{
        let per = $calls / $workers;
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..$workers)
            .map(|_| {
                let mut c = $client.clone();
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
        #[allow(clippy::cast_precision_loss)]
        let rate = (per * $workers) as f64 / t0.elapsed().as_secs_f64();
        rate
    }};
}

/// Sends `calls` calls one at a time; the median call duration in µs.
macro_rules! serial_p50 {
    ($client:expr, $calls:expr) => {{
        let mut c = $client.clone();
        let mut took = Vec::with_capacity($calls);
        for _ in 0..$calls {
            let t0 = Instant::now();
            c.say_hello(HelloRequest { name: "b".into() })
                .await
                .unwrap();
            took.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        median(took)
    }};
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}

async fn run() {
    let num = |name: &str, default: usize| -> usize {
        arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let calls = num("--calls", 50_000);
    let workers = num("--concurrency", 50);
    let serial = num("--serial", 5_000);
    let rounds = num("--rounds", 5);
    let endpoints = num("--endpoints", 1);
    let layers_on = arg("--layers").as_deref() != Some("off");

    let mut addrs = vec![spawn_bare_tonic().await];
    if endpoints > 1 {
        addrs.push(spawn_bare_tonic().await);
    }
    let tonic: Tonic = GreeterClient::connect(format!("http://{}", addrs[0]))
        .await
        .unwrap();
    let mut conf = zrpc::RpcClientConf::direct(addrs.iter().map(ToString::to_string));
    if !layers_on {
        conf = conf
            .with_middlewares(zrpc::ClientMiddlewaresConf::none())
            .with_timeout(Duration::ZERO);
    }
    let zrpc: Zrpc = GreeterClient::new(zrpc::client(conf).await.unwrap());
    // Warm up both (connections, metric series, breakers).
    throughput!(tonic, 2_000, workers);
    throughput!(zrpc, 2_000, workers);

    let (mut t_rate, mut z_rate, mut t_p50, mut z_p50) = (vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        // alternate which client goes first
        if round % 2 == 0 {
            t_rate.push(throughput!(tonic, calls, workers));
            z_rate.push(throughput!(zrpc, calls, workers));
            t_p50.push(serial_p50!(tonic, serial));
            z_p50.push(serial_p50!(zrpc, serial));
        } else {
            z_rate.push(throughput!(zrpc, calls, workers));
            t_rate.push(throughput!(tonic, calls, workers));
            z_p50.push(serial_p50!(zrpc, serial));
            t_p50.push(serial_p50!(tonic, serial));
        }
    }
    println!(
        "zrpc client ({} layers, {endpoints} endpoint(s)) vs bare tonic Channel, same bare tonic server, {rounds} alternating rounds",
        if layers_on { "default" } else { "no" }
    );
    let (tr, zr) = (median(t_rate.clone()), median(z_rate.clone()));
    println!(
        "c{workers} x {calls} calls: tonic {tr:.0}/s, zrpc {zr:.0}/s, ratio {:.3}x  (tonic {t_rate:.0?}, zrpc {z_rate:.0?})",
        zr / tr
    );
    let (tp, zp) = (median(t_p50.clone()), median(z_p50.clone()));
    println!(
        "serial p50 over {serial} calls: tonic {tp:.1} us, zrpc {zp:.1} us, {:+.1} us  (tonic {t_p50:.1?}, zrpc {z_p50:.1?})",
        zp - tp
    );
}
