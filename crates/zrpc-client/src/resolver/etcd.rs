//! etcd discovery: the endpoints registered under `Key/` (go-zero's layout: `Key/<lease id or ID>` ->
//! `host:port`).
//!
//! One background task per `(etcd cluster, key)` in the process, shared by every client resolving that pair
//! (a process-wide registry of weak references); it stops, and its etcd watch is cancelled, when the last
//! [`Resolution`] of it (and every client built on one) is dropped.
//!
//! The task does a prefix get of `Key/`, publishes the distinct values, then watches the prefix from the
//! get's revision + 1 (so nothing is missed between the two). Fixes over go-zero (reference §3.5):
//! - while etcd is unreachable the last known set stays published (never an empty set because the registry is
//!   down: only a successful read of an empty prefix publishes an empty set);
//! - once endpoints were known, an empty prefix publishes every endpoint whose key went away within one
//!   lease TTL before (the status says none is registered) until a key appears again: a network
//!   partition between the servers and etcd expires every lease while the servers run and answer, and
//!   go-zero's clients then fail every call (`etcd/kept.rs`);
//! - watch error, stream end or etcd restart: back off ~1 s with jitter, re-get (full diff), re-watch;
//! - compaction past the watch revision (or any cancellation by etcd): immediate full reload, no watch loop;
//! - a PUT of an unchanged value and duplicate registrations of one address are not updates;
//! - all events of one watch response, plus any responses already buffered, are applied as one update.
//!   While events keep coming, updates are published at most once per 1 µs per address (10 ms at
//!   10,000, at most 50 ms): each copies the whole set and the balancer selects its subset again.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions, WatchResponse};
use futures_util::{FutureExt, StreamExt};
use parking_lot::Mutex;
use tokio::sync::watch;
use zrpc_core::conf::{EtcdConf, Validate};
use zrpc_core::etcd::MAX_RESPONSE_SIZE;

use super::{EndpointUpdates, Resolution, ResolverStatus};

mod kept;

use kept::Kept;

/// Timeout of the prefix get and of the watch creation (go-zero's `RequestTimeout`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound of one connect attempt.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Base back-off after a failure (go-zero: `coolDownUnstable.AroundDuration(1s)`).
const BACKOFF: Duration = Duration::from_secs(1);
/// After this many consecutive failures the etcd client is rebuilt (fresh connections, fresh DNS).
const REBUILD_CLIENT_AFTER: u32 = 3;

type Sender = watch::Sender<Option<Arc<Vec<String>>>>;

/// `(sorted, deduplicated, comma-joined etcd hosts, key)`.
/// The hosts (sorted), the key, and a digest of the account and TLS files: clients that read
/// etcd as different users, or through other certificates, do not share a watch (the first
/// one's credentials would serve them all, or fail them all).
type RegistryKey = (String, String, u64);

static REGISTRY: LazyLock<Mutex<HashMap<RegistryKey, Weak<SharedWatch>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The shared watch of one `(cluster, key)`; the guard of every [`Resolution`] of that pair.
struct SharedWatch {
    key: RegistryKey,
    /// Never marked as seen: clones report the current value as changed once it exists.
    updates: EndpointUpdates,
    task: tokio::task::AbortHandle,
    /// What the task last reported (the cause when there are no endpoints).
    status: ResolverStatus,
    /// Full loads (prefix gets) done so far (read by the `reloads` test hook).
    #[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
    reloads: Arc<AtomicU64>,
}

impl std::fmt::Debug for SharedWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWatch")
            .field("hosts", &self.key.0)
            .field("key", &self.key.1)
            .finish_non_exhaustive()
    }
}

impl Drop for SharedWatch {
    fn drop(&mut self) {
        // Aborting drops the task's etcd client and watch stream: etcd cancels the watcher.
        self.task.abort();
        let mut registry = REGISTRY.lock();
        // A new watch for the same pair may already have replaced this (dead) entry.
        if registry
            .get(&self.key)
            .is_some_and(|w| w.strong_count() == 0)
        {
            registry.remove(&self.key);
        }
        tracing::debug!(hosts = %self.key.0, key = %self.key.1, "etcd resolver: last client gone, watch closed");
    }
}

