//! The innermost stage of the client: waits for the first endpoint set, picks, sends, retries a
//! request that never reached a server once on another endpoint.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures_util::future::BoxFuture;
use pin_project_lite::pin_project;
use tokio::sync::watch;
use tonic::body::Body;
use tower::BoxError;

use super::consistent_hash::{ConsistentHash, HashKey};
use super::endpoint::{Answer, Attempt, ConnectOptions, Deadline, Endpoint};
use super::replay::{self, Replay};
use super::{P2cPicker, RoundRobin, ThreadRng};
use crate::conf::BalancerName;
use crate::resolver::{EndpointUpdates, ResolverStatus, subset};

/// Attempts per call when earlier ones provably never reached a server (transparent retry).
pub const MAX_ATTEMPTS: usize = 3;

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

/// The balancer (cheap to clone); the client starts each call with [`Balancer::start`].
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
/// Every call with a deadline makes tonic's channel arm a timer (`GrpcTimeout`, from the
/// `grpc-timeout` header). tokio's time driver wakes its parked I/O driver (an `eventfd` write)
/// whenever a timer is inserted earlier than the wake-up it last planned, and with no other
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
            _ = stalls.tick() => {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let clock = shared.p2c.clock();
                let now = clock.coarse_now();
                for e in shared.set.load().iter() {
                    e.check_stall(clock, now);
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
        let size = match self.kind {
            BalancerName::ConsistentHash => addrs.len(),
            _ => subset::DEFAULT_SUBSET_SIZE,
        };
        let chosen = subset::select(addrs, self.seed, size);
        let old = self.set.load();
        let by_addr: HashMap<&str, &Arc<Endpoint>> = old.iter().map(|e| (&*e.addr, e)).collect();
        let mut next = Vec::with_capacity(chosen.len());
        for addr in &chosen {
            if next.iter().any(|e: &Arc<Endpoint>| &*e.addr == addr) {
                continue;
            }
            match by_addr.get(addr.as_str()) {
                Some(e) => next.push(Arc::clone(e)),
                None => match Endpoint::new(addr, &self.connect) {
                    Ok(e) => next.push(Arc::new(e)),
                    Err(err) => {
                        tracing::error!(target = %self.target, endpoint = %addr, "invalid endpoint address: {err}")
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
        tracing::info!(target = %self.target, endpoints = ?chosen, "endpoint set updated");
        if self.kind == BalancerName::ConsistentHash {
            self.ring.update(&next);
        }
        self.set.store(Arc::new(next));
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

    pub(crate) fn clock(&self) -> super::Clock {
        self.p2c.clock()
    }

    pub(crate) fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Picks at `now` (ns since the picker's epoch: the attempt's start, [`super::Clock::nanos`])
    /// among `set`; `key` is the call's [`HashKey`] (read by `consistent_hash` alone).
    ///
    /// # Errors
    ///
    /// Unavailable when `set` is empty; `consistent_hash` without a key: InvalidArgument.
    fn pick(
        &self,
        set: &[Arc<Endpoint>],
        now: u64,
        key: Option<&HashKey>,
    ) -> Result<Arc<Endpoint>, tonic::Status> {
        let i = match self.kind {
            BalancerName::ConsistentHash => {
                return self
                    .ring
                    .pick(key, set, now)?
                    .ok_or_else(|| self.no_endpoint());
            }
            BalancerName::RoundRobin => self.rr.pick_at(set, now),
            _ => self.p2c.pick_at(set, now, &mut ThreadRng),
        };
        i.map(|i| Arc::clone(&set[i]))
            .ok_or_else(|| self.no_endpoint())
    }

    /// The resolver's current problem, if any (etcd unreachable, empty key, DNS failure...).
    pub(crate) fn resolver_problem(&self) -> Option<Arc<str>> {
        self.status.problem()
    }

    fn no_endpoint(&self) -> tonic::Status {
        match self.status.problem() {
            Some(p) => self.unresolved(&p),
            None => no_endpoint_status(format!("no endpoint available for target {}", self.target)),
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
    /// and at the call's deadline with what is known, so the caller learns why.
    pub(crate) async fn wait_first_set(
        &self,
        deadline: Option<std::time::Instant>,
    ) -> Result<(), tonic::Status> {
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
            () = expiry => Err(self.unresolved(&format!(
                "the resolver found none within {:?} (no answer from its source yet)",
                started.elapsed()
            ))),
        }
    }

    /// The slow path of [`Balancer::start`]: a call made before the first endpoint set (it waits
    /// for one), then picked, sent and retried like any other.
    async fn call_at(
        self: Arc<Self>,
        req: http::Request<Body>,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
    ) -> Result<http::Response<Body>, BoxError> {
        if !self.is_ready() {
            self.wait_first_set(deadline).await?;
        }
        let first = self.first_attempt(req, deadline, timeout, Instant::now())?;
        match first.attempt.await {
            Ok(answer) => Ok(answer.into_response()),
            Err(e) => match first.replay {
                Some(replay) if e.retryable => {
                    self.retry((first.endpoint, e.status), replay, deadline, timeout)
                        .await
                }
                _ => Err(e.status.into()),
            },
        }
    }

    /// Picks an endpoint and starts the first attempt at `now` (no await: the common path of a
    /// call).
    #[inline]
    fn first_attempt(
        &self,
        req: http::Request<Body>,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
        now: Instant,
    ) -> Result<First, tonic::Status> {
        let set = self.set.load();
        if set.is_empty() {
            return Err(self.no_endpoint());
        }
        let (req, replay) = if set.len() > 1 {
            replay::prepare(req)?
        } else {
            (req, None)
        };
        // One precise clock read serves the pick and the call's latency sample (and, from the
        // client, its observing stage): a coarse read for the pick would come on top of the
        // one the latency needs.
        let clock = self.p2c.clock();
        let start = clock.nanos(now);
        let ep = self.pick(&set, start, req.extensions().get())?;
        let attempt =
            Arc::clone(&ep).send((clock, start), deadline, timeout, req, &self.target, true);
        Ok(First {
            endpoint: ep,
            attempt,
            replay,
        })
    }

    /// Starts one attempt of a call under a retry or hedging policy (`crate::retry`): picked
    /// among the endpoints not in `avoid` (among all when that leaves none), with the
    /// transparent retry of any call. `first`: the call's first attempt (see [`Endpoint::send`]).
    pub(crate) fn start_avoiding(
        self: &Arc<Self>,
        req: http::Request<Body>,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
        avoid: &[Arc<Endpoint>],
        first: bool,
    ) -> Result<(Arc<Endpoint>, Call), tonic::Status> {
        let set = self.set.load();
        if set.is_empty() {
            return Err(self.no_endpoint());
        }
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
        let (req, replay) = if set.len() > 1 {
            replay::prepare(req)?
        } else {
            (req, None)
        };
        let clock = self.p2c.clock();
        let start = clock.nanos(Instant::now());
        let ep = self.pick(pool, start, req.extensions().get())?;
        let attempt =
            Arc::clone(&ep).send((clock, start), deadline, timeout, req, &self.target, first);
        let call = Call {
            state: State::First {
                attempt,
                retry: replay.map(|replay| {
                    Box::new(Retry {
                        shared: Arc::clone(self),
                        endpoint: Arc::clone(&ep),
                        replay,
                        deadline,
                        timeout,
                    })
                }),
            },
        };
        Ok((ep, call))
    }

    /// Transparent retry: the request never reached a server, so it can go elsewhere, at most
    /// [`MAX_ATTEMPTS`] in all. The failed endpoints are in back-off, so the picker avoids them.
    async fn retry(
        self: Arc<Self>,
        mut failed: (Arc<Endpoint>, tonic::Status),
        replay: Replay,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
    ) -> Result<http::Response<Body>, BoxError> {
        let clock = self.p2c.clock();
        for attempt in 2..=MAX_ATTEMPTS {
            let now = clock.nanos(Instant::now());
            let req = replay.clone_request();
            let Ok(ep) = self.pick(&self.set.load(), now, req.extensions().get()) else {
                break;
            };
            if Arc::ptr_eq(&ep, &failed.0) || ep.stats.is_down(now) {
                // nothing else usable: give up with the last error
                ep.stats.on_abandon();
                break;
            }
            tracing::debug!(target = %self.target, from = %failed.0.addr, to = %ep.addr, attempt, "transparent retry: {}", failed.1.message());
            match Arc::clone(&ep)
                .send((clock, now), deadline, timeout, req, &self.target, false)
                .await
            {
                Ok(answer) => return Ok(answer.into_response()),
                Err(e) if e.retryable => failed = (ep, e.status),
                Err(e) => return Err(e.status.into()),
            }
        }
        Err(failed.1.into())
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
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.is::<NoEndpoint>() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// A call's first attempt, its endpoint and its replay copy.
struct First {
    endpoint: Arc<Endpoint>,
    attempt: Attempt,
    replay: Option<Replay>,
}

/// Tolerance of a deadline derived from the `grpc-timeout` header: the header is read after the
/// timeout layer took its own clock reading, and rounds the timeout up to its unit (at most 1 ms
/// below 27 hours), so the derived deadline may be up to ~1 ms late; a call dropped this close to
/// it was dropped by its deadline.
const DEADLINE_SLACK: Duration = Duration::from_millis(2);

/// The deadline of a call and its timeout: the [`Deadline`] extension when present (the timeout
/// layer sets it), else `grpc-timeout` from `now()` (less [`DEADLINE_SLACK`]).
pub(crate) fn call_deadline(
    req: &http::Request<Body>,
    now: impl FnOnce() -> Instant,
) -> (Option<Instant>, Option<Duration>) {
    let timeout = zrpc_core::grpc::timeout::from_headers(req.headers());
    let deadline = match req.extensions().get::<Deadline>() {
        Some(d) => Some(d.0),
        None => timeout.and_then(|t| now().checked_add(t.saturating_sub(DEADLINE_SLACK))),
    };
    (deadline, timeout)
}

impl Balancer {
    /// Starts a call whose deadline and timeout are known (the client's timeout stage computed
    /// them), its first attempt picked at `now`. Its future yields the [`Answer`], whose final
    /// status the caller reads.
    #[inline]
    pub(crate) fn start(
        &self,
        req: http::Request<Body>,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
        now: Instant,
    ) -> Call {
        let shared = &self.shared;
        if !shared.is_ready() {
            return Call {
                state: State::Boxed {
                    fut: Box::pin(Arc::clone(shared).call_at(req, deadline, timeout)),
                },
            };
        }
        let state = match shared.first_attempt(req, deadline, timeout, now) {
            Ok(First {
                endpoint,
                attempt,
                replay,
            }) => State::First {
                attempt,
                // boxed: the call's future stays small for the common single-endpoint call,
                // which moves it several times (a retry copy is ~250 bytes)
                retry: replay.map(|replay| {
                    Box::new(Retry {
                        shared: Arc::clone(shared),
                        endpoint,
                        replay,
                        deadline,
                        timeout,
                    })
                }),
            },
            Err(status) => State::Failed {
                err: Some(status.into()),
            },
        };
        Call { state }
    }
}

impl Balancer {
    /// A call driven by `fut` (a method with a retry or hedging policy, `crate::retry`, whose
    /// attempts [`Shared::start_avoiding`] picks and sends).
    pub(crate) fn boxed_call(
        fut: impl Future<Output = Result<http::Response<Body>, BoxError>> + Send + 'static,
    ) -> Call {
        Call {
            state: State::Boxed { fut: Box::pin(fut) },
        }
    }
}

/// What a retry needs, kept while the first attempt runs.
struct Retry {
    shared: Arc<Shared>,
    endpoint: Arc<Endpoint>,
    replay: Replay,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
}

pin_project! {
    /// One call through the balancer ([`Balancer::start`]): the first attempt is a named future;
    /// a retry (rare) and a call made before the first endpoint set (rarer) are boxed.
    pub(crate) struct Call {
        #[pin]
        state: State,
    }
}

pin_project! {
    #[project = StateProj]
    enum State {
        First { #[pin] attempt: Attempt, retry: Option<Box<Retry>> },
        Boxed { fut: BoxFuture<'static, Result<http::Response<Body>, BoxError>> },
        Failed { err: Option<BoxError> },
    }
}

impl Future for Call {
    type Output = Result<Answer, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let next = match self.as_mut().project().state.project() {
                StateProj::First { attempt, retry } => match ready!(attempt.poll(cx)) {
                    Ok(answer) => return Poll::Ready(Ok(answer)),
                    Err(e) => match retry.take().map(|r| *r) {
                        Some(r) if e.retryable => State::Boxed {
                            fut: Box::pin(r.shared.retry(
                                (r.endpoint, e.status),
                                r.replay,
                                r.deadline,
                                r.timeout,
                            )),
                        },
                        _ => return Poll::Ready(Err(e.status.into())),
                    },
                },
                StateProj::Boxed { fut } => {
                    return fut
                        .as_mut()
                        .poll(cx)
                        .map_ok(|resp| Answer { resp, done: None });
                }
                StateProj::Failed { err } => {
                    return Poll::Ready(Err(err.take().unwrap_or_else(|| {
                        tonic::Status::internal("polled after completion").into()
                    })));
                }
            };
            self.as_mut().project().state.set(next);
        }
    }
}

#[cfg(test)]
mod tests;
