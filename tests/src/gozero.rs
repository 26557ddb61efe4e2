//! Real go-zero next to zrpc: builds and runs the Go programs of `interop/gozero/` (go-zero
//! v1.10.3), and serves zrpc greeters that answer exactly as the Go one does.
//!
//! # The Go programs
//!
//! [`programs`] builds `interop/gozero/bin/gz-server` and `bin/gz-client` once per test process
//! (`bash interop/gozero/build.sh`, which needs `go`; binaries newer than every source file are
//! reused). Without `go` on `PATH` (and without built binaries) it prints
//! `SKIPPED: go not found, go-zero interop tests not run` to stderr and returns None, so every
//! test returns early ([`crate::gozero_or_skip!`]); with `CI=true` a missing Go is a panic.
//!
//! - [`GzServer`]: `gz-server -f <yaml>`, a go-zero greeter (`zrpc.MustNewServer`). Its YAML
//!   comes from [`ServerYaml`] (ListenOn `127.0.0.1:<free port>`, DevServer on `127.0.0.1`,
//!   `CpuThreshold: 0`, `Log: {Mode: console, Level: error}`) or from a file. Started means its
//!   gRPC port accepts connections; dropped means SIGTERM, then SIGKILL after 10 s (only our PID).
//! - [`GzClient`]: `gz-client -f <yaml> -n N -c C ...`, a go-zero client whose config comes from
//!   [`ClientYaml`]; [`GzRun`] is its parsed summary (calls, codes, calls per peer and per
//!   `x-server`) and, with `-v`, its per-call lines.
//!
//! # The zrpc side
//!
//! [`InteropGreeter`] answers as `gz-server` does (the name directives `sleep:<ms>`, `panic`,
//! `code:<n>` (message `forced <n>`), `meta`; response header `x-server: <ListenOn>`), so one
//! assertion covers both servers. [`start_zrpc`] serves it behind a zrpc `Server` on
//! `127.0.0.1:<port>` (registered in etcd when the config has `Etcd`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tonic::metadata::{KeyAndValueRef, MetadataValue};
use tonic::{Code, Request, Response, Status};
use zrpc_core::breaker::BreakerRegistry;
use zrpc_core::conf::EtcdConf;
use zrpc_server::conf::ShutdownConf;
use zrpc_server::{RpcServerConf, Server, ServerHandle};

use crate::greeter::GREETER_DESCRIPTOR;
use crate::pb::greeter_server::{Greeter, GreeterServer};
use crate::pb::{HelloReply, HelloRequest, HelloStreamRequest};

/// The response header naming the server that answered (`ListenOn`), on both sides.
pub const SERVER_HEADER: &str = "x-server";

/// How long a process may take to accept connections after its start.
const START_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Building the Go programs
// ---------------------------------------------------------------------------------------------

/// The built Go programs.
#[derive(Debug, Clone)]
pub struct Programs {
    /// `interop/gozero/bin/gz-server`.
    pub server: PathBuf,
    /// `interop/gozero/bin/gz-client`.
    pub client: PathBuf,
}

/// The repository root (the parent of the `tests` crate).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// `interop/gozero/` in the repository.
pub fn gozero_dir() -> PathBuf {
    repo_root().join("interop").join("gozero")
}

/// Returns `Some(programs)`, or from the enclosing test when the go-zero programs are not
/// available (see [`programs`]).
#[macro_export]
macro_rules! gozero_or_skip {
    () => {
        match $crate::gozero::programs() {
            Some(p) => p,
            None => return,
        }
    };
}

/// The Go programs, built once per test process (see the module docs). None when Go is missing
/// (the skip is printed to stderr once per test).
///
/// # Panics
/// When the build fails, or Go is missing and `CI=true`.
pub fn programs() -> Option<&'static Programs> {
    static PROGRAMS: OnceLock<Option<Programs>> = OnceLock::new();
    let p = PROGRAMS.get_or_init(build_programs).as_ref();
    if p.is_none() {
        eprintln!("SKIPPED: go not found, go-zero interop tests not run");
    }
    p
}