fn registry_key(conf: &EtcdConf) -> RegistryKey {
    use std::hash::{Hash, Hasher};
    let mut hosts: Vec<&str> = conf.hosts.iter().map(|h| h.trim()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let mut access = std::collections::hash_map::DefaultHasher::new();
    (
        &conf.user,
        &conf.pass,
        &conf.cert_file,
        &conf.cert_key_file,
        &conf.ca_cert_file,
        conf.insecure_skip_verify,
    )
        .hash(&mut access);
    (hosts.join(","), conf.key.clone(), access.finish())
}

/// Resolves the endpoints registered in etcd under `conf.key` (`Key/...`).
///
/// Returns at once; `updates` holds `None` until the first successful read of etcd. Must be called inside a
/// tokio runtime (the shared watch task is spawned on it). Errors: an invalid `conf` (go-zero's
/// `empty etcd hosts` / `empty etcd key`, partial account or TLS settings) or no runtime.
pub fn resolve(conf: EtcdConf) -> Result<Resolution, crate::Error> {
    let error = |reason: String| crate::Error::Resolve {
        target: format!("etcd:///{}?key={}", conf.hosts.join(","), conf.key),
        reason,
    };
    conf.validate().map_err(|e| error(e.to_string()))?;
    // TLS files and options are checked now: a bad certificate is an error, not an endless retry.
    zrpc_core::etcd::connect_options(&conf).map_err(|e| error(e.to_string()))?;
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        error("the etcd resolver must be started inside a tokio runtime".to_string())
    })?;
    let key = registry_key(&conf);
    // Declared before the lock guard so that it is dropped after it (its Drop takes the lock).
    let _stale;
    let mut registry = REGISTRY.lock();
    if let Some(shared) = registry.get(&key).and_then(Weak::upgrade) {
        // A watch whose runtime has shut down is dead: replace it.
        if !shared.task.is_finished() {
            return Ok(Resolution::sharing(
                shared.updates.clone(),
                shared.clone(),
                shared.status.clone(),
            ));
        }
        _stale = Some(shared);
    } else {
        _stale = None;
    }
    let (tx, updates) = watch::channel(None);
    let reloads = Arc::new(AtomicU64::new(0));
    let status = ResolverStatus::default();
    let task = runtime
        .spawn(run(conf, tx, reloads.clone(), status.clone()))
        .abort_handle();
    let shared = Arc::new(SharedWatch {
        key: key.clone(),
        updates: updates.clone(),
        task,
        status: status.clone(),
        reloads,
    });
    registry.insert(key, Arc::downgrade(&shared));
    Ok(Resolution::sharing(updates, shared, status))
}

/// True while a shared watch for `(conf.hosts, conf.key)` is alive in this process.
///
/// A test hook (feature `test-hooks`, which only zrpc's own test crate enables): not part of the
/// public API.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn is_watching(conf: &EtcdConf) -> bool {
    REGISTRY
        .lock()
        .get(&registry_key(conf))
        .is_some_and(|w| w.strong_count() > 0)
}

/// How many full loads (prefix gets) the shared watch for `(conf.hosts, conf.key)` has done: 1 after the
/// first successful read, +1 per reload after a compaction or an etcd reset. None when no watch is alive.
/// (A watch that merely reconnects resumes from its revision and does not reload.)
///
/// A test hook (feature `test-hooks`), like [`is_watching`].
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn reloads(conf: &EtcdConf) -> Option<u64> {
    let shared = REGISTRY
        .lock()
        .get(&registry_key(conf))
        .and_then(Weak::upgrade)?;
    Some(shared.reloads.load(Ordering::Relaxed))
}

