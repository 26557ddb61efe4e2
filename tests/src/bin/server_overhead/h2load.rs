//! `--h2load`: server throughput under `h2load -t 1 -c 10 -m 50`, every target in one
//! invocation, rounds alternating (the order rotates each round), medians and ratios.
//!
//! In-process targets (the greeter of `zrpc_tests`): bare tonic (`TcpIncoming`, TCP_NODELAY),
//! the zrpc full chain (go-zero's defaults; the shedder reads a fixed cool CPU so it does its
//! work but never sheds on a loaded machine) and the zrpc minimal chain (every middleware off,
//! no timeout, no shedding; transport defaults kept); with `--plumbing-off LIST` one more
//! minimal server with transport features off. With `--server NAME=PATH` (repeatable),
//! an external `greeter-server` binary is started as well (`examples`' greeter, YAML with
//! `CpuThreshold: 0` and `Log.Level: error`), e.g. the previous commit's build next to HEAD's.
//!
//! ```text
//! cargo build --release -p zrpc-tests --bin server_overhead
//! taskset -c 0 target/release/server_overhead --h2load --rounds 5 --requests 100000 \
//!     [--server prev=/tmp/wt-3611-target/release/greeter-server \
//!      --server head=target/release/greeter-server]
//! ```
//!
//! Each run reports the client's req/s and the server's CPU time per request (its threads'
//! `schedstat`), which the load of other jobs disturbs less than throughput. Ratios are the
//! medians of per-round ratios (each round's runs are adjacent in time).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::net::TcpListener;
use zrpc_core::cpu::FixedCpu;
use zrpc_tests::bench::{self, Run, arg, median};
use zrpc_tests::greeter::{TestGreeter, TestServer, start_server_with, test_conf};

