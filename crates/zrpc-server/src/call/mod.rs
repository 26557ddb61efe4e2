//! A call's facts, in one place: what the transport learns of a call as it arrives and fills in,
//! and what the governing stages and the handler read. The transport (`crate::transport`) and
//! the stages (`crate::stage`) both import this module and nothing of each other.
//!
//! - [`Arrival`]: one request extension per call with its connection ([`ConnInfo`]: peer
//!   address, TLS identity, the connection's shared [`ConnState`]), its [`CallFacts`], its count
//!   in the server's in-flight calls since its stream was accepted, and the caller's deadline;
//! - [`CallFacts`]: whose fault a failure is (recorded by the transport's request body), and the
//!   trailers the handler adds ([`Trailers`]);
//! - [`CallerDeadline`] and [`Timer`]: the caller's `grpc-timeout`, read once as the request
//!   arrives, enforced over the whole call by the timeout stage;
//! - [`InFlight`]: how the transport counts a call in flight as its stream is accepted, for the
//!   stage that owns the count (the shedder) without knowing it.

mod conn;
mod deadline;
mod facts;
mod trailers;

use std::sync::Arc;

use zrpc_core::shedder::Queued;

pub(crate) use conn::{CallGuard, ConnInfo, ConnState};
pub(crate) use deadline::{CallerDeadline, Timer};
pub use facts::Blame;
pub(crate) use facts::{CallFacts, FactsBody, blame, record_frame};
#[cfg(test)]
pub(crate) use facts::{facts_of, nested::FactsLayer};
pub use trailers::Trailers;

/// What the transport knows of a call, in its request's extensions for the chain's stages
/// (the transport's `Front` and the governor) and the handler ([`Trailers::of`]): one
/// extension, so that with tonic's `TcpConnectInfo` and the router's parameters a request's
/// extensions fit their first allocation.
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    /// The connection's facts, one `Arc` per connection.
    pub(crate) conn: Arc<ConnInfo>,
    /// The call's facts, recorded by the transport's request body.
    pub(crate) facts: CallFacts,
    /// The call's count in the server's in-flight calls since its stream was accepted (taken
    /// by the stage that owns the count).
    pub(crate) queued: Option<Queued>,
    /// The deadline the caller's `grpc-timeout` set when the request arrived.
    pub(crate) caller: Option<CallerDeadline>,
}

#[cfg(test)]
impl Arrival {
    /// A call's arrival on a connection the tests know nothing about, without a deadline.
    pub(crate) fn for_test() -> Arrival {
        Arrival {
            conn: Arc::new(ConnInfo {
                tcp: tonic::transport::server::TcpConnectInfo {
                    local_addr: None,
                    remote_addr: None,
                },
                peer: None,
                conn: None,
                authority: None,
            }),
            facts: CallFacts::default(),
            queued: None,
            caller: None,
        }
    }
}

/// Counts a call in flight from the moment its stream is accepted, before its task runs, so
/// that calls waiting for a busy worker thread count too: the stage that owns the count
/// implements it (the shedder, `stage::shedding`), the transport only asks it, and the same
/// stage ends the count when it admits or sheds the call.
pub(crate) trait InFlight: Send + Sync + std::fmt::Debug {
    /// The count of an accepted call to `path`; `None` for calls the stage never counts.
    fn accepted(&self, path: &str) -> Option<Queued>;
}
