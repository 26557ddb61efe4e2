//! Stages: what the server decides about a call before its handler runs, and what it records
//! when the call ends.
//!
//! The server runs a list of stages, built once from the config; a stage the config switches
//! off is not in the list, so it costs a call nothing. Outer to inner:
//!
//! `stat -> metrics -> auth -> breaker -> limit -> shedding -> timeout -> your stages`
//!
//! Each built-in stage is one folder of this module (its logic, its config mapping, its
//! gauges and its drop reason) and one line in `BUILT_IN`. A stage implements [`Stage`]: it
//! [admits](Stage::admit) a call, with or without a [`Record`] that sees the call's final
//! status, or rejects it with a [`Rejection`] (a trailers-only gRPC status, counted in
//! `rpc_server_dropped_total` under its reason), or waits (a token store's lookup, say), the
//! caller's deadline bounding the wait. Records finish inner first, with one read of the final
//! status and one clock read for all of them.
//!
//! What kind of call it is ([`Call::is_streaming`], [`Call::is_infrastructure`]) is looked up
//! once per call, from its path, as the transport accepts its stream (`call::CallKind`, in the
//! call's `Arrival`): the stages read it, none looks the path up again.
//!
//! Three concerns wrap every poll of a call rather than its admission, and are how the list
//! runs rather than stages in it: the call's span and trace context (`Middlewares.Trace`),
//! turning a panic into `Internal` (`Middlewares.Recover`), and the caller's deadline, which
//! holds over the whole call whatever the config switches off.
//!
//! This is go-zero's order but for auth, which go-zero runs innermost (after breaker, shedding
//! and timeout): there an unauthenticated caller's calls are counted by the breaker and the
//! shedder. zrpc checks credentials first, so nothing such a caller sends can open a breaker
//! or move the limit or the shedder (`docs/middleware.md`). `limit` is a zrpc addition.
//!
//! Add your own with [`Server::stage`](crate::Server::stage); `docs/middleware.md` ("Adding a
//! stage") has a complete rate limiter.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use http::{Extensions, HeaderMap, Request};
use tokio::time::Instant;
use tonic::body::Body;
use zrpc_core::shedder::Queued;

pub use crate::call::Blame;
use crate::call::{CallFacts, CallKind};

pub(crate) mod auth;
pub(crate) mod breaker;
pub(crate) mod governor;
pub(crate) mod limit;
pub(crate) mod metrics;
pub(crate) mod recover;
pub(crate) mod shedding;
pub(crate) mod stat;
pub(crate) mod timeout;
pub(crate) mod trace;

pub(crate) use governor::{Frame, GovernorLayer};
pub(crate) use limit::LimitStage;
pub(crate) use shedding::SheddingStage;
#[cfg(test)]
pub(crate) use {
    auth::AuthStage, breaker::BreakerStage, metrics::MetricsStage, stat::StatSettings,
    stat::StatStage, timeout::TimeoutSettings, timeout::TimeoutStage,
};

/// One step of the server's decision about a call (see the [module docs](self)).
///
/// `admit` runs on the call's task before the handler, for every call the stages before it
/// admitted; keep it short and non-blocking (return [`Admission::wait`] for I/O).
pub trait Stage: Send + Sync + 'static {
    /// Admits `call`, rejects it or waits.
    fn admit(&self, call: &mut Call<'_>) -> Admission;

    /// The stage's name, for logs and the admin view.
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }
}

/// What a stage sees of a call as it is admitted.
pub struct Call<'a> {
    req: &'a mut Request<Body>,
    peer: Option<SocketAddr>,
    /// Resolved once per call, as its stream was accepted (`call::Arrival`).
    kind: CallKind,
    now: Option<Instant>,
    deadline: Option<Instant>,
    /// The call's count in the shedder's flight since its stream was accepted.
    pub(crate) queued: Option<Queued>,
}

impl<'a> Call<'a> {
    pub(crate) fn new(
        req: &'a mut Request<Body>,
        peer: Option<SocketAddr>,
        kind: CallKind,
        now: Option<Instant>,
        deadline: Option<Instant>,
        queued: Option<Queued>,
    ) -> Self {
        Call {
            req,
            peer,
            kind,
            now,
            deadline,
            queued,
        }
    }

    /// The method's path, `/package.Service/Method`.
    pub fn method(&self) -> &str {
        self.req.uri().path()
    }

    /// The request's headers (the call's metadata).
    pub fn headers(&self) -> &HeaderMap {
        self.req.headers()
    }