/// The registered endpoints of one key prefix: etcd key -> address, and address -> number of keys.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct EndpointSet {
    by_key: HashMap<Vec<u8>, String>,
    by_value: BTreeMap<String, usize>,
}

impl EndpointSet {
    /// Replaces everything with `kvs` (a full reload).
    pub(crate) fn reload<'a>(&mut self, kvs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) {
        *self = EndpointSet::default();
        for (k, v) in kvs {
            self.put(k, v);
        }
    }

    /// A PUT of `key` = `value`; returns whether the set of distinct addresses changed.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) -> bool {
        let Some(value) = address(key, value) else {
            return self.delete(key);
        };
        match self.by_key.get(key) {
            Some(old) if *old == value => false,
            _ => {
                let removed = self.delete(key);
                let count = self.by_value.entry(value.clone()).or_default();
                *count += 1;
                let added = *count == 1;
                self.by_key.insert(key.to_vec(), value);
                removed || added
            }
        }
    }

    /// A DELETE of `key`; returns whether the set of distinct addresses changed (only when no other key holds
    /// the same address).
    pub(crate) fn delete(&mut self, key: &[u8]) -> bool {
        let Some(old) = self.by_key.remove(key) else {
            return false;
        };
        match self.by_value.get_mut(&old) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            _ => {
                self.by_value.remove(&old);
                true
            }
        }
    }

    /// The distinct addresses, sorted.
    pub(crate) fn addresses(&self) -> Vec<String> {
        self.by_value.keys().cloned().collect()
    }
}

/// The address of a registration, or None (with a warning) when the value is unusable.
fn address(key: &[u8], value: &[u8]) -> Option<String> {
    match std::str::from_utf8(value).map(str::trim) {
        Ok("") => {
            tracing::warn!(key = %String::from_utf8_lossy(key), "etcd resolver: empty address ignored");
            None
        }
        Ok(v) => Some(v.to_string()),
        Err(_) => {
            tracing::warn!(key = %String::from_utf8_lossy(key), "etcd resolver: non UTF-8 address ignored");
            None
        }
    }
}

/// Where the shared watch publishes: the channel, and what it keeps while no key is registered.
struct Out {
    tx: Sender,
    kept: Kept,
}

impl Out {
    fn new(tx: Sender) -> Out {
        Out {
            tx,
            kept: Kept::default(),
        }
    }

    /// Publishes what [`Kept`] makes of the addresses of `set` if it differs from the last
    /// published set. The log line names how many endpoints and the first few that changed, not
    /// the whole set (a fleet of 10,000 made every update a ~200 KB line).
    fn publish(&mut self, set: &EndpointSet, prefix: &str) {
        let kept = &mut self.kept;
        let addresses = kept.next(set.addresses(), std::time::Instant::now());
        self.tx.send_if_modified(|current| {
            let before = current.as_deref().map_or(&[][..], Vec::as_slice);
            if current.is_some() && before == addresses.as_slice() {
                return false;
            }
            let changes = Changes::between(before, &addresses);
            if kept.holding() {
                tracing::warn!(
                    prefix,
                    endpoints = addresses.len(),
                    %changes,
                    "etcd resolver: no endpoint is registered any more; keeping those whose keys went within {:?} until one registers again (a partition between the servers and etcd expires their leases while they run)",
                    kept::HOLD
                );
            } else {
                tracing::info!(prefix, endpoints = addresses.len(), %changes, "etcd resolver: endpoints updated");
            }
            *current = Some(addresses);
            true
        });
    }
}

/// The addresses an update added and removed (both sets sorted), for a log line: the first
/// [`Changes::NAMED`] of each, and how many in all.
struct Changes<'a> {
    added: Vec<&'a String>,
    removed: Vec<&'a String>,
    counts: (usize, usize),
}

impl<'a> Changes<'a> {
    const NAMED: usize = 5;

