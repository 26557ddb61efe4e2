//! Load bench: what TLS costs a zrpc server, plaintext vs TLS side by side in one run.
//!
//! Two in-process zrpc servers with the default chain (shedding off) serve the greeter, one
//! plaintext and one with `Tls` (a server certificate made by `openssl`, no client
//! certificates). Each scenario runs on both in alternation, `--rounds` times (the order flips
//! every round), and reports medians and the median of the per-round ratios:
//!
//! 1. per request: `h2load -t 1 -c 10 -m 50 -n N` (10 connections reused; ALPN `h2` over TLS);
//! 2. handshakes: `h2load -t 1 -c C -m 1 -n C` (one request per new connection);
//! 3. the zrpc client: `Client` over TLS vs plaintext, 50 calls in flight, `--calls` calls;
//! 4. the zrpc client one call at a time (`--serial` calls after one warm-up call on the
//!    connection): p50 and p99 latency.
//!
//! ```text
//! cargo build --release -p zrpc-tests --bin tls_cost
//! taskset -c 0 target/release/tls_cost --rounds 5 --requests 100000 --conns 500 --calls 20000 --serial 3000
//! ```
//!
//! The servers run on one tokio worker (pin with `taskset -c 0`); h2load runs on CPU 1 when
//! `taskset` exists. Each run reports the client's throughput and the **server's CPU time per
//! request** (this process's threads, `/proc/self/task/*/schedstat`; for scenario 3 the client
//! runs in this process too, so it is client + server CPU).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use zrpc::conf::{ClientTlsConf, RpcClientConf, ServerTlsConf};
use zrpc_core::cpu::FixedCpu;
use zrpc_tests::bench::{self, Run, arg, cpu_ns, median};
use zrpc_tests::certs::TestCa;
use zrpc_tests::greeter::{TestGreeter, start_server_with, test_conf};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

/// One h2load run against `url` (`http://` or `https://`); every request must succeed.
fn h2load(url: &str, conns: u64, streams: u64, requests: u64, body: &std::path::Path) -> Run {
    bench::h2load(url, (conns, streams, requests), &[], body)
}

