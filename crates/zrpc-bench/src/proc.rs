//! Child processes of a run: servers and load generators started by the harness, each in its own
//! process group, read back through JSON lines on stdout, measured through `/proc/<pid>`, and
//! always ended (SIGTERM, then SIGKILL) when dropped, so that no run leaves a process behind.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
pub(crate) use nix::sys::signal::Signal;

/// Every live child's pid, for the Ctrl-C handler.
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Kills every child still running (called on Ctrl-C and at exit).
pub(crate) fn kill_all() {
    let pids = LIVE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for pid in pids {
        signal(pid, Signal::SIGCONT);
        signal(pid, Signal::SIGKILL);
    }
}

fn signal(pid: i32, sig: Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

/// A child process that is ended when dropped.
#[derive(Debug)]
pub(crate) struct Proc {
    /// What it is, for messages.
    pub(crate) label: String,
    child: Child,
    lines: Receiver<String>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// Starts `cmd`. Its JSON events are its stdout lines, or with `events` the lines it appends
    /// to that file (its stdout then goes to /dev/null: a server that logs every request to
    /// stdout). With `keep_stderr` the last stderr lines are kept for error messages; without,
    /// stderr goes to /dev/null (a server that logs every request there).
    pub(crate) fn spawn(
        label: &str,
        mut cmd: Command,
        events: Option<std::path::PathBuf>,
        keep_stderr: bool,
    ) -> Result<Proc> {
        cmd.stdin(Stdio::null())
            .stdout(if events.is_some() {
                Stdio::null()
            } else {
                Stdio::piped()
            })
            .stderr(if keep_stderr {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .process_group(0);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {label}: {cmd:?}"))?;
        if let Ok(pid) = i32::try_from(child.id()) {
            LIVE.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
        }
        let (tx, lines) = channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        } else if let Some(path) = events {
            // Tail the events file until the child is gone and the file has been read out.
            // Every 5 ms while events come (start-up: `ready`), then every 20 ms once none
            // came for half a second: a run keeps six servers alive, and six threads reading
            // a file every 5 ms are 1,200 wake-ups a second of this (unpinned) harness, which
            // land on the pinned server's or h2load's core. The events carry their own
            // timestamps, so polling later delays no measured figure; `drain_json`'s settle
            // time (50 ms) is above the slow period.
            let pid = i32::try_from(child.id()).unwrap_or(0);
            std::thread::spawn(move || {
                let mut seen = 0usize;
                let mut last_new = Instant::now();
                loop {
                    let alive = std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
                        && !is_zombie(pid);
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    if text.len() > seen {
                        let new = &text[seen..];
                        let complete = new.rfind('\n').map_or(0, |i| i + 1);
                        for line in new[..complete].lines() {
                            if tx.send(line.to_owned()).is_err() {
                                return;
                            }
                        }
                        seen += complete;
                        last_new = Instant::now();
                    }
                    if !alive {
                        return;
                    }
                    let idle = last_new.elapsed() > Duration::from_millis(500);
                    std::thread::sleep(Duration::from_millis(if idle { 20 } else { 5 }));
                }
            });
        }
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        if let Some(err) = child.stderr.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines() {
                    let Ok(line) = line else { break };
                    let mut v = sink.lock().unwrap_or_else(|e| e.into_inner());
                    if v.len() >= 40 {
                        v.remove(0);
                    }
                    v.push(line);
                }
            });
        }
        Ok(Proc {
            label: label.to_owned(),
            child,
            lines,
            stderr,
        })
    }

    /// The process id.
    pub(crate) fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap_or(0)
    }

    /// The last lines the child wrote to stderr.
    pub(crate) fn stderr_tail(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("\n")
    }

    /// The next stdout line that parses as a JSON object satisfying `want`, within `timeout`.
    pub(crate) fn wait_json(
        &mut self,
        timeout: Duration,
        want: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                        && want(&v)
                    {
                        return Ok(v);
                    }
                }
                Err(RecvTimeoutError::Timeout) => bail!(
                    "{} ({}) said nothing expected within {timeout:?}; stderr:\n{}",
                    self.label,
                    self.pid(),
                    self.stderr_tail()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    bail!(
                        "{} exited ({status:?}) before saying what was expected; stderr:\n{}",
                        self.label,
                        self.stderr_tail()
                    )
                }
            }
        }
    }

    /// The JSON events the child wrote until now (after it exited: everything it wrote).
    pub(crate) fn drain_json(&mut self, settle: Duration) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(settle) {
            if let Ok(v) = serde_json::from_str(&line) {
                out.push(v);
            }
        }
        out
    }

    /// CPU time (user + system, all threads) so far, in µs, from `/proc/<pid>/stat`.
    pub(crate) fn cpu_us(&self) -> f64 {
        cpu_us_of(self.pid())
    }

    /// Resident set size now, in MB (`VmRSS`).
    pub(crate) fn rss_mb(&self) -> f64 {
        rss_mb_of(self.pid())
    }

    /// Sends `sig` (SIGSTOP, SIGKILL, SIGTERM, ...).
    pub(crate) fn signal(&self, sig: Signal) {
        signal(self.pid(), sig);
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub(crate) fn stop(&mut self, grace: Duration) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return self.forget();
        }
        self.signal(Signal::SIGCONT);
        self.signal(Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.forget();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.forget();
    }

    /// Waits for the child to exit by itself (a load generator), up to `timeout`, then kills it.
    pub(crate) fn finish(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.forget();
                if !status.success() && status.code() != Some(1) {
                    bail!(
                        "{} failed ({status}); stderr:\n{}",
                        self.label,
                        self.stderr_tail()
                    );
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.stop(Duration::from_millis(200));
                bail!("{} did not finish within {timeout:?}", self.label);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn forget(&self) {
        let pid = self.pid();
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| *p != pid);
    }
}

