//! `gz-client`, a go-zero client process: the [`GzClient`] builder and [`RunningGzClient`].

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::process::{collect_lines, snapshot, terminate};
use super::{CallLine, ClientYaml, GzRun, Programs, Summary};

/// A `gz-client` invocation (builder).
#[derive(Debug, Clone)]
pub struct GzClient {
    program: PathBuf,
    yaml: String,
    args: Vec<String>,
    limit: Duration,
}

impl GzClient {
    /// `gz-client -f <yaml>` with `-wait 10s` and no other flags (10 calls, one worker).
    pub fn new(p: &Programs, yaml: &ClientYaml) -> GzClient {
        Self::with_yaml(p, yaml.render())
    }

    /// `gz-client` with a YAML text.
    pub fn with_yaml(p: &Programs, yaml: String) -> GzClient {
        GzClient {
            program: p.client.clone(),
            yaml,
            args: Vec::new(),
            limit: Duration::from_secs(60),
        }
    }

    /// Any `-flag value` pair (for flags without a method here, e.g. `-tls-ca`).
    #[must_use]
    pub fn arg(mut self, flag: &str, value: impl ToString) -> Self {
        self.args.push(flag.to_owned());
        self.args.push(value.to_string());
        self
    }

    /// `-n`: number of calls.
    #[must_use]
    pub fn n(self, n: u64) -> Self {
        self.arg("-n", n)
    }

    /// `-c`: concurrent workers.
    #[must_use]
    pub fn c(self, c: u64) -> Self {
        self.arg("-c", c)
    }

    /// `-gap`: pause between two calls of a worker.
    #[must_use]
    pub fn gap(self, gap: Duration) -> Self {
        self.arg("-gap", format!("{}ms", gap.as_millis()))
    }

    /// `-duration`: call until it elapses.
    #[must_use]
    pub fn duration(mut self, d: Duration) -> Self {
        self.limit = self.limit.max(d + Duration::from_secs(40));
        self.arg("-duration", format!("{}ms", d.as_millis()))
    }

    /// `-wait`: how long the first call is retried.
    #[must_use]
    pub fn wait(self, d: Duration) -> Self {
        self.arg("-wait", format!("{}ms", d.as_millis()))
    }

    /// `-name`: the request name (may carry a directive).
    #[must_use]
    pub fn name(self, name: &str) -> Self {
        self.arg("-name", name)
    }

    /// `-stream k`: call SayHelloStream with count k.
    #[must_use]
    pub fn stream(self, k: u32) -> Self {
        self.arg("-stream", k)
    }

    /// `-authority`: dial with `grpc.WithAuthority`.
    #[must_use]
    pub fn authority(self, a: &str) -> Self {
        self.arg("-authority", a)
    }

    /// `-call-timeout`.
    #[must_use]
    pub fn call_timeout(self, d: Duration) -> Self {
        self.arg("-call-timeout", format!("{}ms", d.as_millis()))
    }

    /// `-hash-keys n -hash-peers peers`: one call per key `key-0` .. `key-<n-1>`
    /// (`zrpc.SetHashKey`), after warm-up calls until `peers` servers answered.
    #[must_use]
    pub fn hash_keys(self, n: u64, peers: u64) -> Self {
        self.arg("-hash-keys", n).arg("-hash-peers", peers)
    }

    /// `-metadata key=value`: metadata sent with every call.
    #[must_use]
    pub fn metadata(self, key: &str, value: &str) -> Self {
        self.arg("-metadata", format!("{key}={value}"))
    }

    /// `-v`: per-call lines.
    #[must_use]
    pub fn verbose(mut self) -> Self {
        self.args.push("-v".to_owned());
        self
    }

    /// `-gzip`: every call compressed with gzip (grpc-go's `UseCompressor`).
    #[must_use]
    pub fn gzip(mut self) -> Self {
        self.args.push("-gzip".to_owned());
        self
    }

