//! The etcd publisher: one key per server, kept alive and healed (go-zero `core/discov/publisher.go`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn,
    TxnOp, WatchFilterType, WatchOptions, WatchStream,
};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use zrpc_core::conf::EtcdConf;
use zrpc_core::etcd::{REQUEST_TIMEOUT, connect, retry_unsent};

/// Lease time-to-live in seconds (go-zero `discov.TimeToLive`).
pub(crate) const TIME_TO_LIVE: i64 = 10;
/// The longest wait between attempts while etcd is unreachable (go-zero's 1 s ticker); each pause
/// is 50 to 80 % of it, so that with the attempt's own round trips a healed link is used within it.
pub(crate) const RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// Upper bound of [`Publisher::stop`]: the revoke is abandoned after it (the lease then expires).
pub(crate) const STOP_TIMEOUT: Duration = Duration::from_secs(2);

const TTL: Duration = Duration::from_secs(TIME_TO_LIVE as u64);

/// Where the registration stands (see [`Publisher::state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistrationState {
    /// Not (or no longer) registered: etcd unreachable, or the key is being restored.
    NotRegistered,
    /// The key exists in etcd under a live lease.
    Registered {
        /// The full key, `Key/<lease id>` or `Key/<ID>`.
        key: String,
        /// The lease the key is attached to.
        lease: i64,
    },
    /// Taken out of discovery by an operator ([`Publisher::pause`],
    /// [`ServerHandle::pause_registration`](crate::ServerHandle::pause_registration)): the key
    /// and its lease are gone, nothing is kept in etcd (an etcd restart meanwhile changes
    /// nothing), and the server goes on serving the connections and calls it has. Reported
    /// once etcd confirmed the revoke: while it cannot be reached, the state stays
    /// [`NotRegistered`](Self::NotRegistered) and the revoke is retried (each attempt waits
    /// up to 2 s, then 0.5-0.8 s before the next).
    Paused,
    /// [`Publisher::stop`] ran (the lease was revoked if etcd was reachable).
    Stopped,
}

/// Keeps one `Key/<lease id>` (or `Key/<ID>`) -> `host:port` entry alive in etcd.
///
/// [`Publisher::spawn`] returns at once; a task then registers and supervises the entry forever:
/// - grants a lease (TTL 10 s), puts the key, renews the lease every TTL/3 and watches the key;
/// - keepalive stream broken (etcd restart, network cut): reconnects and keeps the **same** lease alive
///   if etcd still knows it, so the key stays the same;
/// - lease gone (TTL 0 / not found): grants a new lease and puts the key again. A new lease is only
///   used once the old one is known to be gone, so at most one key per server exists at any time
///   (go-zero can leave one per watch error, #5260);
/// - key deleted by someone else: puts it back under the current lease;
/// - failures are retried at least once a second (pauses of 0.5 to 0.8 s), forever; each state
///   change is logged once.
///
/// When etcd is down at start the server still serves; the log says it is not yet discoverable.
///
/// [`Publisher::pause`] takes the server out of discovery without stopping it (the lease is
/// revoked, so the key is gone at once for every watcher, go-zero's and zrpc's), and
/// [`Publisher::resume`] registers it again under a new lease. While paused nothing is kept in
/// etcd, so a restart of etcd cannot bring the key back.
#[derive(Debug)]
pub struct Publisher {
    stop: watch::Sender<bool>,
    pause: watch::Sender<bool>,
    state: watch::Receiver<RegistrationState>,
    task: Option<JoinHandle<()>>,
}

struct Ctx {
    conf: EtcdConf,
    value: String,
    state: watch::Sender<RegistrationState>,
    /// When etcd last renewed the lease (Unix ms; 0 = never), for the admin view.
    renewed: Arc<AtomicU64>,
}

impl Ctx {
    /// etcd renewed (or granted) the lease now.
    fn renewed_now(&self) {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.renewed.store(unix_ms, Ordering::Relaxed);
    }
}

