//! The retry stage: every attempt of a call, in one loop, through the balancer's pick.
//!
//! A call's first attempt is picked and sent at once. What follows its end is decided in one
//! place ([`policy::judge`]) and carried out by one loop ([`Attempts::run`]):
//!
//! - a request that provably never reached a server (connection refused, `REFUSED_STREAM`, a
//!   graceful GOAWAY below its stream, a write that never happened) goes again at once, to
//!   another endpoint or, when none is left, to one already tried that is not in back-off (a
//!   GOAWAY's endpoint, on its next connection), whatever the method
//!   (a *transparent* re-send: no server did any work), at most [`MAX_ATTEMPTS`] sends of it in
//!   all, outside the retry budget;
//! - for a method with a retry or hedging policy (`MethodConfig`), the attempts the policy
//!   asks for, each admitted by the retry budget and the method's breaker ([`policy`]).
//!
//! Each attempt is picked among the endpoints this call has not tried yet (among all of them
//! when none is left; a transparent re-send gives up only when the one picked is in back-off
//! after a transport failure). The answer that ends the call
//! comes back with its endpoint's record still to make ([`Answer`]): the client reads its final
//! status once, for the endpoint and its recorders together.
//!
//! The first attempt is a named future ([`Call`]); only a call that needs more than its first
//! attempt (or waits for the first endpoint set, or is hedged) runs the boxed loop. A request
//! whose body cannot be kept (a live client stream, over `MAX_REPLAY_BYTES`) gets one attempt.

mod attempts;
pub(crate) mod policy;
pub(crate) mod replay;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use pin_project_lite::pin_project;
use tonic::body::Body;
use tower::BoxError;

use crate::balancer::Balancer;
use crate::balancer::endpoint::{Answer, Attempt};
use attempts::{Attempts, Start};
use policy::{Policies, Policy, Verdict};

/// Sends of a request that provably never reached a server, in all (the first included).
pub const MAX_ATTEMPTS: usize = 3;

/// The retry stage of one client (cheap to clone).
#[derive(Debug, Clone)]
pub(crate) struct Retry {
    balancer: Balancer,
    /// Retry and hedging policies (`MethodConfig`), `None` without any.
    policies: Option<Arc<Policies>>,
}

impl Retry {
    pub(crate) fn new(balancer: Balancer, policies: Option<Policies>) -> Retry {
        Retry {
            balancer,
            policies: policies.map(Arc::new),
        }
    }

    /// The balancer it picks through.
    pub(crate) fn balancer(&self) -> &Balancer {
        &self.balancer
    }

    /// The client's policies and budget, when its config names a policy.
    pub(crate) fn policies(&self) -> Option<&Arc<Policies>> {
        self.policies.as_ref()
    }

    /// Starts a call whose deadline and timeout the timeout stage computed, its first attempt
    /// picked at `now`. Its future yields the [`Answer`] whose final status the caller reads.
    #[inline]
    pub(crate) fn call(
        &self,
        req: http::Request<Body>,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
        now: Instant,
    ) -> Call {
        let policy = match &self.policies {
            None => None,
            Some(p) => {
                p.deposit(now);
                let policy = p.policy(req.uri().path());
                if policy.is_some() {
                    p.count(req.uri().path(), "first");
                }
                policy
            }
        };
        let b = &self.balancer;
        if !b.is_ready() || matches!(policy.as_deref(), Some(Policy::Hedge(_))) {
            let attempts = self.attempts(policy, deadline, timeout);
            return Call::looping(attempts.run(Start::Request(req)));
        }
        // A copy is kept whenever the body allows it: even with one endpoint, a request that
        // never reached its server (a graceful GOAWAY crossing it, the server's
        // `MaxConnectionAge` or a deploy) goes again on the endpoint's next connection. A body
        // read whole goes out as one DATA frame that ends the stream, where tonic's own unary
        // body makes hyper send its message, then an empty frame to end it (about 2,000
        // instructions more per call for the client, and a frame more for the server to read).
        let (req, replay) = match replay::prepare(req, deadline) {
            Ok(prepared) => prepared,
            Err(status) => return Call::failed(status),
        };
        let pick = match b.pick(&req, &[], now) {
            Ok(pick) => pick,
            Err(status) => return Call::failed(status),
        };
        let rest = replay.map(|replay| {
            let mut rest = self.attempts(policy, deadline, timeout);
            rest.kept(replay, Arc::clone(&pick.endpoint));
            rest
        });
        let attempt = pick.send(req, deadline, timeout, b.target());
        Call {
            state: State::First { attempt, rest },
        }
    }

    fn attempts(
        &self,
        policy: Option<Arc<Policy>>,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
    ) -> Box<Attempts> {
        Box::new(Attempts::new(
            self.balancer.clone(),
            policy.and_then(|p| Some((Arc::clone(self.policies.as_ref()?), p))),
            deadline,
            timeout,
        ))
    }
}

pin_project! {
    /// One call through the retry stage ([`Retry::call`]): the first attempt is a named future;
    /// the loop that sends more (rare) is boxed.
    pub(crate) struct Call {
        #[pin]
        state: State,
    }
}

pin_project! {
    #[project = StateProj]
    enum State {
        // `rest`: what another attempt needs (`None`: the first is the only one)
        First { #[pin] attempt: Attempt, rest: Option<Box<Attempts>> },
        Looping { fut: BoxFuture<'static, Result<Answer, BoxError>> },
        Failed { err: Option<BoxError> },
    }
}

impl Call {
    fn looping(fut: impl Future<Output = Result<Answer, BoxError>> + Send + 'static) -> Call {
        Call {
            state: State::Looping { fut: Box::pin(fut) },
        }
    }

    fn failed(status: tonic::Status) -> Call {
        Call {
            state: State::Failed {
                err: Some(status.into()),
            },
        }
    }
}

impl Future for Call {
    type Output = Result<Answer, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let next = match self.as_mut().project().state.project() {
                StateProj::First { attempt, rest } => {
                    let result = ready!(attempt.poll(cx));
                    let Some(rest) = rest.take() else {
                        return Poll::Ready(result.map_err(|e| e.status.into()));
                    };
                    match rest.judge(result) {
                        Verdict::Final(result) => return Poll::Ready(result),
                        verdict => State::Looping {
                            fut: Box::pin(rest.run(Start::After(verdict))),
                        },
                    }
                }
                StateProj::Looping { fut } => return fut.as_mut().poll(cx),
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
