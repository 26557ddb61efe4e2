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
//! taskset -c 0 target/release/authority_cost --rounds 5 --seconds 5 \
//!     [--gz-client interop/gozero/bin/gz-client]
//! ```
//!
//! The servers run on one tokio worker (pin the process to one CPU with `taskset`); `h2load`
//! (`-t 1 -c 10 -m 50`) and gz-client run on CPU 1 when `taskset` exists.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::process::Command;

use zrpc_core::cpu::FixedCpu;
use zrpc_tests::greeter::{TestGreeter, start_server_with, test_conf};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A command on CPU 1 when `taskset` is there (the servers are meant to be on CPU 0).
fn on_cpu1(program: &str) -> Command {
    let pinned = Command::new("taskset").arg("--version").output().is_ok();
    if pinned {
        let mut c = Command::new("taskset");
        c.args(["-c", "1", program]);
        c
    } else {
        Command::new(program)
    }
}

/// One h2load run: requests/s (all requests must succeed with HTTP 200).
fn h2load(addr: SocketAddr, authority: &str, seconds: u64, body: &std::path::Path) -> f64 {
    let out = on_cpu1("h2load")
        .args(["-t", "1", "-c", "10", "-m", "50", "--warm-up-time", "1"])
        .args(["-D", &seconds.to_string()])
        .arg("-d")
        .arg(body)
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .args(["-H", &format!(":authority: {authority}")])
        .arg(format!("http://{addr}/greeter.Greeter/SayHello"))
        .output()
        .expect("h2load (Debian nghttp2-client) is installed");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in h2load output:\n{text}"))
            .to_owned()
    };
    let requests = line("requests:");
    assert!(
        requests.contains(" 0 failed, 0 errored"),
        "h2load saw failures: {requests}"
    );
    let codes = line("status codes:");
    assert!(
        codes.contains(" 0 4xx, 0 5xx"),
        "h2load saw errors: {codes}"
    );
    // "finished in 5.00s, 12345.67 req/s, 1.2MB/s"
    let finished = line("finished in");
    finished
        .split(", ")
        .nth(1)
        .and_then(|s| s.strip_suffix(" req/s"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("cannot read req/s from `{finished}`"))
}

/// One gz-client run over `endpoints`: calls/s (every call must succeed).
fn gz_client(bin: &str, endpoints: &[String], seconds: u64, dir: &std::path::Path) -> f64 {
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
    summary["calls"].as_f64().unwrap() / (summary["elapsed_ms"].as_f64().unwrap() / 1000.0)
}

fn report(label: &str, a_name: &str, a: &[f64], b_name: &str, b: &[f64]) {
    let (ma, mb) = (median(a.to_vec()), median(b.to_vec()));
    println!(
        "{label}: {a_name} {ma:.0}/s, {b_name} {mb:.0}/s, ratio {:.3} ({:+.1}%)\n  runs {a_name}: {:?}\n  runs {b_name}: {:?}",
        mb / ma,
        (mb / ma - 1.0) * 100.0,
        a.iter().map(|x| x.round()).collect::<Vec<_>>(),
        b.iter().map(|x| x.round()).collect::<Vec<_>>(),
    );
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

async fn run() {
    let rounds: usize = arg("--rounds").map_or(5, |r| r.parse().unwrap());
    let seconds: u64 = arg("--seconds").map_or(5, |s| s.parse().unwrap());
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
    println!("{rounds} alternating rounds of {seconds} s, h2load -t 1 -c 10 -m 50");

    let (mut with, mut without) = (Vec::new(), Vec::new());
    let (mut single_host, mut two_hosts) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let flip = round % 2 == 1;
        for pass in 0..2 {
            if (pass == 0) != flip {
                with.push(h2load(on.addr, &on.addr.to_string(), seconds, &body));
            } else {
                without.push(h2load(off.addr, &off.addr.to_string(), seconds, &body));
            }
        }
        for pass in 0..2 {
            if (pass == 0) != flip {
                single_host.push(h2load(on.addr, &on.addr.to_string(), seconds, &body));
            } else {
                two_hosts.push(h2load(on.addr, &multi, seconds, &body));
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
