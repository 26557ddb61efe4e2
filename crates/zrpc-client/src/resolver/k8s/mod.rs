//! Kubernetes discovery (`k8s://namespace/service:port`): the ready endpoints of a Service,
//! from its `discovery.k8s.io/v1` EndpointSlices, listed then watched.
//!
//! A background task lists the Service's slices (label selector
//! `kubernetes.io/service-name=<service>`), publishes the merged set, then watches from the
//! list's `resourceVersion` with bookmarks, keeping the resource version of every event and
//! bookmark:
//! - a watch that ends (the server's `timeoutSeconds`, a dropped connection) resumes from the
//!   last resource version, without a new list;
//! - `410 Gone` (the version was compacted away, as a status or an `ERROR` event) re-lists;
//! - any other failure (API unreachable, 401/403, a bad response) keeps the last known set
//!   published, reports the cause in [`ResolverStatus`] naming the API server, and retries
//!   after 1 s, doubling up to 30 s, with jitter.
//!
//! Fixes over go-zero's resolver (reference §3.4, `kube/eventhandler.go`): every slice is kept
//! on its own, so an update to one never drops the others' endpoints; only ready,
//! non-terminating endpoints are used; a named port is looked up per slice; a control-plane
//! outage never empties the set; a kubeconfig works outside a cluster.
//!
//! # Why hand-rolled, not `kube`
//!
//! Discovery needs one list and one watch of one resource: two GETs and a stream of JSON lines.
//! The `kube` crate (with `k8s-openapi`, about a million generated lines) brings its own HTTP
//! stack, tower layers, a YAML/JSON schema of every Kubernetes type and, by default, a second
//! TLS stack choice; compile time on a small CI machine is minutes. Here the GETs ride on the
//! hyper, rustls (ring) and serde_json that zrpc already builds, adding a few hundred lines.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::StatusCode;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::watch;

use super::{K8sPort, Resolution, ResolverStatus};
use crate::Error;

mod api;
pub(crate) mod slices;

pub use api::KubeApi;
use slices::{EndpointSlice, EndpointSliceList, Slices, Status, WatchEvent};

/// The watch's `timeoutSeconds`: the server ends it after this long; the task resumes it.
const WATCH_TIMEOUT_SECS: u64 = 290;
/// A watch with no byte (event or bookmark) for this long is taken for dead.
const WATCH_IDLE: Duration = Duration::from_secs(WATCH_TIMEOUT_SECS + 60);
/// A list response must arrive whole within this.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest list body and watch line accepted.
const MAX_BODY: usize = 64 << 20;
/// First retry delay (doubles up to [`MAX_BACKOFF`]).
const BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

type Sender = watch::Sender<Option<Arc<Vec<String>>>>;

/// Stops the task when the last clone of the [`Resolution`] (and every client built on it) is
/// dropped.
#[derive(Debug)]
struct K8sTask(tokio::task::AbortHandle);

