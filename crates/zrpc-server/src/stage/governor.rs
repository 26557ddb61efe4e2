//! [`Governor`]: the executor of the server's stage list (`crate::stage`).
//!
//! It reads what the transport learnt of the call as it arrived (`call::Arrival`: the call's
//! kind, its facts, its count in flight, the caller's deadline), runs the list's
//! [`Stage::admit`] in order, then the handler, and feeds the records of the stages that
//! admitted the call with one read of its final status. Around every step it keeps the three
//! concerns that wrap the whole call rather than its admission: the call's span and trace
//! context (`Frame::trace`), a panic turned into `Internal "panic: ..."` (`Frame::recover`), and
//! the caller's deadline, always enforced.
//!
//! One service, one response future and one body wrapper for all the stages: nested tower
//! layers would each clone their service, move the request through their `call`, build their
//! future inside the next and wrap the body again, and several would parse `grpc-status`.
//!
//! - A call a stage rejects is seen by the records of the stages before it, as by nested
//!   layers, with [`End::reached_handler`] false (the limit takes no sample from it).
//! - Records finish inner first, the order of nested bodies, with one clock read.
//! - A panic, in a stage, the handler's `call`, its future or its body, becomes `Internal
//!   "panic: ..."` (logged with its stack), the call's facts blame the server, and every
//!   record sees the `Internal` the caller gets.

use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::uri::PathAndQuery;
use http::{Request, Response};
use pin_project_lite::pin_project;
use smallvec::SmallVec;
use tonic::body::Body;
use tower_layer::Layer;
use tower_service::Service;
use tracing::Span;
use zrpc_core::grpc::trace_context::TraceContext;
use zrpc_core::grpc::{OnStatus, StatusGuard, code, status_from_headers, status_response};
use zrpc_core::shedder::Queued;

use super::recover::{RecoverStage, guarded_if, mark_panicked, panic_response, panic_trailers};
use super::timeout;
use super::trace::{TraceRecord, TraceStage, in_scope, rpc_span};
use super::{AnyRecord, Call, End, Rejection, Stage, Verdict};
use crate::call::{Arrival, CallFacts, CallKind, CallerDeadline, StreamingMethods, Timer};
use crate::layers::util::{method_of, peer_addr};
use tower::BoxError;

/// What wraps every call whatever its stages: its span (`Middlewares.Trace`) and catching
/// its panics (`Middlewares.Recover`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    pub(crate) trace: TraceStage,
    pub(crate) recover: RecoverStage,
}

/// What every [`Governor`] reads, behind one `Arc`.
#[derive(Debug)]
struct Governance {
    trace: bool,
    recover: bool,
    stages: Box<[Arc<dyn Stage>]>,
    /// The server's streaming methods, the transport's set: the kind of a request that came
    /// without an `Arrival` is looked up here (the transport resolved every other's).
    streaming: StreamingMethods,
    /// The `method` labels its drops were counted under ([`Governance::drop_label`]).
    drop_labels: parking_lot::RwLock<HashSet<Box<str>, foldhash::fast::RandomState>>,
}

/// The most `method` labels of `rpc_server_dropped_total` one server counts its drops under.
pub(crate) const DROP_METHODS: usize = 1024;

impl Governance {
    /// The `method` label of a drop of a call to `path`: at most [`DROP_METHODS`] of them,
    /// `""` past that. A call is dropped before it reaches its service, so its path may be one
    /// a caller made up, and each label value is a series kept for the life of the process.
    #[cold]
    fn drop_label<'p>(&self, path: &'p str) -> &'p str {
        // a read lock for a label already in use: rejections come in floods under overload
        if self.drop_labels.read().contains(path) {
            return path;
        }
        let mut labels = self.drop_labels.write();
        if labels.contains(path) {
            return path;
        }
        if labels.len() < DROP_METHODS {
            labels.insert(path.into());
            return path;
        }
        ""
    }
}

impl std::fmt::Debug for dyn Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Adds [`Governor`].
#[derive(Debug, Clone)]
pub(crate) struct GovernorLayer {
    shared: Arc<Governance>,
}