fn go_available() -> bool {
    Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn build_programs() -> Option<Programs> {
    let dir = gozero_dir();
    let bin = dir.join("bin");
    let programs = Programs {
        server: bin.join("gz-server"),
        client: bin.join("gz-client"),
    };
    let built = programs.server.is_file() && programs.client.is_file();
    if !go_available() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        if built && !ci {
            eprintln!(
                "note: go not found; using the go-zero programs already built in {}",
                bin.display()
            );
            return Some(programs);
        }
        if ci {
            panic!(
                "go not found and CI=true: the go-zero interop tests must run in CI \
                 (install Go >= 1.24 and run `bash interop/gozero/build.sh`)"
            );
        }
        eprintln!(
            "\n==================================================================\n\
             SKIPPED: go not found, go-zero interop tests not run\n\
             (install Go and run `bash interop/gozero/build.sh` to run them)\n\
             ==================================================================\n"
        );
        return None;
    }
    if built && fresh(&dir, &programs) {
        return Some(programs);
    }
    let started = Instant::now();
    eprintln!("building the go-zero programs (bash interop/gozero/build.sh)...");
    let out = Command::new("bash")
        .arg(dir.join("build.sh"))
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("run bash {}/build.sh: {e}", dir.display()));
    assert!(
        out.status.success(),
        "interop/gozero/build.sh failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "built the go-zero programs in {:.1?}: {}",
        started.elapsed(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    assert!(
        programs.server.is_file() && programs.client.is_file(),
        "build.sh did not produce {} and {}",
        programs.server.display(),
        programs.client.display()
    );
    Some(programs)
}

/// True when both binaries are newer than every source file (`bin/` and `.bin/` excluded).
fn fresh(dir: &Path, programs: &Programs) -> bool {
    fn mtime(p: &Path) -> Option<SystemTime> {
        std::fs::metadata(p).and_then(|m| m.modified()).ok()
    }
    fn newest(dir: &Path, skip: &[&str]) -> Option<SystemTime> {
        let mut best = None;
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if skip.iter().any(|s| name == *s) {
                continue;
            }
            let t = if path.is_dir() {
                newest(&path, &[])
            } else {
                mtime(&path)
            };
            best = best.max(t);
        }
        best
    }
    let (Some(s), Some(c)) = (mtime(&programs.server), mtime(&programs.client)) else {
        return false;
    };
    match newest(dir, &["bin", ".bin"]) {
        Some(src) => s.min(c) >= src,
        None => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------

/// A free loopback port (bound to `127.0.0.1:0` and released).
pub fn free_port() -> u16 {
    StdTcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a free loopback port")
}

/// A YAML double-quoted string (JSON strings are valid YAML).
fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

fn yaml_list(indent: &str, items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("{indent}- {}\n", q(i)))
        .collect()
}

/// Waits until `addr` accepts TCP connections, or `limit` passes.
pub async fn wait_tcp(addr: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Ok(_)) = tokio::time::timeout(
            Duration::from_millis(500),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `cond` every 20 ms until it holds (true) or `limit` passes (false).
pub async fn eventually<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until some key under `key/` holds `value` (a registration of `value`), or `limit`.
pub async fn wait_registered(
    client: &etcd_client::Client,
    key: &str,
    value: &str,
    limit: Duration,
) -> bool {
    eventually(limit, || {
        let mut c = client.clone();
        async move {
            crate::etcd::keys_under(&mut c, key)
                .await
                .iter()
                .any(|(_, v)| v == value)
        }
    })
    .await
}

/// Waits until no key under `key/` holds `value`, or `limit`.
pub async fn wait_deregistered(
    client: &etcd_client::Client,
    key: &str,
    value: &str,
    limit: Duration,
) -> bool {
    eventually(limit, || {
        let mut c = client.clone();
        async move {
            !crate::etcd::keys_under(&mut c, key)
                .await
                .iter()
                .any(|(_, v)| v == value)
        }
    })
    .await
}

/// `GET path` over HTTP/1.0 (so the body is never chunked): the status code and the body.
pub async fn http10_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(5), io)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "GET timed out"))??;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// `GET path` on a DevServer (HTTP/1.0); panics unless it answers 200.
///
/// # Panics
/// When the DevServer does not answer 200.
pub async fn scrape(addr: SocketAddr, path: &str) -> String {
    let (status, body) = http10_get(addr, path)
        .await
        .unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"));
    assert_eq!(status, 200, "GET {path} on {addr}: {body}");
    body
}

/// Sends SIGTERM to `child` (our own process) and waits up to `grace` for it to exit, then
/// SIGKILLs it. Returns its exit status.
fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(Some(status)) = child.try_wait() {
        return Some(status);
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    child.wait().ok()
}

/// Collects the lines of a child's pipe on a thread.
fn collect_lines<R: std::io::Read + Send + 'static>(pipe: R) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    lines
}

