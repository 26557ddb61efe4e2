//! The server middleware chain (outer -> inner):
//!
//! `(facts) -> trace -> recover -> stat -> metrics -> auth -> breaker -> limit -> shedding -> timeout -> (drain) -> user layers -> service`
//!
//! This is go-zero's order but for auth, which go-zero runs innermost (after breaker,
//! shedding and timeout): there an unauthenticated caller's calls are counted by the breaker
//! and the shedder. zrpc checks credentials first, so nothing such a caller sends can open a
//! breaker or move the shedder (see `docs/middleware.md`).
//!
//! `facts`, `limit` and `drain` are zrpc additions: `facts` records whether a call's request
//! arrived whole, so the breaker, the limit and the shedder count only failures the server
//! produced; `limit` is the adaptive concurrency limit and its priority tiers (on with
//! `ConcurrencyLimit`); `drain` ends streams still open at the shutdown deadline with a proper
//! status.
//!
//! The server runs facts to timeout as **one stage**, [`governor`]: one service, one response
//! future, one body wrapper and one read of the final status for all of them, with the
//! behaviour of the stages nested one in another (the module says where it differs). Each
//! stage's module holds what the governor runs of it: its settings (the `*Layer` types,
//! switched by the config at run time: a stage that is off is skipped), its per-call record and
//! its decisions. Stages that reject a call answer with a trailers-only gRPC status and an
//! empty body (`B::default()`).
//!
//! The stages as tower layers of their own exist only in tests: each module's unit tests drive
//! its stage through them, and `governor/differential.rs` nests them all and checks that the
//! governor answers and records alike.
//!
//! The server builds the governor only when one of its stages is on: with all of facts to
//! timeout off it serves through `drain -> user layers` alone.
//!
//! Outside this chain, the transport's `Front` stage runs first on every call (connection
//! limits, HTTP 415 for non-gRPC requests, the request-bytes budget, `Tls.AllowedClients`,
//! the peer's extensions); it also counts a call in the shedder's flight from the moment its
//! stream is accepted, so that calls waiting for a busy worker thread count too
//! (`docs/middleware.md`, "Calls waiting for a worker thread").

pub(crate) mod auth;
pub(crate) mod breaker;
pub(crate) mod drain;
pub(crate) mod governor;
pub(crate) mod limit;
pub(crate) mod metrics;
#[cfg(test)]
mod observe;
pub(crate) mod outcome;
pub(crate) mod recover;
pub(crate) mod shedding;
pub(crate) mod stat;
pub(crate) mod timeout;
pub(crate) mod trace;
pub(crate) mod util;

#[cfg(test)]
pub(crate) mod test_util;

pub use auth::{Lookup, StaticTokens, TokenFuture, TokenStore};

pub(crate) use auth::AuthLayer;
pub(crate) use breaker::BreakerLayer;
pub(crate) use drain::{DrainLayer, DrainSignal};
pub(crate) use governor::{GovernorLayer, Stages};
pub(crate) use limit::{LimitLayer, LimitSettings};
pub(crate) use metrics::MetricsLayer;
pub(crate) use recover::RecoverLayer;
pub(crate) use shedding::{SheddingLayer, SheddingSettings};
pub(crate) use stat::{StatLayer, StatSettings};
pub(crate) use timeout::{TimeoutLayer, TimeoutSettings};
pub(crate) use trace::TraceLayer;
pub(crate) use util::StreamingMethods;
