//! A real etcd for integration tests.
//!
//! # How the tests start etcd
//!
//! [`EtcdServer::start`] runs the `etcd` binary found on `PATH` (or named by `ZRPC_TEST_ETCD_BIN`) as a
//! single-member cluster on two free loopback ports (client and peer) with a fresh temporary data dir
//! (in `/dev/shm` where the machine has it: no disk taken, no fsync cost):
//!
//! ```text
//! etcd --name zrpc-test --data-dir <tmp>/data
//!      --listen-client-urls http://127.0.0.1:<client> --advertise-client-urls http://127.0.0.1:<client>
//!      --listen-peer-urls http://127.0.0.1:<peer> --initial-advertise-peer-urls http://127.0.0.1:<peer>
//!      --initial-cluster zrpc-test=http://127.0.0.1:<peer>
//! ```
//!
//! Its output goes to `<tmp>/etcd.log` (the path is printed when start-up fails). `start` returns once
//! `GET /health` on the client port answers `"health":"true"` (a leader is elected and serving).
//! [`EtcdServer::kill`] sends SIGKILL, [`EtcdServer::restart`] starts etcd again on the same data dir and
//! ports and waits until it is ready; dropping the value kills etcd and removes the data dir. Each test
//! starts its own etcd, so tests can run in parallel. A restarted single-member etcd keeps its leases
//! (it refreshes them on start), so to make a lease *expire* while etcd runs, put a [`TcpProxy`] between
//! the code under test and etcd and [`TcpProxy::cut`] it for longer than the TTL.
//!
//! [`EtcdServer::start_tls`] does the same with client TLS: the `openssl` CLI makes a CA, a server
//! certificate for `127.0.0.1`/`localhost` and a client certificate in the temp dir; etcd gets
//! `--cert-file --key-file --trusted-ca-file --client-cert-auth` and an `https://` client URL;
//! [`EtcdServer::etcd_conf`] fills `CertFile`/`CertKeyFile`/`CACertFile`.
//!
//! # A multi-member cluster
//!
//! [`EtcdCluster::start`]`(n)` runs `n` etcd processes on loopback (free client and peer ports per
//! member, fresh data dirs, one `--initial-cluster` listing every member, `--initial-cluster-state
//! new`, one cluster token). It is ready when every member's `/health` answers `true` and `/version`
//! shows a decided cluster version (>= 3.4: go-zero's etcd client rejects older clusters and a
//! fresh cluster briefly reports `3.0.0`, see go-zero #4873). [`EtcdCluster::kill_member`] and
//! [`EtcdCluster::restart_member`] stop and bring back one member; dropping the value kills all.
//! With `ZRPC_TEST_ETCD_ENDPOINTS` set, the cluster is that external etcd (kill/restart panic).
//!
//! # An external etcd
//!
//! When no `etcd` binary is installed but one runs elsewhere (for example `docker compose up -d etcd`),
//! set `ZRPC_TEST_ETCD_ENDPOINTS=127.0.0.1:2379[,host:port...]`: every [`EtcdServer`] then points at that
//! cluster, nothing is started, and tests use [`unique_key`] so that tests sharing one etcd do not
//! meet. A key prefix isolates keys, not what is cluster-wide: a test that kills or restarts etcd,
//! compacts its history, turns auth on, counts its watchers or changes its members starts with
//! [`EtcdServer::start_exclusive`] (or [`EtcdCluster::start_exclusive`]), which gives it an etcd of
//! its own even then, as etcd's own integration framework gives such tests a cluster each; where
//! no `etcd` binary is installed, it skips itself with a printed note saying why.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::ports::free_port;

/// Environment variable naming an external etcd (comma-separated `host:port` list).
pub const ENDPOINTS_ENV: &str = "ZRPC_TEST_ETCD_ENDPOINTS";
/// Environment variable naming the etcd binary (default `etcd` on `PATH`).
pub const BIN_ENV: &str = "ZRPC_TEST_ETCD_BIN";