    /// The request's extensions: what a stage puts here the handler finds in
    /// `tonic::Request::extensions`.
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        self.req.extensions_mut()
    }

    /// The caller's address, when the transport knows it.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The call's start: the clock is read once per call, for every stage (tokio's clock, so
    /// tests can pause it).
    pub fn now(&mut self) -> Instant {
        *self.now.get_or_insert_with(Instant::now)
    }

    /// The call's deadline so far: the caller's, or the server's timeout when sooner.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the method streams (declared or learned from the descriptor sets), as the
    /// transport found once per call when it accepted the call's stream.
    pub fn is_streaming(&mut self) -> bool {
        self.kind.streaming
    }

    /// Whether the method is health checking or reflection, which the governing stages leave
    /// alone (found once per call, with [`is_streaming`](Self::is_streaming)).
    pub fn is_infrastructure(&self) -> bool {
        self.kind.infra
    }

    /// The call's kind (both of the above).
    pub(crate) fn kind(&self) -> CallKind {
        self.kind
    }

    pub(crate) fn request(&self) -> &Request<Body> {
        self.req
    }

    pub(crate) fn request_mut(&mut self) -> &mut Request<Body> {
        self.req
    }

    /// Shortens the call's deadline to `at` (the timeout stage).
    pub(crate) fn set_deadline(&mut self, at: Option<Instant>) {
        self.deadline = at;
    }
}

impl fmt::Debug for Call<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("method", &self.method())
            .field("peer", &self.peer)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// A stage's decision about a call.
#[must_use]
pub struct Admission(pub(crate) Verdict);

pub(crate) enum Verdict {
    Pass,
    Record(AnyRecord),
    Reject(Rejection),
    Wait(Pin<Box<dyn Future<Output = Admission> + Send>>),
}

impl Admission {
    /// Let the call through; nothing to record.
    pub fn pass() -> Self {
        Admission(Verdict::Pass)
    }

    /// Let the call through; `record` sees how it ends.
    pub fn record(record: impl Record) -> Self {
        Admission(Verdict::Record(AnyRecord::User(Box::new(record))))
    }

    /// Answer the call with `rejection` instead of running it.
    pub fn reject(rejection: Rejection) -> Self {
        Admission(Verdict::Reject(rejection))
    }

    /// Decide when `decision` resolves (I/O, such as a token lookup). The caller's deadline
    /// bounds the wait: past it the call ends `DeadlineExceeded`.
    pub fn wait(decision: impl Future<Output = Admission> + Send + 'static) -> Self {
        Admission(Verdict::Wait(Box::pin(decision)))
    }

    /// A built-in stage's record (kept inline: boxing each would cost an allocation per stage
    /// per call).
    pub(crate) fn built_in(record: impl Into<AnyRecord>) -> Self {
        Admission(Verdict::Record(record.into()))
    }
}

impl From<Rejection> for Admission {
    fn from(rejection: Rejection) -> Self {
        Admission::reject(rejection)
    }
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Verdict::Pass => f.write_str("Pass"),
            Verdict::Record(_) => f.write_str("Record"),
            Verdict::Reject(r) => f.debug_tuple("Reject").field(r).finish(),
            Verdict::Wait(_) => f.write_str("Wait"),
        }
    }
}

/// A stage's answer to a call it refuses.
#[derive(Debug, Clone)]
pub struct Rejection {
    pub(crate) code: i32,
    pub(crate) message: Cow<'static, str>,
    pub(crate) reason: Option<&'static str>,
}

impl Rejection {
    /// Answer with `code` and `message` (the status message the caller reads: say what
    /// refused the call and, where it helps, the figure that did).
    pub fn new(code: tonic::Code, message: impl Into<Cow<'static, str>>) -> Self {
        Rejection {
            code: code as i32,
            message: message.into(),
            reason: None,
        }
    }

    /// Counts the rejection as a dropped call under `reason`: the `reason` label of
    /// `rpc_server_dropped_total` (a short fixed word, such as `"rate"`).
    pub fn dropped(mut self, reason: &'static str) -> Self {
        self.reason = Some(reason);
        self
    }

    pub(crate) fn of(code: i32, message: impl Into<Cow<'static, str>>) -> Self {
        Rejection {
            code,
            message: message.into(),
            reason: None,
        }
    }
}