fn snapshot(lines: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

// ---------------------------------------------------------------------------------------------
// YAML
// ---------------------------------------------------------------------------------------------

/// A go-zero `RpcServerConf` YAML for `gz-server` (also loadable by `zrpc::conf::load`).
#[derive(Debug, Clone)]
pub struct ServerYaml {
    /// `Name`.
    pub name: String,
    /// `ListenOn` port (host `127.0.0.1`).
    pub port: u16,
    /// `DevServer.Port` (host `127.0.0.1`); None = no DevServer block.
    pub dev_port: Option<u16>,
    /// `Etcd.Hosts` and `Etcd.Key`; None = no registration.
    pub etcd: Option<(Vec<String>, String)>,
    /// `Timeout` in ms (None = go-zero's default 2000).
    pub timeout: Option<u64>,
    /// `CpuThreshold` (0 = shedding off).
    pub cpu_threshold: u64,
    /// Extra top-level YAML appended verbatim (e.g. `Auth: true\n`).
    pub extra: String,
}

impl ServerYaml {
    /// A server on a free port with a DevServer on another, registered under `key` in `hosts`.
    pub fn new(name: &str, hosts: &[String], key: &str) -> Self {
        ServerYaml {
            name: name.to_owned(),
            port: free_port(),
            dev_port: Some(free_port()),
            etcd: Some((hosts.to_vec(), key.to_owned())),
            timeout: None,
            cpu_threshold: 0,
            extra: String::new(),
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn listen_on(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The DevServer address, if any.
    pub fn dev_addr(&self) -> Option<SocketAddr> {
        self.dev_port.map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
    }

    /// The YAML text.
    pub fn render(&self) -> String {
        let mut y = format!(
            "Name: {}\nListenOn: {}\nCpuThreshold: {}\nLog:\n  Mode: console\n  Level: error\n",
            q(&self.name),
            q(&self.listen_on()),
            self.cpu_threshold
        );
        if let Some(t) = self.timeout {
            y.push_str(&format!("Timeout: {t}\n"));
        }
        if let Some(p) = self.dev_port {
            y.push_str(&format!(
                "DevServer:\n  Enabled: true\n  Host: 127.0.0.1\n  Port: {p}\n  MetricsPath: /metrics\n  HealthPath: /healthz\n"
            ));
        }
        if let Some((hosts, key)) = &self.etcd {
            y.push_str(&format!(
                "Etcd:\n  Hosts:\n{}  Key: {}\n",
                yaml_list("    ", hosts),
                q(key)
            ));
        }
        y.push_str(&self.extra);
        y
    }
}

/// How a client finds its servers.
#[derive(Debug, Clone)]
pub enum Discovery {
    /// `Etcd: {Hosts, Key}`.
    Etcd(Vec<String>, String),
    /// `Endpoints: [...]`.
    Endpoints(Vec<String>),
    /// `Target: ...`.
    Target(String),
}

impl Discovery {
    /// The same discovery as a zrpc `RpcClientConf`.
    pub fn zrpc_conf(&self) -> zrpc_client::conf::RpcClientConf {
        use zrpc_client::conf::RpcClientConf;
        match self {
            Discovery::Etcd(hosts, key) => RpcClientConf::etcd(hosts.iter().cloned(), key.clone()),
            Discovery::Endpoints(eps) => RpcClientConf::direct(eps.iter().cloned()),
            Discovery::Target(t) => RpcClientConf::target(t.clone()),
        }
    }

    /// A short description for printed figures.
    pub fn describe(&self) -> String {
        match self {
            Discovery::Etcd(hosts, _) => format!("Etcd.Hosts={hosts:?}"),
            Discovery::Endpoints(eps) => format!("Endpoints={eps:?}"),
            Discovery::Target(t) => format!("Target={t}"),
        }
    }
}

/// go-zero's target for etcd hosts and a key: `etcd:///h1,h2?key=<QueryEscape(key)>`.
pub fn etcd_target(hosts: &[String], key: &str) -> String {
    format!("etcd:///{}?key={}", hosts.join(","), query_escape(key))
}

/// Go's `url.QueryEscape`.
pub fn query_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A gz-client YAML: `{Name, Log, Greeter: RpcClientConf}`.
#[derive(Debug, Clone)]
pub struct ClientYaml {
    /// Where the servers are.
    pub discovery: Discovery,
    /// `Greeter.Timeout` in ms (None = default 2000).
    pub timeout: Option<u64>,
    /// `Greeter.App` and `Greeter.Token`.
    pub credential: Option<(String, String)>,
    /// Extra YAML under `Greeter:` (each line indented by two spaces).
    pub extra: String,
}

impl ClientYaml {
    /// A client with `discovery` and go-zero defaults.
    pub fn new(discovery: Discovery) -> Self {
        ClientYaml {
            discovery,
            timeout: None,
            credential: None,
            extra: String::new(),
        }
    }

    /// Sets `Greeter.Timeout`.
    #[must_use]
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout = Some(ms);
        self
    }

    /// Sets `Greeter.App` / `Greeter.Token`.
    #[must_use]
    pub fn credential(mut self, app: &str, token: &str) -> Self {
        self.credential = Some((app.to_owned(), token.to_owned()));
        self
    }

    /// The YAML text.
    pub fn render(&self) -> String {
        let mut y = "Name: gz-client\nLog:\n  Mode: console\n  Level: error\nGreeter:\n".to_owned();
        match &self.discovery {
            Discovery::Etcd(hosts, key) => y.push_str(&format!(
                "  Etcd:\n    Hosts:\n{}    Key: {}\n",
                yaml_list("      ", hosts),
                q(key)
            )),
            Discovery::Endpoints(eps) => {
                y.push_str(&format!("  Endpoints:\n{}", yaml_list("    ", eps)));
            }
            Discovery::Target(t) => y.push_str(&format!("  Target: {}\n", q(t))),
        }
        if let Some(t) = self.timeout {
            y.push_str(&format!("  Timeout: {t}\n"));
        }
        if let Some((app, token)) = &self.credential {
            y.push_str(&format!("  App: {}\n  Token: {}\n", q(app), q(token)));
        }
        y.push_str(&self.extra);
        y
    }
}

// ---------------------------------------------------------------------------------------------
// gz-server
// ---------------------------------------------------------------------------------------------

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
        // The reader thread drains the pipe shortly after exit.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let stdout = snapshot(&self.stdout);
        let calls = stdout.iter().find_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            (v.get("event")?.as_str()? == "stopped").then(|| v.get("calls")?.as_u64())?
        });
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

// ---------------------------------------------------------------------------------------------
// gz-client
// ---------------------------------------------------------------------------------------------

/// The summary line of `gz-client`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Summary {
    /// Calls counted.
    pub calls: u64,
    /// Calls that succeeded.
    pub ok: u64,
    /// Calls that failed.
    pub failed: u64,
    /// Calls per gRPC code name (`OK`, `Unavailable`, ...).
    pub codes: BTreeMap<String, u64>,
    /// Calls per peer address.
    pub peers: BTreeMap<String, u64>,
    /// Calls per `x-server` header value.
    pub servers: BTreeMap<String, u64>,
    /// The first distinct errors.
    pub first_errors: Vec<String>,
    /// Median latency.
    pub p50_ms: f64,
    /// 99th percentile latency.
    pub p99_ms: f64,
    /// Wall time of the calls.
    pub elapsed_ms: f64,
}

