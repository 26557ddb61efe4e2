//! An adaptive concurrency limit found from latency, and priority tiers (zrpc additions: go-zero
//! has neither).
//!
//! go-zero's [shedder](crate::shedder) acts only while the CPU is above its threshold. A server
//! bound by something else (a database's connections, a cache, another service) stays cool
//! while it is overloaded: calls queue for the resource, every caller's latency grows to its
//! deadline, and the server does work whose answers come too late. A concurrency limit set
//! from measured latency needs no CPU signal: when more calls are in flight than the server
//! can serve without queueing, their latency says so, and the limit comes down.
//!
//! # Algorithm: Envoy's gradient controller
//!
//! [`ConcurrencyLimit`] is the gradient controller of Envoy's adaptive-concurrency filter
//! (`source/extensions/filters/http/adaptive_concurrency/controller/gradient_controller.cc`),
//! which treats the concurrency limit like a TCP congestion window, as Netflix's
//! concurrency-limits does:
//!
//! ```text
//! min_rtt     = median round-trip time of min_rtt_samples (50) calls admitted at min_limit (3),
//!               measured at start, every min_rtt_interval (60 s) + up to jitter (15 %) of it,
//!               and after 5 windows in a row at min_limit
//! sample_rtt  = mean round-trip time of the calls that ended in the last window (100 ms)
//! gradient    = clamp(min_rtt * (1 + buffer) / sample_rtt, 0.5, 2)            buffer = 0.25
//! limit'      = clamp(limit * gradient + sqrt(limit * gradient), min_limit, max_limit (1000))
//! admitted    = in_flight < limit    (with tiers: see below)
//! ```
//!
//! While the latency stays within `buffer` of the minimum the limit grows (by up to twice
//! plus its square root per window); past it the limit shrinks (by at most half per window),
//! until the calls in flight queue by about the square root of the limit. Nothing in it is
//! set per service: the minimum round-trip time is measured, and the limit follows.
//!
//! The parameters ([`LimitConfig`]) and their defaults are Envoy's, but for the sample window
//! (Envoy has no default; 100 ms here) and the mean (Envoy's default aggregate is the median:
//! the mean costs two additions per call, and the calls that wait for their deadline pull it
//! up at once). Differences on purpose, each in a line of the code:
//!
//! - **App-limited windows do not raise the limit** (Netflix `Gradient2Limit`: "don't grow the
//!   limit if we are app limited"): when fewer than half the limit were ever in flight at once
//!   in a window, the limit does not grow (it may shrink). Envoy's limit grows to
//!   `max_limit` on an idle server, so a sudden overload meets a limit of 1000 and queues until
//!   a few windows have halved it; here it meets about twice the concurrency it had.
//! - **Tiers**: while the minimum round-trip time is measured, only the calls below the
//!   critical [`Tier`] are held to `min_limit` at once (counted apart from the critical calls
//!   in flight, so that these do not starve the measurement); critical calls keep the limit,
//!   and their round-trip times are not measurement samples. Envoy has no tiers.
//! - **An idle server is not measured**: a measurement that is due waits for a window in which
//!   more than half the limit was in flight at once or the latency passed the buffer. On an
//!   idle server it would find the same minimum, and it holds calls back: on a server at half
//!   its capacity, Envoy's measurement rejects about 0.3 % of the calls (`zrpc-sim limit`).
//! - A measurement that gets no samples (every call waits on something that never answers)
//!   ends after `window * min_rtt_samples` (5 s), at a rejected call, keeping the last minimum.
//!
//! As in Envoy, a call admitted before the last measurement started is not sampled (it was
//! admitted under another limit).
//!
//! # Tiers
//!
//! A caller marks a call's [`Tier`] in its metadata ([`TIER_KEY`]): `critical`, `default` (also
//! any call without the key, so every go-zero caller) or `sheddable`. A default call is
//! admitted while the calls in flight, of every tier, are fewer than three quarters of the
//! limit, a sheddable call while they are fewer than half of it; a critical call while the
//! critical calls in flight are fewer than the limit, whatever the other tiers hold. Under
//! overload the calls in flight stay near the default tier's bound: the lower tiers are shed
//! first, each critical call takes the place of the next call of a lower tier, and the room
//! above the default tier's share absorbs bursts of critical calls (trunk reservation, as
//! telephone exchanges keep lines for priority calls). Counted apart, critical calls cannot be
//! crowded out by a burst of lower tiers (a server that stalled for a moment and finds a
//! hundred calls waiting); the calls in flight then pass the limit by at most the critical
//! ones, until the lower tiers' calls end. The limit itself adapts to the latency of all the
//! calls in flight, whatever their tier.
//!
//! # Time
//!
//! Time is a parameter: [`ConcurrencyLimit::acquire`] and [`LimitPermit::sample`] take `now`,
//! so tests and the simulator (`zrpc-sim limit`) drive the limit with explicit instants.
//! The jitter comes from a seeded generator ([`ConcurrencyLimit::with_seed`]).

