//! Time-decayed exponentially weighted moving average.
//!
//! This is the averaging used by go-zero's `p2c_ewma` balancer
//! (`zrpc/internal/balancer/p2c/p2c.go`, constant `decayTime` borrowed from Finagle): each new sample
//! is blended with the previous average using a weight that depends on the *time elapsed since the
//! previous sample*, not on the number of samples:
//!
//! ```text
//! w     = exp(-dt / decay)          // dt = now - time of the previous sample
//! value = value * w + sample * (1 - w)
//! ```
//!
//! Under heavy traffic `dt` is small, `w` is close to 1 and the average is smooth; under light traffic
//! `w` tends to 0 and the average is just the latest sample. The first sample replaces the (empty)
//! average. go-zero detects "empty" by the value being exactly 0; here emptiness is tracked explicitly,
//! so a genuine sample of 0 is averaged like any other.
//!
//! Only the weight lives here: the client's balancer keeps its per-endpoint averages in its own
//! lock-free stats (`zrpc-client`'s `balancer::stats`), which call [`decay_weight`]. Time is a
//! parameter (the elapsed `Duration`), so tests use constructed values.

use std::time::Duration;

/// The default decay time: 10 s, go-zero's `decayTime` (from Finagle).
pub const DEFAULT_DECAY: Duration = Duration::from_secs(10);

/// The weight given to the previous average after `dt` has elapsed: `exp(-dt / decay)`.
///
/// Returns a value in `[0, 1]`: 1 when `dt` is zero, tending to 0 as `dt` grows. A zero `decay`
/// returns 0 (no memory).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use zrpc_core::ewma::decay_weight;
///
/// assert_eq!(decay_weight(Duration::ZERO, Duration::from_secs(10)), 1.0);
/// let w = decay_weight(Duration::from_secs(10), Duration::from_secs(10));
/// assert!((w - (-1.0f64).exp()).abs() < 1e-12);
/// ```
#[must_use]
pub fn decay_weight(dt: Duration, decay: Duration) -> f64 {
    if decay.is_zero() {
        return 0.0;
    }
    (-dt.as_secs_f64() / decay.as_secs_f64()).exp()
}

#[cfg(test)]
mod tests;
