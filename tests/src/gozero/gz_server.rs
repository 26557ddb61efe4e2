//! `gz-server`, a go-zero greeter process: [`GzServer`] and how it ended, [`GzStopped`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::process::{collect_lines, snapshot, terminate};
use super::{Programs, ServerYaml, eventually, http10_get, scrape, wait_tcp};

/// How long a process may take to accept connections after its start.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `gz-server` process (SIGTERM, then SIGKILL, on drop).
#[derive(Debug)]
pub struct GzServer {
    child: Option<Child>,
    /// `ListenOn` (`127.0.0.1:port`), also its `x-server` value and etcd registration value.
    pub addr: String,
    /// The DevServer address, if configured.
    pub dev_addr: Option<SocketAddr>,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr_path: PathBuf,
    _dir: tempfile::TempDir,
}

/// How a `gz-server` ended.
#[derive(Debug, Clone)]
pub struct GzStopped {
    /// Its exit status code (None if killed by a signal).
    pub exit_code: Option<i32>,
    /// `calls` of its `{"event":"stopped"}` line, if printed.
    pub calls: Option<u64>,
    /// From SIGTERM to exit.
    pub took: Duration,
    /// Its stdout lines.
    pub stdout: Vec<String>,
}

impl GzServer {
    /// Starts `gz-server` with `yaml` (written to a temp file) and waits until it accepts TCP
    /// connections on its `ListenOn`.
    ///
    /// # Panics
    /// When it exits or does not accept connections within 20 s.
    pub async fn start(p: &Programs, yaml: &ServerYaml, args: &[&str]) -> GzServer {
        let dir = tempfile::Builder::new()
            .prefix("zrpc-gz-server-")
            .tempdir()
            .expect("temp dir");
        let path = dir.path().join("gz-server.yaml");
        std::fs::write(&path, yaml.render()).expect("write gz-server.yaml");
        Self::spawn(p, dir, &path, &yaml.listen_on(), yaml.dev_addr(), args, &[]).await
    }

    /// Starts `gz-server -f path` with extra environment variables; `listen_on` is the address
    /// to wait for (the file's `ListenOn`, or `127.0.0.1:port` with `POD_IP`).
    ///
    /// # Panics
    /// When it exits or does not accept connections within 20 s.
    pub async fn start_file(
        p: &Programs,
        path: &Path,
        listen_on: &str,
        dev_addr: Option<SocketAddr>,
        env: &[(&str, &str)],
    ) -> GzServer {
        let dir = tempfile::Builder::new()
            .prefix("zrpc-gz-server-")
            .tempdir()
            .expect("temp dir");
        Self::spawn(p, dir, path, listen_on, dev_addr, &[], env).await
    }

    async fn spawn(
        p: &Programs,
        dir: tempfile::TempDir,
        yaml: &Path,
        listen_on: &str,
        dev_addr: Option<SocketAddr>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> GzServer {
        let stderr_path = dir.path().join("gz-server.stderr");
        let stderr = std::fs::File::create(&stderr_path).expect("create gz-server.stderr");
        let mut child = Command::new(&p.server)
            .arg("-f")
            .arg(yaml)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", p.server.display()));
        let stdout = collect_lines(child.stdout.take().expect("piped stdout"));
        let mut srv = GzServer {
            child: Some(child),
            addr: listen_on.to_owned(),
            dev_addr,
            stdout,
            stderr_path,
            _dir: dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = srv.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "gz-server ({}) exited during start-up: {status}\nstdout: {:?}\nstderr: {}",
                    yaml.display(),
                    snapshot(&srv.stdout),
                    srv.stderr()
                );
            }
            if wait_tcp(listen_on, Duration::from_millis(100)).await {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "gz-server does not accept on {listen_on} after {START_TIMEOUT:?}\nstderr: {}",
                srv.stderr()
            );
        }
        srv
    }

    /// Its PID.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// What it wrote to stderr so far (go-zero's logs).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Its stdout lines so far.
    pub fn stdout(&self) -> Vec<String> {
        snapshot(&self.stdout)
    }

    /// Scrapes its DevServer `/metrics`.
    ///
    /// # Panics
    /// Without a DevServer, or when it does not answer 200.
    pub async fn metrics(&self) -> String {
        let dev = self.dev_addr.expect("gz-server has a DevServer");
        scrape(dev, "/metrics").await
    }

    /// Waits until its DevServer `/healthz` answers 200 (go-zero marks it ready just before
    /// serving), or `limit`.
    pub async fn wait_healthy(&self, limit: Duration) -> bool {
        let Some(dev) = self.dev_addr else {
            return false;
        };
        eventually(limit, || async move {
            matches!(http10_get(dev, "/healthz").await, Ok((200, _)))
        })
        .await
    }

    /// Sends SIGTERM (go-zero's graceful shutdown) without waiting.
    pub fn sigterm(&self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        if let Some(pid) = self.pid().and_then(|p| i32::try_from(p).ok()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
    }

    /// SIGKILL (no wrap-up, no GOAWAY, no deregistration: the kernel closes its sockets), then
    /// waits for the process to be gone.
    pub async fn kill(mut self) {
        let mut child = self.child.take().expect("a running gz-server");
        let _ = child.kill();
        // the exit itself, waited for off the runtime
        let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    }

    /// SIGTERM, then waits (10 s, then SIGKILL) for the process to exit.
    pub async fn stop(mut self) -> GzStopped {
        let started = Instant::now();
        self.sigterm();
        let mut child = self.child.take().expect("a running gz-server");
        let deadline = started + Duration::from_secs(10);
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break child.wait().ok();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let took = started.elapsed();
        let stopped_calls = |stdout: &[String]| {
            stdout.iter().find_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                (v.get("event")?.as_str()? == "stopped").then(|| v.get("calls")?.as_u64())?
            })
        };
        // The reader thread drains the pipe shortly after exit: wait for the "stopped" line
        // (at most 2 s; a program killed at the deadline never prints it).
        let _ = crate::wait::within(Duration::from_secs(2), || {
            std::future::ready(stopped_calls(&snapshot(&self.stdout)).is_some())
        })
        .await;
        let stdout = snapshot(&self.stdout);
        let calls = stopped_calls(&stdout);
        GzStopped {
            exit_code: status.and_then(|s| s.code()),
            calls,
            took,
            stdout,
        }
    }
}

impl Drop for GzServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = terminate(&mut child, Duration::from_secs(10));
        }
    }
}
