//! The HTTP/2 flood and abuse family against zrpc and bare tonic, side by side: each attack
//! runs for `--secs` against a fresh server in a child process (the attacker reconnects after
//! every cut) while a well-behaved client calls one call at a time; the table gives the
//! connections cut and the streams the server processed on one connection before its cut, the
//! GOAWAYs seen, the server's RSS growth, the victim's p99 during the attack against its p99
//! alone just before, and the lines the server logged.
//!
//! ```text
//! cargo build --release -p zrpc-tests --bin h2_attacks
//! target/release/h2_attacks --secs 30
//! target/release/h2_attacks --throughput 9 --requests 200000
//! ```
//!
//! `--throughput ROUNDS` instead measures what the limits cost normal traffic: `h2load -c 10
//! -m 50` against both servers in alternation, ROUNDS times, with the medians and the median
//! of the per-round ratios. `--baseline EXE` adds the zrpc server of another build of this
//! binary (e.g. one without the limits) as a third subject.
//!
//! The zrpc server logs to files (`Log.Mode: file`, plain, level info) in a temporary
//! directory; bare tonic logs nothing. Shedding is off (`CpuThreshold: 0`): the attacks are
//! about HTTP/2, and the box is shared.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use zrpc_tests::bench::{ServeChild, arg, h2load, median, rss_kb, serve_or_run};
use zrpc_tests::greeter::{TestGreeter, spawn_bare_tonic, start_server, test_conf};
use zrpc_tests::h2raw::{Attack, HELLO_MESSAGE, attack_once};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

fn main() {
    serve_or_run(0, serve(), run());
}

/// The child: `--serve tonic` or `--serve zrpc --log-dir DIR`; prints its address, then
/// waits until its stdin closes.
async fn serve() {
    let kind = arg("--serve").unwrap_or_default();
    // the zrpc server and its logging live until this function returns
    let mut zrpc = None;
    let addr = if kind == "zrpc" {
        let dir = arg("--log-dir").expect("--log-dir");
        let mut conf = test_conf("h2-attacks").with_cpu_threshold(0);
        conf.log.mode = "file".into();
        conf.log.encoding = "plain".into();
        conf.log.path = dir;
        let logging = zrpc_server::telemetry::init(&conf).expect("logging");
        let server = start_server(conf, TestGreeter::new()).await;
        let addr = server.addr;
        zrpc = Some((logging, server));
        addr
    } else {
        spawn_bare_tonic().await
    };
    println!("{addr}");
    let mut line = String::new();
    // EOF when the parent drops the child
    let _ = tokio::task::spawn_blocking(move || std::io::stdin().read_line(&mut line)).await;
    drop(zrpc);
}

/// Lines in the files of `dir`.
fn log_lines(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|t| t.lines().count())
        .sum()
}

