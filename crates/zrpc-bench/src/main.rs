//! zrpc-bench: zrpc's evaluation harness. It measures zrpc against bare tonic and real go-zero
//! side by side, in one invocation, as medians of alternating runs, and writes a Markdown
//! report with SVG charts.
//!
//! ```text
//! cargo run --release -p zrpc-bench -- all                 # docs/benchmarks.md + docs/benchmarks/*.svg
//! cargo run --release -p zrpc-bench -- --quick --out /tmp/b/report.md all   # smoke run, < 2 min
//! cargo run --release -p zrpc-bench -- overhead            # one scenario
//! cargo run --release -p zrpc-bench -- --merge memory      # one scenario's section replaced
//! cargo run --release -p zrpc-bench -- --out /tmp/b2.md all  # a second run, then:
//! cargo run --release -p zrpc-bench -- compare docs/benchmarks.md /tmp/b2.md  # ratios within 10%?
//! cargo run --release -p zrpc-bench -- --round-secs 3 overhead  # longer timing-based rounds
//! ```
//!
//! `overhead` and `latency` measure every subject for the same time per round (`--round-secs`),
//! and a noise monitor (`noise.rs`) reports per round the share of the machine other processes
//! and steal took; busy rounds are left out whole by a fixed rule, and the report says how many.
//! Pinned runs also leave out, by the same rule, rounds in which a pinned process waited for its
//! core (the scheduler's run-queue wait). `shed` marks a ratio whose two halves of one run
//! disagree as `unstable` (and `compare` does not hold two runs to it, saying why).
//!
//! Looking into one part: `ZRPC_BENCH_PARTS=pinned,servers` runs only that part of `overhead`,
//! and `ZRPC_BENCH_RUNS=<file>` appends every measured server and client run to that file as JSON.
//!
//! Every server and load generator is a child process (this binary's hidden `serve` and `load`
//! commands, the Go `gzbench` program in `go/`, `interop/gozero/bin/gz-server`, `h2load`), so
//! that CPU time and RSS are measured per process from `/proc`, and every child is ended on
//! exit and on Ctrl-C.
#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

