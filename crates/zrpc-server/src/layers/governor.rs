//! [`Governor`]: the server's governing stages as one service, for the chain the server builds.
//!
//! The stages, outer to inner, and what each does here, as its own layer would:
//!
//! `trace -> recover -> stat -> metrics -> auth -> breaker -> limit -> shedding -> timeout`
//!
//! The governor reads what the transport learnt of the call as it arrived (`call::Arrival`:
//! the call's facts, its count in flight, the caller's deadline) and is always on: the caller's
//! deadline is enforced over the whole call whatever else the config switches off.
//!
//! As nested layers, every call would pay for the nesting itself, whatever each stage did:
//! tower clones each service (an `Arc` each), the request is moved through every `call`, the
//! response futures are built inside one another and moved out again, the response's body is
//! wrapped once per observing stage, and several of those wrappers parse `grpc-status`. Here
//! one future carries the call, one body wrapper reads the final status once and hands it to
//! every record, and the settings sit behind one `Arc`.
//!
//! The behaviour is the nested chain's, stage by stage (each stage's module keeps its tower
//! form for the tests only, and shares its code with this one):
//!
//! - A call rejected by a stage is seen by the stages outside it only: auth's rejection by
//!   trace, stat and metrics; the breaker's also; a call the limit rejects or the shedder
//!   sheds by the breaker too (as the response of a nested layer), and a shed call by the
//!   limit (no sample: its request was never read). Each record is armed when its stage admits the
//!   call, so the one final report reaches exactly those.
//! - Records report inner first (shedding, limit, breaker, metrics, stat, trace), the order
//!   of nested bodies.
//! - A panic, in the handler's `call`, its future or its body, becomes `Internal "panic: ..."`
//!   (logged with its stack), and the call's facts blame the server. Where this differs from
//!   the nested chain, on purpose: there stat and metrics sit inside recover and see the
//!   panicked handler dropped (`Cancelled`), or for a panic in the handler's `call` nothing at
//!   all (the unwinding drops the records made before it, the shedder's as a failure); here
//!   every record is armed before the handler runs and sees the `Internal` the caller gets.
//! - One clock read (tokio's) serves every stage; the breaker and shedding layers read std's.
//!
//! The tests drive this service: each stage's unit tests with only that stage on (the
//! test-only `Layer` of every `*Stage` below), and `governor/tests.rs` with the stages together.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::uri::PathAndQuery;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tonic::body::Body;
use tower_layer::Layer;
use tower_service::Service;
use tracing::Span;
use zrpc_core::breaker::BreakerRegistry;
use zrpc_core::grpc::trace_context::TraceContext;
use zrpc_core::grpc::{OnStatus, StatusGuard, code, status_from_headers, status_response};
use zrpc_core::shedder::Queued;

use super::auth::{self, AuthStage, Check, Policy, TokenFuture, TokenStore};
use super::breaker::{self, BreakerRecord, BreakerStage};
use super::limit::{self, LimitRecord, LimitStage};
use super::metrics::{self, MetricsStage};
use super::outcome::{Both, RecordersRecord};
use super::recover::{RecoverStage, guarded_if, mark_panicked, panic_response, panic_trailers};
use super::shedding::{self, SheddingRecord, SheddingStage};
use super::stat::{StatRecord, StatSettings, StatStage};
use super::timeout::{self, Compiled, TimeoutStage};
use super::trace::{TraceRecord, TraceStage, in_scope, rpc_span};
use super::util::{is_infra, method_of, peer_addr};
use crate::call::{Arrival, CallFacts, CallerDeadline, Timer};
use tower::BoxError;

/// The stages' settings, as their layers were configured.
#[derive(Debug)]
pub(crate) struct Stages {
    pub(crate) trace: TraceStage,
    pub(crate) recover: RecoverStage,
    pub(crate) stat: StatStage,
    pub(crate) metrics: MetricsStage,
    pub(crate) auth: AuthStage,
    pub(crate) breaker: BreakerStage,
    pub(crate) limit: LimitStage,
    pub(crate) shedding: SheddingStage,
    pub(crate) timeout: TimeoutStage,
}

