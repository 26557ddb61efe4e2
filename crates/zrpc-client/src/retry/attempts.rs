//! The one attempt loop of a call: transparent re-sends, retries and hedges.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tonic::body::Body;
use tower::BoxError;
use zrpc_core::retry::{Pushback, backoff};

use super::MAX_ATTEMPTS;
use super::policy::{self, Copies, Policies, Policy, Verdict};
use super::replay::{self, Replay};
use crate::balancer::Balancer;
use crate::balancer::endpoint::{Answer, AttemptError, Endpoint};

/// How the loop starts: with the call's request (nothing sent yet), or after the first
/// attempt's end.
pub(super) enum Start {
    Request(http::Request<Body>),
    After(Verdict),
}

/// What the attempts of one call share (boxed: kept beside the first attempt only when another
/// may follow).
pub(crate) struct Attempts {
    balancer: Balancer,
    /// The method's policy and the client's policies (budget, breakers, metrics).
    policy: Option<(Arc<Policies>, Arc<Policy>)>,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    /// The copy to send again (`None` before the first send, or when the body cannot be kept).
    replay: Option<Replay>,
    /// The endpoint of the first attempt, sent before the loop ran.
    first: Option<Arc<Endpoint>>,
    /// The endpoints this call was sent to.
    tried: Vec<Arc<Endpoint>>,
    /// Sends of a request that never reached a server, so far.
    unsent: usize,
}

impl Attempts {
    pub(super) fn new(
        balancer: Balancer,
        policy: Option<(Arc<Policies>, Arc<Policy>)>,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
    ) -> Attempts {
        Attempts {
            balancer,
            policy,
            deadline,
            timeout,
            replay: None,
            first: None,
            tried: Vec::new(),
            unsent: 0,
        }
    }

    /// The first attempt was sent to `endpoint`; `replay` is its copy.
    pub(super) fn kept(&mut self, replay: Replay, endpoint: Arc<Endpoint>) {
        self.replay = Some(replay);
        self.first = Some(endpoint);
    }

    /// How an attempt's end is judged for this call.
    pub(super) fn judge(&self, result: Result<Answer, AttemptError>) -> Verdict {
        let transparent = self.unsent + 1 < MAX_ATTEMPTS;
        policy::judge(result, self.policy.as_ref().map(|(_, p)| &**p), transparent)
    }

    /// Picks an endpoint, one this call has not tried when there is one, and sends `req` to it.
    /// With `strict` (a transparent re-send), `None` when the one picked is in back-off after a
    /// transport failure: nothing else is usable. An endpoint already tried, or only suspect, is
    /// usable then (the picker chose it because nothing better was left): the request reached
    /// no server, it goes on the endpoint's next connection when a GOAWAY closed the last (as
    /// grpc-go's transparent retry does), and not sending it fails it for certain.
    fn send(
        &mut self,
        req: http::Request<Body>,
        strict: bool,
    ) -> Result<Option<crate::balancer::endpoint::Attempt>, tonic::Status> {
        let pick = self.balancer.pick(&req, &self.tried, Instant::now())?;
        if strict && pick.is_unreachable() {
            pick.abandon();
            return Ok(None);
        }
        self.tried.push(Arc::clone(&pick.endpoint));
        let target = Arc::clone(self.balancer.target());
        Ok(Some(pick.send(req, self.deadline, self.timeout, &target)))
    }

    /// The request of attempt `n` sent again now.
    fn again(&self, replay: &Replay, n: u32) -> http::Request<Body> {
        let n = self.policy.is_some().then_some(n);
        policy::again(replay, n, self.deadline, Instant::now())
    }