    fn between(before: &'a [String], after: &'a [String]) -> Changes<'a> {
        let mut added = kept::missing(after, before);
        let mut removed = kept::missing(before, after);
        let mut c = Changes {
            added: added.by_ref().take(Self::NAMED).collect(),
            removed: removed.by_ref().take(Self::NAMED).collect(),
            counts: (0, 0),
        };
        c.counts = (
            c.added.len() + added.count(),
            c.removed.len() + removed.count(),
        );
        c
    }
}

impl std::fmt::Display for Changes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sep = "";
        for (sign, list, count) in [
            ('+', &self.added, self.counts.0),
            ('-', &self.removed, self.counts.1),
        ] {
            if count == 0 {
                continue;
            }
            write!(f, "{sep}{sign}{count} [")?;
            sep = " ";
            for (i, a) in list.iter().enumerate() {
                write!(f, "{}{}", if i > 0 { " " } else { "" }, super::clipped(a))?;
            }
            if count > list.len() {
                write!(f, " ...")?;
            }
            write!(f, "]")?;
        }
        Ok(())
    }
}

/// An etcd client for the watch: zrpc-core's options (timeouts, keepalive, account, TLS) plus go-zero's
/// `WithRequireLeader`, so that a member cut off from its leader fails the watch instead of silently
/// delivering nothing.
async fn connect(conf: &EtcdConf) -> Result<etcd_client::Client, String> {
    let options = zrpc_core::etcd::connect_options(conf)
        .map_err(|e| e.to_string())?
        .with_require_leader(true);
    etcd_client::Client::connect(&conf.hosts, Some(options))
        .await
        .map_err(|e| zrpc_core::etcd::describe(conf, &e))
}

/// Records `problem` as the resolver's status; logs it once (repeats of the same problem go to
/// debug), saying that the last known endpoints are kept.
fn report(status: &ResolverStatus, prefix: &str, problem: String) {
    if status.set(Some(problem.clone())) {
        tracing::warn!(
            prefix,
            "etcd resolver: {problem}; keeping the last known endpoints, retrying every ~1s"
        );
    } else {
        tracing::debug!(prefix, "etcd resolver: still failing: {problem}");
    }
}

/// After a successful read: no problem, or "no endpoints registered under key K" for an empty set.
fn set_empty_status(status: &ResolverStatus, set: &EndpointSet, key: &str, hosts: &str) {
    let problem = set
        .by_value
        .is_empty()
        .then(|| format!("no endpoints registered under key {key:?} in etcd at {hosts}"));
    if status.set(problem) && status.problem().is_none() {
        tracing::info!(key, "etcd resolver: etcd answers again");
    }
}

/// ~`BACKOFF` with ±20 % jitter, growing slowly (up to 2x) while failures repeat.
fn backoff(failures: u32) -> Duration {
    let factor = 1.0 + 0.25 * f64::from(failures.saturating_sub(1).min(4));
    BACKOFF.mul_f64(factor * (0.8 + 0.4 * crate::balancer::rng::unit()))
}

/// What ended a watch.
enum WatchEnd {
    /// etcd compacted past our revision, cancelled the watch, or is not the cluster we read (reset or
    /// restored): full reload.
    Reload,
    /// Error or end of stream (etcd restart, network): back off, then resume from the last revision.
    Failed,
}

/// Where the watch stands: the state it mirrors is complete up to `revision` of cluster `cluster_id`.
#[derive(Debug, Clone, Copy)]
struct Position {
    revision: i64,
    cluster_id: u64,
}

