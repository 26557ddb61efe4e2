//! Helpers shared by the load benches (`src/bin/authority_cost.rs`, `src/bin/tls_cost.rs`,
//! `src/bin/client_serial.rs`, `src/bin/alloc_count.rs`): command-line flags, medians, pinning the
//! load generator to CPU 1, this process's CPU time, one `h2load` run read back into a [`Run`],
//! and servers in a child process ([`ServeChild`], [`serve_or_run`]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The value after `name` on the command line (`--rounds 5`).
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// This binary run again with `--serve` as a child process (servers kept apart from the process
/// that measures, so that its allocations, CPU or system calls count only the client side):
/// the child prints one line (its addresses) and then reads commands on stdin; it is killed
/// when this value drops.
#[derive(Debug)]
pub struct ServeChild {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl ServeChild {
    /// Starts the child and returns it with the first line it printed (trimmed).
    ///
    /// # Panics
    /// When the child cannot be started or prints nothing.
    pub fn start() -> (ServeChild, String) {
        Self::start_with(&[])
    }

    /// [`start`](Self::start) with more arguments after `--serve`.
    ///
    /// # Panics
    /// When the child cannot be started or prints nothing.
    pub fn start_with(args: &[&str]) -> (ServeChild, String) {
        Self::start_exe(&std::env::current_exe().unwrap(), args)
    }

    /// [`start_with`](Self::start_with) for another build of this binary, `exe`.
    ///
    /// # Panics
    /// When the child cannot be started or prints nothing.
    pub fn start_exe(exe: &Path, args: &[&str]) -> (ServeChild, String) {
        let mut child = Command::new(exe)
            .arg("--serve")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let me = ServeChild {
            child,
            stdin,
            stdout,
        };
        (me, line.trim().to_owned())
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `cmd` as a line; with `answer`, returns the line the child prints back (trimmed).
    ///
    /// # Panics
    /// When the child's pipes are closed.
    pub fn ask(&mut self, cmd: &str, answer: bool) -> Option<String> {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        if !answer {
            return None;
        }
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        Some(line.trim().to_owned())
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `serve` when this binary was started with `--serve` (see [`ServeChild`]), else `run`, on
/// a tokio runtime: current-thread for `threads == 1`, else multi-thread (`0`: tokio's default
/// number of workers).
///
/// # Panics
/// When the runtime cannot be built.
pub fn serve_or_run<S, R>(threads: usize, serve: S, run: R)
where
    S: std::future::Future<Output = ()>,
    R: std::future::Future<Output = ()>,
{
    let mut rt = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    if threads > 1 {
        rt.worker_threads(threads);
    }
    let rt = rt.enable_all().build().unwrap();
    if std::env::args().any(|a| a == "--serve") {
        rt.block_on(serve);
    } else {
        rt.block_on(run);
    }
}

/// The resident set of process `pid` (`"self"` for this one), kB, from `/proc/<pid>/status`;
/// 0 when it cannot be read.
pub fn rss_kb(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Serialises the tests that hold a lot of memory or measure this process's RSS: the suite's
/// tests share one process, so one test's allocations would show in another's RSS figure.
pub async fn rss_serial() -> tokio::sync::MutexGuard<'static, ()> {
    static RSS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    RSS.lock().await
}

/// The median (upper middle for an even count).
///
/// # Panics
/// On an empty `v`.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `program` on CPU 1 when `taskset` exists (the servers are meant to be on CPU 0).
pub fn on_cpu1(program: &str) -> Command {
    if Command::new("taskset").arg("--version").output().is_ok() {
        let mut c = Command::new("taskset");
        c.args(["-c", "1", program]);
        c
    } else {
        Command::new(program)
    }
}

/// CPU time of this process so far (all threads, from `/proc/self/task/*/schedstat`), in ns.
pub fn cpu_ns() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
                .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

/// One measured run: the client's throughput (per second) and this process's (the servers')
/// CPU time per request (µs).
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Requests (or calls) per second seen by the client.
    pub rate: f64,
    /// Server CPU time per request, in microseconds.
    pub cpu_us: f64,
}

/// One `h2load -t 1 -c conns -m streams -n requests` run of the greeter's `SayHello` against
/// `url` (`http://host:port` or `https://...`), with extra `-H` headers; every request must
/// succeed with HTTP 200.
///
/// # Panics
/// When h2load is missing or reports a failure.
pub fn h2load(
    url: &str,
    (conns, streams, requests): (u64, u64, u64),
    headers: &[&str],
    body: &Path,
) -> Run {
    let cpu0 = cpu_ns();
    let mut cmd = on_cpu1("h2load");
    cmd.args([
        "-t",
        "1",
        "-c",
        &conns.to_string(),
        "-m",
        &streams.to_string(),
    ])
    .args(["-n", &requests.to_string()])
    .arg("-d")
    .arg(body)
    .args(["-H", "content-type: application/grpc", "-H", "te: trailers"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd
        .arg(format!("{url}/greeter.Greeter/SayHello"))
        .output()
        .expect("h2load (Debian nghttp2-client) is installed");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in h2load output:\n{text}"))
            .to_owned()
    };
    let done = line("requests:");
    assert!(
        done.contains(" 0 failed, 0 errored"),
        "h2load saw failures: {done}\n{text}"
    );
    let codes = line("status codes:");
    assert!(
        codes.contains(" 0 4xx, 0 5xx"),
        "h2load saw errors: {codes}"
    );
    #[allow(clippy::cast_precision_loss)]
    let cpu_us = (cpu_ns() - cpu0) as f64 / 1000.0 / requests as f64;
    // "finished in 5.00s, 12345.67 req/s, 1.2MB/s"
    let finished = line("finished in");
    let rate = finished
        .split(", ")
        .nth(1)
        .and_then(|s| s.strip_suffix(" req/s"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("cannot read req/s from `{finished}`"));
    Run { rate, cpu_us }
}