/// `calls` calls through a zrpc client, 50 in flight.
async fn zrpc_calls(conf: RpcClientConf, calls: u64) -> Run {
    let client = zrpc::Client::new(conf).await.unwrap();
    let cpu0 = cpu_ns();
    let start = Instant::now();
    let per_task = calls / 50;
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let mut c = GreeterClient::new(client.clone());
            tokio::spawn(async move {
                for _ in 0..per_task {
                    c.say_hello(HelloRequest {
                        name: "world".into(),
                    })
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
    let n = (per_task * 50) as f64;
    #[allow(clippy::cast_precision_loss)]
    let cpu_us = (cpu_ns() - cpu0) as f64 / 1000.0 / n;
    Run {
        rate: n / start.elapsed().as_secs_f64(),
        cpu_us,
    }
}

/// `calls` calls through a zrpc client one at a time (after one warm-up call): p50 and p99 in us.
async fn zrpc_serial(conf: RpcClientConf, calls: usize) -> (f64, f64) {
    let client = zrpc::Client::new(conf).await.unwrap();
    let mut c = GreeterClient::new(client);
    let hello = || HelloRequest {
        name: "world".into(),
    };
    c.say_hello(hello()).await.unwrap();
    let mut took = Vec::with_capacity(calls);
    for _ in 0..calls {
        let start = Instant::now();
        c.say_hello(hello()).await.unwrap();
        took.push(start.elapsed().as_secs_f64() * 1e6);
    }
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((q * took.len() as f64).ceil() as usize).clamp(1, took.len()) - 1];
    (at(0.50), at(0.99))
}

fn report_serial(plain: &[(f64, f64)], tls: &[(f64, f64)]) {
    let med = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| median(v.iter().map(f).collect());
    let ratio = median(plain.iter().zip(tls).map(|(p, t)| t.0 / p.0).collect());
    println!(
        "zrpc client, one call at a time (client and server in one process): TLS vs plaintext"
    );
    println!(
        "  p50         median plaintext {:.1} us, TLS {:.1} us; median per-round ratio {ratio:.3} ({:+.1}%)",
        med(plain, |r| r.0),
        med(tls, |r| r.0),
        (ratio - 1.0) * 100.0
    );
    println!(
        "  p99         median plaintext {:.1} us, TLS {:.1} us",
        med(plain, |r| r.1),
        med(tls, |r| r.1)
    );
    let fmt = |v: &[(f64, f64)]| {
        v.iter()
            .map(|r| format!("p50 {:.1}us p99 {:.1}us", r.0, r.1))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("  runs plaintext: {}\n  runs TLS: {}", fmt(plain), fmt(tls));
}

fn report(label: &str, plain: &[Run], tls: &[Run]) {
    let rate_ratio = median(
        plain
            .iter()
            .zip(tls)
            .map(|(p, t)| t.rate / p.rate)
            .collect(),
    );
    let cpu_ratio = median(
        plain
            .iter()
            .zip(tls)
            .map(|(p, t)| t.cpu_us / p.cpu_us)
            .collect(),
    );
    let med = |v: &[Run], f: fn(&Run) -> f64| median(v.iter().map(f).collect());
    println!("{label}: TLS vs plaintext");
    println!(
        "  throughput  median plaintext {:.0}/s, TLS {:.0}/s; median per-round ratio {rate_ratio:.3} ({:+.1}%)",
        med(plain, |r| r.rate),
        med(tls, |r| r.rate),
        (rate_ratio - 1.0) * 100.0
    );
    println!(
        "  CPU         median plaintext {:.2} us/req, TLS {:.2} us/req; median per-round ratio {cpu_ratio:.3} ({:+.1}%)",
        med(plain, |r| r.cpu_us),
        med(tls, |r| r.cpu_us),
        (cpu_ratio - 1.0) * 100.0
    );
    let fmt = |v: &[Run]| {
        v.iter()
            .map(|r| format!("{:.0}/s {:.2}us", r.rate, r.cpu_us))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("  runs plaintext: {}\n  runs TLS: {}", fmt(plain), fmt(tls));
}

fn main() {
    let workers: usize = arg("--workers").map_or(1, |w| w.parse().unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

/// Runs `a` then `b`, or `b` then `a` on odd rounds.
fn alternate<T>(round: usize, mut a: impl FnMut() -> T, mut b: impl FnMut() -> T) -> (T, T) {
    if round.is_multiple_of(2) {
        let x = a();
        (x, b())
    } else {
        let y = b();
        (a(), y)
    }
}

async fn run() {
    let rounds: usize = arg("--rounds").map_or(5, |r| r.parse().unwrap());
    let requests: u64 = arg("--requests").map_or(100_000, |s| s.parse().unwrap());
    let conns: u64 = arg("--conns").map_or(500, |s| s.parse().unwrap());
    let calls: u64 = arg("--calls").map_or(20_000, |s| s.parse().unwrap());
    let serial: usize = arg("--serial").map_or(3_000, |s| s.parse().unwrap());
    let ca = TestCa::new("bench CA");
    let cert = ca.issue("bench", &["DNS:localhost", "IP:127.0.0.1"]);
    let body = ca.dir().join("hello.bin");
    std::fs::write(&body, b"\x00\x00\x00\x00\x07\x0a\x05world").unwrap();

    let start = |tls: Option<ServerTlsConf>| async move {
        let mut conf = test_conf("tls-bench.rpc").with_cpu_threshold(0);
        if let Some(t) = tls {
            conf = conf.with_tls(t);
        }
        start_server_with(conf, TestGreeter::new(), |s| {
            s.cpu_usage(Arc::new(FixedCpu::new(0)))
        })
        .await
    };
    let plain = start(None).await;
    let tls = start(Some(ServerTlsConf::new(cert.cert_str(), cert.key_str()))).await;
    let (plain_url, tls_url) = (
        format!("http://{}", plain.addr),
        format!("https://{}", tls.addr),
    );
    println!(
        "{rounds} alternating rounds: h2load -t 1 -c 10 -m 50 -n {requests}; h2load -c {conns} -m 1 -n {conns}; zrpc client 50 in flight, {calls} calls; zrpc client serial, {serial} calls"
    );

    let (mut p1, mut t1, mut p2, mut t2, mut p3, mut t3) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut p4, mut t4) = (vec![], vec![]);
    for round in 0..rounds {
        let (p, t) = alternate(
            round,
            || h2load(&plain_url, 10, 50, requests, &body),
            || h2load(&tls_url, 10, 50, requests, &body),
        );
        p1.push(p);
        t1.push(t);
        let (p, t) = alternate(
            round,
            || h2load(&plain_url, conns, 1, conns, &body),
            || h2load(&tls_url, conns, 1, conns, &body),
        );
        p2.push(p);
        t2.push(t);
        let plain_conf = RpcClientConf::direct([plain.addr.to_string()]);
        let tls_conf = RpcClientConf::direct([tls.addr.to_string()])
            .with_tls(ClientTlsConf::new(ca.files.cert_str()));
        if round.is_multiple_of(2) {
            p3.push(zrpc_calls(plain_conf.clone(), calls).await);
            t3.push(zrpc_calls(tls_conf.clone(), calls).await);
            p4.push(zrpc_serial(plain_conf, serial).await);
            t4.push(zrpc_serial(tls_conf, serial).await);
        } else {
            t3.push(zrpc_calls(tls_conf.clone(), calls).await);
            p3.push(zrpc_calls(plain_conf.clone(), calls).await);
            t4.push(zrpc_serial(tls_conf, serial).await);
            p4.push(zrpc_serial(plain_conf, serial).await);
        }
    }
    report(
        "per request (h2load, 10 connections, 50 streams each)",
        &p1,
        &t1,
    );
    report(
        "handshake (h2load, one request per new connection)",
        &p2,
        &t2,
    );
    report(
        "zrpc client (client and server CPU, 1 connection)",
        &p3,
        &t3,
    );
    report_serial(&p4, &t4);
    let _: SocketAddr = plain.addr;
}