/// One `-v` line of `gz-client`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CallLine {
    /// Call index.
    pub call: u64,
    /// Peer address.
    pub peer: String,
    /// `x-server` header value.
    pub server: String,
    /// gRPC code name.
    pub code: String,
    /// Reply text, or the status message.
    pub message: String,
}

/// A finished `gz-client` run.
#[derive(Debug, Clone)]
pub struct GzRun {
    /// Its summary (default if it printed none).
    pub summary: Summary,
    /// Its `-v` lines.
    pub calls: Vec<CallLine>,
    /// Its exit status code.
    pub exit_code: Option<i32>,
    /// Its stderr (go-zero logs).
    pub stderr: String,
    /// The YAML it ran with.
    pub yaml: String,
}

impl GzRun {
    /// Share of the calls that went to `peer` (0..=1).
    pub fn share(&self, peer: &str) -> f64 {
        if self.summary.calls == 0 {
            return 0.0;
        }
        self.summary.peers.get(peer).copied().unwrap_or(0) as f64 / self.summary.calls as f64
    }

    /// The shares of `peers`, as `peer=NN%` text.
    pub fn shares_text(&self, peers: &[String]) -> String {
        peers
            .iter()
            .map(|p| format!("{p}={:.0}%", self.share(p) * 100.0))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A description for failure messages: summary, first errors, YAML and the stderr tail.
    pub fn explain(&self) -> String {
        let tail: Vec<&str> = self.stderr.lines().rev().take(15).collect();
        format!(
            "summary: {:?}\nexit: {:?}\nyaml:\n{}\nstderr (last lines, newest first):\n{}",
            self.summary,
            self.exit_code,
            self.yaml,
            tail.join("\n")
        )
    }

    /// Asserts `expected_calls` calls (when given), 0 failures and exit code 0.
    ///
    /// # Panics
    /// When a call failed.
    pub fn assert_all_ok(&self, what: &str, expected_calls: Option<u64>) {
        if let Some(n) = expected_calls {
            assert_eq!(self.summary.calls, n, "{what}: calls\n{}", self.explain());
        }
        assert!(
            self.summary.calls > 0,
            "{what}: no calls\n{}",
            self.explain()
        );
        assert_eq!(
            self.summary.failed,
            0,
            "{what}: failed calls\n{}",
            self.explain()
        );
        assert_eq!(self.exit_code, Some(0), "{what}: exit\n{}", self.explain());
    }

    /// Asserts that each of `peers` got at least `min` of the calls, and nothing else got any.
    ///
    /// # Panics
    /// When a share is below `min`.
    pub fn assert_shares(&self, what: &str, peers: &[String], min: f64) {
        for p in peers {
            assert!(
                self.share(p) >= min,
                "{what}: {p} got {:.1}% of the calls (want >= {:.0}%)\n{}",
                self.share(p) * 100.0,
                min * 100.0,
                self.explain()
            );
        }
        let counted: u64 = peers
            .iter()
            .map(|p| self.summary.peers.get(p).copied().unwrap_or(0))
            .sum();
        assert_eq!(
            counted,
            self.summary.calls,
            "{what}: calls went to unexpected peers\n{}",
            self.explain()
        );
    }
}

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