/// How long `start`/`restart` wait for etcd to become healthy.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A single-member etcd started for one test (or an external one, see the module docs).
#[derive(Debug)]
pub struct EtcdServer {
    endpoints: Vec<String>,
    local: Option<Local>,
}

#[derive(Debug)]
struct Local {
    child: Option<Child>,
    client_port: u16,
    peer_port: u16,
    tls: Option<TlsFiles>,
    // Held for its Drop (removes the directory); `data_dir`/`log_path` live inside it.
    dir: tempfile::TempDir,
}

/// PEM files of a TLS etcd started by [`EtcdServer::start_tls`] (made with the `openssl` CLI).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// Client certificate.
    pub cert: PathBuf,
    /// Client key (PKCS#8).
    pub key: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
}

impl EtcdServer {
    /// Starts etcd on free loopback ports with a temporary data dir and waits until it is healthy
    /// (or, with [`ENDPOINTS_ENV`] set, uses that etcd).
    ///
    /// # Panics
    /// When etcd cannot be started or does not become healthy in 20 s (the message names the log file).
    pub async fn start() -> EtcdServer {
        if let Some(endpoints) = external_endpoints() {
            return EtcdServer {
                endpoints,
                local: None,
            };
        }
        Self::start_local(false).await
    }

    /// Starts a local etcd that serves clients over TLS and requires client certificates
    /// (`--client-cert-auth`), with a CA, server and client certificate made by the `openssl` CLI.
    /// It is local even when an external etcd is configured; None (with a printed note) when no
    /// `etcd` binary is installed then.
    ///
    /// # Panics
    /// When `openssl` or etcd fail.
    pub async fn start_tls() -> Option<EtcdServer> {
        if !exclusive_available("a TLS etcd test", "needs an etcd serving TLS") {
            return None;
        }
        Some(Self::start_local(true).await)
    }

    /// An etcd of this test's own, even when [`ENDPOINTS_ENV`] names a shared one: for a test that
    /// changes or measures what a key prefix does not isolate (`why`: "kills and restarts etcd",
    /// "compacts the cluster's history", ...). Prints a note when it starts one beside the shared
    /// etcd; returns None, printing why the test skips, when no `etcd` binary is installed.
    ///
    /// # Panics
    /// When a local etcd cannot be started.
    pub async fn start_exclusive(test: &str, why: &str) -> Option<EtcdServer> {
        if !exclusive_available(test, why) {
            return None;
        }
        Some(Self::start_local(false).await)
    }

    async fn start_local(tls: bool) -> EtcdServer {
        let mut last_err = String::new();
        // The ports are released before etcd binds them; another program may grab one in
        // between, so a failed start is retried on fresh ports.
        for _ in 0..3 {
            let dir = data_dir("zrpc-etcd-");
            let (client_port, peer_port) = (free_port(), free_port());
            let tls = tls.then(|| make_certs(dir.path()));
            let mut local = Local {
                child: None,
                client_port,
                peer_port,
                tls,
                dir,
            };
            match local.spawn() {
                Ok(()) => {}
                Err(e) => {
                    last_err = e;
                    continue;
                }
            }
            match local.wait_ready().await {
                Ok(()) => {
                    return EtcdServer {
                        endpoints: vec![format!("127.0.0.1:{client_port}")],
                        local: Some(local),
                    };
                }
                Err(e) => {
                    last_err = e;
                    local.kill();
                }
            }
        }
        panic!("could not start etcd: {last_err}");
    }

    /// True when the tests use an external etcd (`ZRPC_TEST_ETCD_ENDPOINTS`): kill/restart are unavailable.
    pub fn is_external(&self) -> bool {
        self.local.is_none()
    }

