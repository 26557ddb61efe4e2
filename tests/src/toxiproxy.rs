//! Network faults between real processes: Shopify's Toxiproxy in front of servers and etcd.
//!
//! # How the tests run it
//!
//! [`Toxiproxy::start`] runs `interop/toxiproxy/bin/toxiproxy-server` (v2.12.0, built once per
//! test process by `interop/toxiproxy/build.sh` from the committed go.mod/go.sum, as the go-zero
//! programs are) with its HTTP API on a free loopback port, and returns once `GET /version`
//! answers. Its log goes to a temp file (named in the panics). Dropping the value kills it (and
//! with it every proxy and connection). Without Go and without a built binary, `start` returns
//! None and prints why, so the test returns early ([`crate::toxiproxy_or_skip!`]); with
//! `CI=true` that is a panic.
//!
//! [`Toxiproxy::proxy`] creates a proxy listening on `127.0.0.1:<free port>` in front of an
//! upstream `host:port`; the test gives [`Proxy::endpoint`] to the client (or the server's etcd
//! config) instead of the upstream. [`Proxy::add`] puts a [`Toxic`] on the link, and Toxiproxy
//! applies it to the connections already open as well as to new ones; [`Proxy::remove`] takes
//! it off. The API is spoken with plain HTTP/1.1 requests (`Connection: close`) on loopback, as
//! the etcd harness probes etcd: one request per change, no client library needed.
//!
//! # What a toxic does (Toxiproxy v2.12.0)
//!
//! A toxic acts on one direction of every connection of its proxy: `downstream` (upstream to
//! client, the default) or `upstream` (client to upstream); [`Proxy::add_both`] puts one on
//! each. So a toxic hits every HTTP/2 stream multiplexed on a connection at once; a per-call
//! fault needs a server-side behaviour instead (the greeter's `sleep:`/`fail:` directives).
//!
//! - `latency` (+ `jitter`): each chunk of bytes is delayed;
//! - `timeout` 0 (a blackhole): bytes are dropped, the connection stays open, nothing is closed;
//!   taken off, bytes flow again but those dropped meanwhile are lost (an HTTP/2 peer then sees
//!   a broken frame stream);
//! - `timeout` n: the same, and the connection is closed after n ms;
//! - `reset_peer` n: n ms after the next bytes the connection is closed, with a TCP RST on
//!   connections opened after the toxic was added (on older ones Toxiproxy can only close);
//! - `limit_data` n: the connection is closed once n bytes passed (counted from when the toxic
//!   met the connection), cutting whatever message is under way;
//! - `slicer`: bytes are passed in pieces of about `average_size` bytes, `delay` µs apart;
//! - `bandwidth`: at most `rate` KB/s.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::gobuild::repo_root;
use crate::ports::free_port;

/// How long [`Toxiproxy::start`] waits for the API to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Returns a started [`Toxiproxy`], or from the enclosing test when it is not available (see
/// [`Toxiproxy::start`]).
#[macro_export]
macro_rules! toxiproxy_or_skip {
    () => {
        match $crate::toxiproxy::Toxiproxy::start().await {
            Some(t) => t,
            None => return,
        }
    };
}

/// `interop/toxiproxy/bin/toxiproxy-server`, built once per test process (None without Go).
fn binary() -> Option<PathBuf> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = repo_root().join("interop").join("toxiproxy");
        let bin = dir.join("bin").join("toxiproxy-server");
        crate::gobuild::build("Toxiproxy", &dir, std::slice::from_ref(&bin)).then_some(bin)
    })
    .clone()
}

/// A running `toxiproxy-server`, killed on drop.
#[derive(Debug)]
pub struct Toxiproxy {
    api: SocketAddr,
    child: Child,
    log: PathBuf,
    // Held for its Drop (removes the log).
    _dir: tempfile::TempDir,
}