    fn arg(mut self, flag: &str, value: impl ToString) -> Self {
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

    /// `-v`: per-call lines.
    #[must_use]
    pub fn verbose(mut self) -> Self {
        self.args.push("-v".to_owned());
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

// ---------------------------------------------------------------------------------------------
// The zrpc side
// ---------------------------------------------------------------------------------------------

/// A greeter that answers as `gz-server` does (see the module docs). Clones share the counter.
#[derive(Debug, Clone)]
pub struct InteropGreeter {
    name: String,
    calls: Arc<AtomicU64>,
}

impl InteropGreeter {
    /// A greeter whose `x-server` header is `name` (its `ListenOn`).
    pub fn new(name: impl Into<String>) -> Self {
        InteropGreeter {
            name: name.into(),
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Handler invocations (unary and streaming).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    fn header(&self) -> MetadataValue<tonic::metadata::Ascii> {
        MetadataValue::try_from(self.name.as_str()).expect("ListenOn is ASCII")
    }

    fn status(&self, code: Code, message: String) -> Status {
        let mut st = Status::new(code, message);
        st.metadata_mut().insert(SERVER_HEADER, self.header());
        st
    }

    fn reply<T>(&self, msg: T) -> Response<T> {
        let mut r = Response::new(msg);
        r.metadata_mut().insert(SERVER_HEADER, self.header());
        r
    }
}

/// Headers that grpc-go keeps out of the incoming metadata (`isReservedHeader`, minus the two
/// it adds back: `content-type` and `user-agent`).
const RESERVED: &[&str] = &[
    "te",
    "grpc-timeout",
    "grpc-encoding",
    "grpc-message",
    "grpc-message-type",
    "grpc-status",
    "grpc-status-details-bin",
];

/// `k=v;...` sorted by key plus `deadline=<ms>|none`, as gz-server's `meta` directive.
fn describe_incoming(md: &tonic::metadata::MetadataMap) -> String {
    let mut pairs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for kv in md.iter() {
        if let KeyAndValueRef::Ascii(k, v) = kv {
            let k = k.as_str();
            if k.starts_with(':') || RESERVED.contains(&k) {
                continue;
            }
            pairs
                .entry(k.to_owned())
                .or_default()
                .push(v.to_str().unwrap_or("").to_owned());
        }
    }
    let mut out: Vec<String> = pairs
        .into_iter()
        .map(|(k, v)| format!("{k}={}", v.join(",")))
        .collect();
    let deadline = md
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)
        .map_or_else(|| "none".to_owned(), |d| d.as_millis().to_string());
    out.push(format!("deadline={deadline}"));
    out.join(";")
}

/// Parses a `grpc-timeout` header value (`<digits><H|M|S|m|u|n>`).
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[tonic::async_trait]
impl Greeter for InteropGreeter {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let meta = describe_incoming(req.metadata());
        let name = req.into_inner().name;
        if name == "panic" {
            panic!("zrpc interop greeter: panic requested");
        }
        if name == "meta" {
            return Ok(self.reply(HelloReply { message: meta }));
        }
        if let Some(n) = name.strip_prefix("code:") {
            let Ok(n) = n.parse::<i32>() else {
                return Err(
                    self.status(Code::InvalidArgument, format!("bad directive {}", q(&name)))
                );
            };
            return Err(self.status(Code::from_i32(n), format!("forced {n}")));
        }
        if let Some(ms) = name.strip_prefix("sleep:") {
            let Ok(ms) = ms.parse::<u64>() else {
                return Err(
                    self.status(Code::InvalidArgument, format!("bad directive {}", q(&name)))
                );
            };
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Ok(self.reply(HelloReply {
            message: format!("hello {name}"),
        }))
    }

    type SayHelloStreamStream = Pin<Box<dyn Stream<Item = Result<HelloReply, Status>> + Send>>;

    async fn say_hello_stream(
        &self,
        req: Request<HelloStreamRequest>,
    ) -> Result<Response<Self::SayHelloStreamStream>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let r = req.into_inner();
        let interval = Duration::from_millis(u64::from(r.interval_ms));
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            for i in 0..r.count {
                if i > 0 && !interval.is_zero() {
                    tokio::time::sleep(interval).await;
                }
                let reply = HelloReply {
                    message: format!("hello {} {i}", r.name),
                };
                if tx.send(Ok(reply)).await.is_err() {
                    return;
                }
            }
        });
        let stream: Self::SayHelloStreamStream =
            Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx));
        Ok(self.reply(stream))
    }
}