/// What every [`Governor`] reads, behind one `Arc`.
#[derive(Debug)]
struct Governance {
    trace: bool,
    recover: bool,
    stat: Option<Arc<StatSettings>>,
    metrics: Option<Arc<metrics::State>>,
    auth: Option<Arc<dyn TokenStore>>,
    policy: Arc<Policy>,
    breaker: Option<Arc<BreakerRegistry>>,
    limit: Option<Arc<limit::Shared>>,
    shedding: Option<Arc<shedding::Shared>>,
    timeout: Option<Arc<Compiled>>,
}

/// Adds [`Governor`].
#[derive(Debug, Clone)]
pub(crate) struct GovernorLayer {
    shared: Arc<Governance>,
}

impl GovernorLayer {
    pub(crate) fn new(stages: &Stages) -> Self {
        let (auth, policy) = stages.auth.parts();
        GovernorLayer {
            shared: Arc::new(Governance {
                trace: stages.trace.is_on(),
                recover: stages.recover.is_on(),
                stat: stages.stat.enabled_settings(),
                metrics: stages.metrics.state(),
                auth,
                policy,
                breaker: stages.breaker.registry(),
                limit: stages.limit.shared(),
                shedding: stages.shedding.shared(),
                timeout: stages.timeout.compiled(),
            }),
        }
    }
}