impl Toxiproxy {
    /// Starts Toxiproxy with its API on a free loopback port and waits until it answers.
    /// None when it is not available (no Go and no built binary; printed once).
    ///
    /// # Panics
    /// When it cannot be built or started, does not answer within 10 s, or Go is missing and
    /// `CI=true`.
    pub async fn start() -> Option<Toxiproxy> {
        let bin = binary()?;
        let mut last_err = String::new();
        // The free port is found by binding :0 and releasing it; another process may take it
        // in between, so a failed start is retried on a fresh one.
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("zrpc-toxiproxy-")
                .tempdir()
                .expect("temp dir for toxiproxy");
            let log = dir.path().join("toxiproxy.log");
            let out = std::fs::File::create(&log).expect("create the toxiproxy log");
            let err = out.try_clone().expect("clone the log handle");
            let port = free_port();
            let child = Command::new(&bin)
                .args(["-host", "127.0.0.1", "-port", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
            let mut t = Toxiproxy {
                api: SocketAddr::from(([127, 0, 0, 1], port)),
                child,
                log,
                _dir: dir,
            };
            match t.wait_ready().await {
                Ok(()) => return Some(t),
                Err(e) => last_err = e,
            }
        }
        panic!("could not start toxiproxy: {last_err}");
    }

    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "toxiproxy exited ({status}); see {}",
                    self.log.display()
                ));
            }
            if let Ok((200, _)) = request(self.api, "GET", "/version", None).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "toxiproxy API not answering on {} after {READY_TIMEOUT:?}; see {}",
                    self.api,
                    self.log.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Creates the proxy `name` on `127.0.0.1:<free port>` in front of `upstream` (`host:port`).
    ///
    /// # Panics
    /// When Toxiproxy refuses it.
    pub async fn proxy(&self, name: &str, upstream: &str) -> Proxy {
        let body = json!({ "name": name, "listen": "127.0.0.1:0", "upstream": upstream });
        let created = call(self.api, "POST", "/proxies", Some(body), 201).await;
        let listen = created["listen"]
            .as_str()
            .and_then(|l| l.parse().ok())
            .unwrap_or_else(|| {
                panic!("toxiproxy: proxy {name} without a listen address: {created}")
            });
        Proxy {
            api: self.api,
            name: name.to_owned(),
            listen,
        }
    }

    /// The log file (for failure messages).
    pub fn log_path(&self) -> &std::path::Path {
        &self.log
    }
}

impl Drop for Toxiproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One proxy of a [`Toxiproxy`].
#[derive(Debug, Clone)]
pub struct Proxy {
    api: SocketAddr,
    name: String,
    listen: SocketAddr,
}

impl Proxy {
    /// Where clients connect: `127.0.0.1:port`.
    pub fn endpoint(&self) -> String {
        self.listen.to_string()
    }

    /// The proxy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Puts `toxic` on the link (open connections included); returns its name, for
    /// [`Proxy::remove`].
    ///
    /// # Panics
    /// When Toxiproxy refuses it.
    pub async fn add(&self, toxic: Toxic) -> String {
        let path = format!("/proxies/{}/toxics", self.name);
        let name = toxic.name();
        call(self.api, "POST", &path, Some(toxic.to_json()), 200).await;
        name
    }

    /// Puts `toxic` on both directions; returns the two names.
    pub async fn add_both(&self, toxic: Toxic) -> [String; 2] {
        [
            self.add(toxic.clone().stream(Stream::Upstream)).await,
            self.add(toxic.stream(Stream::Downstream)).await,
        ]
    }

    /// Takes the toxic `name` off.
    ///
    /// # Panics
    /// When Toxiproxy does not know it.
    pub async fn remove(&self, name: &str) {
        let path = format!("/proxies/{}/toxics/{name}", self.name);
        call(self.api, "DELETE", &path, None, 204).await;
    }

    /// Takes every toxic off.
    pub async fn clear(&self) {
        let path = format!("/proxies/{}/toxics", self.name);
        let toxics = call(self.api, "GET", &path, None, 200).await;
        for t in toxics.as_array().into_iter().flatten() {
            if let Some(name) = t["name"].as_str() {
                self.remove(name).await;
            }
        }
    }