/// The shared watch task: runs until aborted (last guard dropped) or every receiver is gone.
async fn run(conf: EtcdConf, tx: Sender, reloads: Arc<AtomicU64>, status: ResolverStatus) {
    let mut out = Out::new(tx);
    let hosts = zrpc_core::etcd::hosts_label(&conf);
    let prefix = format!("{}/", conf.key);
    let mut set = EndpointSet::default();
    let mut client: Option<etcd_client::Client> = None;
    // None: a full load is needed.
    let mut position: Option<Position> = None;
    let mut failures: u32 = 0;
    let mut immediate_reloads: u32 = 0;
    loop {
        if out.tx.is_closed() {
            return;
        }
        if failures > 0 {
            if failures >= REBUILD_CLIENT_AFTER {
                client = None;
            }
            tokio::time::sleep(backoff(failures)).await;
        }
        if client.is_none() {
            match tokio::time::timeout(CONNECT_TIMEOUT, connect(&conf)).await {
                Ok(Ok(c)) => client = Some(c),
                Ok(Err(e)) => {
                    failures += 1;
                    report(&status, &prefix, e);
                    continue;
                }
                Err(_) => {
                    failures += 1;
                    report(
                        &status,
                        &prefix,
                        format!(
                            "etcd unreachable at {hosts}: no connection within {CONNECT_TIMEOUT:?}"
                        ),
                    );
                    continue;
                }
            }
        }
        let Some(c) = client.as_mut() else { continue };

        // Full load (first time, after compaction or a cluster reset).
        let pos = match position {
            Some(pos) => pos,
            None => {
                // a request that never reached etcd (a member down) is sent again at once
                let get = zrpc_core::etcd::retry_unsent(|| {
                    let mut kv = c.kv_client().max_decoding_message_size(MAX_RESPONSE_SIZE);
                    let prefix = prefix.clone();
                    async move { kv.get(prefix, Some(GetOptions::new().with_prefix())).await }
                });
                match tokio::time::timeout(REQUEST_TIMEOUT, get).await {
                    Ok(Ok(resp)) => {
                        set.reload(resp.kvs().iter().map(|kv| (kv.key(), kv.value())));
                        reloads.fetch_add(1, Ordering::Relaxed);
                        out.publish(&set, &prefix);
                        set_empty_status(&status, &set, &conf.key, &hosts);
                        let pos = Position {
                            revision: resp.header().map_or(0, |h| h.revision()),
                            cluster_id: resp.header().map_or(0, |h| h.cluster_id()),
                        };
                        position = Some(pos);
                        pos
                    }
                    Ok(Err(e)) => {
                        failures += 1;
                        report(&status, &prefix, zrpc_core::etcd::describe(&conf, &e));
                        continue;
                    }
                    Err(_) => {
                        failures += 1;
                        report(
                            &status,
                            &prefix,
                            format!(
                                "etcd unreachable at {hosts}: no answer to a get within {REQUEST_TIMEOUT:?}"
                            ),
                        );
                        continue;
                    }
                }
            }
        };

        // Watch from the next revision: after an error this replays everything missed meanwhile.
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(pos.revision + 1);
        let watch = zrpc_core::etcd::retry_unsent(|| {
            let mut w = c
                .watch_client()
                .max_decoding_message_size(MAX_RESPONSE_SIZE);
            let (prefix, options) = (prefix.clone(), options.clone());
            async move { w.watch(prefix, Some(options)).await }
        });
        let stream = match tokio::time::timeout(REQUEST_TIMEOUT, watch).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                failures += 1;
                report(&status, &prefix, zrpc_core::etcd::describe(&conf, &e));
                continue;
            }
            Err(_) => {
                failures += 1;
                tracing::warn!(
                    prefix,
                    "etcd resolver: watch creation timed out, keeping the last known endpoints"
                );
                continue;
            }
        };
        // Keep the request half open: closing it would end the watch.
        let (_requests, mut responses) = stream.split();
        let mut pos = pos;
        let end = watch_loop(
            &mut responses,
            &mut set,
            &mut out,
            &prefix,
            &mut failures,
            &mut pos,
            &|set: &EndpointSet| set_empty_status(&status, set, &conf.key, &hosts),
        )
        .await;
        position = Some(pos);
        match end {
            WatchEnd::Reload => {
                position = None;
                immediate_reloads += 1;
                // A watch cancelled again right after a reload: do not spin.
                failures = if immediate_reloads > 1 { 1 } else { 0 };
            }
            WatchEnd::Failed => {
                immediate_reloads = 0;
                failures = failures.max(1);
            }
        }
    }
}

