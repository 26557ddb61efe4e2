//! Retries and hedging under the client's retry budget (gRFC A6's semantics, linkerd's budget).
//!
//! A call of a method with a policy (`MethodConfig`) runs here instead of the balancer's plain
//! path; its attempts still go through the balancer, each picked among the endpoints this call
//! has not tried yet (all of them when none is left), each with the transparent retry of a
//! request that never reached a server.
//!
//! - **Retry policy**: an attempt that fails with a retryable code (an error, or a trailers-only
//!   answer) is sent again after gRFC A6's back-off (random below `initial * multiplier^(n-1)`,
//!   capped), or after the server's `grpc-retry-pushback-ms` (negative: no retry). Response
//!   headers without a status commit the call: what follows is the caller's.
//! - **Hedging policy**: while no answer came, another copy goes out every `HedgingDelay`; the
//!   first answer that is not a non-fatal failure wins and the others are cancelled; a
//!   non-fatal failure sends the next copy at once.
//! - Every attempt after the first needs the budget ([`RetryBudget`]) and the method's breaker
//!   (which records each failed attempt), fits in the caller's deadline (one deadline for the
//!   whole call; `grpc-timeout` says what is left) and carries `grpc-previous-rpc-attempts`.
//!   A request whose body cannot be kept (a live client stream, over `MAX_REPLAY_BYTES`) gets
//!   one attempt.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use http::HeaderValue;
use tonic::body::Body;
use tower::BoxError;
use zrpc_core::breaker::{BreakerPromise, BreakerRegistry};
use zrpc_core::grpc::status_from_headers;
use zrpc_core::grpc::timeout::{GRPC_TIMEOUT_HEADER, format as format_timeout};
use zrpc_core::retry::{PREVIOUS_ATTEMPTS_HEADER, Pushback, RetryBudget, backoff};

use crate::balancer::endpoint::{Answer, Endpoint};
use crate::balancer::replay::{self, Replay};
use crate::balancer::service::Shared;
use crate::conf::{HedgingPolicyConf, RetryPolicyConf, RpcClientConf};
use crate::layers::code_of_error;
use crate::metrics::ClientMetrics;

/// The policy of one method.
#[derive(Debug)]
pub(crate) enum Policy {
    Retry(RetryPolicyConf),
    Hedge(HedgingPolicyConf),
}

/// A client's policies, budget and the handles its retries record into.
#[derive(Debug)]
pub(crate) struct Retries {
    /// By `/service/method`, by `service`, and the default (an entry naming neither).
    methods: HashMap<Box<str>, Arc<Policy>>,
    services: HashMap<Box<str>, Arc<Policy>>,
    default: Option<Arc<Policy>>,
    budget: RetryBudget,
    epoch: Instant,
    target: Arc<str>,
    breakers: Option<Arc<BreakerRegistry>>,
    metrics: Option<ClientMetrics>,
}

impl Retries {
    /// The client's retries; `None` when its config names no policy (no cost per call then).
    pub(crate) fn new(
        conf: &RpcClientConf,
        target: Arc<str>,
        breakers: Option<Arc<BreakerRegistry>>,
        metrics: Option<ClientMetrics>,
    ) -> Option<Retries> {
        if conf.method_config.is_empty() {
            return None;
        }
        let mut methods = HashMap::new();
        let mut services = HashMap::new();
        let mut default = None;
        for entry in &conf.method_config {
            let policy = Arc::new(match (&entry.retry_policy, &entry.hedging_policy) {
                (Some(r), _) => Policy::Retry(r.clone()),
                (None, Some(h)) => Policy::Hedge(h.clone()),
                (None, None) => continue,
            });
            for name in &entry.name {
                let p = Arc::clone(&policy);
                match (name.service.is_empty(), name.method.is_empty()) {
                    (true, _) => default = Some(p),
                    (false, true) => {
                        services.insert(name.service.as_str().into(), p);
                    }
                    (false, false) => {
                        methods.insert(format!("/{}/{}", name.service, name.method).into(), p);
                    }
                }
            }
        }
        let b = &conf.retry_budget;
        Some(Retries {
            methods,
            services,
            default,
            budget: RetryBudget::new(b.ratio, b.min_per_second, b.window),
            epoch: Instant::now(),
            target,
            breakers,
            metrics,
        })
    }

    /// The policy of the method at `path` (`/service/method`): its own, its service's, or the
    /// default.
    pub(crate) fn policy(&self, path: &str) -> Option<Arc<Policy>> {
        if let Some(p) = self.methods.get(path) {
            return Some(Arc::clone(p));
        }
        let service = path
            .strip_prefix('/')
            .and_then(|p| p.split_once('/'))
            .map(|(s, _)| s);
        service
            .and_then(|s| self.services.get(s))
            .or(self.default.as_ref())
            .map(Arc::clone)
    }