impl Drop for K8sTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves `k8s://namespace/service[:port]` with [`KubeApi::infer`] (in-cluster config in a
/// pod, else the kubeconfig). Returns at once; must be called inside a tokio runtime.
///
/// # Errors
///
/// [`Error::Resolve`] when no API config can be found (naming what is missing).
pub fn resolve(namespace: &str, service: &str, port: Option<K8sPort>) -> Result<Resolution, Error> {
    let api = KubeApi::infer().map_err(|e| match e {
        Error::Resolve { reason, .. } => Error::Resolve {
            target: target_text(namespace, service, port.as_ref()),
            reason: format!("no Kubernetes API config: {reason}"),
        },
        e => e,
    })?;
    resolve_with(api, namespace, service, port)
}

/// [`resolve`] against a given API.
///
/// # Errors
///
/// [`Error::Resolve`] outside a tokio runtime.
pub fn resolve_with(
    api: KubeApi,
    namespace: &str,
    service: &str,
    port: Option<K8sPort>,
) -> Result<Resolution, Error> {
    let target = target_text(namespace, service, port.as_ref());
    // the names go into the request path: Kubernetes names only (RFC 1123 labels)
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if !label(namespace) || !label(service) {
        return Err(Error::Resolve {
            target,
            reason: "the namespace and the service must be Kubernetes names \
                     (lowercase letters, digits and '-')"
                .into(),
        });
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::Resolve {
        target: target.clone(),
        reason: "the k8s resolver must be started inside a tokio runtime".into(),
    })?;
    let (tx, updates) = watch::channel(None);
    let status = ResolverStatus::default();
    let path = format!(
        "/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices\
         ?labelSelector=kubernetes.io%2Fservice-name%3D{service}"
    );
    let watcher = Watcher {
        api,
        path,
        target,
        slices: Slices::new(port),
        tx,
        status: status.clone(),
    };
    let task = runtime.spawn(watcher.run()).abort_handle();
    Ok(Resolution::new(updates, K8sTask(task)).with_status(status))
}

fn target_text(namespace: &str, service: &str, port: Option<&K8sPort>) -> String {
    match port {
        Some(p) => format!("k8s://{namespace}/{service}:{p}"),
        None => format!("k8s://{namespace}/{service}"),
    }
}

/// How a watch ended.
enum WatchEnd {
    /// The server closed it (its timeout, a restart): resume from the last version.
    Closed,
    /// 410 Gone: the version is too old; list again.
    Gone,
    /// Anything else: retry after a back-off.
    Failed(String),
}

struct Watcher {
    api: KubeApi,
    path: String,
    target: String,
    slices: Slices,
    tx: Sender,
    status: ResolverStatus,
}

impl Watcher {
    async fn run(mut self) {
        let tx = self.tx.clone();
        tokio::select! {
            () = self.list_and_watch() => {}
            () = tx.closed() => {}
        }
    }

    async fn list_and_watch(&mut self) {
        let mut version: Option<String> = None;
        let mut failures = 0u32;
        loop {
            let version_now = match version.take() {
                Some(v) => v,
                None => match self.list().await {
                    Ok(v) => {
                        failures = 0;
                        v
                    }
                    Err(e) => {
                        failures += 1;
                        self.failed(&format!("list failed: {e}"), failures).await;
                        continue;
                    }
                },
            };
            let started = Instant::now();
            let (end, last) = self.watch(version_now).await;
            match end {
                WatchEnd::Gone => {
                    tracing::info!(target = %self.target, "k8s resolver: resource version expired (410 Gone), listing again");
                }
                WatchEnd::Closed => {
                    version = Some(last);
                    failures = 0;
                }
                WatchEnd::Failed(e) => {
                    version = Some(last);
                    failures += 1;
                    self.failed(&format!("watch failed: {e}"), failures).await;
                    continue;
                }
            }
            // A server that ends every watch at once, or answers every fresh version 410 (a
            // list again, megabytes each), is not asked again at once.
            if started.elapsed() < BACKOFF {
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }

    /// Reports a failure (the last set stays published) and sleeps the back-off.
    async fn failed(&self, what: &str, failures: u32) {
        let known = self.tx.borrow().as_ref().map_or(0, |s| s.len());
        let problem = format!(
            "Kubernetes API {} for {}: {what}",
            self.api.server(),
            self.target
        );
        tracing::warn!(%problem, known_endpoints = known, "k8s resolver: keeping the last known endpoints");
        self.status.set(Some(problem));
        let exp = BACKOFF.saturating_mul(1 << failures.min(5).saturating_sub(1));
        let base = exp.min(MAX_BACKOFF);
        let jitter = 0.8 + 0.4 * crate::balancer::rng::unit();
        tokio::time::sleep(base.mul_f64(jitter)).await;
    }

    /// Lists the slices; publishes them; returns the list's resource version.
    async fn list(&mut self) -> Result<String, String> {
        let resp = self.api.get(&self.path).await?;
        let body = tokio::time::timeout(LIST_TIMEOUT, read_ok(resp))
            .await
            .map_err(|_| format!("list body not received within {LIST_TIMEOUT:?}"))??;
        let list: EndpointSliceList =
            serde_json::from_slice(&body).map_err(|e| format!("bad EndpointSliceList: {e}"))?;
        self.slices.reset(&list.items);
        tracing::debug!(target = %self.target, slices = list.items.len(), version = %list.metadata.resource_version, "k8s resolver: listed");
        self.publish();
        Ok(list.metadata.resource_version)
    }

    /// Watches from `version`; applies every event; returns how it ended and the last version.
    async fn watch(&mut self, mut version: String) -> (WatchEnd, String) {
        let path = format!(
            "{}&watch=1&allowWatchBookmarks=true&timeoutSeconds={WATCH_TIMEOUT_SECS}&resourceVersion={version}",
            self.path
        );
        let resp = match self.api.get(&path).await {
            Ok(r) => r,
            Err(e) => return (WatchEnd::Failed(e), version),
        };
        if resp.status() == StatusCode::GONE {
            return (WatchEnd::Gone, version);
        }
        let mut body = match check_status(resp).await {
            Ok(b) => b,
            Err(e) => return (WatchEnd::Failed(e), version),
        };
        // the API answers again: clear a reported failure
        self.publish();
        let mut line = Vec::new();
        loop {
            let frame = match tokio::time::timeout(WATCH_IDLE, body.frame()).await {
                Err(_) => {
                    return (
                        WatchEnd::Failed(format!("watch silent for {WATCH_IDLE:?}")),
                        version,
                    );
                }
                Ok(None) => return (WatchEnd::Closed, version),
                Ok(Some(Err(e))) => {
                    return (WatchEnd::Failed(format!("watch stream: {e}")), version);
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let mut changed = false;
            let mut rest = &data[..];
            while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
                line.extend_from_slice(&rest[..nl]);
                rest = &rest[nl + 1..];
                match self.apply(&line, &mut version) {
                    Ok(c) => changed |= c,
                    Err(end) => return (end, version),
                }
                line.clear();
            }
            line.extend_from_slice(rest);
            if line.len() > MAX_BODY {
                return (
                    WatchEnd::Failed(format!("a watch event over {MAX_BODY} bytes")),
                    version,
                );
            }
            // every event of one chunk is one update
            if changed {
                self.publish();
            }
        }
    }

    /// Applies one watch line; `Ok(true)` when the slices changed.
    fn apply(&mut self, line: &[u8], version: &mut String) -> Result<bool, WatchEnd> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(false);
        }
        let event: WatchEvent = serde_json::from_slice(line)
            .map_err(|e| WatchEnd::Failed(format!("bad watch event: {e}")))?;
        if event.kind == "ERROR" {
            let status: Status = serde_json::from_value(event.object).unwrap_or_default();
            if status.code == 410 {
                return Err(WatchEnd::Gone);
            }
            return Err(WatchEnd::Failed(format!(
                "watch error {}: {}",
                status.code, status.message
            )));
        }
        let slice: EndpointSlice = serde_json::from_value(event.object)
            .map_err(|e| WatchEnd::Failed(format!("bad {} object: {e}", event.kind)))?;
        if !slice.metadata.resource_version.is_empty() {
            version.clone_from(&slice.metadata.resource_version);
        }
        match event.kind.as_str() {
            "ADDED" | "MODIFIED" => self.slices.upsert(&slice),
            "DELETED" => self.slices.remove(&slice.metadata.name),
            // BOOKMARK (only the version) and types this code does not know
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Publishes the merged set if it changed and updates the status.
    fn publish(&self) {
        let endpoints = self.slices.endpoints();
        let problem = self.slices.problem().or_else(|| {
            endpoints.is_empty().then(|| {
                format!(
                    "{} has no ready endpoint ({} EndpointSlices)",
                    self.target,
                    self.slices.len()
                )
            })
        });
        self.status.set(problem);
        self.tx.send_if_modified(|current| {
            if current.as_deref() == Some(&endpoints) {
                return false;
            }
            tracing::info!(target = %self.target, endpoints = ?endpoints, "k8s resolver: endpoints updated");
            *current = Some(Arc::new(endpoints.clone()));
            true
        });
    }
}

/// The body of a 2xx response, or an error naming the status and the API's message.
async fn check_status(resp: http::Response<Incoming>) -> Result<Incoming, String> {
    let code = resp.status();
    if code.is_success() {
        return Ok(resp.into_body());
    }
    let body = tokio::time::timeout(
        Duration::from_secs(5),
        http_body_util::Limited::new(resp.into_body(), 64 << 10).collect(),
    )
    .await
    .ok()
    .and_then(Result::ok)
    .map(|b| b.to_bytes())
    .unwrap_or_default();
    let message = serde_json::from_slice::<Status>(&body)
        .map(|s| s.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
    let hint = match code {
        StatusCode::UNAUTHORIZED => " (the token or client certificate was refused)",
        StatusCode::FORBIDDEN => {
            " (the service account needs get, list and watch on \
             endpointslices.discovery.k8s.io in this namespace: see docs/rbac-example.yaml)"
        }
        _ => "",
    };
    Err(format!("HTTP {code}{hint}: {}", message.trim()))
}

async fn read_ok(resp: http::Response<Incoming>) -> Result<hyper::body::Bytes, String> {
    let body = check_status(resp).await?;
    http_body_util::Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| format!("reading the list: {e}"))
}