mod config;
mod gradient;
mod tier;

pub use config::LimitConfig;
pub use gradient::{ConcurrencyLimit, LimitPermit, LimitStats};
pub use tier::{TIER_KEY, Tier, UnknownTier};

use std::fmt;

/// Why a [`ConcurrencyLimit`] rejected a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RejectReason {
    /// The calls in flight reached the limit.
    Limit,
    /// The calls in flight reached the share of the limit of the call's tier; a call of a
    /// higher tier would have been admitted.
    Tier,
}

/// The error returned when a [`ConcurrencyLimit`] rejects a call. Servers map it to
/// `ResourceExhausted`, as the CPU shedder's [`Overloaded`](crate::shedder::Overloaded).
///
/// Displays as `service overloaded` (go-zero's shedder's words, so that callers see one
/// message for every overload rejection) followed by the bound that refused the call and the
/// figures it was refused at, e.g. `service overloaded: concurrency limit 12 reached (12 in
/// flight)`; [`reason`](Self::reason) says which bound it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    reason: RejectReason,
    tier: Tier,
    /// The limit when the call was refused.
    limit: u32,
    /// The bound the call met: the limit, the tier's share of it, or `min_limit` while the
    /// minimum round-trip time is measured.
    bound: u32,
    /// The calls counted against `bound` when the call was refused.
    inflight: u32,
    measuring: bool,
}

impl Rejected {
    pub(super) fn at_limit(
        tier: Tier,
        limit: u32,
        bound: u32,
        inflight: u32,
        measuring: bool,
    ) -> Self {
        Rejected {
            reason: RejectReason::Limit,
            tier,
            limit,
            bound,
            inflight,
            measuring,
        }
    }

    pub(super) fn at_share(tier: Tier, limit: u32, bound: u32, inflight: u32) -> Self {
        Rejected {
            reason: RejectReason::Tier,
            tier,
            limit,
            bound,
            inflight,
            measuring: false,
        }
    }

    /// Which bound was reached.
    #[must_use]
    pub fn reason(&self) -> RejectReason {
        self.reason
    }

    /// The tier of the refused call.
    #[must_use]
    pub fn call_tier(&self) -> Tier {
        self.tier
    }

    /// The concurrency limit when the call was refused.
    #[must_use]
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The bound the call met: the limit (for a critical call, the critical calls' own count),
    /// its tier's share of it, or `min_limit` while the minimum round-trip time is measured.
    #[must_use]
    pub fn bound(&self) -> u32 {
        self.bound
    }

    /// The calls in flight counted against [`bound`](Self::bound) when the call was refused.
    #[must_use]
    pub fn inflight(&self) -> u32 {
        self.inflight
    }

    /// Whether the limit was measuring the minimum round-trip time (only `min_limit` calls of
    /// the lower tiers at once).
    #[must_use]
    pub fn measuring(&self) -> bool {
        self.measuring
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Rejected {
            tier,
            limit,
            bound,
            inflight,
            ..
        } = *self;
        match self.reason {
            RejectReason::Tier => write!(
                f,
                "service overloaded: the {tier} tier's share of the concurrency limit is in use \
                 ({inflight} in flight, share {bound} of limit {limit})"
            ),
            _ if self.measuring => write!(
                f,
                "service overloaded: {inflight} calls in flight while the concurrency limit \
                 measures the minimum round-trip time (at most {bound} at once; limit {limit})"
            ),
            _ if tier == Tier::Critical => write!(
                f,
                "service overloaded: concurrency limit {limit} reached by critical calls \
                 ({inflight} critical in flight)"
            ),
            _ => write!(
                f,
                "service overloaded: concurrency limit {limit} reached ({inflight} in flight)"
            ),
        }
    }
}

impl std::error::Error for Rejected {}

#[cfg(test)]
mod tests;