/// The shortest time between two publishes while events keep coming: 1 µs per address, at most
/// 50 ms. A publish copies and compares the whole set and the balancer selects its subset
/// again, ~1 ms at 10,000 addresses: a rolling deploy of such a fleet (a thousand events a
/// second) took three quarters of a core when every event was published on its own. The first
/// event after a quiet spell is published at once; the rest of a burst waits at most this long.
fn publish_gap(addresses: usize) -> Duration {
    Duration::from_micros(addresses as u64).min(Duration::from_millis(50))
}

/// Applies watch responses until the watch ends, advancing `pos`; publishes at most once per
/// [`publish_gap`].
async fn watch_loop(
    responses: &mut etcd_client::WatchResponseStream,
    set: &mut EndpointSet,
    out: &mut Out,
    prefix: &str,
    failures: &mut u32,
    pos: &mut Position,
    empty: &(dyn Fn(&EndpointSet) + Sync),
) -> WatchEnd {
    let mut pending = false;
    // the last publish of this loop (the full load's was before it: the first event is at once)
    let mut last: Option<tokio::time::Instant> = None;
    let gap_over = |last: Option<tokio::time::Instant>, set: &EndpointSet| {
        last.map_or(tokio::time::Instant::now(), |l| {
            l + publish_gap(set.by_value.len())
        })
    };
    loop {
        let due = gap_over(last, set);
        let first = tokio::select! {
            next = responses.next() => next,
            () = out.tx.closed() => return WatchEnd::Failed,
            () = tokio::time::sleep_until(due), if pending => {
                out.publish(set, prefix);
                empty(set);
                pending = false;
                last = Some(tokio::time::Instant::now());
                continue;
            }
        };
        let mut end = None;
        let mut next = first;
        // Apply this response and every response already buffered, then publish once.
        loop {
            match next {
                Some(Ok(resp)) => {
                    if let Some(why) = cancelled(&resp) {
                        tracing::warn!(
                            prefix,
                            revision = pos.revision,
                            why,
                            "etcd resolver: watch cancelled, reloading"
                        );
                        end = Some(WatchEnd::Reload);
                        break;
                    }
                    if resp.created() {
                        // The watch is established: the failure streak is over.
                        *failures = 0;
                        if let Some(h) = resp.header()
                            && (h.cluster_id() != pos.cluster_id || h.revision() < pos.revision)
                        {
                            tracing::warn!(
                                prefix,
                                revision = pos.revision,
                                etcd_revision = h.revision(),
                                "etcd resolver: etcd was reset or replaced, reloading"
                            );
                            end = Some(WatchEnd::Reload);
                            break;
                        }
                    }
                    pending |= apply(set, &resp, pos);
                }
                Some(Err(e)) => {
                    tracing::warn!(prefix, error = %e, "etcd resolver: watch error, keeping the last known endpoints and reconnecting");
                    end = Some(WatchEnd::Failed);
                    break;
                }
                None => {
                    tracing::warn!(
                        prefix,
                        "etcd resolver: watch stream ended, keeping the last known endpoints and reconnecting"
                    );
                    end = Some(WatchEnd::Failed);
                    break;
                }
            }
            match responses.next().now_or_never() {
                Some(ready) => next = ready,
                None => break,
            }
        }
        // Events applied before a failure are real (they came from etcd, in order): publish
        // them, whatever the gap.
        let now = tokio::time::Instant::now();
        if pending && (end.is_some() || now >= gap_over(last, set)) {
            out.publish(set, prefix);
            empty(set);
            pending = false;
            last = Some(now);
        }
        if let Some(end) = end {
            return end;
        }
    }
}

/// Why etcd cancelled the watch, if it did.
fn cancelled(resp: &WatchResponse) -> Option<String> {
    if resp.compact_revision() > 0 {
        return Some(format!("compacted at revision {}", resp.compact_revision()));
    }
    if resp.canceled() {
        return Some(format!("cancelled: {}", resp.cancel_reason()));
    }
    None
}