    /// Prints a note and returns true when this etcd cannot be killed/restarted (external etcd):
    /// `if etcd.skip_if_external("test name") { return; }`.
    pub fn skip_if_external(&self, test: &str) -> bool {
        if self.is_external() {
            println!("note: {test} skipped: it kills/restarts etcd, which {ENDPOINTS_ENV} forbids");
        }
        self.is_external()
    }

    /// The first client endpoint, `127.0.0.1:port`.
    pub fn endpoint(&self) -> String {
        self.endpoints[0].clone()
    }

    /// All client endpoints.
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints.clone()
    }

    /// The etcd log file (None for an external etcd).
    pub fn log_path(&self) -> Option<PathBuf> {
        self.local.as_ref().map(|l| l.log_path())
    }

    /// The TLS files of an etcd started by [`EtcdServer::start_tls`].
    pub fn tls_files(&self) -> Option<&TlsFiles> {
        self.local.as_ref().and_then(|l| l.tls.as_ref())
    }

    /// An `EtcdConf` for this etcd and `key` (with the TLS files for a TLS etcd).
    pub fn etcd_conf(&self, key: &str) -> zrpc_core::conf::EtcdConf {
        let mut conf = zrpc_core::conf::EtcdConf::new(self.endpoints.clone(), key);
        if let Some(t) = self.tls_files() {
            conf.cert_file = t.cert.display().to_string();
            conf.cert_key_file = t.key.display().to_string();
            conf.ca_cert_file = t.ca.display().to_string();
        }
        conf
    }

    /// A plain etcd client (3 s request timeout) for inspecting and tampering with the keys.
    ///
    /// # Panics
    /// When etcd is not reachable.
    pub async fn client(&self) -> etcd_client::Client {
        if self.tls_files().is_some() {
            return zrpc_core::etcd::connect(&self.etcd_conf(""))
                .await
                .unwrap_or_else(|e| panic!("connect to TLS etcd: {e}"));
        }
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(3))
            .with_keep_alive_while_idle(false);
        etcd_client::Client::connect(&self.endpoints, Some(options))
            .await
            .unwrap_or_else(|e| panic!("connect to etcd {:?}: {e}", self.endpoints))
    }

    /// Kills etcd with SIGKILL (no clean shutdown) and waits for the process to exit.
    ///
    /// # Panics
    /// For an external etcd.
    pub fn kill(&mut self) {
        self.local_mut("kill").kill();
    }

    /// Stops etcd gracefully (SIGTERM), waiting at most 10 s before SIGKILL.
    ///
    /// # Panics
    /// For an external etcd.
    pub fn stop(&mut self) {
        self.local_mut("stop").stop();
    }

    /// Starts etcd again on the same data dir and ports (killing it first if it still runs) and waits
    /// until it is healthy. Returns the instant it was seen healthy.
    ///
    /// # Panics
    /// For an external etcd, or when etcd does not come back in 20 s.
    pub async fn restart(&mut self) -> Instant {
        let local = self.local_mut("restart");
        local.kill();
        // The ports were just released by the killed process; etcd may briefly fail to bind.
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Err(e) = local.spawn() {
                panic!("restart etcd: {e}");
            }
            match local.wait_ready().await {
                Ok(()) => return Instant::now(),
                Err(e) if Instant::now() > deadline => panic!("restart etcd: {e}"),
                Err(_) => local.kill(),
            }
        }
    }

    /// True while the local etcd process runs (always true for an external etcd).
    pub fn is_running(&mut self) -> bool {
        match &mut self.local {
            None => true,
            Some(l) => l.running(),
        }
    }

    fn local_mut(&mut self, what: &str) -> &mut Local {
        match &mut self.local {
            Some(l) => l,
            None => panic!("cannot {what} an external etcd ({ENDPOINTS_ENV} is set)"),
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        if let Some(l) = &mut self.local {
            l.kill();
        }
    }
}