impl Publisher {
    /// Starts registering `value` (`host:port`) under `conf.key`. Must be called inside a Tokio runtime.
    pub fn spawn(conf: EtcdConf, value: String) -> Publisher {
        let (pause, paused) = watch::channel(false);
        let (state_tx, _) = watch::channel(RegistrationState::NotRegistered);
        Publisher::spawn_with(conf, value, pause, paused, state_tx, Arc::default())
    }

    /// [`Publisher::spawn`] paused and resumed by `pause` (also through `paused`, a receiver
    /// of it that a server's handle may have made before), its state published on `state`,
    /// the time of the lease's last renewal (Unix ms) on `renewed`.
    pub(crate) fn spawn_with(
        conf: EtcdConf,
        value: String,
        pause: watch::Sender<bool>,
        paused: watch::Receiver<bool>,
        state_tx: watch::Sender<RegistrationState>,
        renewed: Arc<AtomicU64>,
    ) -> Publisher {
        let (stop, stop_rx) = watch::channel(false);
        let state = state_tx.subscribe();
        state_tx.send_replace(RegistrationState::NotRegistered);
        let ctx = Arc::new(Ctx {
            conf,
            value,
            state: state_tx,
            renewed,
        });
        let task = tokio::spawn(supervise(ctx, stop_rx, paused));
        Publisher {
            stop,
            pause,
            state,
            task: Some(task),
        }
    }

    /// Takes the server out of discovery until [`resume`](Publisher::resume): the lease is
    /// revoked (its key with it); the server keeps serving. Idempotent.
    pub fn pause(&self) {
        self.pause.send_replace(true);
    }

    /// Registers the server again after [`pause`](Publisher::pause), under a new lease (or
    /// under the old one, when the pause's revoke has not reached etcd yet). Idempotent.
    pub fn resume(&self) {
        self.pause.send_replace(false);
    }

    /// The registration state; `changed().await` on it to wait for a transition.
    pub fn state(&self) -> watch::Receiver<RegistrationState> {
        self.state.clone()
    }

    /// The registered key, if registered right now.
    pub fn current_key(&self) -> Option<String> {
        match &*self.state.borrow() {
            RegistrationState::Registered { key, .. } => Some(key.clone()),
            _ => None,
        }
    }

    /// The lease of the registered key, if registered right now.
    pub fn current_lease(&self) -> Option<i64> {
        match &*self.state.borrow() {
            RegistrationState::Registered { lease, .. } => Some(*lease),
            _ => None,
        }
    }

    /// Deregisters: stops the supervision and revokes the lease, so the key disappears at once.
    /// Takes at most about 2 s; if etcd cannot be reached the key expires with its lease.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(mut task) = self.task.take() {
            // The task bounds its revoke by STOP_TIMEOUT; this is a safety net above it.
            let bound = STOP_TIMEOUT + Duration::from_millis(500);
            if tokio::time::timeout(bound, &mut task).await.is_err() {
                task.abort();
                tracing::warn!("etcd publisher did not stop within {bound:?}; abandoned");
            }
        }
    }
}

impl Drop for Publisher {
    /// Dropping without [`Publisher::stop`] still deregisters, in the background.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Jittered retry pause, 50 to 80 % of `RETRY_INTERVAL`: servers that lost etcd together do not
/// retry in step, and a registration is back within `RETRY_INTERVAL` of a partition's end (go-zero
/// retries on a 1 s ticker), its connect, grant and put included.
fn retry_pause() -> Duration {
    let base = RETRY_INTERVAL.as_millis() as u64;
    Duration::from_millis(
        SmallRng::seed_from_u64(zrpc_core::random_seed()).random_range(base / 2..=base * 4 / 5),
    )
}

/// Log a failure once per distinct reason (repeats go to debug).
#[derive(Default)]
struct Reporter {
    last: Option<String>,
    was_registered: bool,
}

impl Reporter {
    fn failed(&mut self, ctx: &Ctx, reason: &str) {
        let kind = reason.split(':').next().unwrap_or(reason).to_owned();
        if self.last.as_deref() == Some(kind.as_str()) {
            tracing::debug!(key = %ctx.conf.key, "etcd registration still failing: {reason}");
            return;
        }
        if self.was_registered {
            tracing::warn!(key = %ctx.conf.key, value = %ctx.value,
                "etcd registration lost, not discoverable until restored (retrying every ~1s): {reason}");
        } else {
            tracing::warn!(key = %ctx.conf.key, value = %ctx.value,
                "not yet discoverable: etcd registration failed (retrying every ~1s): {reason}");
        }
        self.last = Some(kind);
    }

