//! Endpoint-set sources: direct (here), etcd, DNS and Kubernetes (`etcd.rs`, `dns.rs`, `k8s/`), and
//! the stable subset. etcd needs the `etcd` cargo feature and Kubernetes the `tls` one (its API
//! server speaks HTTPS); without them such a target is refused, naming the feature.
//!
//! A resolver publishes the endpoint set of a [`Target`] on a `tokio::sync::watch` channel
//! ([`EndpointUpdates`]): `None` until the first resolution, then `Some(set)` on every change. The
//! client applies a stable subset (at most 32 endpoints, stable under churn) to each update and
//! hands the result to the balancer, which keeps per-endpoint stats across updates.
//!
//! A [`Resolution`] also holds its source: whatever keeps it alive (a watch task, the sender).
//! The client holds it for as long as it lives; dropping it lets the source stop.

use std::any::Any;
use std::sync::Arc;

use tokio::sync::watch;

use zrpc_core::conf::EtcdConf;

use crate::Error;

pub mod dns;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "tls")]
pub mod k8s;
pub(crate) mod subset;
mod target;

pub use target::{K8sPort, Target};

/// The stream of endpoint sets of one target: `None` = not yet resolved, then each full set.
pub type EndpointUpdates = watch::Receiver<Option<Arc<Vec<String>>>>;

/// A running resolution: its endpoint sets, what its source last reported, and the source
/// itself, kept alive as long as the resolution (or a client built on it) is.
///
/// For a discovery of your own, publish each set on a `watch` channel and hand its receiver to
/// [`Resolution::new`] with whatever keeps the source running (its task, the sender):
///
/// ```
/// use std::sync::Arc;
/// use zrpc_client::resolver::Resolution;
///
/// let (tx, rx) = tokio::sync::watch::channel(Some(Arc::new(vec!["127.0.0.1:8080".to_owned()])));
/// let resolution = Resolution::new(rx, tx);
/// // let client = zrpc_client::Client::with_resolution(conf, "my:///service", resolution).await?;
/// ```
#[derive(Clone)]
pub struct Resolution {
    updates: EndpointUpdates,
    /// Keeps the source alive.
    source: Arc<dyn Any + Send + Sync>,
    status: ResolverStatus,
}

/// What a resolver last reported about its source: `None` while it is fine.
///
/// Written by the resolver task on each failure and success; read by the client only on its
/// error paths (no endpoint yet, an empty set, a blocking dial that gave up).
#[derive(Debug, Clone)]
pub struct ResolverStatus(Arc<watch::Sender<Option<Arc<str>>>>);

impl Default for ResolverStatus {
    fn default() -> Self {
        Self(Arc::new(watch::channel(None).0))
    }
}

impl ResolverStatus {
    /// A status with no problem.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The current problem, if any.
    #[must_use]
    pub fn problem(&self) -> Option<Arc<str>> {
        self.0.borrow().clone()
    }

    /// Reports `problem` (`None`: the source is fine again). Returns whether it changed.
    pub fn set(&self, problem: Option<String>) -> bool {
        self.0.send_if_modified(|cur| {
            if cur.as_deref() == problem.as_deref() {
                return false;
            }
            *cur = problem.map(Arc::from);
            true
        })
    }

    /// Waits until a problem is reported (at once if one is).
    pub async fn failed(&self) -> Arc<str> {
        let mut rx = self.0.subscribe();
        loop {
            if let Some(p) = rx.borrow_and_update().clone() {
                return p;
            }
            // The sender lives in `self`: `changed` cannot fail while we hold `&self`.
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

impl std::fmt::Debug for Resolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolution")
            .field("current", &*self.updates.borrow())
            .finish_non_exhaustive()
    }
}

impl Resolution {
    /// A resolution publishing on `updates` (`None` until the first set, then each full set),
    /// whose source `source` (a task handle, the sender, ...) is kept alive with it.
    #[must_use]
    pub fn new(updates: EndpointUpdates, source: impl Any + Send + Sync) -> Resolution {
        Resolution::sharing(updates, Arc::new(source), ResolverStatus::default())
    }

    /// A resolution whose source is shared (one etcd watch for several clients).
    pub(crate) fn sharing(
        updates: EndpointUpdates,
        source: Arc<dyn Any + Send + Sync>,
        status: ResolverStatus,
    ) -> Resolution {
        Resolution {
            updates,
            source,
            status,
        }
    }

