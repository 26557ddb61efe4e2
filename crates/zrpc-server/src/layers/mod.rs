//! The server's governed stages (outer -> inner):
//!
//! `trace -> recover -> stat -> metrics -> auth -> breaker -> limit -> shedding -> timeout`
//!
//! then `drain -> compression -> user layers -> service` (`crate::server`). This is go-zero's
//! order but for auth, which go-zero runs innermost (after breaker, shedding and timeout):
//! there an unauthenticated caller's calls are counted by the breaker and the shedder. zrpc
//! checks credentials first, so nothing such a caller sends can open a breaker or move the
//! limit or the shedder (see `docs/middleware.md`). `limit` is a zrpc addition: the adaptive
//! concurrency limit and its priority tiers (on with `ConcurrencyLimit`).
//!
//! The server runs the stages as **one stage**, [`governor`]: one service, one response
//! future, one body wrapper and one read of the final status for all of them, with the
//! behaviour of the stages nested one in another (the module says where it differs). Each
//! stage's module holds what the governor runs of it: its `*Stage` type (its settings, compiled
//! from the config; a stage that is off is skipped), its per-call record and its decisions.
//! Stages that reject a call answer with a trailers-only gRPC status and an empty body
//! (`B::default()`). The governor is always built: the caller's deadline is enforced whatever
//! the config switches off.
//!
//! What the transport learnt of a call as it arrived (its facts, its count in the shedder's
//! flight since its stream was accepted, the caller's deadline) reaches the governor as
//! `crate::call::Arrival`; nothing here imports from the transport.
//!
//! The tests drive what production runs: each stage's unit tests go through the governor with
//! only that stage on (`impl Layer for *Stage`, test-only, in [`governor`]), and the
//! governor's own tests run the stages together.

pub(crate) mod auth;
pub(crate) mod breaker;
pub(crate) mod drain;
pub(crate) mod governor;
pub(crate) mod limit;
pub(crate) mod metrics;
pub(crate) mod outcome;
pub(crate) mod recover;
pub(crate) mod shedding;
pub(crate) mod stat;
pub(crate) mod timeout;
pub(crate) mod trace;
pub(crate) mod util;

#[cfg(test)]
pub(crate) mod test_util;

pub(crate) use auth::AuthStage;
pub(crate) use breaker::BreakerStage;
pub(crate) use drain::{DrainLayer, DrainSignal};
pub(crate) use governor::{GovernorLayer, Stages};
pub(crate) use limit::{LimitSettings, LimitStage};
pub(crate) use metrics::MetricsStage;
pub(crate) use recover::RecoverStage;
pub(crate) use shedding::{SheddingSettings, SheddingStage};
pub(crate) use stat::{StatSettings, StatStage};
pub(crate) use timeout::{TimeoutSettings, TimeoutStage};
pub(crate) use trace::TraceStage;
pub(crate) use util::StreamingMethods;
