//! A deterministic discrete-event simulator for zrpc's balancing and breaking code.
//!
//! The code under test is the real one: [`zrpc_client::sim::P2cPicker`] (v1 and v2 rules),
//! [`zrpc_client::sim::RoundRobin`], [`zrpc_client::sim::EndpointStats`] (the EWMA and
//! ejection math) and [`zrpc_core::breaker::GoogleBreaker`], driven by simulated time (explicit
//! instants, no clock read) and simulated servers ([`ServerSpec`]: latency with jitter, failure
//! windows, freezes, connection-refused windows). For comparison it also carries two small
//! reimplementations: go-zero's exact `p2c_ewma` picker ([`Policy::GoZero`]: cold nodes with lag
//! 0, forcePick keyed to the last pick) and tower's `PeakEwma` behind power of two choices
//! ([`Policy::PeakEwma`]).
//!
//! Everything is seeded: the same scenario and seed give the same report. An hour of simulated
//! traffic at 2000 requests/s takes about a second.
//!
//! `cargo run --release -p zrpc-sim -- table` prints the comparison table of `docs/balancing.md`;
//! `-- shed` runs the real `AdaptiveShedder` in front of a simulated CPU-bound server under a 2x
//! step overload ([`simulate_overload`]); `-- retries` compares no retries, gRFC A6 retries and
//! retries under zrpc's retry budget when servers fail ([`simulate_retries`]); `-- limit` runs the
//! real `ConcurrencyLimit` and `AdaptiveShedder` in front of a handler bound by a downstream
//! resource, at 0.5x to 4x its capacity and through spikes ([`simulate_downstream`]).

mod breaker;
mod engine;
mod limit;
mod model;
mod policy;
pub mod retries;
mod rng;
mod shed;
pub mod table;

pub use breaker::{BreakerReport, BreakerRules, simulate_outage};
pub use engine::run;
pub use limit::{
    Downstream, DownstreamReport, LOADS, Protection, limit_markdown, simulate_downstream,
};
pub use model::{Load, Report, Scenario, ServerSpec, Window};
pub use policy::Policy;
pub use retries::{
    FlakyServer, RetryClient, RetryReport, RetryScenario, retries_markdown, simulate_retries,
};
pub use shed::{Overload, ShedReport, shed_markdown, simulate_overload};

/// Nanoseconds in `d`, the simulations' unit of time (saturating).
pub(crate) fn ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The nearest-rank `q` quantile of `sorted` (0 when it is empty).
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}
