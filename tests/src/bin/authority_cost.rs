//! Load bench: what the `:authority` repair costs, side by side in one run.
//!
//! Two in-process zrpc servers with the default chain (shedding off, as in every bench) serve
//! the greeter: one with the repair (the default), one with `Server::authority_repair(false)`.
//! `h2load` loads them in alternation, `--rounds` times each (the order flips every round), and
//! the medians are compared:
//!
//! 1. normal traffic (a valid `:authority`): repair on vs off — the price every client pays;
//! 2. grpc-go-style traffic (`:authority: 127.0.0.1:P,127.0.0.1:P`, which needs the repair on
//!    every request's header block) vs normal traffic, both on the repairing server;
//! 3. with `--gz-client PATH`: a real go-zero client (`interop/gozero/bin/gz-client`) with one
//!    endpoint vs two endpoints (the same server spelled `127.0.0.1:P` and `localhost:P`).
//!
//! ```text
//! cargo build --release -p zrpc-tests --bin authority_cost
//! taskset -c 0 target/release/authority_cost --rounds 5 --requests 150000 --seconds 5 \
//!     [--gz-client interop/gozero/bin/gz-client]
//! ```
//!
//! The servers run on one tokio worker (pin the process to one CPU with `taskset`); `h2load`
//! (`-t 1 -c 10 -m 50`, a fixed `--requests` count) and gz-client run on CPU 1 when `taskset`
//! exists. Each run reports the clients' throughput and the **server's CPU time per request**
//! (this process's threads, from `/proc/self/task/*/schedstat`), which the load of other jobs on
//! a shared machine disturbs far less than throughput; the ratios are medians of the per-round
//! ratios (each round's two runs are adjacent in time).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use zrpc_core::cpu::FixedCpu;
use zrpc_tests::bench::{self, Run, arg, cpu_ns, median, on_cpu1};
use zrpc_tests::greeter::{TestGreeter, start_server_with, test_conf};

/// One h2load run (`-c 10 -m 50`) against `addr` with the given `:authority`.
fn h2load(addr: SocketAddr, authority: &str, requests: u64, body: &std::path::Path) -> Run {
    bench::h2load(
        &format!("http://{addr}"),
        (10, 50, requests),
        &[&format!(":authority: {authority}")],
        body,
    )
}

/// One gz-client run over `endpoints` (every call must succeed).
fn gz_client(bin: &str, endpoints: &[String], seconds: u64, dir: &std::path::Path) -> Run {
    let cpu0 = cpu_ns();
    let conf = dir.join("gz-client.yaml");
    let list: String = endpoints.iter().map(|e| format!("    - {e}\n")).collect();
    std::fs::write(
        &conf,
        format!("Name: bench\nLog:\n  Level: error\nGreeter:\n  Endpoints:\n{list}"),
    )
    .unwrap();
    let out = on_cpu1(bin)
        .arg("-f")
        .arg(&conf)
        .args(["-c", "50", "-duration", &format!("{seconds}s")])
        .output()
        .expect("run gz-client");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value = text
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no gz-client summary in:\n{text}"));
    assert_eq!(summary["failed"], 0, "gz-client failures: {summary}");
    let calls = summary["calls"].as_f64().unwrap();
    #[allow(clippy::cast_precision_loss)]
    let cpu_us = (cpu_ns() - cpu0) as f64 / 1000.0 / calls;
    Run {
        rate: calls / (summary["elapsed_ms"].as_f64().unwrap() / 1000.0),
        cpu_us,
    }
}