    fn registered(&mut self, ctx: &Ctx, key: &str, lease: i64) {
        tracing::info!(%key, value = %ctx.value, lease, "registered in etcd");
        self.last = None;
        self.was_registered = true;
    }
}

/// Resolves once `rx` holds `want` (never, when its sender is gone: the value cannot change).
async fn until(rx: &mut watch::Receiver<bool>, want: bool) {
    if rx.wait_for(|v| *v == want).await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn supervise(
    ctx: Arc<Ctx>,
    mut stop: watch::Receiver<bool>,
    mut paused: watch::Receiver<bool>,
) {
    let mut lease: Option<i64> = None;
    let mut client: Option<Client> = None;
    let mut report = Reporter::default();
    loop {
        if *paused.borrow_and_update() {
            // Out of discovery: the key goes with its lease at once, and nothing stays in etcd
            // that a restart of etcd could bring back.
            ctx.state.send_replace(RegistrationState::NotRegistered);
            let resumed = match lease {
                Some(id) => {
                    match confirm_revoke(&ctx, &mut client, id, &mut stop, &mut paused).await {
                        Revoke::Confirmed => false,
                        Revoke::Resumed => true,
                        Revoke::Stopped => break,
                    }
                }
                None => false,
            };
            if !resumed {
                lease = None;
                client = None;
                ctx.state.send_replace(RegistrationState::Paused);
                tracing::warn!(key = %ctx.conf.key, value = %ctx.value,
                    "registration paused: out of discovery until resumed, still serving");
                tokio::select! {
                    biased;
                    _ = stop.wait_for(|s| *s) => break,
                    () = until(&mut paused, false) => {}
                }
            }
            tracing::info!(key = %ctx.conf.key, value = %ctx.value, "registration resumed");
            report = Reporter::default();
            continue;
        }
        let reason = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            () = until(&mut paused, true) => continue,
            reason = attempt(&ctx, &mut client, &mut lease, &mut report) => reason,
        };
        ctx.state.send_replace(RegistrationState::NotRegistered);
        report.failed(&ctx, &reason);
        // A fresh client next time: the old one may hold a dead connection.
        client = None;
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            () = until(&mut paused, true) => {}
            _ = tokio::time::sleep(retry_pause()) => {}
        }
    }
    ctx.state.send_replace(RegistrationState::NotRegistered);
    if let Some(id) = lease
        && let Err(e) = revoke(&ctx, client, id).await
    {
        tracing::warn!(key = %ctx.conf.key, lease = id,
            "etcd deregistration {e}; the key expires with its lease within {TIME_TO_LIVE}s");
    }
    ctx.state.send_replace(RegistrationState::Stopped);
}

/// How a pause's revoke ended.
enum Revoke {
    /// etcd confirmed it: the key is gone.
    Confirmed,
    /// Resumed before etcd confirmed it: the lease is kept, so the registration goes on with
    /// it and puts no second key.
    Resumed,
    /// Stopped meanwhile: the stop revokes once more, within its own bound.
    Stopped,
}

/// Revokes lease `id` until etcd confirms it (a pause is reported only then: until then the
/// key may still be discoverable; when etcd cannot be reached, the lease expires at most a TTL
/// after its last renewal, but an etcd restarted meanwhile renews it), unless the server is
/// resumed or stopped first.
async fn confirm_revoke(
    ctx: &Ctx,
    client: &mut Option<Client>,
    id: i64,
    stop: &mut watch::Receiver<bool>,
    paused: &mut watch::Receiver<bool>,
) -> Revoke {
    let mut failures = 0u32;
    loop {
        let revoked = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => return Revoke::Stopped,
            revoked = revoke(ctx, client.take(), id) => revoked,
        };
        match revoked {
            Ok(()) => return Revoke::Confirmed,
            Err(e) if failures == 0 => tracing::warn!(key = %ctx.conf.key, lease = id,
                "etcd deregistration {e}; the key stays discoverable until etcd confirms the \
                 revoke (retrying) or the lease expires"),
            Err(e) => tracing::debug!(key = %ctx.conf.key, lease = id,
                "etcd deregistration still failing: {e}"),
        }
        failures += 1;
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => return Revoke::Stopped,
            () = until(paused, false) => return Revoke::Resumed,
            () = tokio::time::sleep(retry_pause()) => {}
        }
    }
}

