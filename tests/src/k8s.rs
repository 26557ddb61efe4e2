//! A fake Kubernetes API server for the `k8s://` resolver tests (no real API server can run here).
//! Plain HTTP ([`FakeKubeApi::start`]) or TLS ([`FakeKubeApi::start_tls`], a certificate from
//! `crate::certs`).
//!
//! It serves only what discovery uses, over plain HTTP/1.1 on `127.0.0.1:0`, one request per
//! connection:
//! - `GET /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=kubernetes.io/service-name={svc}`:
//!   an `EndpointSliceList` of the matching slices with the current `resourceVersion`;
//! - the same with `watch=1&resourceVersion=N`: a chunked stream of JSON lines (`ADDED`,
//!   `MODIFIED`, `DELETED`, `BOOKMARK` when `allowWatchBookmarks=true`), replaying every change
//!   after `N` and then live ones; from a compacted `N`, an `ERROR` event with a 410 `Status`
//!   (as the real API server answers a watch whose version is too old);
//! - bearer-token auth (401 with a `Status` body), a 403 switch, and an outage switch (every
//!   connection closed at once, live watches cut);
//! - faults: end every live watch (the server's `timeoutSeconds`, an API restart), expire them
//!   with 410, and split every event line over two chunks (to prove line reassembly).
//!
//! Every request is logged (list or watch, its `resourceVersion`, its `Authorization`) so that
//! the tests can assert resume-without-relist and one relist per 410.
//!
//! The HTTP is written by hand rather than with hyper's server: the tests need exact control
//! of the wire (chunk boundaries inside a JSON line, a stream cut mid-way).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// One endpoint of a fake slice.
#[derive(Debug, Clone)]
pub struct Ep {
    /// The address (an IP, or `127.0.0.1` in tests that dial it).
    pub ip: String,
    /// `conditions.ready` (`None`: absent).
    pub ready: Option<bool>,
    /// `conditions.terminating` (`None`: absent).
    pub terminating: Option<bool>,
}

impl Ep {
    /// A ready endpoint.
    pub fn ready(ip: &str) -> Ep {
        Ep {
            ip: ip.into(),
            ready: Some(true),
            terminating: Some(false),
        }
    }
    /// A not-ready endpoint (starting, or failing its readiness probe).
    pub fn not_ready(ip: &str) -> Ep {
        Ep {
            ready: Some(false),
            ..Ep::ready(ip)
        }
    }
    /// A terminating endpoint still marked ready (`publishNotReadyAddresses`).
    pub fn terminating(ip: &str) -> Ep {
        Ep {
            terminating: Some(true),
            ..Ep::ready(ip)
        }
    }
}

/// A request the fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    /// `true` for a watch, `false` for a list.
    pub watch: bool,
    /// The `resourceVersion` parameter (watches).
    pub resource_version: Option<String>,
    /// The label selector, decoded.
    pub selector: String,
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// The status answered.
    pub status: u16,
}

#[derive(Debug)]
enum Entry {
    /// A change to a slice (replayed to watches from an older version).
    Change {
        rv: u64,
        ns: String,
        service: String,
        kind: &'static str,
        object: Value,
    },
    /// A bookmark at `rv` (live watches only).
    Bookmark(u64),
    /// End the live watches.
    Close,
    /// Send the live watches an `ERROR` 410 and end them.
    Expire,
}

#[derive(Debug, Default)]
struct State {
    rv: u64,
    /// (namespace, name) -> (service, object)
    slices: BTreeMap<(String, String), (String, Value)>,
    log: Vec<Entry>,
    /// Watches from a version below this get 410.
    compacted: u64,
    token: Option<String>,
    forbidden: bool,
    down: bool,
    /// Every watch gets an `ERROR` 410 at once, whatever its version.
    always_expired: bool,
    split_chunks: bool,
    requests: Vec<Logged>,
}

/// The fake API server; stops when dropped.
#[derive(Debug)]
pub struct FakeKubeApi {
    addr: SocketAddr,
    tls: bool,
    state: Arc<Mutex<State>>,
    wake: watch::Sender<u64>,
    task: tokio::task::AbortHandle,
}

impl Drop for FakeKubeApi {
    fn drop(&mut self) {
        self.task.abort();
        // live watches see the channel close and end
        self.wake.send_modify(|g| *g += 1);
    }
}