    /// The same resolution reporting its source's problems on `status` (see
    /// [`ResolverStatus::set`]); the client's "no endpoint" errors quote them.
    #[must_use]
    pub fn with_status(mut self, status: ResolverStatus) -> Resolution {
        self.status = status;
        self
    }

    /// A resolution that publishes `endpoints` once and never changes (the direct source).
    #[must_use]
    pub fn fixed(endpoints: Vec<String>) -> Resolution {
        let (tx, rx) = watch::channel(Some(Arc::new(endpoints)));
        Resolution::new(rx, tx)
    }

    /// Its endpoint sets (a new receiver of them).
    #[must_use]
    pub fn updates(&self) -> EndpointUpdates {
        self.updates.clone()
    }

    /// What its source last reported: why it has no endpoints to give, if it knows (etcd
    /// unreachable, authentication or TLS failure, DNS failure, an empty key).
    #[must_use]
    pub fn status(&self) -> &ResolverStatus {
        &self.status
    }

    /// Its source, for the client to keep.
    pub(crate) fn into_source(self) -> Arc<dyn Any + Send + Sync> {
        self.source
    }

    /// A test hook (feature `test-hooks`, which only zrpc's own test crate enables): whether
    /// `self` and `other` share one source (one etcd watch). Not part of the public API, no
    /// semver promise.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    #[must_use]
    pub fn shares_source_with(&self, other: &Resolution) -> bool {
        Arc::ptr_eq(&self.source, &other.source)
    }
}

/// Starts the resolver of `target` (dispatch by scheme).
///
/// Must be called inside a tokio runtime for the etcd and DNS sources (they spawn their watch task).
///
/// # Errors
///
/// [`Error::Resolve`] when the source cannot be started.
pub fn resolve(target: &Target) -> Result<Resolution, Error> {
    resolve_with(target, &EtcdConf::default())
}

/// Like [`resolve`], with the etcd account and TLS settings of `etcd` (its hosts and key are
/// replaced by the target's).
///
/// # Errors
///
/// [`Error::Resolve`] when the source cannot be started.
pub fn resolve_with(target: &Target, etcd: &EtcdConf) -> Result<Resolution, Error> {
    match target {
        Target::Direct { endpoints } => Ok(Resolution::fixed(endpoints.clone())),
        Target::Etcd { hosts, key } => {
            let mut conf = etcd.clone();
            conf.hosts.clone_from(hosts);
            conf.key.clone_from(key);
            #[cfg(feature = "etcd")]
            return self::etcd::resolve(conf);
            // A loaded config with an etcd target was refused already; this is a target built
            // in code.
            #[cfg(not(feature = "etcd"))]
            Err(Error::Config(zrpc_core::conf::ConfError::feature_off(
                "Target",
                &format!("etcd:///{}?key={}", conf.hosts.join(","), conf.key),
                "discovery in etcd",
                "etcd",
            )))
        }
        Target::Dns { host, port } => dns::resolve(host, *port),
        #[cfg(feature = "tls")]
        Target::K8s {
            namespace,
            service,
            port,
        } => k8s::resolve(namespace, service, port.clone()),
        // A loaded config with a k8s target was refused already; this is a target built in code.
        #[cfg(not(feature = "tls"))]
        Target::K8s { .. } => Err(Error::Config(k8s_off(&target.to_string()))),
    }
}

/// The error for a `k8s://` target in a build without the `tls` feature: the resolver speaks
/// HTTPS to the Kubernetes API server.
pub(crate) fn k8s_off(target: &str) -> zrpc_core::conf::ConfError {
    zrpc_core::conf::ConfError::feature_off(
        "Target",
        target,
        "the Kubernetes resolver (HTTPS to the API server)",
        "tls",
    )
}

/// `addr` for a log line: at most 64 characters (a value under an etcd key may be megabytes).
pub(crate) fn clipped(addr: &str) -> std::borrow::Cow<'_, str> {
    match addr.char_indices().nth(64) {
        Some((i, _)) => format!("{}... ({} bytes)", &addr[..i], addr.len()).into(),
        None => addr.into(),
    }
}

#[cfg(test)]
mod clip_tests {
    #[test]
    fn a_logged_address_is_clipped() {
        assert_eq!(super::clipped("127.0.0.1:1"), "127.0.0.1:1");
        let long = "é".repeat(100);
        let c = super::clipped(&long);
        assert!(
            c.starts_with(&"é".repeat(64)) && c.ends_with("... (200 bytes)"),
            "{c}"
        );
    }
}