/// CPU time of process `pid` (all threads), in ns.
fn cpu_ns_of(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
                .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

enum Target {
    InProcess(String),
    External { url: String, child: Child },
}

impl Target {
    fn run(&self, requests: u64, body: &Path) -> Run {
        match self {
            Target::InProcess(url) => bench::h2load(url, (10, 50, requests), &[], body),
            Target::External { url, child } => {
                let cpu0 = cpu_ns_of(child.id());
                let run = bench::h2load(url, (10, 50, requests), &[], body);
                #[allow(clippy::cast_precision_loss)]
                let cpu_us = (cpu_ns_of(child.id()) - cpu0) as f64 / 1000.0 / requests as f64;
                Run {
                    rate: run.rate,
                    cpu_us,
                }
            }
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Target::External { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `bin` (a `greeter-server`) on a free loopback port and waits until it accepts.
async fn external(bin: &str, dir: &Path, name: &str) -> Target {
    let conf = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &conf,
        "Name: bench.rpc\nListenOn: 127.0.0.1:0\nCpuThreshold: 0\nLog:\n  Level: error\n",
    )
    .unwrap();
    let port = zrpc_tests::ports::free_port();
    let mut child = Command::new(bin)
        .arg("-f")
        .arg(&conf)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin}: {e}"));
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Target::External {
                url: format!("http://127.0.0.1:{port}"),
                child,
            };
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("{bin} did not listen on 127.0.0.1:{port} within 10 s");
}

async fn zrpc(minimal: bool, plumbing_off: Option<&str>) -> TestServer {
    let mut conf = test_conf("h2load-bench.rpc");
    let mut repair = true;
    for part in plumbing_off.unwrap_or_default().split(',') {
        let t = &mut conf.transport;
        match part {
            "" => {}
            "keepalive" => t.keepalive_time = Duration::ZERO,
            "handshake" => t.handshake_timeout = Duration::ZERO,
            "budget" => {
                t.max_buffered_request_bytes = 0;
                t.max_connection_buffered_request_bytes = 0;
                t.message_receive_timeout = Duration::ZERO;
            }
            "streams" => t.max_concurrent_streams = u32::MAX,
            "authority" => repair = false,
            other => panic!("unknown plumbing part {other}"),
        }
    }
    if minimal {
        conf = conf.with_timeout(Duration::ZERO).with_cpu_threshold(0);
        let mw = &mut conf.middlewares;
        mw.trace = false;
        mw.recover = false;
        mw.stat = false;
        mw.prometheus = false;
        mw.breaker = false;
    }
    start_server_with(conf, TestGreeter::new(), |s| {
        s.cpu_usage(std::sync::Arc::new(FixedCpu::new(0)))
            .authority_repair(repair)
    })
    .await
}

pub(crate) async fn run() {
    let rounds: usize = arg("--rounds").map_or(5, |r| r.parse().unwrap());
    let requests: u64 = arg("--requests").map_or(100_000, |s| s.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("hello.bin");
    // The gRPC frame of HelloRequest{name: "world"}.
    std::fs::write(&body, b"\x00\x00\x00\x00\x07\x0a\x05world").unwrap();

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bare_addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TestGreeter::new().into_service())
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            ),
    );
    let full = zrpc(false, None).await;
    let minimal = zrpc(true, None).await;
    let mut targets = vec![
        (
            "bare tonic",
            Target::InProcess(format!("http://{bare_addr}")),
        ),
        ("zrpc full chain", Target::InProcess(full.url())),
        ("zrpc minimal chain", Target::InProcess(minimal.url())),
    ];
    // `--plumbing-off keepalive,handshake,budget,streams,authority`: one more minimal server
    // with those transport features off too, to attribute the plumbing's cost.
    let mut extra = Vec::new();
    if let Some(list) = arg("--plumbing-off") {
        let server = zrpc(true, Some(&list)).await;
        let name: &'static str = Box::leak(format!("minimal w/o {list}").into_boxed_str());
        targets.push((name, Target::InProcess(server.url())));
        extra.push(server);
    }
    let first_ext = targets.len();
    let args: Vec<String> = std::env::args().collect();
    for (i, a) in args.iter().enumerate() {
        if a == "--server" {
            let spec = args.get(i + 1).expect("--server NAME=PATH");
            let (name, bin) = spec.split_once('=').expect("--server NAME=PATH");
            let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
            targets.push((name, external(bin, dir.path(), name).await));
        }
    }
    println!(
        "{rounds} alternating rounds of h2load -t 1 -c 10 -m 50 -n {requests} (SayHello), order rotating"
    );
    // Warm up every target (connections, allocator, breaker windows).
    for (_, t) in &targets {
        t.run(requests / 10, &body);
    }
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); targets.len()];
    for round in 0..rounds {
        for k in 0..targets.len() {
            let i = (round + k) % targets.len();
            runs[i].push(targets[i].1.run(requests, &body));
        }
    }
    println!(
        "{:<22} {:>12} {:>14} {:>16} {:>16}",
        "target", "median req/s", "median CPU us", "req/s vs bare", "CPU vs bare"
    );
    for (i, (name, _)) in targets.iter().enumerate() {
        let ratio = |f: fn(&Run) -> f64| {
            median(
                runs[i]
                    .iter()
                    .zip(&runs[0])
                    .map(|(x, b)| f(x) / f(b))
                    .collect(),
            )
        };
        println!(
            "{name:<22} {:>12.0} {:>14.2} {:>15.3}x {:>15.3}x",
            median(runs[i].iter().map(|r| r.rate).collect()),
            median(runs[i].iter().map(|r| r.cpu_us).collect()),
            ratio(|r| r.rate),
            ratio(|r| r.cpu_us),
        );
    }
    // External servers against the first external one (e.g. HEAD vs the previous commit).
    for i in first_ext + 1..targets.len() {
        let ratio = |f: fn(&Run) -> f64| {
            median(
                runs[i]
                    .iter()
                    .zip(&runs[first_ext])
                    .map(|(x, b)| f(x) / f(b))
                    .collect(),
            )
        };
        println!(
            "{} vs {}: req/s {:.3}x, CPU/req {:.3}x",
            targets[i].0,
            targets[first_ext].0,
            ratio(|r| r.rate),
            ratio(|r| r.cpu_us)
        );
    }
    for (i, (name, _)) in targets.iter().enumerate() {
        let list: Vec<String> = runs[i]
            .iter()
            .map(|r| format!("{:.0}/s {:.2}us", r.rate, r.cpu_us))
            .collect();
        println!("  runs {name}: {}", list.join(", "));
    }
    drop(targets);
    full.shutdown().await.unwrap();
    minimal.shutdown().await.unwrap();
    for s in extra {
        s.shutdown().await.unwrap();
    }
}