    fn nanos(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Counts a call into the budget (every call of the client, with a policy or not).
    pub(crate) fn deposit(&self, now: Instant) {
        self.budget.deposit(self.nanos(now));
    }

    /// Admits one more attempt of the call to `path` at `now`: the budget has one and the
    /// method's breaker allows it. `Err` when either refuses; `Ok` with the breaker's promise for
    /// the attempt (`None` without a breaker), which the caller resolves.
    fn admit(&self, path: &str, now: Instant) -> Result<Option<BreakerPromise>, ()> {
        if !self.budget.try_withdraw(self.nanos(now)) {
            if let Some(m) = &self.metrics {
                m.retry_budget_exhausted_total
                    .with_label_values(&[path])
                    .inc();
            }
            return Err(());
        }
        match &self.breakers {
            Some(registry) => registry
                .get(&format!("{}{path}", self.target))
                .allow(now)
                .map(Some)
                .map_err(|_open| ()),
            None => Ok(None),
        }
    }

    /// Admits a retry: its breaker promise records the failed attempt before it (the call's own
    /// promise records how the last attempt ends).
    fn admit_retry(&self, path: &str, now: Instant) -> bool {
        match self.admit(path, now) {
            Ok(promise) => {
                if let Some(p) = promise {
                    p.reject(now);
                }
                true
            }
            Err(()) => false,
        }
    }

    fn count(&self, path: &str, kind: &str) {
        if let Some(m) = &self.metrics {
            m.attempts_total.with_label_values(&[path, kind]).inc();
        }
    }
}

/// The breaker's record of a hedged call's extra copies: one promise per copy after the first
/// (the call's own promise records how the call ends). When the call ends, a promise stands
/// for each failed copy first (rejected), then for the copies that did not fail (accepted: a
/// copy cancelled because another answered first is no failure of its server).
#[derive(Default)]
struct Copies {
    promises: Vec<BreakerPromise>,
    failed: usize,
}

impl Drop for Copies {
    fn drop(&mut self) {
        let now = Instant::now();
        for p in self.promises.drain(..) {
            if self.failed > 0 {
                self.failed -= 1;
                p.reject(now);
            } else {
                p.accept(now);
            }
        }
    }
}

/// How one attempt ended, as the policy sees it.
enum Ended {
    /// An answer that commits the call (or a failure the policy does not retry).
    Final(Result<http::Response<Body>, BoxError>),
    /// A failure the policy may retry: the caller's result if it is not, and the pushback.
    Retryable(Result<http::Response<Body>, BoxError>, Pushback),
}

/// Classifies an attempt's result under `retryable` codes; a retryable trailers-only answer is
/// recorded on its endpoint now.
fn classify(result: Result<Answer, BoxError>, retryable: impl Fn(i32) -> bool) -> Ended {
    match result {
        Ok(answer) => match status_from_headers(answer.resp.headers()) {
            Some(code) if retryable(code) => {
                let pushback = Pushback::from_headers(answer.resp.headers());
                let Answer { resp, done } = answer;
                if let Some(d) = done {
                    d.finish(code, Instant::now());
                }
                Ended::Retryable(Ok(resp), pushback)
            }
            _ => Ended::Final(Ok(answer.into_response())),
        },
        Err(err) => {
            if retryable(code_of_error(&*err)) {
                Ended::Retryable(Err(err), Pushback::None)
            } else {
                Ended::Final(Err(err))
            }
        }
    }
}

/// The request of attempt `n` (2 or more): the kept copy with `grpc-previous-rpc-attempts` and
/// the time left to the deadline in `grpc-timeout`.
fn again(replay: &Replay, n: u32, deadline: Option<Instant>, now: Instant) -> http::Request<Body> {
    let mut req = replay.clone_request();
    let headers = req.headers_mut();
    headers.insert(PREVIOUS_ATTEMPTS_HEADER, HeaderValue::from(n - 1));
    if let Some(d) = deadline
        && let Ok(v) = HeaderValue::try_from(format_timeout(d.saturating_duration_since(now)))
    {
        headers.insert(GRPC_TIMEOUT_HEADER, v);
    }
    req
}

/// A call under `policy`: see the module docs.
pub(crate) async fn call(
    shared: Arc<Shared>,
    retries: Arc<Retries>,
    policy: Arc<Policy>,
    req: http::Request<Body>,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
) -> Result<http::Response<Body>, BoxError> {
    if !shared.is_ready() {
        shared.wait_first_set(deadline).await?;
    }
    let path: Arc<str> = Arc::from(req.uri().path());
    let (req, replay) = replay::prepare(req)?;
    retries.count(&path, "first");
    let Some(replay) = replay else {
        // nothing kept to send again: one attempt
        let (_, first) = shared.start_avoiding(req, deadline, timeout, &[], true)?;
        return first.await.map(Answer::into_response);
    };
    let call = Attempts {
        shared: &shared,
        retries: &retries,
        path: &path,
        replay: &replay,
        deadline,
        timeout,
    };
    match &*policy {
        Policy::Retry(p) => retry(&call, p, req).await,
        Policy::Hedge(p) => hedge(&call, p, req).await,
    }
}

/// What every attempt of one call shares.
struct Attempts<'a> {
    shared: &'a Arc<Shared>,
    retries: &'a Retries,
    path: &'a str,
    replay: &'a Replay,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
}

