//! The balancer: the endpoint set (kept current from the resolver's updates) and the pick.
//!
//! Its interface to the client is narrow: wait for the first endpoint set
//! ([`Balancer::wait_first_set`]) and pick an endpoint for a request, avoiding some
//! ([`Balancer::pick`]); the picked endpoint sends the attempt ([`Pick::send`]). Which requests
//! are sent, and again where, is the client's retry stage's (`crate::retry`).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tonic::body::Body;

use super::consistent_hash::ConsistentHash;
use super::endpoint::{Attempt, ConnectOptions, Endpoint};
use super::stats::Clock;
use super::{P2cPicker, RoundRobin, ThreadRng};
use crate::conf::BalancerName;
use crate::resolver::{EndpointUpdates, ResolverStatus, subset};

/// The shared state of one client's balancer.
pub(crate) struct Shared {
    pub(crate) target: Arc<str>,
    kind: BalancerName,
    p2c: P2cPicker,
    rr: RoundRobin,
    ring: ConsistentHash,
    set: ArcSwap<Vec<Arc<Endpoint>>>,
    /// True once the first endpoint set has been applied.
    ready: watch::Sender<bool>,
    connect: ConnectOptions,
    seed: u64,
    /// Never sent: its receivers see an error once the balancer is dropped.
    alive: watch::Sender<()>,
    /// The resolver's status, quoted in "no endpoint" errors.
    status: ResolverStatus,
    /// When the last set was applied (Unix ms; 0 = never), for the admin view.
    updated_ms: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancer")
            .field("target", &self.target)
            .field("balancer", &self.kind)
            .field(
                "endpoints",
                &self
                    .set
                    .load()
                    .iter()
                    .map(|e| e.addr.clone())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// The balancer (cheap to clone): the client's retry stage picks through it.
#[derive(Debug, Clone)]
pub(crate) struct Balancer {
    pub(crate) shared: Arc<Shared>,
}

impl Balancer {
    /// Creates the balancer and spawns the task applying `updates` (it ends when the balancer is
    /// dropped or the resolver closes; the last set stays). Its "no endpoint" errors quote
    /// `status` (the resolver's). With `anchor` (the client's default timeout), the update task
    /// also keeps a timer anchored in the runtime's timer wheel (see [`anchor_period`]).
    pub(crate) fn with_status(
        target: Arc<str>,
        kind: BalancerName,
        mut updates: EndpointUpdates,
        connect: ConnectOptions,
        seed: u64,
        status: ResolverStatus,
        anchor: Option<Duration>,
    ) -> Balancer {
        let epoch = epoch();
        let shared = Arc::new(Shared {
            target,
            kind,
            p2c: P2cPicker::new(epoch),
            rr: RoundRobin::new(epoch),
            ring: ConsistentHash::default(),
            set: ArcSwap::from_pointee(Vec::new()),
            ready: watch::channel(false).0,
            connect,
            seed,
            alive: watch::channel(()).0,
            status,
            updated_ms: std::sync::atomic::AtomicU64::new(0),
        });
        if let Some(set) = updates.borrow_and_update().clone() {
            shared.apply(&set);
        }
        let weak = Arc::downgrade(&shared);
        let alive = shared.alive.subscribe();
        let period = anchor.and_then(anchor_period);
        tokio::spawn(async move { apply_updates(weak, updates, alive, period).await });
        Balancer { shared }
    }
}

/// The shortest default timeout worth an anchor timer (its period is half the timeout: shorter
/// timeouts would wake the runtime too often for what a call saves).
const MIN_ANCHORED_TIMEOUT: Duration = Duration::from_millis(200);

/// The period of the anchor timer for calls whose timeout is `timeout`, if any.
///
/// Every call with a deadline arms a timer (its attempt's). tokio's time driver wakes its
/// parked I/O driver (an `eventfd` write) whenever a timer is inserted earlier than the wake-up
/// it last planned, and with no other
/// timer in the wheel that plan is "never": so each serial call would pay one more system call,
/// and on a multi-thread runtime a wake-up of the worker parked on the driver, which then finds
/// nothing to do. A timer of our own kept in the wheel at most `timeout / 2` ahead makes the
/// driver's plan earlier than any call's deadline (at least `timeout` ahead), so inserting the
/// call's timer wakes nobody. Its cost: the
/// update task wakes every period (about once a second for go-zero's 2 s default, plus the
/// wheel's cascade), against one wake-up saved per call. No tokio or tower API exposes this;
/// `tokio::time::Interval` would tick the same way but still needs the task that polls it,
/// which is why the balancer's update task, already there, carries it.
pub(crate) fn anchor_period(timeout: Duration) -> Option<Duration> {
    (timeout >= MIN_ANCHORED_TIMEOUT).then(|| timeout / 2)
}

fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// How often the balancer looks for endpoints whose calls stalled
/// ([`Endpoint::check_stall`](super::endpoint::Endpoint)).
const STALL_CHECK: Duration = Duration::from_millis(100);

/// Applies each update until the balancer is dropped (after the resolver closes, the last set
/// stays). Checks the endpoints for stalled calls every [`STALL_CHECK`]. With `anchor`, keeps a
/// timer at most that far ahead in the runtime's wheel ([`anchor_period`]).
async fn apply_updates(
    shared: Weak<Shared>,
    mut updates: EndpointUpdates,
    mut alive: watch::Receiver<()>,
    anchor: Option<Duration>,
) {
    let period = anchor.unwrap_or(Duration::MAX);
    let timer = tokio::time::sleep(anchor.unwrap_or_default());
    tokio::pin!(timer);
    let mut stalls = tokio::time::interval(STALL_CHECK);
    stalls.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closed = false;
    loop {
        tokio::select! {
            r = updates.changed(), if !closed => if r.is_err() {
                // the last set stays: the stall checks (and the anchor) go on serving its calls
                closed = true;
                continue;
            },
            _ = alive.changed() => return,
            () = &mut timer, if anchor.is_some() => {
                timer.as_mut().reset(tokio::time::Instant::now() + period);
                continue;
            }
            due = stalls.tick() => {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let clock = shared.p2c.clock();
                let now = clock.coarse_now();
                // a tick this late: the runtime did not run meanwhile (starved of CPU, or the
                // process was stopped), and the silence it saw says nothing of the servers
                let late = due.elapsed() > STALL_CHECK;
                for e in shared.set.load().iter() {
                    e.check_stall(clock, now, late);
                }
                continue;
            }
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if let Some(set) = updates.borrow_and_update().clone() {
            shared.apply(&set);
        }
    }
}

impl Shared {
    /// Applies an endpoint set: subset of at most 32 ([`subset::DEFAULT_SUBSET_SIZE`]; all of
    /// them for `consistent_hash`, whose clients agree on a key's server only over one set),
    /// existing endpoints (and their stats and connections) kept by address, new ones created
    /// cold.
    pub(crate) fn apply(&self, addrs: &[String]) {
        // An address that cannot be dialled takes no place in the subset: a value under the
        // key that is not `host:port` would push a real endpoint out (or all of them).
        let mut invalid = None;
        let mut invalid_count = 0usize;
        let valid: Vec<String> = addrs
            .iter()
            .filter(|a| match super::endpoint::parse_address(a) {
                Ok(_) => true,
                Err(e) => {
                    invalid_count += 1;
                    invalid.get_or_insert((crate::resolver::clipped(a), e));
                    false
                }
            })
            .cloned()
            .collect();
        if let Some((addr, err)) = invalid {
            tracing::error!(target = %self.target, invalid = invalid_count, example = %addr,
                "endpoint addresses ignored: {err}");
        }
        let size = match self.kind {
            BalancerName::ConsistentHash => valid.len(),
            _ => subset::DEFAULT_SUBSET_SIZE,
        };
        // distinct addresses (`select` counts a duplicate once)
        let chosen = subset::select(&valid, self.seed, size);
        let old = self.set.load();
        let by_addr: HashMap<&str, &Arc<Endpoint>> = old.iter().map(|e| (&*e.addr, e)).collect();
        let mut next = Vec::with_capacity(chosen.len());
        for addr in &chosen {
            match by_addr.get(addr.as_str()) {
                Some(e) => next.push(Arc::clone(e)),
                None => match Endpoint::new(addr, &self.connect) {
                    Ok(e) => {
                        let e = Arc::new(e);
                        e.watch_connection(self.p2c.clock());
                        next.push(e);
                    }
                    Err(err) => {
                        tracing::error!(target = %self.target, endpoint = %addr, "endpoint ignored: {err}")
                    }
                },
            }
        }
        self.connect.ejection.set_len(next.len());
        // only a set of two or more can retry elsewhere: the connections peek before writes then
        let guarded = next.len() > 1;
        for e in &next {
            e.wire.set_guarded(guarded);
        }
        // at most the first 32 named: `consistent_hash` takes the whole fleet
        tracing::info!(target = %self.target, endpoints = next.len(),
            first = ?&chosen[..chosen.len().min(subset::DEFAULT_SUBSET_SIZE)], "endpoint set updated");
        if self.kind == BalancerName::ConsistentHash {
            self.ring.update(&next);
        }
        self.set.store(Arc::new(next));
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.updated_ms
            .store(unix_ms, std::sync::atomic::Ordering::Relaxed);
        self.ready.send_replace(true);
    }

    /// The current endpoints.
    pub(crate) fn endpoints(&self) -> Arc<Vec<Arc<Endpoint>>> {
        self.set.load_full()
    }

    /// Waits until the first endpoint set has been applied.
    pub(crate) async fn wait_ready(&self) {
        let mut rx = self.ready.subscribe();
        // the sender lives in `self`: `wait_for` cannot fail while we hold `&self`
        let _ = rx.wait_for(|r| *r).await;
    }

    pub(crate) fn clock(&self) -> Clock {
        self.p2c.clock()
    }

    pub(crate) fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// The pick of the balancer's policy (`BalancerName`) among `pool` for `req`, at `now` (ns
    /// since the picker's epoch: the attempt's start, [`Clock::nanos`]): the endpoint, counted
    /// in flight. `consistent_hash` reads the call's key from the request's extensions
    /// ([`HashKey`](super::consistent_hash::HashKey)) and walks the ring of the whole set,
    /// passing over the endpoints not in `pool`.
    ///
    /// # Errors
    ///
    /// Unavailable when `pool` is empty; `consistent_hash` without a key: InvalidArgument.
    #[inline]
    fn choose(
        &self,
        req: &http::Request<Body>,
        pool: &[Arc<Endpoint>],
        now: u64,
    ) -> Result<Arc<Endpoint>, tonic::Status> {
        let i = match self.kind {
            BalancerName::ConsistentHash => {
                return self
                    .ring
                    .pick(req.extensions().get(), pool, now)?
                    .ok_or_else(|| self.no_endpoint(pool.len()));
            }
            BalancerName::RoundRobin => self.rr.pick_at(pool, now),
            _ => self.p2c.pick_at(pool, now, &mut ThreadRng),
        };
        i.map(|i| Arc::clone(&pool[i]))
            .ok_or_else(|| self.no_endpoint(pool.len()))
    }

    /// The resolver's current problem, if any (etcd unreachable, empty key, DNS failure...).
    pub(crate) fn resolver_problem(&self) -> Option<Arc<str>> {
        self.status.problem()
    }

    /// No endpoint among `pool` (`0`: the set is empty): the resolver's problem, or the figure.
    fn no_endpoint(&self, pool: usize) -> tonic::Status {
        match self.status.problem() {
            Some(p) => self.unresolved(&p),
            None if pool == 0 => no_endpoint_status(format!(
                "no endpoint available for target {}: the resolver's last set has no endpoints",
                self.target
            )),
            None => no_endpoint_status(format!(
                "no endpoint available for target {}: none of the {pool} endpoints tried is usable",
                self.target
            )),
        }
    }

    fn unresolved(&self, problem: &str) -> tonic::Status {
        no_endpoint_status(format!(
            "no endpoint available for target {}: {problem}",
            self.target
        ))
    }

    /// Waits for the first endpoint set. Fails at once with the resolver's problem when it
    /// reports one (grpc-go fails the calls of a channel in TRANSIENT_FAILURE the same way),
    /// and at the call's deadline with `DeadlineExceeded` naming what is known (grpc-go's
    /// words for a pick that waited out its deadline), so the caller learns why.
    async fn wait_first_set(&self, deadline: Option<Instant>) -> Result<(), tonic::Status> {
        let started = tokio::time::Instant::now();
        let expiry = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = self.wait_ready() => Ok(()),
            problem = self.status.failed() => Err(self.unresolved(&problem)),
            () = expiry => Err(tonic::Status::deadline_exceeded(format!(
                "deadline exceeded while waiting for an endpoint of target {}: the resolver found \
                 none within {:?} (no answer from its source yet)",
                self.target,
                started.elapsed()
            ))),
        }
    }
}

/// The source of a "no endpoint" status: tells the metrics layer the call was dropped for that
/// reason (`rpc_client_dropped_total{reason="no_endpoint"}`).
#[derive(Debug)]
struct NoEndpoint;

impl std::fmt::Display for NoEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no endpoint")
    }
}