mod charts;
mod check;
mod compare;
mod env;
mod load;
mod many_serve;
mod noise;
mod proc;
mod report;
mod scale_client;
mod scale_serve;
mod scenarios;
mod serve;
mod stats;
mod watch_log;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// zrpc vs bare tonic vs go-zero: side-by-side benchmarks, Markdown report and SVG charts.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// Small sizes: the whole run finishes in under 2 minutes (a smoke test, not figures).
    #[arg(long, global = true)]
    quick: bool,
    /// The report to write; charts go to `<dir of out>/<stem>/*.svg`.
    #[arg(long, global = true, default_value = "docs/benchmarks.md")]
    out: PathBuf,
    /// Alternating rounds per comparison (medians are taken over them). Default 41 (`latency`),
    /// `overhead` 61 (quick: 1).
    #[arg(long, global = true)]
    rounds: Option<usize>,
    /// `overhead` and `latency`: seconds each subject is measured per round (every subject of a
    /// comparison runs for the same time). Default 0.7 (`latency`), `overhead` 0.25 (quick: 0.3).
    #[arg(long, global = true, value_parser = parse_round_secs)]
    round_secs: Option<f64>,
    /// `balance`: seconds per run instead of the default sizes (20/200/2000 calls/s for
    /// 10/8/5 s, C=1 and C=20 for 8/6 s); `docs/balancing.md`'s figures are 60 s runs.
    #[arg(long, global = true)]
    balance_secs: Option<u64>,
    /// `balance`: only these clients, comma-separated (`p2c_ewma`, `round_robin`, `go-zero`).
    #[arg(long, global = true, value_delimiter = ',')]
    balance_clients: Vec<String>,
    /// Replace only the sections of this run in the existing `--out` report, keeping its other
    /// sections and its header; each replaced section names its own command, date and commit.
    #[arg(long, global = true)]
    merge: bool,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Every scenario, in order.
    All,
    /// Server and client throughput, latency, CPU per request and RSS (pinned and unpinned).
    Overhead,
    /// Serial calls (C=1), the four Rust/Go client/server pairs.
    Latency,
    /// Two 10 ms servers and one 1000 ms server: slow share, latency, failures.
    Balance,
    /// A backend that fails 100% for a while, then heals: the client breakers.
    Breaker,
    /// 2x overload of a CPU-bound handler: goodput and admitted latency.
    Shed,
    /// A handler bound by a downstream resource at 0.5x-4x: no shedding, the CPU shedder, the
    /// concurrency limit, with tiers, and go-zero.
    Overload,
    /// One of three servers killed / stopped / drained under load.
    Failover,
    /// Server RSS per idle HTTP/2 connection.
    Memory,
    /// Server streaming messages/s and unary calls with a 256 KiB request.
    Payloads,
    /// Unary calls with a 256 KiB text request, with and without gzip: zrpc and bare tonic.
    Compression,
    /// A client's costs at 10 to 10,000 endpoints: pick cost, memory per endpoint, etcd load and
    /// update latency; a server's costs at 1 to 10,000 methods and 10 to 1,000 open streams.
    Scale,
    /// A fleet on this machine: a 3-member etcd cluster, 200 zrpc server processes, 20 clients
    /// (zrpc and go-zero); steady load, a rolling deploy, a third killed, etcd's leader killed.
    /// Prints a Markdown table (not part of `all`: it takes minutes and most of the machine).
    Fleet(scenarios::fleet::FleetArgs),
    /// Checks that a report is well formed (every section, table and chart): the smoke test.
    CheckReport {
        /// The report.
        file: PathBuf,
    },
    /// Compares the ratios of two reports: both values, their difference, PASS/FAIL at the
    /// tolerance (exit status 1 when one fails). Two full runs must agree within 10%.
    Compare {
        /// The first report.
        a: PathBuf,
        /// The second report.
        b: PathBuf,
        /// Largest accepted relative difference, percent.
        #[arg(long, default_value_t = 10.0)]
        tolerance: f64,
    },
    /// (internal) run a Rust server.
    #[command(hide = true)]
    Serve(serve::ServeArgs),
    /// (internal) run the Rust load generator.
    #[command(hide = true)]
    Load(load::LoadArgs),
    /// (internal) one client of N endpoints (the `scale` scenario).
    #[command(hide = true)]
    ScaleClient(scale_client::ScaleClientArgs),
    /// (internal) many greeter endpoints from one process (the `scale` scenario's churn).
    #[command(hide = true)]
    ScaleServe(scale_serve::ScaleServeArgs),
    /// (internal) one service of N methods, bare tonic or zrpc (the `scale` scenario's server).
    #[command(hide = true)]
    ManyServe(many_serve::ManyServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Serve(a) => serve::run(a),
        Cmd::Load(a) => load::run(a),
        Cmd::ScaleClient(a) => scale_client::run(a),
        Cmd::ScaleServe(a) => scale_serve::run(a),
        Cmd::ManyServe(a) => many_serve::run(a),
        Cmd::Fleet(a) => {
            install_ctrl_c();
            let r = scenarios::fleet::run(a);
            proc::kill_all();
            r
        }
        Cmd::CheckReport { file } => check::run(&file),
        Cmd::Compare { a, b, tolerance } => compare::run(&a, &b, tolerance),
        cmd => {
            let which: &[scenarios::Kind] = match cmd {
                Cmd::All => &scenarios::ALL,
                Cmd::Overhead => &[scenarios::Kind::Overhead],
                Cmd::Latency => &[scenarios::Kind::Latency],
                Cmd::Balance => &[scenarios::Kind::Balance],
                Cmd::Breaker => &[scenarios::Kind::Breaker],
                Cmd::Shed => &[scenarios::Kind::Shed],
                Cmd::Overload => &[scenarios::Kind::Overload],
                Cmd::Failover => &[scenarios::Kind::Failover],
                Cmd::Memory => &[scenarios::Kind::Memory],
                Cmd::Payloads => &[scenarios::Kind::Payloads],
                Cmd::Compression => &[scenarios::Kind::Compression],
                Cmd::Scale => &[scenarios::Kind::Scale],
                Cmd::Serve(_)
                | Cmd::Load(_)
                | Cmd::ScaleClient(_)
                | Cmd::ScaleServe(_)
                | Cmd::ManyServe(_)
                | Cmd::Fleet(_)
                | Cmd::CheckReport { .. }
                | Cmd::Compare { .. } => {
                    unreachable!("handled above")
                }
            };
            install_ctrl_c();
            // `overhead` takes many short rounds, unless told otherwise. On a small virtual
            // machine a pinned server's own CPU time per request can move a lot from one short
            // run to the next with no neighbour in sight (the host's core is shared below the
            // guest), and that speed is correlated over about a second only. The per-round
            // ratios therefore stay noisy whatever the run length, and only their number
            // tightens the median: many short rounds beat a few long ones for the same time.
            let rounds = |full| {
                cli.rounds
                    .unwrap_or(if cli.quick { 1 } else { full })
                    .max(1)
            };
            let secs = |full| cli.round_secs.unwrap_or(if cli.quick { 0.3 } else { full });
            // `latency` too: short rounds of 0.7 s keep the six runs of a round close in time,
            // so the per-round ratios divide runs the host's drifting speed treats alike; 41
            // rounds, because the per-round difference of the zrpc client's p50 to the bare
            // channel's spreads several times wider than the gap it measures.
            let opts = scenarios::Opts {
                quick: cli.quick,
                rounds: rounds(41),
                round_secs: secs(0.7),
                overhead_rounds: rounds(61),
                overhead_secs: secs(0.25),
                out: cli.out,
                balance_secs: cli.balance_secs,
                balance_clients: cli.balance_clients,
                merge: cli.merge,
            };
            let r = scenarios::run(which, &opts);
            proc::kill_all();
            r
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--round-secs`: a number of seconds from 0.1 to 600.
fn parse_round_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=600.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{v} s is out of range: from 0.1 to 600 seconds")),
        Err(e) => Err(format!("`{s}` is not a number of seconds: {e}")),
    }
}

/// Ctrl-C / SIGTERM: end every child, then exit (no leftover servers holding ports).
fn install_ctrl_c() {
    std::thread::spawn(|| {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(zrpc::shutdown::signal());
        eprintln!("\ninterrupted: stopping every child process");
        proc::kill_all();
        #[allow(clippy::exit)]
        std::process::exit(130);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_secs_are_checked() {
        assert_eq!(parse_round_secs("1.5"), Ok(1.5));
        assert!(parse_round_secs("0").is_err_and(|e| e.contains("out of range")));
        assert!(parse_round_secs("nan").is_err_and(|e| e.contains("out of range")));
        assert!(parse_round_secs("2s").is_err_and(|e| e.contains("not a number")));
        let cli = Cli::try_parse_from(["zrpc-bench", "--round-secs", "2.5", "overhead"]);
        assert_eq!(cli.map(|c| c.round_secs).ok(), Some(Some(2.5)));
    }
}