impl FakeKubeApi {
    /// Starts the fake; with `token`, every request must carry `Authorization: Bearer <token>`.
    pub async fn start(token: Option<&str>) -> FakeKubeApi {
        FakeKubeApi::start_with(token, None).await
    }

    /// Like [`FakeKubeApi::start`], over TLS with `cert` (a real API server is https only).
    pub async fn start_tls(token: Option<&str>, cert: &crate::certs::CertFiles) -> FakeKubeApi {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_file_iter(&cert.cert)
            .expect("read the fake API certificate")
            .collect::<Result<Vec<_>, _>>()
            .expect("parse the fake API certificate");
        let key = PrivateKeyDer::from_pem_file(&cert.key).expect("read the fake API key");
        // ring, as zrpc's own TLS (deprecated by rustls 0.23.48: no post-quantum key exchange)
        #[allow(deprecated)]
        let provider = rustls::crypto::ring::default_provider();
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("fake API certificate and key");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        FakeKubeApi::start_with(
            token,
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
        )
        .await
    }

    async fn start_with(
        token: Option<&str>,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> FakeKubeApi {
        let is_tls = tls.is_some();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake API");
        let addr = listener.local_addr().expect("fake API address");
        let state = Arc::new(Mutex::new(State {
            rv: 100,
            token: token.map(str::to_owned),
            ..State::default()
        }));
        let (wake, _) = watch::channel(0u64);
        let task = {
            let state = state.clone();
            let wake = wake.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let state = state.clone();
                    let wake = wake.subscribe();
                    let tls = tls.clone();
                    tokio::spawn(async move {
                        match tls {
                            Some(tls) => {
                                if let Ok(stream) = tls.accept(stream).await {
                                    let _ = serve(stream, state, wake).await;
                                }
                            }
                            None => {
                                let _ = serve(stream, state, wake).await;
                            }
                        }
                    });
                }
            })
            .abort_handle()
        };
        FakeKubeApi {
            addr,
            tls: is_tls,
            state,
            wake,
            task,
        }
    }

    /// `http://127.0.0.1:port` (`https://` when started with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The current resource version.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Creates or replaces slice `name` of `service` in `ns` (an `ADDED` or `MODIFIED` event).
    /// `ports` are `(name, port)` pairs, all TCP.
    pub fn put_slice(
        &self,
        ns: &str,
        service: &str,
        name: &str,
        eps: &[Ep],
        ports: &[(&str, u16)],
    ) {
        let mut st = self.lock();
        st.rv += 1;
        let rv = st.rv;
        let object = slice_json(ns, service, name, rv, eps, ports);
        let key = (ns.to_owned(), name.to_owned());
        let kind = if st.slices.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        st.slices.insert(key, (service.to_owned(), object.clone()));
        st.log.push(Entry::Change {
            rv,
            ns: ns.into(),
            service: service.into(),
            kind,
            object,
        });
        drop(st);
        self.wake();
    }

    /// Deletes slice `name` in `ns` (a `DELETED` event). Returns whether it existed.
    pub fn delete_slice(&self, ns: &str, name: &str) -> bool {
        let mut st = self.lock();
        let Some((service, mut object)) = st.slices.remove(&(ns.to_owned(), name.to_owned()))
        else {
            return false;
        };
        st.rv += 1;
        let rv = st.rv;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        st.log.push(Entry::Change {
            rv,
            ns: ns.into(),
            service,
            kind: "DELETED",
            object,
        });
        drop(st);
        self.wake();
        true
    }

    /// Advances the resource version (other objects changed) and sends live watches a bookmark.
    pub fn bookmark(&self, advance: u64) -> u64 {
        let mut st = self.lock();
        st.rv += advance;
        let rv = st.rv;
        st.log.push(Entry::Bookmark(rv));
        drop(st);
        self.wake();
        rv
    }

    /// Ends every live watch cleanly (as the server's `timeoutSeconds` or a restart does).
    pub fn close_watches(&self) {
        self.lock().log.push(Entry::Close);
        self.wake();
    }

    /// Compacts history up to now: live watches get an `ERROR` 410 and end; later watches from
    /// an older version get the same.
    pub fn compact_and_expire(&self) {
        let mut st = self.lock();
        st.compacted = st.rv;
        st.log.push(Entry::Expire);
        drop(st);
        self.wake();
    }

    /// While `down`, every connection is closed at once and live watches are cut.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
        if down {
            self.close_watches();
        }
    }

    /// While `expired`, every watch is answered with an `ERROR` 410 at once, even from the
    /// version a list just gave (an API server whose watch cache lags its lists).
    pub fn set_always_expired(&self, expired: bool) {
        self.lock().always_expired = expired;
    }

    /// While `forbidden`, every request gets 403 (missing RBAC).
    pub fn set_forbidden(&self, forbidden: bool) {
        self.lock().forbidden = forbidden;
    }

    /// Changes the accepted token (a rotation).
    pub fn set_token(&self, token: Option<&str>) {
        self.lock().token = token.map(str::to_owned);
    }

    /// Writes every event line in two chunks, split in the middle of the JSON.
    pub fn set_split_chunks(&self, split: bool) {
        self.lock().split_chunks = split;
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.lock().requests.clone()
    }

    /// The number of successful lists so far.
    pub fn lists(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| !r.watch && r.status == 200)
            .count()
    }

    /// The watches so far.
    pub fn watches(&self) -> Vec<Logged> {
        self.requests().into_iter().filter(|r| r.watch).collect()
    }

    fn wake(&self) {
        self.wake.send_modify(|g| *g += 1);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn slice_json(
    ns: &str,
    service: &str,
    name: &str,
    rv: u64,
    eps: &[Ep],
    ports: &[(&str, u16)],
) -> Value {
    let endpoints: Vec<Value> = eps
        .iter()
        .map(|e| {
            let mut conditions = serde_json::Map::new();
            if let Some(r) = e.ready {
                conditions.insert("ready".into(), json!(r));
                conditions.insert("serving".into(), json!(r));
            }
            if let Some(t) = e.terminating {
                conditions.insert("terminating".into(), json!(t));
            }
            json!({"addresses": [e.ip], "conditions": conditions, "nodeName": "node-1"})
        })
        .collect();
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p)| json!({"name": n, "port": p, "protocol": "TCP", "appProtocol": "grpc"}))
        .collect();
    json!({
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {
            "name": name,
            "namespace": ns,
            "resourceVersion": rv.to_string(),
            "labels": {"kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
            "ownerReferences": [{"kind": "Service", "name": service}],
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports,
    })
}

struct Query {
    ns: String,
    service: String,
    selector: String,
    watch: bool,
    rv: Option<u64>,
    rv_text: Option<String>,
    bookmarks: bool,
}

fn parse_target(target: &str) -> Option<Query> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let ns = path
        .strip_prefix("/apis/discovery.k8s.io/v1/namespaces/")?
        .strip_suffix("/endpointslices")?;
    let mut q = Query {
        ns: ns.to_owned(),
        service: String::new(),
        selector: String::new(),
        watch: false,
        rv: None,
        rv_text: None,
        bookmarks: false,
    };
    for kv in query.split('&') {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let v = percent_decode(v);
        match k {
            "labelSelector" => {
                q.service = v.strip_prefix("kubernetes.io/service-name=")?.to_owned();
                q.selector = v;
            }
            "watch" => q.watch = v == "1" || v == "true",
            "resourceVersion" => {
                q.rv = v.parse().ok();
                q.rv_text = Some(v);
            }
            "allowWatchBookmarks" => q.bookmarks = v == "true",
            _ => {}
        }
    }
    Some(q)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(h) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(h);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    state: Arc<Mutex<State>>,
    mut wake: watch::Receiver<u64>,
) -> std::io::Result<()> {
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    if lock().down {
        return Ok(());
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || buf.len() > 64 << 10 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let target = request_line.split(' ').nth(1).unwrap_or("");
    let authorization = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.trim().to_owned());
    let query = parse_target(target);
    let (status, body) = {
        let st = lock();
        let expected = st.token.as_ref().map(|t| format!("Bearer {t}"));
        if expected.is_some() && authorization != expected {
            (401, status_json(401, "Unauthorized", "Unauthorized"))
        } else if st.forbidden {
            let ns = query.as_ref().map_or("", |q| q.ns.as_str());
            (
                403,
                status_json(
                    403,
                    "Forbidden",
                    &format!(
                        "endpointslices.discovery.k8s.io is forbidden: User \"system:serviceaccount:{ns}:default\" cannot list resource \"endpointslices\" in API group \"discovery.k8s.io\" in the namespace \"{ns}\""
                    ),
                ),
            )
        } else if query.is_none() {
            (
                404,
                status_json(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ),
            )
        } else {
            (200, Value::Null)
        }
    };
    // the log entries before this index are history to a watch: taken with its request's record,
    // so that a test that saw the watch in `watches()` knows later events reach it live
    let start = {
        let mut st = lock();
        st.requests.push(Logged {
            watch: query.as_ref().is_some_and(|q| q.watch),
            resource_version: query.as_ref().and_then(|q| q.rv_text.clone()),
            selector: query
                .as_ref()
                .map(|q| q.selector.clone())
                .unwrap_or_default(),
            authorization,
            status,
        });
        st.log.len()
    };
    let Some(q) = query.filter(|_| status == 200) else {
        return write_json(&mut stream, status, &body).await;
    };
    if !q.watch {
        let list = {
            let st = lock();
            let items: Vec<Value> = st
                .slices
                .iter()
                .filter(|((ns, _), (svc, _))| *ns == q.ns && *svc == q.service)
                .map(|(_, (_, o))| o.clone())
                .collect();
            json!({
                "kind": "EndpointSliceList",
                "apiVersion": "discovery.k8s.io/v1",
                "metadata": {"resourceVersion": st.rv.to_string()},
                "items": items,
            })
        };
        return write_json(&mut stream, 200, &list).await;
    }
    stream
        .write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        )
        .await?;
    let from = q.rv.unwrap_or(0);
    // only changes are replayed from the history before `start`
    let mut pos = 0;
    let (compacted, always_expired) = {
        let st = lock();
        (st.compacted, st.always_expired)
    };
    if from < compacted || always_expired {
        let e = json!({"type": "ERROR", "object": status_json(410, "Expired", &format!("too old resource version: {from}"))});
        write_line(&mut stream, &e, false).await?;
        return stream.write_all(b"0\r\n\r\n").await;
    }
    loop {
        let (lines, end, split) = {
            let st = lock();
            let mut lines = Vec::new();
            let mut end = false;
            for (i, entry) in st.log.iter().enumerate().skip(pos) {
                let live = i >= start;
                match entry {
                    Entry::Change { rv, ns, service, kind, object } => {
                        if *rv > from && *ns == q.ns && *service == q.service {
                            lines.push(json!({"type": kind, "object": object}));
                        }
                    }
                    Entry::Bookmark(rv) if live && q.bookmarks => lines.push(json!({
                        "type": "BOOKMARK",
                        "object": {"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1", "metadata": {"resourceVersion": rv.to_string()}},
                    })),
                    Entry::Bookmark(_) => {}
                    Entry::Close if live => {
                        end = true;
                        break;
                    }
                    Entry::Expire if live => {
                        lines.push(json!({"type": "ERROR", "object": status_json(410, "Expired", "too old resource version")}));
                        end = true;
                        break;
                    }
                    Entry::Close | Entry::Expire => {}
                }
                pos = i + 1;
            }
            if end {
                pos = st.log.len();
            }
            (lines, end, st.split_chunks)
        };
        // several pending events go in one chunk, as the API server's buffered writer does
        if !lines.is_empty() {
            if split {
                for l in &lines {
                    write_line(&mut stream, l, true).await?;
                }
            } else {
                let mut all = String::new();
                for l in &lines {
                    all.push_str(&l.to_string());
                    all.push('\n');
                }
                write_chunk(&mut stream, all.as_bytes()).await?;
            }
        }
        if end {
            return stream.write_all(b"0\r\n\r\n").await;
        }
        if wake.changed().await.is_err() {
            return Ok(());
        }
    }
}

fn status_json(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code})
}

async fn write_json(
    stream: &mut (impl AsyncWrite + Unpin),
    status: u16,
    body: &Value,
) -> std::io::Result<()> {
    let body = body.to_string();
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        403 => "Forbidden",
        _ => "Not Found",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

async fn write_line(
    stream: &mut (impl AsyncWrite + Unpin),
    line: &Value,
    split: bool,
) -> std::io::Result<()> {
    let text = format!("{line}\n");
    if split {
        let mid = text.len() / 2;
        write_chunk(stream, &text.as_bytes()[..mid]).await?;
        stream.flush().await?;
        // let the halves arrive apart
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        write_chunk(stream, &text.as_bytes()[mid..]).await
    } else {
        write_chunk(stream, text.as_bytes()).await
    }
}

async fn write_chunk(stream: &mut (impl AsyncWrite + Unpin), data: &[u8]) -> std::io::Result<()> {
    stream
        .write_all(format!("{:x}\r\n", data.len()).as_bytes())
        .await?;
    stream.write_all(data).await?;
    stream.write_all(b"\r\n").await?;
    stream.flush().await
}