impl Local {
    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let bin = std::env::var(BIN_ENV).unwrap_or_else(|_| "etcd".to_owned());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("open {}: {e}", self.log_path().display()))?;
        let log2 = log
            .try_clone()
            .map_err(|e| format!("clone log handle: {e}"))?;
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new(&bin)
            .arg("--name")
            .arg("zrpc-test")
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("zrpc-test={peer}"))
            .args(self.tls_args())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| {
                format!("spawn `{bin}` (install etcd or set {ENDPOINTS_ENV}/{BIN_ENV}): {e}")
            })?;
        self.child = Some(child);
        Ok(())
    }

    async fn wait_ready(&mut self) -> Result<(), String> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.client_port));
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if !self.running() {
                return Err(format!(
                    "etcd exited during start-up; see {}",
                    self.log_path().display()
                ));
            }
            if self.probe(addr).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "etcd not healthy on {addr} after {READY_TIMEOUT:?}; see {}",
                    self.log_path().display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn tls_args(&self) -> Vec<String> {
        match &self.tls {
            None => Vec::new(),
            Some(t) => vec![
                "--cert-file".into(),
                t.server_cert.display().to_string(),
                "--key-file".into(),
                t.server_key.display().to_string(),
                "--trusted-ca-file".into(),
                t.ca.display().to_string(),
                "--client-cert-auth".into(),
            ],
        }
    }

    async fn probe(&self, addr: SocketAddr) -> bool {
        let Some(t) = &self.tls else {
            return healthy(addr).await;
        };
        let mut conf = zrpc_core::conf::EtcdConf::new([addr.to_string()], "probe");
        conf.cert_file = t.cert.display().to_string();
        conf.cert_key_file = t.key.display().to_string();
        conf.ca_cert_file = t.ca.display().to_string();
        matches!(
            tokio::time::timeout(Duration::from_secs(1), zrpc_core::etcd::connect(&conf)).await,
            Ok(Ok(_))
        )
    }

    fn running(&mut self) -> bool {
        child_running(&mut self.child)
    }

    fn kill(&mut self) {
        kill_child(&mut self.child);
    }

    fn stop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        if let Some(mut child) = self.child.take() {
            let pid = Pid::from_raw(child.id() as i32);
            let _ = kill(pid, Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `GET /health` over plain HTTP/1.1 (etcd serves it on the client port).
async fn healthy(addr: SocketAddr) -> bool {
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        Some(String::from_utf8_lossy(&buf).contains("\"health\":\"true\""))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), probe).await,
        Ok(Some(true))
    )
}

/// A fresh directory for an etcd's data and log, in memory (`/dev/shm`) where the machine has
/// it, else in the temp dir. etcd preallocates 64 MiB for each WAL file and exits when a write
/// fails, so on a disk that other jobs fill the tests' etcds would be the first to go; in memory
/// they take no disk and their fsyncs cost nothing.
fn data_dir(prefix: &str) -> tempfile::TempDir {
    let in_memory = Path::new("/dev/shm");
    if in_memory.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(in_memory)
    {
        return dir;
    }
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("create a temp dir for etcd")
}