/// Revokes lease `id` (its key with it) within `STOP_TIMEOUT`: `Ok` once etcd confirmed it (or
/// no longer knows the lease), else what failed.
async fn revoke(ctx: &Ctx, client: Option<Client>, id: i64) -> Result<(), String> {
    let work = async {
        let client = match client {
            Some(c) => c,
            None => connect(&ctx.conf).await.map_err(|e| e.to_string())?,
        };
        let revoked = retry_unsent(|| {
            let mut c = client.clone();
            async move { c.lease_revoke(id).await }
        });
        match revoked.await {
            Ok(_) => Ok(()),
            Err(e) if is_lease_gone(&e) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    };
    let res = match tokio::time::timeout(STOP_TIMEOUT, work).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("failed: {e}")),
        Err(_) => Err(format!("timed out after {STOP_TIMEOUT:?}")),
    };
    if res.is_ok() {
        tracing::info!(key = %ctx.conf.key, lease = id, "deregistered from etcd");
    }
    res
}

fn is_lease_gone(e: &etcd_client::Error) -> bool {
    e.to_string().contains("lease not found")
}

/// Bounds an etcd call on a clone of `client` (the client's own timeout does not cover waiting
/// for a connection); a call that never reached etcd is sent again (`retry_unsent`: a member
/// that is down must not fail the registration while the others answer).
async fn bounded<T, Fut>(
    what: &str,
    client: &Client,
    op: impl Fn(Client) -> Fut,
) -> Result<T, Failure>
where
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let call = retry_unsent(|| op(client.clone()));
    match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) if is_lease_gone(&e) => Err(Failure::LeaseGone),
        Ok(Err(e)) => Err(Failure::Broken(format!("{what}: {e}"))),
        Err(_) => Err(Failure::Broken(format!(
            "{what}: no answer within {REQUEST_TIMEOUT:?}"
        ))),
    }
}

enum Failure {
    /// The lease is known to be gone (and so is its key): a new one may be granted.
    LeaseGone,
    /// Anything else: reconnect and retry with the same lease.
    Broken(String),
}

/// Connects if needed, then registers and supervises until something breaks; returns why.
async fn attempt(
    ctx: &Ctx,
    client: &mut Option<Client>,
    lease: &mut Option<i64>,
    report: &mut Reporter,
) -> String {
    let c = match client {
        Some(c) => c.clone(),
        None => match connect(&ctx.conf).await {
            Ok(c) => client.insert(c).clone(),
            Err(e) => return format!("connect: {e}"),
        },
    };
    loop {
        match session(ctx, c.clone(), lease, report).await {
            Failure::LeaseGone => {
                if let Some(id) = lease.take() {
                    tracing::warn!(key = %ctx.conf.key, lease = id,
                        "etcd lease expired or revoked; registering under a new lease");
                }
                ctx.state.send_replace(RegistrationState::NotRegistered);
            }
            Failure::Broken(reason) => return reason,
        }
    }
}

fn full_key(conf: &EtcdConf, lease: i64) -> String {
    let id = if conf.id > 0 { conf.id } else { lease };
    format!("{}/{id}", conf.key)
}