fn report(label: &str, a_name: &str, a: &[Run], b_name: &str, b: &[Run]) {
    let rates = |v: &[Run]| v.iter().map(|r| r.rate).collect::<Vec<_>>();
    let cpus = |v: &[Run]| v.iter().map(|r| r.cpu_us).collect::<Vec<_>>();
    let rate_ratio = median(a.iter().zip(b).map(|(x, y)| y.rate / x.rate).collect());
    let cpu_ratio = median(a.iter().zip(b).map(|(x, y)| y.cpu_us / x.cpu_us).collect());
    println!("{label}: {b_name} vs {a_name}");
    println!(
        "  throughput  median {a_name} {:.0}/s, {b_name} {:.0}/s; median per-round ratio {rate_ratio:.3} ({:+.1}%)",
        median(rates(a)),
        median(rates(b)),
        (rate_ratio - 1.0) * 100.0
    );
    println!(
        "  server CPU  median {a_name} {:.2} us/req, {b_name} {:.2} us/req; median per-round ratio {cpu_ratio:.3} ({:+.1}%)",
        median(cpus(a)),
        median(cpus(b)),
        (cpu_ratio - 1.0) * 100.0
    );
    let fmt = |v: &[Run]| {
        v.iter()
            .map(|r| format!("{:.0}/s {:.2}us", r.rate, r.cpu_us))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("  runs {a_name}: {}\n  runs {b_name}: {}", fmt(a), fmt(b));
}

fn main() {
    let workers: usize = arg("--workers").map_or(1, |w| w.parse().unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    match arg("--serve") {
        Some(mode) => rt.block_on(serve_only(&mode)),
        None => rt.block_on(run()),
    }
}

/// `--serve on|off --exit-after N`: one server (repair on or off) that prints `listening ADDR`
/// and exits once N calls have finished; for `scripts/bench_authority.sh`, which runs it under
/// valgrind to count the instructions per request (a figure machine noise cannot move).
async fn serve_only(mode: &str) {
    let exit_after: u64 = arg("--exit-after").map_or(1000, |n| n.parse().unwrap());
    let greeter = TestGreeter::new();
    let conf = test_conf("authority-bench.rpc").with_cpu_threshold(0);
    let repair = mode == "on";
    let server = start_server_with(conf, greeter.clone(), move |s| {
        s.cpu_usage(std::sync::Arc::new(FixedCpu::new(0)))
            .authority_repair(repair)
    })
    .await;
    println!("listening {}", server.addr);
    while greeter.finished() < exit_after {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn run() {
    let rounds: usize = arg("--rounds").map_or(5, |r| r.parse().unwrap());
    let seconds: u64 = arg("--seconds").map_or(5, |s| s.parse().unwrap());
    let requests: u64 = arg("--requests").map_or(150_000, |s| s.parse().unwrap());
    let gz = arg("--gz-client");
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("hello.bin");
    // The gRPC frame of HelloRequest{name: "world"}.
    std::fs::write(&body, b"\x00\x00\x00\x00\x07\x0a\x05world").unwrap();

    let start = |repair: bool| async move {
        let conf = test_conf("authority-bench.rpc").with_cpu_threshold(0);
        start_server_with(conf, TestGreeter::new(), move |s| {
            s.cpu_usage(std::sync::Arc::new(FixedCpu::new(0)))
                .authority_repair(repair)
        })
        .await
    };
    let on = start(true).await;
    let off = start(false).await;
    let multi = format!("127.0.0.1:{0},127.0.0.1:{0}", on.addr.port());
    println!(
        "{rounds} alternating rounds: h2load -t 1 -c 10 -m 50 -n {requests}; gz-client -c 50 for {seconds} s"
    );

    let (mut with, mut without) = (Vec::new(), Vec::new());
    let (mut single_host, mut two_hosts) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let flip = round % 2 == 1;
        for pass in 0..2 {
            if (pass == 0) != flip {
                with.push(h2load(on.addr, &on.addr.to_string(), requests, &body));
            } else {
                without.push(h2load(off.addr, &off.addr.to_string(), requests, &body));
            }
        }
        for pass in 0..2 {
            if (pass == 0) != flip {
                single_host.push(h2load(on.addr, &on.addr.to_string(), requests, &body));
            } else {
                two_hosts.push(h2load(on.addr, &multi, requests, &body));
            }
        }
    }
    report(
        "normal traffic (valid :authority)",
        "repair off",
        &without,
        "repair on",
        &with,
    );
    report(
        "repairing server",
        "one-host authority",
        &single_host,
        "two-host authority (repaired)",
        &two_hosts,
    );

    if let Some(bin) = gz {
        let port = on.addr.port();
        let (mut one, mut two) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let flip = round % 2 == 1;
            for pass in 0..2 {
                if (pass == 0) != flip {
                    one.push(gz_client(
                        &bin,
                        &[format!("127.0.0.1:{port}")],
                        seconds,
                        dir.path(),
                    ));
                } else {
                    two.push(gz_client(
                        &bin,
                        &[format!("127.0.0.1:{port}"), format!("localhost:{port}")],
                        seconds,
                        dir.path(),
                    ));
                }
            }
        }
        report(
            "go-zero client (gz-client -c 50)",
            "1 endpoint",
            &one,
            "2 endpoints",
            &two,
        );
    }
}