    /// Runs the call's attempts until one ends it (see the module docs of `crate::retry`).
    pub(super) async fn run(mut self: Box<Self>, start: Start) -> Result<Answer, BoxError> {
        // each attempt in flight, tagged with its number (a transparent re-send keeps it)
        let mut pending = FuturesUnordered::new();
        let mut sent: u32 = 1;
        let mut verdict = None;
        // when the policy's next attempt goes (a retry's back-off, hedging's delay)
        let mut next: Option<tokio::time::Instant> = None;
        let hedging = match self.policy.as_ref().map(|(_, p)| &**p) {
            Some(Policy::Hedge(h)) => Some(h.hedging_delay),
            _ => None,
        };
        match start {
            Start::Request(req) => {
                self.balancer.wait_first_set(self.deadline).await?;
                let (req, replay) = replay::prepare(req, self.deadline)?;
                self.replay = replay;
                let Some(attempt) = self.send(req, false)? else {
                    unreachable!("a send that is not strict always picks")
                };
                if self.replay.is_none() {
                    // nothing kept to send again: one attempt
                    return attempt.await.map_err(|e| e.status.into());
                }
                pending.push(tagged(1, attempt));
                if let Some(delay) = hedging {
                    next = Some(tokio::time::Instant::now() + delay);
                }
            }
            Start::After(v) => {
                self.tried.extend(self.first.take());
                verdict = Some((1, v));
            }
        }
        let Some(replay) = self.replay.take() else {
            return Err(tonic::Status::internal("a re-sent call without its copy").into());
        };
        let path: Arc<str> = Arc::from(replay.path());
        // the breaker's record of hedged copies, resolved when the call ends
        let mut copies = Copies::default();
        let mut stopped = false;
        let mut backoffs: u32 = 0;
        let mut last: Option<Result<Answer, BoxError>> = None;
        loop {
            let (n, v) = match verdict.take() {
                Some(v) => v,
                None => {
                    let timer = async {
                        match next {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        Some((n, result)) = pending.next() => (n, self.judge(result)),
                        () = timer, if next.is_some() => {
                            next = None;
                            // the policy's next attempt (a retry admitted already, or a copy)
                            let Some((policies, policy)) = self.policy.clone() else {
                                continue;
                            };
                            let now = Instant::now();
                            if let Policy::Hedge(h) = &*policy {
                                let admitted = (!stopped
                                    && sent < h.max_attempts
                                    && self.deadline.is_none_or(|d| now < d))
                                .then(|| policies.admit(&path, now).ok())
                                .flatten();
                                let Some(promise) = admitted else {
                                    stopped = true;
                                    if pending.is_empty() {
                                        return last.unwrap_or_else(ended_without_answer);
                                    }
                                    continue;
                                };
                                copies.promises.extend(promise);
                                policies.count(&path, "hedge");
                                next = Some(tokio::time::Instant::now() + h.hedging_delay);
                            } else {
                                policies.count(&path, "retry");
                            }
                            sent += 1;
                            tracing::debug!(target = %self.balancer.target(), method = &*path, attempt = sent, "sending again");
                            let req = self.again(&replay, sent);
                            if let Some(attempt) = self.send(req, false)? {
                                pending.push(tagged(sent, attempt));
                            }
                            continue;
                        }
                        else => return last.unwrap_or_else(ended_without_answer),
                    }
                }
            };
            match v {
                Verdict::Final(result) => return result,
                Verdict::Unsent(e) => {
                    self.unsent += 1;
                    let req = self.again(&replay, n);
                    tracing::debug!(target = %self.balancer.target(), attempt = n, "sending again a request that never reached a server: {}", e.status.message());
                    match self.send(req, true)? {
                        Some(attempt) => pending.push(tagged(n, attempt)),
                        // nothing else usable: the policy judges the failure
                        None => {
                            let policy = self.policy.as_ref().map(|(_, p)| &**p);
                            verdict = Some((n, policy::judge(Err(e), policy, false)));
                        }
                    }
                }
                Verdict::Again(result, pushback) => {
                    let Some((policies, policy)) = self.policy.clone() else {
                        return result;
                    };
                    match &*policy {
                        Policy::Retry(p) => {
                            if sent >= p.max_attempts {
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
                                        p.initial_backoff,
                                        p.max_backoff,
                                        p.backoff_multiplier,
                                        backoffs,
                                        crate::balancer::rng::unit(),
                                    )
                                }
                            };
                            let now = Instant::now();
                            if self.deadline.is_some_and(|d| now + delay >= d)
                                || !policies.admit_retry(&path, now)
                            {
                                return result;
                            }
                            drop(result);
                            next = Some(tokio::time::Instant::from_std(now + delay));
                        }
                        Policy::Hedge(_) => {
                            copies.failed += 1;
                            last = Some(result);
                            match pushback {
                                Pushback::Stop => stopped = true,
                                Pushback::After(d) => {
                                    next = Some(tokio::time::Instant::now() + d);
                                }
                                Pushback::None => next = Some(tokio::time::Instant::now()),
                            }
                            if pending.is_empty() && (stopped || sent >= policy.max_attempts()) {
                                return last.unwrap_or_else(ended_without_answer);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// An attempt that yields its number with its end.
async fn tagged(
    n: u32,
    attempt: crate::balancer::endpoint::Attempt,
) -> (u32, Result<Answer, AttemptError>) {
    (n, attempt.await)
}

fn ended_without_answer() -> Result<Answer, BoxError> {
    Err(tonic::Status::internal("hedged call ended without an answer").into())
}