/// Whether a test that needs an etcd of its own can have one: always without [`ENDPOINTS_ENV`];
/// with it, when the `etcd` binary runs here (a note says the test uses its own etcd), else the
/// test skips (a note says why).
fn exclusive_available(test: &str, why: &str) -> bool {
    if external_endpoints().is_none() {
        return true;
    }
    static LOCAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let local = *LOCAL.get_or_init(|| {
        let bin = std::env::var(BIN_ENV).unwrap_or_else(|_| "etcd".to_owned());
        Command::new(bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if local {
        println!(
            "note: {test} runs on an etcd of its own beside the shared one ({ENDPOINTS_ENV}): it {why}"
        );
    } else {
        println!(
            "note: {test} skipped: it {why}, which a shared etcd ({ENDPOINTS_ENV}) cannot give it, \
             and no `etcd` binary is installed to start one of its own"
        );
    }
    local
}

fn external_endpoints() -> Option<Vec<String>> {
    let v = std::env::var(ENDPOINTS_ENV).ok()?;
    let eps: Vec<String> = v
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    (!eps.is_empty()).then_some(eps)
}

/// A key prefix unique to this process and call (`/zrpc-test/<name>/<pid>-<n>-<nanos>`), so tests
/// sharing one etcd never see each other's keys.
pub fn unique_key(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "zrpc-test/{name}/{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// All `(key, value)` pairs under `prefix/` (the go-zero layout `Key/<id>`), sorted by key.
///
/// # Panics
/// When etcd is not reachable.
pub async fn keys_under(client: &mut etcd_client::Client, prefix: &str) -> Vec<(String, String)> {
    let resp = client
        .get(
            format!("{prefix}/"),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap_or_else(|e| panic!("get prefix {prefix}/: {e}"));
    let mut out: Vec<(String, String)> = resp
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Path of the etcd log, for messages (`"<external>"` for an external etcd).
pub fn describe_log(path: Option<&Path>) -> String {
    path.map(|p| p.display().to_string())
        .unwrap_or_else(|| "<external>".to_owned())
}

/// A TCP proxy in front of etcd whose link can be cut, to simulate a network partition while etcd
/// keeps running (so leases expire on the etcd side, unlike a restart, which refreshes them).
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    state: std::sync::Arc<ProxyState>,
    accept_task: tokio::task::JoinHandle<()>,
}

#[derive(Debug, Default)]
struct ProxyState {
    cut: std::sync::atomic::AtomicBool,
    conns: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(upstream: String) -> TcpProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy port");
        let addr = listener.local_addr().expect("proxy address");
        let state = std::sync::Arc::new(ProxyState::default());
        let st = state.clone();
        let accept_task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if st.cut.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let upstream = upstream.clone();
                let conn = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                let mut conns = st.conns.lock().unwrap_or_else(|e| e.into_inner());
                conns.retain(|c| !c.is_finished());
                conns.push(conn);
            }
        });
        TcpProxy {
            addr,
            state,
            accept_task,
        }
    }

    /// The proxy's `127.0.0.1:port`.
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// Cuts the link: open connections are dropped, new ones are closed at once.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        let conns =
            std::mem::take(&mut *self.state.conns.lock().unwrap_or_else(|e| e.into_inner()));
        for c in conns {
            c.abort();
        }
    }

    /// Like [`TcpProxy::cut`], and returns once every forwarded connection is closed: nothing
    /// written after it reaches the other side.
    pub async fn cut_and_wait(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        let conns =
            std::mem::take(&mut *self.state.conns.lock().unwrap_or_else(|e| e.into_inner()));
        for c in &conns {
            c.abort();
        }
        for c in conns {
            // Err(cancelled) once the task and its two sockets are dropped
            let _ = c.await;
        }
    }

    /// Restores the link for new connections.
    pub fn heal(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept_task.abort();
    }
}

/// Makes a CA, a server certificate for 127.0.0.1/localhost and a client certificate in `dir`.
fn make_certs(dir: &Path) -> TlsFiles {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| panic!("run openssl (needed for the TLS etcd test): {e}"));
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let key = |name: &str| {
        run(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            name,
        ])
    };
    key("ca.key");
    run(&[
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-subj",
        "/CN=zrpc-test-ca",
        "-days",
        "2",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-out",
        "ca.pem",
    ]);
    for (name, usage) in [
        ("server", "serverAuth,clientAuth"),
        ("client", "clientAuth"),
    ] {
        key(&format!("{name}.key"));
        run(&[
            "req",
            "-new",
            "-key",
            &format!("{name}.key"),
            "-subj",
            &format!("/CN={name}"),
            "-out",
            &format!("{name}.csr"),
        ]);
        let ext = format!(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage={usage}\n"
        );
        std::fs::write(dir.join(format!("{name}.ext")), ext).expect("write ext file");
        run(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }
    TlsFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join("client.pem"),
        key: dir.join("client.key"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
    }
}