/// One registration under one lease; returns when the lease is gone or something broke.
async fn session(
    ctx: &Ctx,
    mut client: Client,
    lease: &mut Option<i64>,
    report: &mut Reporter,
) -> Failure {
    let id = match *lease {
        Some(id) => id,
        None => match bounded("grant lease", &client, |mut c| async move {
            c.lease_grant(TIME_TO_LIVE, None).await
        })
        .await
        {
            Ok(g) => *lease.insert(g.id()),
            Err(f) => return f,
        },
    };
    let (mut keeper, mut acks) = match bounded("keep lease alive", &client, |mut c| async move {
        c.lease_keep_alive(id).await
    })
    .await
    {
        Ok(pair) => pair,
        Err(f) => return f,
    };
    let key = full_key(&ctx.conf, id);
    let rev = match put_key(&mut client, &key, &ctx.value, id).await {
        Ok(rev) => rev,
        Err(f) => return f,
    };
    let options = WatchOptions::new()
        .with_start_revision(rev + 1)
        .with_filters([WatchFilterType::NoPut]);
    let watch = |mut c: Client| {
        let (key, options) = (key.clone(), options.clone());
        async move { c.watch(key, Some(options)).await }
    };
    let mut deletes = match bounded("watch key", &client, watch).await {
        Ok(w) => w,
        Err(f) => return f,
    };
    ctx.renewed_now();
    ctx.state.send_replace(RegistrationState::Registered {
        key: key.clone(),
        lease: id,
    });
    report.registered(ctx, &key, id);
    keep(
        ctx,
        &mut client,
        &key,
        id,
        &mut keeper,
        &mut acks,
        &mut deletes,
    )
    .await
}

/// Puts `key = value` under `lease` unless it is already exactly that; returns the store revision.
async fn put_key(client: &mut Client, key: &str, value: &str, lease: i64) -> Result<i64, Failure> {
    let txn = Txn::new()
        .when([
            Compare::value(key, CompareOp::Equal, value),
            Compare::lease(key, CompareOp::Equal, lease),
        ])
        .or_else([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        )]);
    let resp = bounded("put key", client, |mut c| {
        let txn = txn.clone();
        async move { c.txn(txn).await }
    })
    .await?;
    Ok(resp.header().map(|h| h.revision()).unwrap_or(0))
}

/// The steady state: renew every TTL/3, watch for deletes, detect a dead stream.
async fn keep(
    ctx: &Ctx,
    client: &mut Client,
    key: &str,
    lease: i64,
    keeper: &mut LeaseKeeper,
    acks: &mut LeaseKeepAliveStream,
    deletes: &mut WatchStream,
) -> Failure {
    let period = TTL / 3;
    let mut tick = tokio::time::interval_at(Instant::now() + period, period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_ack = Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                // Two renewals unanswered: the stream is dead even if no error surfaced.
                if last_ack.elapsed() > period * 2 + period / 2 {
                    return Failure::Broken("keepalive: no answer from etcd".to_owned());
                }
                if let Err(e) = keeper.keep_alive().await {
                    return Failure::Broken(format!("keepalive: {e}"));
                }
            }
            ack = acks.message() => match ack {
                Ok(Some(r)) if r.ttl() > 0 => {
                    last_ack = Instant::now();
                    ctx.renewed_now();
                }
                Ok(Some(_)) => return Failure::LeaseGone,
                Ok(None) => return Failure::Broken("keepalive: stream closed".to_owned()),
                Err(e) => return Failure::Broken(format!("keepalive: {e}")),
            },
            event = deletes.message() => match event {
                Ok(Some(resp)) if resp.canceled() => {
                    return Failure::Broken(format!("watch: canceled: {}", resp.cancel_reason()));
                }
                Ok(Some(resp)) => {
                    if resp.events().iter().any(|e| e.event_type() == EventType::Delete) {
                        tracing::info!(%key, value = %ctx.value, "etcd key deleted by someone else; putting it back");
                        if let Err(f) = put_key(client, key, &ctx.value, lease).await {
                            return f;
                        }
                    }
                }
                Ok(None) => return Failure::Broken("watch: stream closed".to_owned()),
                Err(e) => return Failure::Broken(format!("watch: {e}")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_pause_is_jittered_and_shorter_than_the_interval() {
        let pauses: Vec<Duration> = (0..1000).map(|_| retry_pause()).collect();
        assert!(
            pauses
                .iter()
                .all(|p| *p >= RETRY_INTERVAL / 2 && *p <= RETRY_INTERVAL * 4 / 5),
            "{pauses:?}"
        );
        assert!(pauses.iter().any(|p| *p != pauses[0]), "jittered");
    }
}
