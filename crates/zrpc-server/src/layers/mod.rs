//! The server middleware chain, one tower `Layer` + `Service` pair per stage (outer -> inner):
//!
//! `(facts) -> trace -> recover -> stat -> metrics -> auth -> breaker -> shedding -> timeout -> (drain) -> user layers -> service`
//!
//! This is go-zero's order but for auth, which go-zero runs innermost (after breaker,
//! shedding and timeout): there an unauthenticated caller's calls are counted by the breaker
//! and the shedder. zrpc checks credentials first, so nothing such a caller sends can open a
//! breaker or move the shedder (see `docs/middleware.md`).
//!
//! `facts` and `drain` are zrpc additions: `facts` records whether a call's request arrived
//! whole, so the breaker and the shedder count only failures the server produced; `drain`
//! ends streams still open at the shutdown deadline with a proper status.
//!
//! Each stage is switched by the config at run time (a disabled stage passes calls through)
//! rather than with `option_layer`: the stages that observe the final status wrap the
//! response body, so an `Either` of "on" and "off" would not have one response type.
//! Stages that reject a call answer with a trailers-only gRPC status and an empty body
//! (`B::default()`), so every body type in the chain is `Default`.
//!
//! The server builds this chain only when one of its stages is on: with all of facts to
//! timeout off it serves through `drain -> user layers` alone (its serve loop then runs that
//! lean chain instead, `Server::serve_with_listener`). And it runs facts to timeout as **one
//! stage**, `governor`: one service, one response future, one body wrapper and one read of
//! the final status for all of them, with the behaviour of the nested layers (the module says
//! where it differs). Nested layers would cost every call the moves of the request and of the
//! futures and bodies nested in one another, a service clone per layer and more status
//! parses. The layers stay public for users who compose their own chain; both share their
//! code.
//!
//! Outside this chain, the transport's `Front` stage runs first on every call (connection
//! limits, HTTP 415 for non-gRPC requests, the request-bytes budget, `Tls.AllowedClients`,
//! the peer's extensions); it also counts a call in the shedder's flight from the moment its
//! stream is accepted, so that calls waiting for a busy worker thread count too
//! (`docs/middleware.md`, "Calls waiting for a worker thread").
//!
//! Every stage's `call` and its response future's `poll` are `#[inline(always)]`: a request and
//! its response are moved by value from stage to stage, and out of line each move is a
//! `memcpy` call; inlined, the compiler merges most of them. On the client's layers the same
//! attribute made calls slower, so they stay as the compiler chooses.

pub mod auth;
pub mod breaker;
pub mod drain;
pub mod facts;
pub(crate) mod governor;
pub mod metrics;
pub mod observe;
pub(crate) mod outcome;
pub mod recover;
pub mod shedding;
pub mod stat;
pub mod timeout;
pub mod trace;
pub(crate) mod util;

#[cfg(test)]
pub(crate) mod test_util;

pub use auth::{AuthLayer, Lookup, StaticTokens, TokenFuture, TokenStore};
pub use breaker::BreakerLayer;
pub use drain::{DrainLayer, DrainSignal};
pub use facts::{CallFacts, FactsLayer};
pub(crate) use governor::{GovernorLayer, Stages};
pub use metrics::MetricsLayer;
pub use recover::RecoverLayer;
pub use shedding::{SheddingLayer, SheddingSettings};

pub use stat::{StatLayer, StatSettings};
pub use timeout::{TimeoutLayer, TimeoutSettings};
pub use trace::TraceLayer;
pub use util::StreamingMethods;