/// An n-member etcd cluster on loopback, started for one test (see the module docs).
#[derive(Debug)]
pub struct EtcdCluster {
    endpoints: Vec<String>,
    members: Vec<Member>,
    // Held for its Drop (removes every member's data dir and log).
    _dir: Option<tempfile::TempDir>,
}

#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    initial_cluster: String,
    token: String,
    data_dir: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
}

impl EtcdCluster {
    /// Starts an `n`-member cluster and waits until every member is healthy and the cluster
    /// version is decided (>= 3.4).
    ///
    /// # Panics
    /// When `n` is 0, or the cluster does not become ready in 20 s (3 attempts on fresh ports).
    pub async fn start(n: usize) -> EtcdCluster {
        assert!(n > 0, "a cluster needs at least one member");
        if let Some(endpoints) = external_endpoints() {
            return EtcdCluster {
                endpoints,
                members: Vec::new(),
                _dir: None,
            };
        }
        Self::start_local(n).await
    }

    /// A cluster of this test's own even when [`ENDPOINTS_ENV`] names a shared etcd, like
    /// [`EtcdServer::start_exclusive`]: for a test that kills members or changes membership.
    ///
    /// # Panics
    /// As [`EtcdCluster::start`].
    pub async fn start_exclusive(n: usize, test: &str, why: &str) -> Option<EtcdCluster> {
        assert!(n > 0, "a cluster needs at least one member");
        if !exclusive_available(test, why) {
            return None;
        }
        Some(Self::start_local(n).await)
    }

    async fn start_local(n: usize) -> EtcdCluster {
        static TOKENS: AtomicU64 = AtomicU64::new(0);
        let mut last_err = String::new();
        for _ in 0..3 {
            let dir = data_dir("zrpc-etcd-cluster-");
            let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
            let initial_cluster = ports
                .iter()
                .enumerate()
                .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
                .collect::<Vec<_>>()
                .join(",");
            let token = format!(
                "zrpc-test-{}-{}",
                std::process::id(),
                TOKENS.fetch_add(1, Ordering::Relaxed)
            );
            let mut members: Vec<Member> = ports
                .iter()
                .enumerate()
                .map(|(i, &(client_port, peer_port))| Member {
                    name: format!("m{i}"),
                    client_port,
                    peer_port,
                    initial_cluster: initial_cluster.clone(),
                    token: token.clone(),
                    data_dir: dir.path().join(format!("m{i}.data")),
                    log_path: dir.path().join(format!("m{i}.log")),
                    child: None,
                })
                .collect();
            let spawned: Result<(), String> = members.iter_mut().try_for_each(Member::spawn);
            let ready = match spawned {
                Ok(()) => wait_members_ready(&mut members).await,
                Err(e) => Err(e),
            };
            match ready {
                Ok(()) => {
                    let endpoints = members
                        .iter()
                        .map(|m| format!("127.0.0.1:{}", m.client_port))
                        .collect();
                    return EtcdCluster {
                        endpoints,
                        members,
                        _dir: Some(dir),
                    };
                }
                Err(e) => {
                    last_err = e;
                    for m in &mut members {
                        m.kill();
                    }
                }
            }
        }
        panic!("could not start a {n}-member etcd cluster: {last_err}");
    }

    /// True when the cluster is an external etcd (`ZRPC_TEST_ETCD_ENDPOINTS`).
    pub fn is_external(&self) -> bool {
        self.members.is_empty()
    }