    /// Disables the proxy (every connection closed, the port refused) or enables it again on
    /// the same port.
    pub async fn set_enabled(&self, enabled: bool) {
        let path = format!("/proxies/{}", self.name);
        call(
            self.api,
            "POST",
            &path,
            Some(json!({ "enabled": enabled })),
            200,
        )
        .await;
    }
}

/// A direction of a proxy's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Client to upstream (requests).
    Upstream,
    /// Upstream to client (responses): Toxiproxy's default.
    Downstream,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
        }
    }
}

/// A Toxiproxy toxic (see the module docs for what each does).
#[derive(Debug, Clone)]
pub struct Toxic {
    kind: &'static str,
    stream: Stream,
    attributes: Value,
}

impl Toxic {
    fn new(kind: &'static str, attributes: Value) -> Toxic {
        Toxic {
            kind,
            stream: Stream::Downstream,
            attributes,
        }
    }

    /// `latency`: each chunk delayed by `latency` ± `jitter`.
    pub fn latency(latency: Duration, jitter: Duration) -> Toxic {
        Toxic::new(
            "latency",
            json!({ "latency": latency.as_millis() as u64, "jitter": jitter.as_millis() as u64 }),
        )
    }

    /// `timeout` 0: bytes dropped, the connection left open.
    pub fn blackhole() -> Toxic {
        Toxic::new("timeout", json!({ "timeout": 0 }))
    }

    /// `reset_peer`: the connection closed (RST) `after` the next bytes.
    pub fn reset_peer(after: Duration) -> Toxic {
        Toxic::new("reset_peer", json!({ "timeout": after.as_millis() as u64 }))
    }

    /// `limit_data`: the connection closed after `bytes` bytes.
    pub fn limit_data(bytes: u64) -> Toxic {
        Toxic::new("limit_data", json!({ "bytes": bytes }))
    }

    /// `slicer`: pieces of `average` ± `variation` bytes, `delay` apart (µs resolution).
    pub fn slicer(average: u32, variation: u32, delay: Duration) -> Toxic {
        Toxic::new(
            "slicer",
            json!({
                "average_size": average,
                "size_variation": variation,
                "delay": delay.as_micros() as u64,
            }),
        )
    }

    /// `bandwidth`: at most `kb_per_s` KB (1024 bytes) per second.
    pub fn bandwidth(kb_per_s: u64) -> Toxic {
        Toxic::new("bandwidth", json!({ "rate": kb_per_s }))
    }

    /// The direction it acts on (default: downstream, upstream to client).
    #[must_use]
    pub fn stream(mut self, stream: Stream) -> Toxic {
        self.stream = stream;
        self
    }

    /// `<kind>_<stream>`: one toxic of a kind per direction and proxy.
    pub fn name(&self) -> String {
        format!("{}_{}", self.kind, self.stream.as_str())
    }

    fn to_json(&self) -> Value {
        json!({
            "name": self.name(),
            "type": self.kind,
            "stream": self.stream.as_str(),
            "toxicity": 1.0,
            "attributes": self.attributes,
        })
    }
}

/// One API request that must answer `expect`; the JSON body of the answer.
async fn call(
    api: SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
    expect: u16,
) -> Value {
    match request(api, method, path, body.as_ref()).await {
        Ok((status, text)) if status == expect => {
            serde_json::from_str(&text).unwrap_or(Value::Null)
        }
        Ok((status, text)) => panic!("toxiproxy {method} {path}: HTTP {status}: {text}"),
        Err(e) => panic!("toxiproxy {method} {path}: {e}"),
    }
}

/// A plain HTTP/1.1 request with `Connection: close`: (status, body).
async fn request(
    api: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<(u16, String)> {
    let body = body.map(Value::to_string).unwrap_or_default();
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(api).await?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await?;
        s.write_all(body.as_bytes()).await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(crate::greeter::parse_http_response(&raw))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| std::io::Error::other("no answer within 5 s"))?
}
