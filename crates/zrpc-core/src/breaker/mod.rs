//! Google SRE client-side throttling ("adaptive throttling"), go-zero flavour.
//!
//! Port of go-zero's `core/breaker/googlebreaker.go` and `bucket.go` (current master behaviour), after
//! the "Client-Side Throttling" section of the Google SRE book, chapter *Handling Overload*
//! (<https://sre.google/sre-book/handling-overload/>).
//!
//! # Algorithm
//!
//! Outcomes are counted in a [`RollingWindow`](crate::window::RollingWindow) of `buckets` buckets
//! over `window` (default 40 × 250 ms = 10 s; the current bucket **is** included). Each bucket counts
//! successes, failures and drops; `total` is the sum of all three (drops count since go-zero v1.6.5).
//! Walking the buckets oldest to newest:
//!
//! - `accepts` = Σ successes, `total` = Σ (successes + failures + drops);
//! - `failing_buckets`: reset to 0 by a bucket with a success, +1 for a bucket with failures and no
//!   success (empty and drop-only buckets leave it unchanged) — the trailing run of failing buckets;
//! - `working_buckets`: reset to 0 by a bucket with a failure, +1 for a bucket with successes.
//!
//! Then, on every request:
//!
//! ```text
//! w          = k - (k - min_k) * failing_buckets / buckets     // 1.5 falls to 1.1 while it keeps failing
//! drop_ratio = (total - protection - max(w, min_k) * accepts) / (total + 1)
//! if drop_ratio <= 0                       -> allow
//! if last_pass is set && now - last_pass > force_pass (1 s) -> allow, last_pass = now   // probe
//! drop_ratio *= (buckets - working_buckets) / buckets           // recover faster while it works
//! if random() < drop_ratio                 -> reject with BreakerOpen, count a drop
//! else                                     -> allow, last_pass = now
//! ```
//!
//! An allowed request is reported with [`BreakerPromise::accept`] (success) or
//! [`BreakerPromise::reject`] (failure); dropping the promise unresolved counts as a failure (so a
//! panic or a cancelled call is a failure, like go-zero's `defer` in `doReq`).
//! [`GoogleBreaker::do_with_acceptable`] wraps a synchronous call.
//!
//! Because drops count in `total`, recovery after a full outage at high request rates is slow: see
//! the simulation test in `breaker/tests/sim.rs` for measured figures (go-zero issue #4101).
//!
//! # Implementation notes
//!
//! The window sits behind a short `parking_lot::Mutex` (one lock per `allow`, one per outcome, no
//! allocation); `last_pass` is an atomic and the random numbers come from a lock-free SplitMix64
//! generator seeded per breaker, so simulations can be made deterministic with
//! [`GoogleBreaker::with_seed`].

mod config;
mod google;
mod registry;

pub use config::BreakerConfig;
pub use google::{BreakerPromise, BreakerStats, GoogleBreaker};
pub use registry::BreakerRegistry;

use std::fmt;

/// The error returned when the breaker rejects a request (go-zero `ErrServiceUnavailable`).
///
/// Displays as `circuit breaker is open`. Servers map it to `Unavailable`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BreakerOpen {
    _priv: (),
}

impl BreakerOpen {
    /// Creates the marker error.
    #[must_use]
    pub fn new() -> Self {
        BreakerOpen { _priv: () }
    }
}

impl fmt::Display for BreakerOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("circuit breaker is open")
    }
}

impl std::error::Error for BreakerOpen {}

/// Whether a numeric gRPC status code counts as an acceptable outcome for a breaker (go-zero
/// `zrpc/internal/codes/accept.go`).
///
/// `DeadlineExceeded` (4), `ResourceExhausted` (8), `Unimplemented` (12), `Internal` (13),
/// `Unavailable` (14) and `DataLoss` (15) are failures; every other code, including `Ok` (0),
/// `Unknown` and `Cancelled`, is acceptable.
///
/// # Examples
///
/// ```
/// use zrpc_core::breaker::is_acceptable_code;
///
/// assert!(is_acceptable_code(0));
/// assert!(is_acceptable_code(5)); // NotFound
/// assert!(!is_acceptable_code(14)); // Unavailable
/// ```
#[must_use]
pub fn is_acceptable_code(code: i32) -> bool {
    !matches!(code, 4 | 8 | 12 | 13 | 14 | 15)
}

#[cfg(test)]
mod tests;