    /// The client endpoints of every member (`127.0.0.1:port`), in member order.
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints.clone()
    }

    /// The first `n` client endpoints (all of them if there are fewer).
    pub fn hosts(&self, n: usize) -> Vec<String> {
        self.endpoints.iter().take(n).cloned().collect()
    }

    /// An `EtcdConf` with every member as a host and `key`.
    pub fn etcd_conf(&self, key: &str) -> zrpc_core::conf::EtcdConf {
        zrpc_core::conf::EtcdConf::new(self.endpoints.clone(), key)
    }

    /// The log files of the members (for failure messages).
    pub fn log_paths(&self) -> Vec<PathBuf> {
        self.members.iter().map(|m| m.log_path.clone()).collect()
    }

    /// A plain etcd client over every member (3 s request timeout).
    ///
    /// # Panics
    /// When no member is reachable.
    pub async fn client(&self) -> etcd_client::Client {
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(3))
            .with_keep_alive_while_idle(false);
        etcd_client::Client::connect(&self.endpoints, Some(options))
            .await
            .unwrap_or_else(|e| panic!("connect to etcd cluster {:?}: {e}", self.endpoints))
    }

    /// Kills member `i` with SIGKILL and waits for the process to exit. The others keep a quorum
    /// as long as a majority runs.
    ///
    /// # Panics
    /// For an external etcd or an unknown member.
    pub fn kill_member(&mut self, i: usize) {
        self.member_mut(i, "kill").kill();
    }

    /// Starts member `i` again on its data dir and ports and waits until it is healthy (20 s).
    /// Returns the instant it was seen healthy.
    ///
    /// # Panics
    /// For an external etcd or an unknown member, or when it does not come back.
    pub async fn restart_member(&mut self, i: usize) -> Instant {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let m = self.member_mut(i, "restart");
            m.kill();
            if let Err(e) = m.spawn() {
                panic!("restart etcd member {i}: {e}");
            }
            match wait_members_ready(std::slice::from_mut(m)).await {
                Ok(()) => return Instant::now(),
                Err(e) if Instant::now() > deadline => panic!("restart etcd member {i}: {e}"),
                // The ports were just released by the killed process; etcd may fail to bind.
                Err(_) => {}
            }
        }
    }

    /// The index of the member that is leader now, asked over each running member's
    /// `/metrics` (`etcd_server_is_leader 1`); `None` while there is none (no quorum, an
    /// election) or for an external etcd.
    pub async fn leader(&mut self) -> Option<usize> {
        for i in 0..self.members.len() {
            if !self.members[i].running() {
                continue;
            }
            let addr = SocketAddr::from(([127, 0, 0, 1], self.members[i].client_port));
            // HTTP/1.0: no chunked encoding to split a line
            let probe = async {
                let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
                s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.ok()?;
                let mut buf = Vec::new();
                s.read_to_end(&mut buf).await.ok()?;
                Some(String::from_utf8_lossy(&buf).into_owned())
            };
            let metrics = tokio::time::timeout(Duration::from_secs(2), probe)
                .await
                .ok()
                .flatten()
                .unwrap_or_default();
            if metrics
                .lines()
                .any(|l| l.trim() == "etcd_server_is_leader 1")
            {
                return Some(i);
            }
        }
        None
    }

    /// Waits up to `limit` for a leader among the running members; returns its index.
    pub async fn wait_leader(&mut self, limit: Duration) -> Option<usize> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(i) = self.leader().await {
                return Some(i);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// True while member `i` runs (always true for an external etcd).
    pub fn is_member_running(&mut self, i: usize) -> bool {
        if self.is_external() {
            return true;
        }
        self.member_mut(i, "inspect").running()
    }

    fn member_mut(&mut self, i: usize, what: &str) -> &mut Member {
        assert!(
            !self.members.is_empty(),
            "cannot {what} a member of an external etcd ({ENDPOINTS_ENV} is set)"
        );
        let n = self.members.len();
        self.members
            .get_mut(i)
            .unwrap_or_else(|| panic!("no etcd member {i} (cluster of {n})"))
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            m.kill();
        }
    }
}