impl Drop for Proc {
    /// SIGKILL: a child dropped at the end of a run is not measured any more, and a graceful stop
    /// costs a zrpc server its 1 s wrap-up (go-zero's `WrapUpTime`), per server, in series
    /// (a third of the `--quick` run). A scenario that measures a graceful stop signals it itself.
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return self.forget();
        }
        self.signal(Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.forget();
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// CPU time of `pid` (user + system) in µs.
pub(crate) fn cpu_us_of(pid: i32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may contain spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime is field 14, stime 15 (1-based); `rest` starts at field 3.
    let total = ticks(11) + ticks(12);
    total * 1e6 / clock_ticks()
}

/// What the scheduler counted for a process, summed over its live threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Sched {
    /// Time on a CPU, ns.
    pub(crate) run_ns: u64,
    /// Time runnable but waiting for a CPU (another task had it), ns.
    pub(crate) wait_ns: u64,
}

/// The scheduler's counters of `pid` (`/proc/<pid>/task/*/schedstat`: run time and run-queue
/// wait, ns, per thread), summed over its threads; `None` when the kernel does not expose them
/// (no `CONFIG_SCHED_INFO`) or the process is gone. Threads that already exited are not counted:
/// the servers' threads live as long as the server.
pub(crate) fn sched_of(pid: i32) -> Option<Sched> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = Sched::default();
    let mut any = false;
    for task in dir.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        if let Some(s) = parse_schedstat(&text) {
            total.run_ns += s.run_ns;
            total.wait_ns += s.wait_ns;
            any = true;
        }
    }
    any.then_some(total)
}

/// `run_ns wait_ns timeslices` -> [`Sched`].
fn parse_schedstat(text: &str) -> Option<Sched> {
    let mut f = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some(Sched {
        run_ns: f.next()??,
        wait_ns: f.next()??,
    })
}

/// Clock ticks per second of `/proc` times (`getconf CLK_TCK`, 100 on every Linux box).
pub(crate) fn clock_ticks() -> f64 {
    // sysconf(_SC_CLK_TCK) without unsafe code: ask `getconf` once (100 on every Linux box).
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU time of this process and of everything it started, µs: its own user + system time, its
/// waited-for children's (h2load, finished load generators) and the live children's (servers).
pub(crate) fn self_and_children_cpu_us() -> f64 {
    let own = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .map_or(0.0, |stat| {
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            // utime, stime, cutime, cstime: fields 14-17 (1-based); `rest` starts at field 3.
            rest.split_whitespace()
                .skip(11)
                .take(4)
                .filter_map(|v| v.parse::<f64>().ok())
                .sum::<f64>()
                * 1e6
                / clock_ticks()
        });
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    own + live.into_iter().map(cpu_us_of).sum::<f64>()
}

/// `VmRSS` of `pid` in MB.
pub(crate) fn rss_mb_of(pid: i32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// A free loopback port (bound, then released).
pub(crate) fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("bind 127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_gives_run_and_wait_time() {
        assert_eq!(
            parse_schedstat("594157190 3121502801 180\n"),
            Some(Sched {
                run_ns: 594_157_190,
                wait_ns: 3_121_502_801
            })
        );
        assert_eq!(parse_schedstat("12\n"), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    #[test]
    fn a_busy_process_has_scheduler_counters_that_grow_with_its_cpu_time() {
        // A one-thread child that spins, not this test process: the sum over a process's live
        // threads drops when one of them exits between two readings, and the test harness
        // ends its other tests' threads at any time (the servers' threads live as long as the
        // server, so the harness itself does not meet this).
        let mut child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("sh");
        let pid = i32::try_from(child.id()).expect("pid");
        std::thread::sleep(Duration::from_millis(20));
        let Some(a) = sched_of(pid) else {
            // A kernel without CONFIG_SCHED_INFO: the tick-based times are used instead.
            let _ = child.kill();
            let _ = child.wait();
            return;
        };
        std::thread::sleep(Duration::from_millis(50));
        let b = sched_of(pid).expect("still there");
        let _ = child.kill();
        let _ = child.wait();
        assert!(b.run_ns > a.run_ns, "{a:?} -> {b:?}");
        assert!(b.wait_ns >= a.wait_ns, "{a:?} -> {b:?}");
        assert_eq!(sched_of(-1), None, "no such process");
    }
}