impl GovernorLayer {
    /// Runs `stages` in order inside `frame`; `streaming` says which methods stream, for a
    /// request that came without the transport's `Arrival`.
    pub(crate) fn with(
        frame: Frame,
        stages: Vec<Arc<dyn Stage>>,
        streaming: StreamingMethods,
    ) -> Self {
        GovernorLayer {
            shared: Arc::new(Governance {
                trace: frame.trace.is_on(),
                recover: frame.recover.is_on(),
                stages: stages.into_boxed_slice(),
                streaming,
                drop_labels: parking_lot::RwLock::default(),
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

/// The server's stage list as one service (see the [module docs](self)).
#[derive(Debug, Clone)]
pub(crate) struct Governor<S> {
    inner: S,
    shared: Arc<Governance>,
}

/// The records of the stages that admitted a call, fed by one read of its final status.
///
/// Boxed: inline they would move with the call's future and again with its response (into the
/// body, through hyper's stream task), each move a copy into memory the call had not touched
/// yet. One allocation, served from the allocator's per-thread cache, costs less.
#[derive(Debug)]
pub(crate) struct Records(Box<RecordSet>);

#[derive(Debug)]
struct RecordSet {
    /// Outer first; they finish in reverse.
    records: SmallVec<[AnyRecord; 4]>,
    trace: Option<TraceRecord>,
    /// The caller's deadline: a reset at it is the deadline passing (`call::CallerDeadline`).
    caller: Option<CallerDeadline>,
    /// The caller's trace context, current for the end-of-call lines (moved in from the
    /// call's future when its response head is ready).
    context: Option<TraceContext>,
    facts: Option<CallFacts>,
    /// The handler was called.
    handled: bool,
}

impl RecordSet {
    fn new(caller: Option<CallerDeadline>, facts: Option<CallFacts>) -> Self {
        RecordSet {
            records: SmallVec::new(),
            trace: None,
            caller,
            context: None,
            facts,
            handled: false,
        }
    }
}

impl OnStatus for Records {
    fn on_status(self, mut c: i32) {
        // In place: moving the set out of its box would copy every record.
        let mut set = self.0;
        // One clock read for every record.
        let now = (!set.records.is_empty() || set.caller.is_some()).then(tokio::time::Instant::now);
        if c == code::CANCELLED
            && let (Some(caller), Some(now)) = (set.caller, now)
            && caller.passed_for_reset(now)
        {
            c = code::DEADLINE_EXCEEDED;
        }
        if let Some(now) = now
            && !set.records.is_empty()
        {
            let RecordSet {
                records,
                trace,
                context,
                facts,
                handled,
                ..
            } = &mut *set;
            let end = End {
                code: c,
                now,
                facts: facts.as_ref(),
                handled: *handled,
            };
            // Inside the call's span: end-of-call log lines carry the trace id.
            let _span = trace.as_ref().map(TraceRecord::enter);
            in_scope(context, || {
                for r in records.drain(..).rev() {
                    r.finish(&end);
                }
            });
        }
        if let Some(t) = set.trace.take() {
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
    /// Runs the stages from `entry.from` on: the call's next state.
    #[inline(always)]
    fn admit<S, B>(
        self: &Arc<Self>,
        inner: &mut S,
        mut req: Request<Body>,
        entry: Entry,
        guard: &mut StatusGuard<Records>,
        timer: &mut Timer,
    ) -> State<S, B>
    where
        S: Service<Request<Body>, Response = Response<B>> + Clone,
        B: Default,
    {
        let mut call = Call::new(
            &mut req,
            entry.peer,
            entry.kind,
            entry.now,
            entry.deadline,
            entry.queued,
        );
        for (i, stage) in self.stages.iter().enumerate().skip(entry.from) {
            match stage.admit(&mut call).0 {
                Verdict::Pass => {}
                Verdict::Record(r) => records(guard, &entry.facts, entry.caller).push(r),
                Verdict::Reject(r) => {
                    drop(call);
                    return State::answer(rejected(self.drop_label(req.uri().path()), r));
                }
                Verdict::Wait(wait) => {
                    let deadline = call.deadline();
                    drop(call);
                    let clone = inner.clone();
                    let inner = std::mem::replace(inner, clone);
                    return State::wait(
                        wait,
                        Pending {
                            inner,
                            req,
                            // The clock is read again when the wait ends. A waiting call no
                            // longer counts in the shedder's flight: callers that have not
                            // proved who they are do not move it.
                            entry: Entry {
                                from: i + 1,
                                deadline,
                                now: None,
                                queued: None,
                                ..entry
                            },
                            shared: Arc::clone(self),
                        },
                    );
                }
            }
        }
        let deadline = call.deadline();
        drop(call);
        if deadline != timer.deadline() {
            *timer = Timer::new(deadline);
        }
        if let Some(records) = guard.get_mut() {
            records.0.handled = true;
        }
        State::Call {
            fut: inner.call(req),
        }
    }
}

/// The record set, made on the first record of a call without a span.
fn records<'a>(
    guard: &'a mut StatusGuard<Records>,
    facts: &Option<CallFacts>,
    caller: Option<CallerDeadline>,
) -> &'a mut SmallVec<[AnyRecord; 4]> {
    if guard.get_mut().is_none() {
        *guard = StatusGuard::new(Records(Box::new(RecordSet::new(caller, facts.clone()))));
    }
    match guard.get_mut() {
        Some(r) => &mut r.0.records,
        None => unreachable!("armed above"),
    }
}

/// The answer to a call a stage rejected, counted as a drop (under `method`) when it says so.
#[cold]
#[inline(never)]
pub(crate) fn rejected<B: Default>(method: &str, r: Rejection) -> Response<B> {
    if let Some(reason) = r.reason {
        crate::metrics::count_drop(method, reason);
    }
    status_response(r.code, &r.message)
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
    /// call's kind and facts, the peer's address, the call's count in flight since its stream
    /// was accepted and the caller's deadline.
    #[inline(always)]
    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let (kind, facts, queued, peer, caller) = match req.extensions_mut().get_mut::<Arrival>() {
            Some(a) => (
                a.kind,
                Some(a.facts.clone()),
                a.queued.take(),
                a.conn.tcp.remote_addr,
                a.caller,
            ),
            // A request that did not come through the serve loop (the unit tests'; their
            // nested facts layer puts the call's facts in the extensions). Its kind is looked
            // up here, and left in its extensions for the drain inside.
            None => {
                let kind = self.shared.streaming.kind(req.uri().path());
                req.extensions_mut().insert(kind);
                (
                    kind,
                    req.extensions().get::<CallFacts>().cloned(),
                    None,
                    peer_addr(&req),
                    CallerDeadline::of(req.headers()),
                )
            }
        };
        let entry = Entry {
            from: 0,
            kind,
            facts,
            peer,
            caller,
            deadline: caller.map(|c| c.at),
            now: None,
            queued,
        };
        self.call_with(req, entry)
    }
}

impl<S, B> Governor<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone,
    B: Default,
{
    /// The call of `req`, admitted as `entry` says.
    #[inline(always)]
    fn call_with(&mut self, req: Request<Body>, entry: Entry) -> ResponseFuture<S, B> {
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
        let mut guard = StatusGuard::disarmed();
        let span = if span.is_disabled() {
            Span::none()
        } else {
            let mut records = RecordSet::new(entry.caller, entry.facts.clone());
            records.trace = Some(TraceRecord::new(span.clone()));
            guard = StatusGuard::new(Records(Box::new(records)));
            span
        };
        let mut timer = Timer::new(entry.deadline);
        let facts = entry.facts.clone();
        let _enter = span.enter();
        let (inner, shared) = (&mut self.inner, &self.shared);
        // Recover covers what runs inside it: the stages' `admit` and the handler's `call`.
        let state = match guarded_if(recover.as_ref(), || {
            in_scope(&context, || {
                shared.admit(inner, req, entry, &mut guard, &mut timer)
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

/// Where the list is in admitting a call, and what it knows of it.
#[derive(Debug)]
struct Entry {
    /// The next stage to run.
    from: usize,
    /// The call's kind.
    kind: CallKind,
    /// The call's facts.
    facts: Option<CallFacts>,
    peer: Option<SocketAddr>,
    /// The deadline the caller set.
    caller: Option<CallerDeadline>,
    /// The call's deadline so far (the caller's, or a stage's sooner one).
    deadline: Option<tokio::time::Instant>,
    /// The clock, when the call read it already (as its start).
    now: Option<tokio::time::Instant>,
    /// The call's count in the shedder's flight since its stream was accepted.
    queued: Option<Queued>,
}

/// A call waiting for a stage's decision.
struct Pending<S> {
    inner: S,
    req: Request<Body>,
    entry: Entry,
    shared: Arc<Governance>,
}

type Decision = Pin<Box<dyn Future<Output = super::Admission> + Send>>;

pin_project! {
    #[project = StateProj]
    enum State<S: Service<Request<Body>>, B> {
        Call { #[pin] fut: S::Future },
        // Boxed: a waiting call's service and request, and a stage's answer, are off the
        // common path, and inline they would make every call's future larger.
        Wait { decision: Decision, pending: Option<Box<Pending<S>>> },
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

    /// Waits for a stage's decision (off the common path: out of line).
    #[cold]
    #[inline(never)]
    fn wait(decision: Decision, pending: Pending<S>) -> Self {
        State::Wait {
            decision,
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
    S: Service<Request<Body>, Response = Response<B>> + Clone,
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
    S: Service<Request<Body>, Response = Response<B>> + Clone,
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
        StateProj::Wait { decision, pending } => {
            let Poll::Ready(admission) = decision.as_mut().poll(cx) else {
                // The call's deadline bounds a stage's wait too: a slow token store answers
                // `DeadlineExceeded` at the deadline.
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
                shared,
            } = *p;
            let next = match admission.0 {
                Verdict::Reject(r) => {
                    State::answer(rejected(shared.drop_label(req.uri().path()), r))
                }
                Verdict::Wait(decision) => State::wait(
                    decision,
                    Pending {
                        inner,
                        req,
                        entry,
                        shared,
                    },
                ),
                verdict => {
                    if let Verdict::Record(r) = verdict {
                        records(guard, &entry.facts, entry.caller).push(r);
                    }
                    shared.admit(&mut inner, req, entry, guard, timer)
                }
            };
            state.set(next);
            Step::Next
        }
    }
}

/// The built-in stages as the tests set them, each off unless a test turns it on.
#[cfg(test)]
#[derive(Debug, Clone)]
pub(crate) struct Stages {
    pub(crate) trace: TraceStage,
    pub(crate) recover: RecoverStage,
    pub(crate) stat: super::StatStage,
    pub(crate) metrics: super::MetricsStage,
    pub(crate) auth: super::AuthStage,
    pub(crate) breaker: super::BreakerStage,
    pub(crate) limit: super::LimitStage,
    pub(crate) shedding: super::SheddingStage,
    pub(crate) timeout: super::TimeoutStage,
}

#[cfg(test)]
impl Stages {
    /// Every stage off (the caller's deadline still holds).
    pub(crate) fn off() -> Self {
        Stages {
            trace: TraceStage::new(false),
            recover: RecoverStage::new(false),
            stat: super::StatStage::new(super::StatSettings {
                enabled: false,
                ..super::StatSettings::default()
            }),
            metrics: super::MetricsStage::new(false),
            auth: super::AuthStage::new(None, false),
            breaker: super::BreakerStage::new(false),
            limit: super::LimitStage::new(None, &[], std::time::Instant::now()),
            shedding: super::SheddingStage::new(None),
            timeout: super::TimeoutStage::new(super::TimeoutSettings::default()),
        }
    }
}

#[cfg(test)]
impl GovernorLayer {
    /// The list of `stages`, in the server's order (a stage that is off admits every call).
    pub(crate) fn new(stages: &Stages) -> Self {
        let s = stages.clone();
        let list: Vec<Arc<dyn Stage>> = vec![
            Arc::new(s.stat),
            Arc::new(s.metrics),
            Arc::new(s.auth),
            Arc::new(s.breaker),
            Arc::new(s.limit),
            Arc::new(s.shedding),
            Arc::new(s.timeout),
        ];
        let frame = Frame {
            trace: s.trace,
            recover: s.recover,
        };
        GovernorLayer::with(frame, list, StreamingMethods::default())
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
use super::{
    AuthStage, BreakerStage, LimitStage, MetricsStage, SheddingStage, StatStage, TimeoutStage,
};

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