/// What a stage remembers of a call it admitted, until the call ends.
pub trait Record: Send + 'static {
    /// The call ended as `end` says.
    fn finish(self: Box<Self>, end: &End<'_>);
}

/// How a call ended, for its records.
#[derive(Debug)]
pub struct End<'a> {
    pub(crate) code: i32,
    pub(crate) now: Instant,
    pub(crate) facts: Option<&'a CallFacts>,
    pub(crate) handled: bool,
}

impl End<'_> {
    /// The final status code.
    pub fn code(&self) -> tonic::Code {
        tonic::Code::from_i32(self.code)
    }

    /// When the call ended (one clock read for every record).
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Whose fault the code is: the caller's (its request failed or never ended), the
    /// server's, or nobody's (go-zero's acceptable codes).
    pub fn blame(&self) -> Blame {
        crate::call::blame(self.facts, self.code)
    }

    /// Whether the handler ran: `false` when a stage rejected the call (or its deadline passed
    /// while a stage waited).
    pub fn reached_handler(&self) -> bool {
        self.handled
    }

    /// Whether the call shows its path names a method: its service answered it, with a code
    /// other than `Unimplemented`. The rule by which a caller's made-up paths get no state of
    /// their own (a breaker, a limit, metrics series).
    pub(crate) fn names_a_method(&self) -> bool {
        self.handled && self.code != zrpc_core::grpc::code::UNIMPLEMENTED
    }
}

/// The records of the built-in stages, inline, and users' boxed.
pub(crate) enum AnyRecord {
    Stat(stat::StatRecord),
    Metrics(metrics::MetricsRecord),
    Breaker(breaker::BreakerRecord),
    Limit(limit::LimitRecord),
    Shedding(shedding::SheddingRecord),
    User(Box<dyn Record>),
}

impl AnyRecord {
    fn finish(self, end: &End<'_>) {
        match self {
            AnyRecord::Stat(r) => r.finish(end),
            AnyRecord::Metrics(r) => r.finish(end),
            AnyRecord::Breaker(r) => r.finish(end),
            AnyRecord::Limit(r) => r.finish(end),
            AnyRecord::Shedding(r) => r.finish(end),
            AnyRecord::User(r) => r.finish(end),
        }
    }
}

impl fmt::Debug for AnyRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnyRecord::Stat(r) => r.fmt(f),
            AnyRecord::Metrics(r) => r.fmt(f),
            AnyRecord::Breaker(r) => r.fmt(f),
            AnyRecord::Limit(r) => r.fmt(f),
            AnyRecord::Shedding(r) => r.fmt(f),
            AnyRecord::User(_) => f.write_str("User"),
        }
    }
}

macro_rules! built_in_records {
    ($($variant:ident($ty:ty)),* $(,)?) => {$(
        impl From<$ty> for AnyRecord {
            fn from(r: $ty) -> Self {
                AnyRecord::$variant(r)
            }
        }
    )*};
}

built_in_records!(
    Stat(stat::StatRecord),
    Metrics(metrics::MetricsRecord),
    Breaker(breaker::BreakerRecord),
    Limit(limit::LimitRecord),
    Shedding(shedding::SheddingRecord),
);

/// What building the built-in stages needs besides the config.
pub(crate) struct Env<'a> {
    pub(crate) conf: &'a crate::conf::RpcServerConf,
    pub(crate) token_store: Option<Arc<dyn crate::auth::TokenStore>>,
    pub(crate) breakers: Arc<zrpc_core::breaker::BreakerRegistry>,
    pub(crate) shedding: SheddingStage,
    pub(crate) limit: LimitStage,
    /// The methods the server's descriptor sets name (`/pkg.Service/Method`): known to exist
    /// before any call of theirs.
    pub(crate) described: &'a [String],
}

/// Builds a built-in stage from the config: `None` when the config switches it off.
type Build = fn(&Env<'_>) -> Option<Box<dyn Stage>>;

/// The built-in stages, outer to inner: adding one is a folder and a line here.
const BUILT_IN: &[Build] = &[
    stat::build,
    metrics::build,
    auth::build,
    breaker::build,
    limit::build,
    shedding::build,
    timeout::build,
];

/// The server's list: the built-in stages the config switches on, then the user's.
pub(crate) fn list(env: &Env<'_>, user: &[Arc<dyn Stage>]) -> Vec<Arc<dyn Stage>> {
    BUILT_IN
        .iter()
        .filter_map(|build| build(env))
        .map(Arc::from)
        .chain(user.iter().cloned())
        .collect()
}