    /// Starts it; [`RunningGzClient::finish`] waits for it.
    ///
    /// # Panics
    /// When it cannot be spawned.
    pub fn spawn(self) -> RunningGzClient {
        let dir = tempfile::Builder::new()
            .prefix("zrpc-gz-client-")
            .tempdir()
            .expect("temp dir");
        let path = dir.path().join("gz-client.yaml");
        std::fs::write(&path, &self.yaml).expect("write gz-client.yaml");
        self.spawn_file(&path, dir)
    }

    /// Starts it with an existing YAML file (the builder's YAML text is not used).
    ///
    /// # Panics
    /// When it cannot be spawned.
    pub fn spawn_with_file(mut self, path: &Path) -> RunningGzClient {
        let dir = tempfile::Builder::new()
            .prefix("zrpc-gz-client-")
            .tempdir()
            .expect("temp dir");
        self.yaml = std::fs::read_to_string(path).unwrap_or_default();
        self.spawn_file(path, dir)
    }

    fn spawn_file(self, path: &Path, dir: tempfile::TempDir) -> RunningGzClient {
        let mut child = Command::new(&self.program)
            .arg("-f")
            .arg(path)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.program.display()));
        let stdout = collect_lines(child.stdout.take().expect("piped stdout"));
        let stderr = collect_lines(child.stderr.take().expect("piped stderr"));
        RunningGzClient {
            child: Some(child),
            stdout,
            stderr,
            yaml: self.yaml,
            deadline: Instant::now() + self.limit,
            _dir: dir,
        }
    }

    /// Runs it to completion.
    pub async fn run(self) -> GzRun {
        self.spawn().finish().await
    }
}

/// A `gz-client` that runs in the background (killed on drop).
#[derive(Debug)]
pub struct RunningGzClient {
    child: Option<Child>,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    yaml: String,
    deadline: Instant,
    _dir: tempfile::TempDir,
}

impl RunningGzClient {
    /// Its `-v` lines so far.
    pub fn calls_so_far(&self) -> Vec<CallLine> {
        snapshot(&self.stdout)
            .iter()
            .filter_map(|l| serde_json::from_str::<CallLine>(l).ok())
            .filter(|c| !c.code.is_empty())
            .collect()
    }

    /// Waits for it to exit (killing it at its time limit) and parses its output.
    ///
    /// # Panics
    /// When it exceeds its time limit or prints no summary.
    pub async fn finish(mut self) -> GzRun {
        let mut child = self.child.take().expect("a running gz-client");
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break status;
            }
            if Instant::now() > self.deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "gz-client did not finish in time\nstderr: {}",
                    snapshot(&self.stderr).join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // The reader threads end at EOF, right after the exit; give them a moment.
        let drained = Instant::now() + Duration::from_secs(2);
        let mut lines = snapshot(&self.stdout);
        while Instant::now() < drained
            && !lines
                .last()
                .is_some_and(|l| l.starts_with("{\"calls\"") || l.contains("\"first_errors\""))
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
            lines = snapshot(&self.stdout);
        }
        let stderr = snapshot(&self.stderr).join("\n");
        let summary = lines
            .iter()
            .rev()
            .find(|l| l.contains("\"first_errors\""))
            .and_then(|l| serde_json::from_str::<Summary>(l).ok());
        let Some(summary) = summary else {
            panic!(
                "gz-client printed no summary (exit {status})\nyaml:\n{}\nstdout: {lines:?}\nstderr: {stderr}",
                self.yaml
            );
        };
        let calls = lines
            .iter()
            .filter(|l| l.starts_with("{\"call\""))
            .filter_map(|l| serde_json::from_str::<CallLine>(l).ok())
            .collect();
        GzRun {
            summary,
            calls,
            exit_code: status.code(),
            stderr,
            yaml: std::mem::take(&mut self.yaml),
        }
    }
}

impl Drop for RunningGzClient {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = terminate(&mut child, Duration::from_secs(2));
        }
    }
}