impl std::error::Error for NoEndpoint {}

fn no_endpoint_status(message: String) -> tonic::Status {
    let mut status = tonic::Status::unavailable(message);
    status.set_source(Arc::new(NoEndpoint));
    status
}

/// True when `err` is (or wraps) the balancer's "no endpoint available" status.
pub(crate) fn is_no_endpoint(err: &(dyn std::error::Error + 'static)) -> bool {
    crate::failure::find::<NoEndpoint>(err).is_some()
}

/// An endpoint picked for one attempt, counted in flight from the pick's instant.
#[derive(Debug)]
pub(crate) struct Pick {
    pub(crate) endpoint: Arc<Endpoint>,
    clock: Clock,
    /// The pick's instant (ns since the picker's epoch): the attempt's start.
    at: u64,
}

impl Pick {
    /// Sends `req` to the picked endpoint (see [`Endpoint::send`]).
    #[inline]
    pub(crate) fn send(
        self,
        req: http::Request<Body>,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
        target: &Arc<str>,
    ) -> Attempt {
        self.endpoint
            .send((self.clock, self.at), deadline, timeout, req, target)
    }

    /// Gives the pick up unsent (its in-flight count released, nothing recorded).
    pub(crate) fn abandon(self) {
        self.endpoint.stats.on_abandon();
    }

    /// True when the picked endpoint is in transport-failure back-off at the pick's instant
    /// (a connection refused, reset or lost by a call): sent there again now, a request would
    /// most likely meet the same failure. A suspect endpoint (calls stalled, a deadline, a lost
    /// connection, and no probe answered yet) is not: it may well answer.
    pub(crate) fn is_unreachable(&self) -> bool {
        self.endpoint.stats.is_unreachable(self.at)
    }
}

/// The balancer as the client's retry stage sees it: wait for the first endpoint set, and pick
/// an endpoint for a request, avoiding some. Cheap to clone.
impl Balancer {
    /// The target's name (logs, errors, metrics).
    pub(crate) fn target(&self) -> &Arc<str> {
        &self.shared.target
    }

    /// True once the first endpoint set has been applied (a pick can be tried).
    #[inline]
    pub(crate) fn is_ready(&self) -> bool {
        self.shared.is_ready()
    }

    /// Waits for the first endpoint set, until `deadline` (see [`Shared::wait_first_set`]).
    pub(crate) async fn wait_first_set(
        &self,
        deadline: Option<Instant>,
    ) -> Result<(), tonic::Status> {
        if self.is_ready() {
            return Ok(());
        }
        self.shared.wait_first_set(deadline).await
    }

    /// Picks an endpoint for `req` at `now` by the balancer's policy (`BalancerName`), among
    /// the endpoints not in `avoid` (among all of them when that leaves none), and counts it
    /// in flight. `Unavailable` naming the target (and the resolver's problem) when the set
    /// is empty.
    ///
    /// One precise clock read (`now`) serves the pick and the attempt's latency sample (and,
    /// from the client, its observing stage): a coarse read for the pick would come on top of
    /// the one the latency needs.
    #[inline]
    pub(crate) fn pick(
        &self,
        req: &http::Request<Body>,
        avoid: &[Arc<Endpoint>],
        now: Instant,
    ) -> Result<Pick, tonic::Status> {
        let shared = &*self.shared;
        let set = shared.set.load();
        if set.is_empty() {
            return Err(shared.no_endpoint(0));
        }
        let clock = shared.p2c.clock();
        let at = clock.nanos(now);
        let rest: Vec<Arc<Endpoint>>;
        let pool: &[Arc<Endpoint>] = if avoid.is_empty() {
            &set
        } else {
            rest = set
                .iter()
                .filter(|e| !avoid.iter().any(|a| Arc::ptr_eq(a, e)))
                .cloned()
                .collect();
            if rest.is_empty() { &set } else { &rest }
        };
        let endpoint = shared.choose(req, pool, at)?;
        Ok(Pick {
            endpoint,
            clock,
            at,
        })
    }
}

#[cfg(test)]
mod tests;
pub(crate) mod view;
