//! A call's facts, in one place: what the transport learns of a call as it arrives and fills in,
//! and what the governing stages and the handler read. The transport (`crate::transport`) and
//! the stages (`crate::stage`) both import this module and nothing of each other.
//!
//! - [`Arrival`]: one request extension per call with its connection ([`ConnInfo`]: peer
//!   address, TLS identity, the connection's shared [`ConnState`]), its [`CallKind`], its
//!   [`CallFacts`], its count in the server's in-flight calls since its stream was accepted, and
//!   the caller's deadline;
//! - [`CallKind`]: whether the call streams and whether it is health or reflection, looked up
//!   once per call from its path ([`StreamingMethods::kind`]) as the transport accepts its
//!   stream; every stage and the drain read it from the `Arrival` rather than the path;
//! - [`CallFacts`]: whose fault a failure is (recorded by the transport's request body), and the
//!   trailers the handler adds ([`Trailers`]);
//! - [`CallerDeadline`] and [`Timer`]: the caller's `grpc-timeout`, read once as the request
//!   arrives, enforced over the whole call by the timeout stage;
//! - [`InFlight`]: how the transport counts a call in flight as its stream is accepted, for the
//!   stage that owns the count (the shedder) without knowing it.

mod conn;
mod deadline;
mod facts;
mod kind;
mod trailers;

use std::sync::Arc;

use zrpc_core::shedder::Queued;

pub(crate) use conn::{CallGuard, ConnInfo, ConnState};
pub(crate) use deadline::{CallerDeadline, Timer};
pub use facts::Blame;
pub(crate) use facts::{CallFacts, FactsBody, blame, record_frame};
#[cfg(test)]
pub(crate) use facts::{facts_of, nested::FactsLayer};
pub(crate) use kind::{CallKind, StreamingMethods};
pub use trailers::Trailers;

/// What the transport knows of a call, in its request's extensions for the chain's stages
/// (the transport's `Front` and the governor) and the handler ([`Trailers::of`]): one
/// extension, so that with tonic's `TcpConnectInfo` and the router's parameters a request's
/// extensions fit their first allocation.
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    /// The connection's facts, one `Arc` per connection.
    pub(crate) conn: Arc<ConnInfo>,
    /// The call's kind, resolved from its path as its stream was accepted.
    pub(crate) kind: CallKind,
    /// The call's facts, recorded by the transport's request body.
    pub(crate) facts: CallFacts,
    /// The call's count in the server's in-flight calls since its stream was accepted (taken
    /// by the stage that owns the count).
    pub(crate) queued: Option<Queued>,
    /// The deadline the caller's `grpc-timeout` set when the request arrived.
    pub(crate) caller: Option<CallerDeadline>,
    /// The request's `grpc-timeout` is there but does not parse.
    pub(crate) malformed_timeout: bool,
}

#[cfg(test)]
impl Arrival {
    /// A unary call's arrival on a connection the tests know nothing about, without a
    /// deadline.
    pub(crate) fn for_test() -> Arrival {
        Arrival::for_test_kind(CallKind::UNARY)
    }

    /// A call of `kind` arriving on a connection the tests know nothing about, without a
    /// deadline.
    pub(crate) fn for_test_kind(kind: CallKind) -> Arrival {
        Arrival {
            kind,
            conn: Arc::new(ConnInfo {
                tcp: tonic::transport::server::TcpConnectInfo {
                    local_addr: None,
                    remote_addr: None,
                },
                peer: None,
                conn: None,
                authority: None,
                goaway_at: None,
            }),
            facts: CallFacts::default(),
            queued: None,
            caller: None,
            malformed_timeout: false,
        }
    }
}

/// The kind of the call whose extensions are `ext`: its [`Arrival`]'s, or for a request that came
/// without one, what the governor resolved and put there itself; `None` when neither did.
pub(crate) fn kind_of(ext: &http::Extensions) -> Option<CallKind> {
    match ext.get::<Arrival>() {
        Some(a) => Some(a.kind),
        None => ext.get::<CallKind>().copied(),
    }
}

/// Counts a call in flight from the moment its stream is accepted, before its task runs, so
/// that calls waiting for a busy worker thread count too: the stage that owns the count
/// implements it (the shedder, `stage::shedding`), the transport only asks it, and the same
/// stage ends the count when it admits or sheds the call.
pub(crate) trait InFlight: Send + Sync + std::fmt::Debug {
    /// The count of an accepted call of `kind`; `None` for calls the stage never counts.
    fn accepted(&self, kind: CallKind) -> Option<Queued>;
}
