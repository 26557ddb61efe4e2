//! The retry and hedging policies of a client (`MethodConfig`), its retry budget, and how one
//! attempt's end is judged (gRFC A6's semantics, linkerd's budget).
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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use http::HeaderValue;
use tonic::body::Body;
use tower::BoxError;
use zrpc_core::breaker::{BreakerPromise, BreakerRegistry};
use zrpc_core::grpc::status_from_headers;
use zrpc_core::grpc::timeout::{GRPC_TIMEOUT_HEADER, format as format_timeout};
use zrpc_core::retry::{PREVIOUS_ATTEMPTS_HEADER, Pushback, RetryBudget};

use super::replay::Replay;
use crate::balancer::endpoint::{Answer, AttemptError};
use crate::conf::{HedgingPolicyConf, RetryPolicyConf, RpcClientConf};
use crate::metrics::ClientMetrics;

/// The policy of one method.
#[derive(Debug)]
pub(crate) enum Policy {
    Retry(RetryPolicyConf),
    Hedge(HedgingPolicyConf),
}

impl Policy {
    /// True when an attempt ending with `code` may be followed by another (retryable codes,
    /// or hedging's non-fatal ones).
    fn again_after(&self, code: i32) -> bool {
        match self {
            Policy::Retry(p) => p.retryable_status_codes.contains(code),
            Policy::Hedge(p) => p.non_fatal_status_codes.contains(code),
        }
    }

    /// Attempts in all (the first included).
    pub(crate) fn max_attempts(&self) -> u32 {
        match self {
            Policy::Retry(p) => p.max_attempts,
            Policy::Hedge(p) => p.max_attempts,
        }
    }
}

/// A client's policies, its budget and the handles its retries record into.
#[derive(Debug)]
pub(crate) struct Policies {
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

impl Policies {
    /// The client's policies; `None` when its config names none (no cost per call then).
    pub(crate) fn new(
        conf: &RpcClientConf,
        target: Arc<str>,
        breakers: Option<Arc<BreakerRegistry>>,
        metrics: Option<ClientMetrics>,
    ) -> Option<Policies> {
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
        Some(Policies {
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

    /// Retries and hedges the budget still allows now (the admin view).
    pub(crate) fn budget_remaining(&self) -> f64 {
        self.budget.remaining(self.nanos(Instant::now()))
    }

    /// Counts a call into the budget (every call of the client, with a policy or not).
    pub(crate) fn deposit(&self, now: Instant) {
        self.budget.deposit(self.nanos(now));
    }

    /// Admits one more attempt of the call to `path` at `now`: the budget has one and the
    /// method's breaker allows it. `Err` when either refuses; `Ok` with the breaker's promise for
    /// the attempt (`None` without a breaker), which the caller resolves.
    pub(crate) fn admit(&self, path: &str, now: Instant) -> Result<Option<BreakerPromise>, ()> {
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
    pub(crate) fn admit_retry(&self, path: &str, now: Instant) -> bool {
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

    /// Counts an attempt of `kind` (`first`, `retry`, `hedge`) of the call to `path`.
    pub(crate) fn count(&self, path: &str, kind: &str) {
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
pub(crate) struct Copies {
    pub(crate) promises: Vec<BreakerPromise>,
    pub(crate) failed: usize,
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

/// How one attempt ended, as the retry stage judges it.
pub(crate) enum Verdict {
    /// The call's answer (or its error): nothing more is sent.
    Final(Result<Answer, BoxError>),
    /// The request provably never reached a server: it may go elsewhere at once, whatever the
    /// policy (a transparent re-send).
    Unsent(AttemptError),
    /// A failure the policy may follow with another attempt: the caller's result if none
    /// follows, and the server's pushback.
    Again(Result<Answer, BoxError>, Pushback),
}

/// Judges an attempt's end under `policy` (`None`: only transparent re-sends, while
/// `transparent` allows one). A trailers-only answer the policy may follow is recorded on its
/// endpoint now (what the caller gets if nothing follows carries no record any more).
pub(crate) fn judge(
    result: Result<Answer, AttemptError>,
    policy: Option<&Policy>,
    transparent: bool,
) -> Verdict {
    match result {
        Err(e) if e.retryable && transparent => Verdict::Unsent(e),
        Err(e) => match policy {
            Some(p) if p.again_after(e.status.code() as i32) => {
                Verdict::Again(Err(e.status.into()), Pushback::None)
            }
            _ => Verdict::Final(Err(e.status.into())),
        },
        Ok(answer) => {
            // a trailers-only answer's status (read only under a policy)
            let again = policy.and_then(|p| {
                status_from_headers(answer.resp.headers()).filter(|&c| p.again_after(c))
            });
            match again {
                Some(code) => {
                    let pushback = Pushback::from_headers(answer.resp.headers());
                    let Answer { resp, done } = answer;
                    if let Some(d) = done {
                        d.finish(code, Instant::now());
                    }
                    Verdict::Again(Ok(Answer { resp, done: None }), pushback)
                }
                None => Verdict::Final(Ok(answer)),
            }
        }
    }
}

/// The request of attempt `n` (with a policy: `grpc-previous-rpc-attempts: n - 1` from the
/// second on) re-sent at `now`: the kept copy, its `grpc-timeout` the time left to `deadline`.
pub(crate) fn again(
    replay: &Replay,
    n: Option<u32>,
    deadline: Option<Instant>,
    now: Instant,
) -> http::Request<Body> {
    let mut req = replay.clone_request();
    let headers = req.headers_mut();
    if let Some(n) = n.filter(|&n| n > 1) {
        headers.insert(PREVIOUS_ATTEMPTS_HEADER, HeaderValue::from(n - 1));
    }
    if let Some(d) = deadline
        && let Ok(v) = HeaderValue::try_from(format_timeout(d.saturating_duration_since(now)))
    {
        headers.insert(GRPC_TIMEOUT_HEADER, v);
    }
    req
}
