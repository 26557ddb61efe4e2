//! The server middleware chain, one tower `Layer` + `Service` pair per stage, in go-zero's
//! order (outer -> inner):
//!
//! `trace -> recover -> stat -> metrics -> breaker -> shedding -> timeout -> auth -> (drain) -> user layers -> service`
//!
//! `drain` is a zrpc addition: it ends streams still open at the shutdown deadline with a
//! proper status.
//!
//! Each stage is switched by the config at run time (a disabled stage passes calls through)
//! rather than with `option_layer`: the stages that observe the final status wrap the
//! response body, so an `Either` of "on" and "off" would not have one response type.
//! Stages that reject a call answer with a trailers-only gRPC status and an empty body
//! (`B::default()`), so every body type in the chain is `Default`.

pub mod auth;
pub mod breaker;
pub mod drain;
pub mod metrics;
pub mod observe;
pub mod recover;
pub mod shedding;
pub mod stat;
pub mod timeout;
pub mod trace;
mod util;

#[cfg(test)]
pub(crate) mod test_util;

pub use auth::{AuthLayer, Lookup, StaticTokens, TokenFuture, TokenStore};
pub use breaker::BreakerLayer;
pub use drain::{DrainLayer, DrainSignal};
pub use metrics::MetricsLayer;
pub use recover::RecoverLayer;
pub use shedding::{SheddingLayer, SheddingSettings};

pub use stat::{StatLayer, StatSettings};
pub use timeout::{TimeoutLayer, TimeoutSettings};
pub use trace::TraceLayer;
pub use util::StreamingMethods;