impl<S> Layer<S> for GovernorLayer {
    type Service = Governor<S>;
    fn layer(&self, inner: S) -> Governor<S> {
        Governor {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The governing stages of the server's chain as one service (see the [module docs](self)).
#[derive(Debug, Clone)]
pub(crate) struct Governor<S> {
    inner: S,
    shared: Arc<Governance>,
}

/// The records of the stages that admitted a call, fed by one read of its final status.
///
/// Boxed: a fully governed call's records are a few hundred bytes, and inline they would move
/// with the call's future and again with its response (into the body, through hyper's stream
/// task), each move a copy into memory the call had not touched yet. One allocation, served
/// from the allocator's per-thread cache, costs less than those copies and their cache misses.
#[derive(Debug)]
pub(crate) struct Records(Box<RecordSet>);

#[derive(Debug)]
struct RecordSet {
    guards: Both<BreakerRecord, SheddingRecord>,
    // Between the two guards in the chain: reported after the shedder, before the breaker.
    limit: Option<LimitRecord>,
    recorders: Option<RecordersRecord>,
    trace: Option<TraceRecord>,
    /// The caller's deadline: a reset at it is the deadline passing (`call::CallerDeadline`).
    caller: Option<CallerDeadline>,
    /// The caller's trace context, current for the end-of-call lines (moved in from the
    /// call's future when its response head is ready).
    context: Option<TraceContext>,
}

impl RecordSet {
    fn is_empty(&self) -> bool {
        self.guards.is_empty()
            && self.limit.is_none()
            && self.recorders.is_none()
            && self.trace.is_none()
    }
}

impl OnStatus for Records {
    fn on_status(self, mut c: i32) {
        let RecordSet {
            guards,
            limit,
            recorders,
            trace,
            caller,
            context,
        } = *self.0;
        // One clock read for every record that wants the end of the call.
        let now =
            (!guards.is_empty() || limit.is_some() || recorders.is_some() || caller.is_some())
                .then(tokio::time::Instant::now);
        if c == code::CANCELLED
            && let (Some(caller), Some(now)) = (caller, now)
            && caller.passed_for_reset(now)
        {
            c = code::DEADLINE_EXCEEDED;
        }
        // Inner first, as nested bodies would report.
        if let Some(now) = now {
            let Both { outer, inner } = guards;
            if let Some(shedding) = inner {
                shedding.finish(c, now.into_std());
            }
            if let Some(limit) = limit {
                limit.finish(c, now.into_std());
            }
            if let Some(breaker) = outer {
                breaker.finish(c, now.into_std());
            }
            if let Some(r) = recorders {
                // inside the call's span: its end-of-call log lines carry the trace id
                let _span = trace.as_ref().map(TraceRecord::enter);
                in_scope(&context, || r.finish(c, now));
            }
        }
        if let Some(t) = trace {
            t.on_status(c);
        }
    }
}

pin_project! {
    /// The response body: the handler's, its final status read once for the call's records
    /// (as [`StatusBody`](zrpc_core::grpc::StatusBody) reads it: from the trailers, `Unknown`
    /// when it ends or fails without them, `Cancelled` when dropped before), under the call's
    /// deadline (past it: `DeadlineExceeded` for the records, `RST_STREAM CANCEL` on the wire),
    /// with the trailers the handler added ([`Trailers`](crate::Trailers)), and with recover
    /// on, a panic while polling it answered with `Internal "panic: ..."` trailers (as
    /// recover's nested `RecoverBody` does). One wrapper for all, so that every frame goes
    /// through one `poll_frame` and one `Poll` mapping.
    pub(crate) struct GovernedBody<B> {
        #[pin]
        inner: B,
        guard: StatusGuard<Records>,
        // `Some` when guarded.
        recover: Option<Recovering>,
        // The call's deadline (armed only when the body is pending).
        timer: Timer,
        // Where the handler's trailers are.
        facts: Option<CallFacts>,
        // A panic or the deadline ended the body.
        done: bool,
    }
}

impl<B> GovernedBody<B> {
    fn new(
        inner: B,
        guard: StatusGuard<Records>,
        recover: Option<Recovering>,
        timer: Timer,
        facts: Option<CallFacts>,
    ) -> Self {
        GovernedBody {
            inner,
            guard,
            recover,
            timer,
            facts,
            done: false,
        }
    }
}

impl<B: Default> Default for GovernedBody<B> {
    fn default() -> Self {
        GovernedBody::new(
            B::default(),
            StatusGuard::disarmed(),
            None,
            Timer::new(None),
            None,
        )
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for GovernedBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GovernedBody")
            .field("inner", &self.inner)
            .field("guard", &self.guard)
            .field("recover", &self.recover.is_some())
            .field("deadline", &self.timer.deadline())
            .finish_non_exhaustive()
    }
}

impl<B> http_body::Body for GovernedBody<B>
where
    B: http_body::Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, BoxError>>> {
        let this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        let inner = this.inner;
        let mut item = match guarded_if(this.recover.as_ref(), || inner.poll_frame(cx)) {
            Ok(Poll::Ready(item)) => item,
            Ok(Poll::Pending) if this.timer.expired(cx) => {
                *this.done = true;
                this.guard.fire(code::DEADLINE_EXCEEDED);
                return Poll::Ready(Some(Err(timeout::reset())));
            }
            Ok(Poll::Pending) => return Poll::Pending,
            Err((r, caught)) => {
                *this.done = true;
                Some(Ok(panic_trailers(&r.method, r.facts.as_ref(), &caught)))
            }
        };
        if let (Some(Ok(frame)), Some(facts)) = (&mut item, this.facts.as_ref())
            && let Some(trailers) = frame.trailers_mut()
        {
            facts.take_trailers(trailers);
        }
        this.guard.observe(&item);
        Poll::Ready(item.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Governance {
    /// Auth, then (when it passes at once) [`admit`](Self::admit): the call's first state.
    #[inline(always)]
    fn start<S, B>(
        self: &Arc<Self>,
        inner: &mut S,
        req: Request<Body>,
        entry: Entry,
        guard: &mut StatusGuard<Records>,
        timer: &mut Timer,
    ) -> State<S, B>
    where
        S: Service<Request<Body>, Response = Response<B>> + Clone,
        B: Default,
    {
        match auth::check(self.auth.as_ref(), &self.policy, &req) {
            Check::Pass => self.admit(inner, req, entry, guard, timer),
            Check::Reject(c, m) => State::answer(status_response(c, &m)),
            Check::Pending(lookup, token) => {
                let clone = inner.clone();
                let inner = std::mem::replace(inner, clone);
                State::lookup(
                    lookup,
                    Pending {
                        inner,
                        req,
                        // Admitted when the store answers: the clock is read then. A call
                        // waiting for its token no longer counts in the shedder's flight:
                        // callers that have not proved who they are do not move it.
                        entry: Entry {
                            now: None,
                            queued: None,
                            ..entry
                        },
                        token,
                        shared: Arc::clone(self),
                    },
                )
            }
        }
    }

    /// Breaker, limit, shedding, timeout, then the handler: what follows a passed auth check.
    #[inline(always)]
    fn admit<S, B>(
        &self,
        inner: &mut S,
        mut req: Request<Body>,
        entry: Entry,
        guard: &mut StatusGuard<Records>,
        timer: &mut Timer,
    ) -> State<S, B>
    where
        S: Service<Request<Body>, Response = Response<B>>,
        B: Default,
    {
        let Entry {
            facts,
            caller,
            mut now,
            queued,
        } = entry;
        let path = req.uri().path();
        let registry = self.breaker.as_ref().filter(|_| !is_infra(path));
        // A call the serve loop counted as queued is one the shedder watches.
        let shedder = self
            .shedding
            .as_ref()
            .filter(|s| queued.is_some() || s.watches(path));
        let limiter = self.limit.as_ref().filter(|l| l.watches(path));
        if registry.is_some() || limiter.is_some() || shedder.is_some() {
            let now = now.get_or_insert_with(tokio::time::Instant::now).into_std();
            let facts = || facts.clone();
            let mut guards = Both::default();
            if let Some(registry) = registry {
                match BreakerRecord::admit(registry, path, facts, now) {
                    Some(record) => guards.outer = Some(record),
                    None => return State::answer(breaker::rejection()),
                }
            }
            let mut limit = None;
            if let Some(limiter) = limiter {
                match limiter.admit(req.headers(), path, facts, now) {
                    Some(record) => limit = Some(record),
                    None => {
                        // The breaker sees the rejection's code, as from a nested layer.
                        if let Some(outer) = guards.outer {
                            outer.on_status(code::RESOURCE_EXHAUSTED);
                        }
                        return State::answer(limit::rejection());
                    }
                }
            }
            if let Some(shedder) = shedder {
                match shedder.admit(path, facts, now, queued) {
                    Some(record) => guards.inner = Some(record),
                    None => {
                        // The breaker sees the shed call's code, as it would from the
                        // response of a nested shedding layer; the limit's permit is
                        // dropped (no sample: the request was never read).
                        if let Some(outer) = guards.outer {
                            outer.on_status(code::RESOURCE_EXHAUSTED);
                        }
                        return State::answer(shedding::rejection());
                    }
                }
            }
            match guard.get_mut() {
                Some(records) => {
                    records.0.guards = guards;
                    records.0.limit = limit;
                }
                None => {
                    *guard = StatusGuard::new(Records(Box::new(RecordSet {
                        guards,
                        limit,
                        recorders: None,
                        trace: None,
                        caller,
                        context: None,
                    })));
                }
            }
        }
        // The server's own timeout, when it is sooner than the caller's deadline (the timer
        // holds the caller's already).
        if let Some(settings) = self.timeout.as_deref() {
            *timer = Timer::new(timeout::deadline(
                Some(settings),
                &mut req,
                caller.map(|c| c.at),
                || *now.get_or_insert_with(tokio::time::Instant::now),
            ));
        }
        State::Call {
            fut: inner.call(req),
        }
    }
}

impl<S, B> Service<Request<Body>> for Governor<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone,
    B: Default,
{
    type Response = Response<GovernedBody<B>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    /// Reads what the serve loop put in the request's extensions (its `Arrival`): the
    /// call's facts, the peer's address, the call's count in flight since its stream was
    /// accepted and the caller's deadline.
    #[inline(always)]
    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let (facts, queued, peer, caller) = match req.extensions_mut().get_mut::<Arrival>() {
            Some(a) => (
                Some(a.facts.clone()),
                a.queued.take(),
                a.conn.tcp.remote_addr,
                a.caller,
            ),
            // A request that did not come through the serve loop (the unit tests'; their
            // nested facts layer puts the call's facts in the extensions).
            None => (
                req.extensions().get::<CallFacts>().cloned(),
                None,
                peer_addr(&req),
                CallerDeadline::of(req.headers()),
            ),
        };
        let entry = Entry {
            facts,
            caller,
            now: None,
            queued,
        };
        self.call_with(req, entry, peer)
    }
}

impl<S, B> Governor<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone,
    B: Default,
{
    /// The call of `req` from `peer`, admitted as `entry` says.
    #[inline(always)]
    fn call_with(
        &mut self,
        req: Request<Body>,
        entry: Entry,
        peer: Option<std::net::SocketAddr>,
    ) -> ResponseFuture<S, B> {
        let g = &*self.shared;
        // Recover's method (for the log line) and the facts it marks on a panic, which the
        // breaker and the shedder read too.
        let recover = g.recover.then(|| Recovering {
            method: method_of(&req),
            facts: entry.facts.clone(),
        });
        // The caller's trace context, current while the handler runs, for zrpc's client to pass
        // on (see `trace`); whether or not a subscriber wants the span.
        let context = if g.trace {
            TraceContext::extract(req.headers())
        } else {
            None
        };
        let span = if g.trace {
            rpc_span(&req, context.as_ref())
        } else {
            Span::none()
        };
        // A disabled span (no subscriber records it) would end with a code set on nothing:
        // no record, and the future holds `Span::none()` (see `trace`).
        let (trace, span) = if span.is_disabled() {
            (None, Span::none())
        } else {
            (Some(TraceRecord::new(span.clone())), span)
        };
        // One clock read for both durations, the breaker's and the shedder's admission and
        // the timeout's deadline.
        let mut entry = entry;
        let recorders = if g.stat.is_some() || g.metrics.is_some() {
            let start = *entry.now.insert(tokio::time::Instant::now());
            Some(RecordersRecord::new(
                g.stat
                    .as_ref()
                    .map(|s| StatRecord::start(s, &req, peer, start)),
                g.metrics.as_ref().map(|m| m.start(&req, start)),
            ))
        } else {
            None
        };
        let records = RecordSet {
            guards: Both::default(),
            limit: None,
            recorders,
            trace,
            caller: entry.caller,
            context: None,
        };
        let mut guard = if records.is_empty() {
            StatusGuard::disarmed()
        } else {
            StatusGuard::new(Records(Box::new(records)))
        };
        let mut timer = Timer::new(entry.caller.map(|c| c.at));
        let facts = entry.facts.clone();
        let _enter = span.enter();
        let (inner, shared) = (&mut self.inner, &self.shared);
        // Recover covers what runs inside it in the nested chain: a token store's lookup, the
        // inner layers' and the handler's `call`.
        let state = match guarded_if(recover.as_ref(), || {
            in_scope(&context, || {
                shared.start(inner, req, entry, &mut guard, &mut timer)
            })
        }) {
            Ok(state) => state,
            Err((r, caught)) => {
                mark_panicked(r.facts.as_ref());
                State::answer(panic_response(&r.method, &caught))
            }
        };
        drop(_enter);
        ResponseFuture {
            state,
            guard,
            recover,
            timer,
            facts,
            span,
            context,
        }
    }
}

/// Recover's part of a call: the method for the log line, the facts it marks.
#[derive(Debug)]
struct Recovering {
    method: PathAndQuery,
    facts: Option<CallFacts>,
}

/// What admitting a call needs besides its request.
#[derive(Debug)]
struct Entry {
    /// The call's facts.
    facts: Option<CallFacts>,
    /// The deadline the caller set.
    caller: Option<CallerDeadline>,
    /// The clock, when the call read it already (as its start).
    now: Option<tokio::time::Instant>,
    /// The call's count in the shedder's flight since its stream was accepted.
    queued: Option<Queued>,
}

/// A call waiting for its token lookup.
struct Pending<S> {
    inner: S,
    req: Request<Body>,
    entry: Entry,
    token: Vec<u8>,
    shared: Arc<Governance>,
}

pin_project! {
    #[project = StateProj]
    enum State<S: Service<Request<Body>>, B> {
        Call { #[pin] fut: S::Future },
        // Boxed: the lookup's service and request, and a stage's answer, are off the common
        // path, and inline they would make every call's future larger.
        Lookup { lookup: TokenFuture, pending: Option<Box<Pending<S>>> },
        Answer { resp: Option<Box<Response<B>>> },
    }
}

impl<S: Service<Request<Body>>, B> State<S, B> {
    #[cold]
    #[inline(never)]
    fn answer(resp: Response<B>) -> Self {
        State::Answer {
            resp: Some(Box::new(resp)),
        }
    }

    /// Waits for a token store's answer (off the common path: out of line).
    #[cold]
    #[inline(never)]
    fn lookup(lookup: TokenFuture, pending: Pending<S>) -> Self {
        State::Lookup {
            lookup,
            pending: Some(Box::new(pending)),
        }
    }
}

pin_project! {
    /// Response future of [`Governor`].
    pub(crate) struct ResponseFuture<S: Service<Request<Body>>, B> {
        #[pin]
        state: State<S, B>,
        guard: StatusGuard<Records>,
        recover: Option<Recovering>,
        timer: Timer,
        // where the handler's trailers are
        facts: Option<CallFacts>,
        span: Span,
        // the caller's trace context, current while the handler is polled
        context: Option<TraceContext>,
    }
}

impl<S: Service<Request<Body>>, B> std::fmt::Debug for ResponseFuture<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("governor::ResponseFuture")
            .field("guard", &self.guard)
            .finish_non_exhaustive()
    }
}

impl<S, B> Future for ResponseFuture<S, B>
where
    S: Service<Request<Body>, Response = Response<B>>,
    B: Default,
{
    type Output = Result<Response<GovernedBody<B>>, S::Error>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let _enter = this.span.enter();
        let resp = loop {
            // Recover covers each step: the handler's future, a token store's lookup and
            // the inner `call` after it.
            let step = match guarded_if(this.recover.as_ref(), || {
                in_scope(this.context, || {
                    step(this.state.as_mut(), this.guard, this.timer, cx)
                })
            }) {
                Ok(step) => step,
                Err((r, caught)) => {
                    mark_panicked(r.facts.as_ref());
                    Step::Answer(panic_response(&r.method, &caught))
                }
            };
            match step {
                Step::Answer(resp) => break resp,
                Step::Next => {}
                Step::Pending => return Poll::Pending,
                Step::Failed(e) => {
                    this.guard.fire(code::UNKNOWN);
                    return Poll::Ready(Err(e));
                }
            }
        };
        let (mut parts, body) = resp.into_parts();
        let mut guard = std::mem::replace(this.guard, StatusGuard::disarmed());
        if let Some(records) = guard.get_mut() {
            records.0.context = this.context.take();
        }
        // A trailers-only response reports its code at once, and carries the handler's
        // trailers in its headers.
        if let Some(c) = status_from_headers(&parts.headers) {
            guard.fire(c);
            if let Some(facts) = this.facts.as_ref() {
                facts.take_trailers(&mut parts.headers);
            }
        }
        let timer = std::mem::replace(this.timer, Timer::new(None));
        let body = GovernedBody::new(body, guard, this.recover.take(), timer, this.facts.take());
        Poll::Ready(Ok(Response::from_parts(parts, body)))
    }
}

/// What one [`step`] of a call's future came to.
enum Step<B, E> {
    /// The response, the handler's or a stage's.
    Answer(Response<B>),
    /// The state moved on: step again.
    Next,
    Pending,
    Failed(E),
}

/// Polls the call's current state once.
#[inline(always)]
fn step<S, B>(
    mut state: Pin<&mut State<S, B>>,
    guard: &mut StatusGuard<Records>,
    timer: &mut Timer,
    cx: &mut Context<'_>,
) -> Step<B, S::Error>
where
    S: Service<Request<Body>, Response = Response<B>>,
    B: Default,
{
    match state.as_mut().project() {
        StateProj::Call { fut } => match fut.poll(cx) {
            Poll::Ready(Ok(resp)) => Step::Answer(resp),
            Poll::Ready(Err(e)) => Step::Failed(e),
            Poll::Pending if timer.expired(cx) => Step::Answer(timeout::expired()),
            Poll::Pending => Step::Pending,
        },
        StateProj::Answer { resp } => match resp.take() {
            Some(r) => Step::Answer(*r),
            None => Step::Pending,
        },
        StateProj::Lookup { lookup, pending } => {
            let Poll::Ready(found) = lookup.as_mut().poll(cx) else {
                // The caller's deadline bounds the lookup too (the timer holds it until the
                // call is admitted): a slow store answers `DeadlineExceeded` at the deadline.
                return if timer.expired(cx) {
                    Step::Answer(timeout::expired())
                } else {
                    Step::Pending
                };
            };
            let Some(p) = pending.take() else {
                return Step::Pending;
            };
            let Pending {
                mut inner,
                req,
                entry,
                token,
                shared,
            } = *p;
            let next = match auth::decide(found, &token, &shared.policy) {
                Check::Reject(c, m) => State::answer(status_response(c, &m)),
                _ => shared.admit(&mut inner, req, entry, guard, timer),
            };
            state.set(next);
            Step::Next
        }
    }
}

/// The metrics stage's state this governor records into, for its tests.
#[cfg(test)]
impl<S> Governor<S> {
    pub(crate) fn metrics_state(&self) -> Option<&Arc<metrics::State>> {
        self.shared.metrics.as_ref()
    }
}

/// Every stage off, for the tests to turn one on (the caller's deadline still holds).
#[cfg(test)]
impl Stages {
    pub(crate) fn off() -> Self {
        Stages {
            trace: TraceStage::new(false),
            recover: RecoverStage::new(false),
            stat: StatStage::new(StatSettings {
                enabled: false,
                ..StatSettings::default()
            }),
            metrics: MetricsStage::new(false),
            auth: AuthStage::new(None, false),
            breaker: BreakerStage::new(false),
            limit: LimitStage::new(None, std::time::Instant::now()),
            shedding: SheddingStage::new(None),
            timeout: TimeoutStage::new(super::TimeoutSettings::default()),
        }
    }
}

/// A stage as a tower layer, for its unit tests: the governor with only that stage on, so the
/// tests drive what the server runs.
#[cfg(test)]
macro_rules! one_stage_layer {
    ($($stage:ident => $field:ident),* $(,)?) => {$(
        impl<S> Layer<S> for $stage {
            type Service = Governor<S>;
            fn layer(&self, inner: S) -> Governor<S> {
                GovernorLayer::new(&Stages {
                    $field: self.clone(),
                    ..Stages::off()
                })
                .layer(inner)
            }
        }
    )*};
}

#[cfg(test)]
one_stage_layer!(
    TraceStage => trace,
    RecoverStage => recover,
    StatStage => stat,
    MetricsStage => metrics,
    AuthStage => auth,
    BreakerStage => breaker,
    LimitStage => limit,
    SheddingStage => shedding,
    TimeoutStage => timeout,
);

#[cfg(test)]
mod tests;