/// Applies the events of one watch response and advances `pos`; returns whether the distinct addresses
/// changed.
fn apply(set: &mut EndpointSet, resp: &WatchResponse, pos: &mut Position) -> bool {
    let mut changed = false;
    for event in resp.events() {
        let Some(kv) = event.kv() else { continue };
        changed |= match event.event_type() {
            EventType::Put => set.put(kv.key(), kv.value()),
            EventType::Delete => set.delete(kv.key()),
        };
        pos.revision = pos.revision.max(kv.mod_revision());
    }
    // A progress notification (no events): everything up to the header revision has been delivered.
    if resp.events().is_empty()
        && !resp.created()
        && let Some(h) = resp.header()
    {
        pos.revision = pos.revision.max(h.revision());
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(set: &EndpointSet) -> Vec<String> {
        set.addresses()
    }

    #[test]
    fn duplicates_collapse_and_delete_needs_all_keys_gone() {
        let mut s = EndpointSet::default();
        assert!(s.put(b"svc/1", b"10.0.0.1:80"));
        assert!(
            !s.put(b"svc/2", b"10.0.0.1:80"),
            "same address under another key is not new"
        );
        assert_eq!(addrs(&s), ["10.0.0.1:80"]);
        assert!(!s.delete(b"svc/1"), "svc/2 still holds the address");
        assert_eq!(addrs(&s), ["10.0.0.1:80"]);
        assert!(s.delete(b"svc/2"));
        assert!(addrs(&s).is_empty());
        assert!(
            !s.delete(b"svc/2"),
            "deleting an unknown key changes nothing"
        );
    }

    #[test]
    fn unchanged_put_is_not_an_update_and_moves_are() {
        let mut s = EndpointSet::default();
        assert!(s.put(b"svc/1", b"10.0.0.1:80"));
        assert!(!s.put(b"svc/1", b"10.0.0.1:80"));
        assert!(!s.put(b"svc/1", b" 10.0.0.1:80 "), "whitespace is trimmed");
        assert!(
            s.put(b"svc/1", b"10.0.0.2:80"),
            "a key moving to a new address"
        );
        assert_eq!(addrs(&s), ["10.0.0.2:80"]);
        assert!(
            s.put(b"svc/1", b""),
            "an empty value removes the key's address"
        );
        assert!(addrs(&s).is_empty());
    }

    #[test]
    fn reload_replaces_everything() {
        let mut s = EndpointSet::default();
        s.put(b"svc/1", b"a:1");
        s.put(b"svc/2", b"b:1");
        s.reload([(&b"svc/3"[..], &b"c:1"[..]), (&b"svc/4"[..], &b"c:1"[..])]);
        assert_eq!(addrs(&s), ["c:1"]);
        assert!(!s.delete(b"svc/3") && s.delete(b"svc/4"));
    }

    #[test]
    fn publish_only_on_change() {
        let (tx, mut rx) = watch::channel(None);
        let mut s = EndpointSet::default();
        let mut out = Out::new(tx);
        out.publish(&s, "svc/");
        assert!(rx.has_changed().unwrap());
        assert_eq!(
            rx.borrow_and_update().as_deref().map(Vec::len),
            Some(0),
            "a confirmed empty prefix"
        );
        out.publish(&s, "svc/");
        assert!(!rx.has_changed().unwrap());
        s.put(b"svc/1", b"a:1");
        out.publish(&s, "svc/");
        assert_eq!(
            rx.borrow_and_update().as_deref().unwrap().as_slice(),
            ["a:1"]
        );
    }

    #[test]
    fn an_update_logs_what_changed_not_the_whole_set() {
        let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let before: Vec<String> = (0..100).map(|i| format!("10.0.0.{i:03}:80")).collect();
        let mut after = before[10..].to_vec();
        after.push("10.0.9.1:80".into());
        let line = Changes::between(&before, &after).to_string();
        assert_eq!(
            line,
            "+1 [10.0.9.1:80] -10 [10.0.0.000:80 10.0.0.001:80 10.0.0.002:80 10.0.0.003:80 10.0.0.004:80 ...]"
        );
        assert_eq!(Changes::between(&s(&["a"]), &s(&["a"])).to_string(), "");
        assert_eq!(
            Changes::between(&[], &s(&["a", "b"])).to_string(),
            "+2 [a b]"
        );
    }

    #[test]
    fn an_emptied_prefix_keeps_the_endpoints_until_a_key_appears() {
        let (tx, mut rx) = watch::channel(None);
        let mut s = EndpointSet::default();
        let mut out = Out::new(tx);
        s.put(b"svc/1", b"a:1");
        s.put(b"svc/2", b"b:2");
        out.publish(&s, "svc/");
        rx.mark_unchanged();
        s.delete(b"svc/1");
        s.delete(b"svc/2");
        out.publish(&s, "svc/");
        assert!(!rx.has_changed().unwrap(), "no empty set published");
        assert_eq!(rx.borrow().as_deref().unwrap().as_slice(), ["a:1", "b:2"]);
        s.put(b"svc/3", b"c:3");
        out.publish(&s, "svc/");
        assert_eq!(
            rx.borrow_and_update().as_deref().unwrap().as_slice(),
            ["c:3"],
            "a new key replaces the kept set"
        );
        // a reload that finds the prefix empty: every endpoint gone within a TTL comes back
        s.reload(std::iter::empty());
        out.publish(&s, "svc/");
        assert_eq!(
            rx.borrow_and_update().as_deref().unwrap().as_slice(),
            ["a:1", "b:2", "c:3"]
        );
    }

    #[test]
    fn bad_config_is_an_error_at_once() {
        let err = |c: EtcdConf| resolve(c).unwrap_err().to_string();
        assert!(err(EtcdConf::new(Vec::<String>::new(), "k")).contains("empty etcd hosts"));
        assert!(err(EtcdConf::new(["127.0.0.1:2379"], "")).contains("empty etcd key"));
        let mut tls = EtcdConf::new(["127.0.0.1:2379"], "k");
        tls.cert_file = "/nonexistent/zrpc/cert.pem".into();
        tls.cert_key_file = "/nonexistent/zrpc/key.pem".into();
        tls.ca_cert_file = "/nonexistent/zrpc/ca.pem".into();
        assert!(
            err(tls).contains("/nonexistent/zrpc/"),
            "names the unreadable file"
        );
        assert!(err(EtcdConf::new(["127.0.0.1:2379"], "k")).contains("tokio runtime"));
    }

    #[test]
    fn registry_key_ignores_host_order() {
        let a = EtcdConf::new(["h2:2379", "h1:2379"], "k");
        let b = EtcdConf::new(["h1:2379", " h2:2379", "h1:2379"], "k");
        assert_eq!(registry_key(&a), registry_key(&b));
        assert_ne!(
            registry_key(&a),
            registry_key(&EtcdConf::new(["h1:2379"], "k"))
        );
        // another account, or other certificates: a watch of its own
        let mut other = a.clone();
        other.user = "reader".to_owned();
        other.pass = "secret".to_owned();
        assert_ne!(registry_key(&a), registry_key(&other));
        let mut tls = a.clone();
        tls.ca_cert_file = "ca.pem".to_owned();
        assert_ne!(registry_key(&a), registry_key(&tls));
    }

    #[test]
    fn the_publish_gap_grows_with_the_set_and_is_bounded() {
        assert_eq!(publish_gap(3), Duration::from_micros(3));
        assert_eq!(publish_gap(10_000), Duration::from_millis(10));
        assert_eq!(publish_gap(1_000_000), Duration::from_millis(50));
    }

    #[test]
    fn backoff_is_about_a_second() {
        for f in 1..10 {
            let d = backoff(f);
            assert!(
                d >= Duration::from_millis(800) && d <= Duration::from_millis(2400),
                "{d:?}"
            );
        }
    }
}