/// A zrpc server config for interop tests: `CpuThreshold: 0`, WrapUpTime 1 s (go-zero's
/// default, so that go-zero clients see a deregistration before the drain), WaitTime 10 s,
/// registered under `etcd` when given. `ListenOn` is filled in by [`start_zrpc`].
pub fn zrpc_conf(name: &str, etcd: Option<EtcdConf>) -> RpcServerConf {
    let conf = RpcServerConf::new(name, "127.0.0.1:0")
        .with_cpu_threshold(0)
        .with_shutdown(ShutdownConf::new(
            Duration::from_secs(1),
            Duration::from_secs(10),
        ));
    match etcd {
        Some(e) => conf.with_etcd(e),
        None => conf,
    }
}

/// A running zrpc server with an [`InteropGreeter`].
#[derive(Debug)]
pub struct ZrpcServer {
    /// Its gRPC address; `addr.to_string()` is its `ListenOn`, `x-server` and etcd value.
    pub addr: SocketAddr,
    /// Its handle.
    pub handle: ServerHandle,
    /// Its greeter (call counter).
    pub greeter: InteropGreeter,
    join: Option<JoinHandle<Result<(), zrpc_server::Error>>>,
}

impl ZrpcServer {
    /// `127.0.0.1:port`.
    pub fn listen_on(&self) -> String {
        self.addr.to_string()
    }

    /// Its DevServer address, if configured.
    pub fn dev_addr(&self) -> Option<SocketAddr> {
        self.handle.dev_server_addr()
    }

    /// Starts the graceful shutdown without waiting.
    pub fn begin_shutdown(&self) {
        self.handle.shutdown();
    }