impl Member {
    fn spawn(&mut self) -> Result<(), String> {
        let bin = std::env::var(BIN_ENV).unwrap_or_else(|_| "etcd".to_owned());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("open {}: {e}", self.log_path.display()))?;
        let log2 = log
            .try_clone()
            .map_err(|e| format!("clone log handle: {e}"))?;
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new(&bin)
            .arg("--name")
            .arg(&self.name)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| {
                format!("spawn `{bin}` (install etcd or set {ENDPOINTS_ENV}/{BIN_ENV}): {e}")
            })?;
        self.child = Some(child);
        Ok(())
    }

    fn running(&mut self) -> bool {
        child_running(&mut self.child)
    }

    fn kill(&mut self) {
        kill_child(&mut self.child);
    }
}

/// Waits (20 s) until every member answers `/health` true and `/version` shows a decided
/// cluster version >= 3.4.
async fn wait_members_ready(members: &mut [Member]) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let mut pending = None;
        for m in members.iter_mut() {
            if !m.running() {
                return Err(format!(
                    "etcd member {} exited during start-up; see {}",
                    m.name,
                    m.log_path.display()
                ));
            }
            let addr = SocketAddr::from(([127, 0, 0, 1], m.client_port));
            if !healthy(addr).await {
                pending = Some(format!("member {} not healthy on {addr}", m.name));
                break;
            }
            let version = get_text(addr, "/version").await.unwrap_or_default();
            if !cluster_version_at_least_3_4(&version) {
                pending = Some(format!(
                    "member {} reports cluster version {version:?} on {addr}",
                    m.name
                ));
                break;
            }
        }
        let Some(why) = pending else {
            return Ok(());
        };
        if Instant::now() > deadline {
            let logs: Vec<String> = members
                .iter()
                .map(|m| m.log_path.display().to_string())
                .collect();
            return Err(format!(
                "{why} after {READY_TIMEOUT:?}; see {}",
                logs.join(", ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// True when an etcd `/version` body (`{"etcdserver":"3.4.23","etcdcluster":"3.4.0"}`) shows a
/// cluster version >= 3.4.
fn cluster_version_at_least_3_4(body: &str) -> bool {
    let Some(rest) = body.split("\"etcdcluster\":\"").nth(1) else {
        return false;
    };
    let version = rest.split('"').next().unwrap_or("");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (3, 4),
        _ => false,
    }
}

/// Waits until `endpoint`'s `/version` shows a decided cluster version >= 3.4 (go-zero's client
/// needs it; see the module docs). Returns false after `limit`.
pub async fn wait_cluster_version(endpoint: &str, limit: Duration) -> bool {
    let Ok(addr) = endpoint.parse::<SocketAddr>() else {
        return false;
    };
    let deadline = Instant::now() + limit;
    loop {
        let body = get_text(addr, "/version").await.unwrap_or_default();
        if cluster_version_at_least_3_4(&body) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A plain HTTP/1.1 GET on etcd's client port; the body (with headers) as text.
async fn get_text(addr: SocketAddr, path: &str) -> Option<String> {
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        Some(String::from_utf8_lossy(&buf).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(1), probe)
        .await
        .ok()
        .flatten()
}

/// Whether the child in `slot` is still running.
fn child_running(slot: &mut Option<Child>) -> bool {
    slot.as_mut()
        .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
}

/// SIGKILLs and reaps the child in `slot`, if any.
fn kill_child(slot: &mut Option<Child>) {
    if let Some(mut child) = slot.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[cfg(test)]
mod cluster_tests {
    use super::cluster_version_at_least_3_4 as ok;

    #[test]
    fn cluster_version_gate() {
        assert!(ok(r#"{"etcdserver":"3.4.23","etcdcluster":"3.4.0"}"#));
        assert!(ok(r#"{"etcdserver":"3.5.21","etcdcluster":"3.5.0"}"#));
        assert!(!ok(r#"{"etcdserver":"3.4.23","etcdcluster":"3.0.0"}"#));
        assert!(!ok(
            r#"{"etcdserver":"3.4.23","etcdcluster":"not_decided"}"#
        ));
        assert!(!ok(""));
    }
}