/// Calls one at a time until `stop`; the latencies of the calls (ms) and the failures.
async fn victim(addr: SocketAddr, stop: Arc<AtomicBool>) -> (Vec<f64>, u64) {
    let mut client = GreeterClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let (mut took, mut failed) = (Vec::new(), 0);
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let reply = client
            .say_hello(HelloRequest {
                name: "victim".into(),
            })
            .await;
        match reply {
            Ok(_) => took.push(started.elapsed().as_secs_f64() * 1e3),
            Err(_) => failed += 1,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (took, failed)
}

fn p99(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

/// One row of the table.
struct Row {
    conns: u64,
    cut: u64,
    max_streams_per_cut: u64,
    goaways: BTreeSet<String>,
    rss_before_mb: f64,
    rss_max_mb: f64,
    p99_alone: f64,
    p99_attacked: f64,
    victim_failed: u64,
    log_lines: usize,
}

async fn measure(kind: &str, attack: Attack, secs: u64) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_string_lossy().into_owned();
    let (child, addr) = ServeChild::start_with(&[kind, "--log-dir", &dir_arg]);
    let addr: SocketAddr = addr.parse().unwrap();
    let pid = child.pid().to_string();
    // the victim alone for 3 s
    let stop = Arc::new(AtomicBool::new(false));
    let alone = tokio::spawn(victim(addr, stop.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let (took, _) = alone.await.unwrap();
    let p99_alone = p99(took);

    let rss_before = rss_kb(&pid);
    let lines_before = log_lines(dir.path());
    let stop = Arc::new(AtomicBool::new(false));
    let during = tokio::spawn(victim(addr, stop.clone()));
    let sampler_stop = stop.clone();
    let sampled = pid.clone();
    let sampler = tokio::spawn(async move {
        let mut max = 0;
        while !sampler_stop.load(Ordering::Relaxed) {
            max = max.max(rss_kb(&sampled));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        max
    });
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut row = Row {
        conns: 0,
        cut: 0,
        max_streams_per_cut: 0,
        goaways: BTreeSet::new(),
        rss_before_mb: rss_before as f64 / 1024.0,
        rss_max_mb: 0.0,
        p99_alone,
        p99_attacked: 0.0,
        victim_failed: 0,
        log_lines: 0,
    };
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        let out = attack_once(addr, attack, left).await;
        row.conns += 1;
        if let Some(g) = &out.goaway {
            row.goaways.insert(g.to_string());
        }
        if out.closed {
            row.cut += 1;
            let processed = out
                .goaway
                .as_ref()
                .map_or(out.streams, |g| g.streams_processed());
            row.max_streams_per_cut = row.max_streams_per_cut.max(processed);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (took, failed) = during.await.unwrap();
    row.rss_max_mb = sampler.await.unwrap() as f64 / 1024.0;
    row.p99_attacked = p99(took);
    row.victim_failed = failed;
    // the last cut's summary is written as its connection closes
    tokio::time::sleep(Duration::from_millis(200)).await;
    row.log_lines = log_lines(dir.path()) - lines_before;
    drop(child);
    row
}

/// `h2load -c 10 -m 50` against zrpc, bare tonic and (with `baseline`) another build's zrpc,
/// in alternation.
async fn throughput(rounds: usize, requests: u64, baseline: Option<String>) {
    let body = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(body.path(), HELLO_MESSAGE).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_string_lossy().into_owned();
    let mut subjects = vec![
        (
            "zrpc",
            ServeChild::start_with(&["zrpc", "--log-dir", &dir_arg]),
        ),
        ("tonic", ServeChild::start_with(&["tonic"])),
    ];
    if let Some(exe) = &baseline {
        let child = ServeChild::start_exe(exe.as_ref(), &["zrpc", "--log-dir", &dir_arg]);
        subjects.push(("zrpc baseline", child));
    }
    let mut rates = vec![Vec::new(); subjects.len()];
    let mut ratios = vec![Vec::new(); subjects.len()];
    for round in 0..rounds {
        let mut this_round = vec![0.0; subjects.len()];
        // the order turns every round
        for k in 0..subjects.len() {
            let i = (k + round) % subjects.len();
            let url = format!("http://{}", subjects[i].1.1);
            this_round[i] = h2load(&url, (10, 50, requests), &[], body.path()).rate;
        }
        let line: Vec<_> = subjects
            .iter()
            .zip(&this_round)
            .map(|((name, _), r)| format!("{name} {r:.0}"))
            .collect();
        println!("round {round}: {} req/s", line.join(", "));
        for (i, r) in this_round.iter().enumerate() {
            rates[i].push(*r);
            ratios[i].push(r / this_round[0]);
        }
    }
    for (i, (name, _)) in subjects.iter().enumerate() {
        println!(
            "h2load -c 10 -m 50, {rounds} rounds: {name} {:.0} req/s (median), \
             median per-round ratio to zrpc x{:.3}",
            median(rates[i].clone()),
            median(ratios[i].clone())
        );
    }
}

async fn run() {
    if let Some(rounds) = arg("--throughput") {
        let requests = arg("--requests").map_or(200_000, |r| r.parse().unwrap());
        return throughput(rounds.parse().unwrap(), requests, arg("--baseline")).await;
    }
    let secs: u64 = arg("--secs").map_or(30, |s| s.parse().unwrap());
    let only = arg("--only");
    println!(
        "| attack | server | connections (cut) | streams before a cut (max) | GOAWAY | RSS MB before -> max | victim p99 alone -> attacked (ms) | victim failures | server log lines |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for attack in Attack::ALL {
        if only.as_deref().is_some_and(|o| !attack.name().contains(o)) {
            continue;
        }
        for kind in ["zrpc", "tonic"] {
            let r = measure(kind, attack, secs).await;
            let goaways: Vec<_> = r.goaways.into_iter().collect();
            println!(
                "| {} | {kind} | {} ({}) | {} | {} | {:.0} -> {:.0} | {:.1} -> {:.1} (x{:.1}) | {} | {} |",
                attack.name(),
                r.conns,
                r.cut,
                r.max_streams_per_cut,
                if goaways.is_empty() {
                    "none".to_owned()
                } else {
                    goaways.join(", ")
                },
                r.rss_before_mb,
                r.rss_max_mb,
                r.p99_alone,
                r.p99_attacked,
                r.p99_attacked / r.p99_alone,
                r.victim_failed,
                if kind == "zrpc" {
                    r.log_lines.to_string()
                } else {
                    "-".to_owned()
                },
            );
        }
    }
}