    /// Shuts down gracefully and waits for `serve` to return.
    ///
    /// # Panics
    /// When the server task panicked.
    pub async fn shutdown(mut self) -> Result<(), zrpc_server::Error> {
        self.handle.shutdown();
        match self.join.take() {
            Some(j) => j.await.expect("server task panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for ZrpcServer {
    fn drop(&mut self) {
        if let Some(j) = self.join.take() {
            j.abort();
        }
    }
}

/// Serves an [`InteropGreeter`] behind a zrpc server built from `conf`. A `ListenOn` with port
/// 0 gets a free port on 127.0.0.1; otherwise `ListenOn` is bound as given.
///
/// # Panics
/// When the config is invalid or the address cannot be bound.
pub async fn start_zrpc(conf: RpcServerConf) -> ZrpcServer {
    start_zrpc_with(conf, |s| s).await
}

/// [`start_zrpc`] with a customization of the `Server` (CPU source, token store, ...).
///
/// # Panics
/// When the config is invalid or the address cannot be bound.
pub async fn start_zrpc_with(
    mut conf: RpcServerConf,
    customize: impl FnOnce(Server) -> Server,
) -> ZrpcServer {
    let bind = if conf.listen_on.ends_with(":0") || conf.listen_on.is_empty() {
        "127.0.0.1:0".to_owned()
    } else {
        conf.listen_on.clone()
    };
    let listener = TcpListener::bind(&bind)
        .await
        .unwrap_or_else(|e| panic!("bind {bind}: {e}"));
    let addr = listener.local_addr().expect("local address");
    if bind.ends_with(":0") {
        conf.listen_on = addr.to_string();
    }
    let greeter = InteropGreeter::new(conf.listen_on.clone());
    let server = Server::new(conf)
        .expect("valid zrpc server config")
        .add_service(GreeterServer::new(greeter.clone()))
        .reflection_descriptor(GREETER_DESCRIPTOR)
        // Each server has its own breakers: several servers run in this process.
        .breaker_registry(Box::leak(Box::new(BreakerRegistry::default())));
    let server = customize(server);
    let handle = server.handle();
    let join = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));
    let addr = handle.serving().await.expect("zrpc server serves");
    ZrpcServer {
        addr,
        handle,
        greeter,
        join: Some(join),
    }
}

/// One call's outcome through a zrpc client: the `x-server` that answered (if any), the code and
/// the reply or status message.
#[derive(Debug, Clone)]
pub struct ZrpcCall {
    /// `x-server` header value ("" if none).
    pub server: String,
    /// The gRPC code.
    pub code: Code,
    /// The reply text or the status message.
    pub message: String,
}

/// A unary `SayHello(name)` through any tonic channel (a zrpc `Client` included).
pub async fn say_hello<T>(
    client: &mut crate::pb::greeter_client::GreeterClient<T>,
    name: &str,
) -> ZrpcCall
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error:
        Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    let header = |md: &tonic::metadata::MetadataMap| {
        md.get(SERVER_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    match client
        .say_hello(HelloRequest {
            name: name.to_owned(),
        })
        .await
    {
        Ok(r) => ZrpcCall {
            server: header(r.metadata()),
            code: Code::Ok,
            message: r.into_inner().message,
        },
        Err(st) => ZrpcCall {
            server: header(st.metadata()),
            code: st.code(),
            message: st.message().to_owned(),
        },
    }
}

/// Results of a load run through a zrpc client.
#[derive(Debug, Clone, Default)]
pub struct ZrpcRun {
    /// Calls made.
    pub calls: u64,
    /// Calls that failed.
    pub failed: u64,
    /// Calls per `x-server`.
    pub servers: BTreeMap<String, u64>,
    /// Calls per code (`Ok`, `Unavailable`, ...).
    pub codes: BTreeMap<String, u64>,
    /// The first distinct failures.
    pub first_errors: Vec<String>,
    /// Wall time.
    pub elapsed: Duration,
}

impl ZrpcRun {
    /// Share of the calls answered by `server` (0..=1).
    pub fn share(&self, server: &str) -> f64 {
        if self.calls == 0 {
            return 0.0;
        }
        self.servers.get(server).copied().unwrap_or(0) as f64 / self.calls as f64
    }

    /// The shares of `servers` as `server=NN%` text.
    pub fn shares_text(&self, servers: &[String]) -> String {
        servers
            .iter()
            .map(|s| format!("{s}={:.0}%", self.share(s) * 100.0))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Asserts 0 failures and that each of `servers` answered at least `min` of the calls.
    ///
    /// # Panics
    /// When a call failed or a share is too small.
    pub fn assert_ok_and_shares(&self, what: &str, servers: &[String], min: f64) {
        assert!(self.calls > 0, "{what}: no calls");
        assert_eq!(self.failed, 0, "{what}: failed calls: {self:?}");
        for s in servers {
            assert!(
                self.share(s) >= min,
                "{what}: {s} answered {:.1}% (want >= {:.0}%): {self:?}",
                self.share(s) * 100.0,
                min * 100.0
            );
        }
        let counted: u64 = servers
            .iter()
            .map(|s| self.servers.get(s).copied().unwrap_or(0))
            .sum();
        assert_eq!(counted, self.calls, "{what}: unexpected servers: {self:?}");
    }
}

/// How a zrpc-client load run is shaped.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Calls per worker (ignored with `duration`).
    pub calls_per_worker: u64,
    /// Concurrent workers.
    pub workers: u64,
    /// Pause between two calls of a worker.
    pub gap: Duration,
    /// If set, call until it elapses.
    pub duration: Option<Duration>,
    /// The request name (may carry a directive, e.g. `sleep:5`).
    pub name: &'static str,
}

/// Calls `SayHello(load.name)` through `client` as `load` says; the first call of each worker is
/// retried (for up to `wait`) while it fails with `Unavailable` before any call succeeded, as
/// `gz-client` does (discovery lags).
pub async fn zrpc_load(client: &zrpc_client::Client, load: Load, wait: Duration) -> ZrpcRun {
    use crate::pb::greeter_client::GreeterClient;
    let started = Instant::now();
    let stop_at = load.duration.map(|d| started + d);
    // The first call (uncounted retries until one reaches a server or `wait` passes).
    let mut first = GreeterClient::new(client.clone());
    let mut first_call = say_hello(&mut first, load.name).await;
    while first_call.code != Code::Ok && first_call.server.is_empty() && started.elapsed() < wait {
        tokio::time::sleep(Duration::from_millis(100)).await;
        first_call = say_hello(&mut first, load.name).await;
    }
    let total = load.calls_per_worker * load.workers.max(1);
    let next = Arc::new(AtomicU64::new(1)); // the first call was call 0
    let mut workers = Vec::new();
    for _ in 0..load.workers.max(1) {
        let mut greeter = GreeterClient::new(client.clone());
        let next = next.clone();
        workers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for n in 0u64.. {
                if n > 0 && !load.gap.is_zero() {
                    tokio::time::sleep(load.gap).await;
                }
                match stop_at {
                    Some(stop) if Instant::now() >= stop => break,
                    Some(_) => {}
                    None if next.fetch_add(1, Ordering::SeqCst) >= total => break,
                    None => {}
                }
                out.push(say_hello(&mut greeter, load.name).await);
            }
            out
        }));
    }
    let mut all = vec![first_call];
    for w in workers {
        all.extend(w.await.expect("load worker panicked"));
    }
    let mut run = ZrpcRun {
        elapsed: started.elapsed(),
        ..ZrpcRun::default()
    };
    for c in all {
        run.calls += 1;
        *run.codes.entry(format!("{:?}", c.code)).or_default() += 1;
        if !c.server.is_empty() {
            *run.servers.entry(c.server.clone()).or_default() += 1;
        }
        if c.code != Code::Ok {
            run.failed += 1;
            let e = format!("{:?}: {}", c.code, c.message);
            if run.first_errors.len() < 5 && !run.first_errors.contains(&e) {
                run.first_errors.push(e);
            }
        }
    }
    run
}