impl<'a> Attempts<'a> {
    fn parts(&self) -> (&'a Arc<Shared>, &'a Retries, &'a str, &'a Replay) {
        (self.shared, self.retries, self.path, self.replay)
    }
}

async fn retry(
    call: &Attempts<'_>,
    policy: &RetryPolicyConf,
    first: http::Request<Body>,
) -> Result<http::Response<Body>, BoxError> {
    let (shared, retries, path, replay) = call.parts();
    let (deadline, timeout) = (call.deadline, call.timeout);
    let mut tried: Vec<Arc<Endpoint>> = Vec::new();
    let mut req = Some(first);
    let mut n: u32 = 1;
    let mut backoffs: u32 = 0;
    loop {
        let now = Instant::now();
        let this = req
            .take()
            .unwrap_or_else(|| again(replay, n, deadline, now));
        let (endpoint, attempt) = shared.start_avoiding(this, deadline, timeout, &tried, n == 1)?;
        tried.push(endpoint);
        let (result, pushback) =
            match classify(attempt.await, |c| policy.retryable_status_codes.contains(c)) {
                Ended::Final(result) => return result,
                Ended::Retryable(result, pushback) => (result, pushback),
            };
        if n >= policy.max_attempts {
            return result;
        }
        let delay = match pushback {
            Pushback::Stop => return result,
            Pushback::After(d) => {
                backoffs = 0;
                d
            }
            Pushback::None => {
                backoffs += 1;
                backoff(
                    policy.initial_backoff,
                    policy.max_backoff,
                    policy.backoff_multiplier,
                    backoffs,
                    crate::balancer::rng::unit(),
                )
            }
        };
        let now = Instant::now();
        if deadline.is_some_and(|d| now + delay >= d) || !retries.admit_retry(path, now) {
            return result;
        }
        drop(result);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        n += 1;
        retries.count(path, "retry");
        tracing::debug!(target = %shared.target, method = path, attempt = n, ?delay, "retrying");
    }
}

async fn hedge(
    call: &Attempts<'_>,
    policy: &HedgingPolicyConf,
    first: http::Request<Body>,
) -> Result<http::Response<Body>, BoxError> {
    let (shared, retries, path, replay) = call.parts();
    let (deadline, timeout) = (call.deadline, call.timeout);
    let non_fatal = |c: i32| policy.non_fatal_status_codes.contains(c);
    let mut copies = Copies::default();
    let mut in_use: Vec<Arc<Endpoint>> = Vec::new();
    let mut pending = FuturesUnordered::new();
    let (endpoint, attempt) = shared.start_avoiding(first, deadline, timeout, &[], true)?;
    in_use.push(endpoint);
    pending.push(attempt);
    let mut sent: u32 = 1;
    let mut last: Option<Result<http::Response<Body>, BoxError>> = None;
    let mut stopped = false;
    let timer = tokio::time::sleep(policy.hedging_delay);
    tokio::pin!(timer);
    loop {
        let may_send = !stopped && sent < policy.max_attempts;
        let send_now = tokio::select! {
            Some(result) = pending.next() => match classify(result, non_fatal) {
                Ended::Final(result) => return result,
                Ended::Retryable(result, pushback) => {
                    copies.failed += 1;
                    last = Some(result);
                    match pushback {
                        Pushback::Stop => {
                            stopped = true;
                            false
                        }
                        Pushback::After(d) => {
                            timer.as_mut().reset(tokio::time::Instant::now() + d);
                            false
                        }
                        Pushback::None => true,
                    }
                }
            },
            () = &mut timer, if may_send => true,
            else => false,
        };
        if send_now && !stopped && sent < policy.max_attempts {
            let now = Instant::now();
            let admitted = if deadline.is_none_or(|d| now < d) {
                retries.admit(path, now).ok()
            } else {
                None
            };
            if let Some(promise) = admitted {
                copies.promises.extend(promise);
                sent += 1;
                retries.count(path, "hedge");
                let req = again(replay, sent, deadline, now);
                let (endpoint, attempt) =
                    shared.start_avoiding(req, deadline, timeout, &in_use, false)?;
                in_use.push(endpoint);
                pending.push(attempt);
                timer
                    .as_mut()
                    .reset(tokio::time::Instant::from_std(now + policy.hedging_delay));
            } else {
                stopped = true;
            }
        }
        if pending.is_empty() {
            if (stopped || sent >= policy.max_attempts)
                && let Some(result) = last.take()
            {
                return result;
            }
            if stopped || sent >= policy.max_attempts {
                return Err(tonic::Status::internal("hedged call ended without an answer").into());
            }
        }
    }
}