// ---------------------------------------------------------------------------------------------
// Prometheus text
// ---------------------------------------------------------------------------------------------

/// The value of the sample `series` (`name{labels}` in Prometheus' sorted label order).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|v| v.strip_prefix(' '))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    })
}

/// The `# TYPE` of `family`.
pub fn family_type(text: &str, family: &str) -> Option<String> {
    let prefix = format!("# TYPE {family} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|t| t.trim().to_owned()))
}

/// The `# HELP` text of `family`.
pub fn family_help(text: &str, family: &str) -> Option<String> {
    let prefix = format!("# HELP {family} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|t| t.trim().to_owned()))
}

/// The samples of metric `name` (exact name, e.g. `rpc_server_requests_duration_ms_bucket`) as
/// label maps with values.
pub fn samples(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once("} ") {
                Some((l, v)) => (l, v),
                None => continue,
            },
            None => match rest.strip_prefix(' ') {
                Some(v) => ("", v),
                None => continue,
            },
        };
        let mut map = BTreeMap::new();
        for pair in split_labels(labels) {
            if let Some((k, v)) = pair.split_once('=') {
                map.insert(k.to_owned(), v.trim_matches('"').to_owned());
            }
        }
        if let Some(v) = value.split_whitespace().next().and_then(|v| v.parse().ok()) {
            out.push((map, v));
        }
    }
    out
}

/// Splits `a="x",b="y,z"` at the commas outside quotes.
fn split_labels(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, ch) in s.char_indices() {
        match ch {
            '\\' if quoted && !escaped => {
                escaped = true;
                continue;
            }
            '"' if !escaped => quoted = !quoted,
            ',' if !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        escaped = false;
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_values() {
        assert_eq!(
            parse_grpc_timeout("1999998u"),
            Some(Duration::from_micros(1_999_998))
        );
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("x"), None);
        assert_eq!(parse_grpc_timeout(""), None);
    }

    #[test]
    fn query_escape_as_go() {
        assert_eq!(query_escape("zrpc-test/a b/1"), "zrpc-test%2Fa+b%2F1");
    }

    #[test]
    fn prometheus_samples() {
        let text = "# TYPE x counter\nx{code=\"0\",method=\"/a,b\"} 3\nx_sum 1.5\n";
        let s = samples(text, "x");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0.get("method").map(String::as_str), Some("/a,b"));
        assert_eq!(s[0].1, 3.0);
        assert_eq!(sample(text, "x_sum"), Some(1.5));
        assert_eq!(family_type(text, "x").as_deref(), Some("counter"));
    }

    #[test]
    fn yaml_renders() {
        let y = ServerYaml::new("a", &["127.0.0.1:1".to_owned()], "k/1").render();
        assert!(
            y.contains("Etcd:\n  Hosts:\n    - \"127.0.0.1:1\"\n  Key: \"k/1\"\n"),
            "{y}"
        );
        let c = ClientYaml::new(Discovery::Endpoints(vec!["127.0.0.1:2".into()]))
            .credential("a", "b")
            .render();
        assert!(
            c.contains("Greeter:\n  Endpoints:\n    - \"127.0.0.1:2\"\n  App: \"a\"\n"),
            "{c}"
        );
    }
}
