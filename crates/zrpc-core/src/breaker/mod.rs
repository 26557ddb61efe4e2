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
//! drop_ratio *= max(0, (R - working_buckets) / R)                // recover faster while it works
//! if random() < drop_ratio                 -> reject with BreakerOpen, count a drop
//! else                                     -> allow, last_pass = now
//! ```
//!
//! `R` is go-zero's `buckets` (the whole window) under [`BreakerConfig::go_zero`]; zrpc's default
//! (breaker v2) is the buckets in [`BreakerConfig::recovery`] (1.5 s = 6 buckets), so a healed
//! backend is back to full traffic about 1.5 s after its first successful call instead of ~9 s,
//! while a bucket with any failure restarts the run (partial failure keeps the proportional drops).
//!
//! An allowed request is reported with [`BreakerPromise::accept`] (success) or
//! [`BreakerPromise::reject`] (failure); dropping the promise unresolved counts as a failure (so a
//! panic or a cancelled call is a failure, like go-zero's `defer` in `doReq`).
//! [`GoogleBreaker::do_with_acceptable`] wraps a synchronous call.
//!
//! # Behaviour in an outage
//!
//! The simulation in `breaker/tests/sim.rs` (explicit 1 ms steps, a backend failing every request
//! for 20 s, then healthy) measures, at 1000 req/s: first drop after 6 ms, ≥ 95 % drops from 0.2 s,
//! 1–7 requests per second let through while open, and after healing < 50 % drops within about
//! 5 s and < 1 % within about 10 s; 10 000 req/s gives the same shape. Drops count in `total`, so
//! the SRE formula alone would recover slowly at high rates (go-zero issue #4101, reported against
//! older versions); what bounds recovery here is the working-bucket factor, which reaches 0 once a
//! whole window (10 s) of buckets has successes and no failures (go-zero; those figures are for
//! [`BreakerConfig::go_zero`]; zrpc's default reaches 0 after 1.5 s, see `zrpc-sim`). Without that factor the same
//! simulation needs about 72 s to get back under 1 % drops.
//!
//! # Implementation notes
//!
//! The window sits behind a short `parking_lot::Mutex`, taken once per reported outcome. `allow`
//! takes it only while a failure or drop is still inside the window: with only successes in the
//! window the SRE ratio cannot be positive (for `min_k >= 1`), so `allow` is then a lock-free atomic
//! check. No allocation per call; `last_pass` is an atomic and the random numbers come from a `rand`
//! `SmallRng` seeded per breaker and kept under the window's lock (a draw happens only with the
//! window locked), so simulations can be made deterministic with [`GoogleBreaker::with_seed`].

mod config;
mod google;
mod registry;

pub use config::BreakerConfig;
pub use google::{BreakerPromise, BreakerStats, GoogleBreaker};
pub use registry::BreakerRegistry;

use std::fmt;
use std::time::Duration;

/// The error returned when the breaker rejects a request (go-zero `ErrServiceUnavailable`).
///
/// Displays as `circuit breaker is open` (go-zero's words), followed, when the breaker made it,
/// by its window's figures: `circuit breaker is open: dropped 38 of the last 200 calls in 10s
/// (150 failed, 12 succeeded; drop chance 81%)`; [`explain`](Self::explain) names the breaker
/// too. Servers map it to `Unavailable`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BreakerOpen {
    /// Boxed: `allow`'s result stays as small as the promise it carries when the call passes.
    figures: Option<Box<Figures>>,
}

/// The breaker's window when it dropped a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Figures {
    /// The window, the drop counted.
    stats: BreakerStats,
    window: Duration,
    /// The drop probability, in percent.
    chance: u8,
}

impl BreakerOpen {
    /// Creates the marker error.
    #[must_use]
    pub fn new() -> Self {
        BreakerOpen { figures: None }
    }

    /// A drop, whose window (the drop counted) is `stats`.
    pub(crate) fn at(stats: BreakerStats, window: Duration, ratio: f64) -> Self {
        BreakerOpen {
            figures: Some(Box::new(Figures {
                stats,
                window,
                chance: (ratio.clamp(0.0, 1.0) * 100.0).round() as u8,
            })),
        }
    }

    /// The breaker's window when it dropped the request (the drop counted), when the breaker
    /// made this error.
    #[must_use]
    pub fn stats(&self) -> Option<BreakerStats> {
        self.figures.as_ref().map(|f| f.stats)
    }

    /// The message naming the breaker `name` (a method, `/pkg.Service/Method`):
    /// `circuit breaker is open: /pkg.Service/Method dropped 38 of the last 200 calls in 10s
    /// (150 failed, 12 succeeded; drop chance 81%)`.
    #[must_use]
    pub fn explain(&self, name: &str) -> String {
        match self.figures.as_deref() {
            Some(x) => format!("circuit breaker is open: {name} {}", Explained(*x)),
            None => format!("circuit breaker is open: {name}"),
        }
    }
}

/// The figures of a drop, as words.
struct Explained(Figures);

impl fmt::Display for Explained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Figures {
            stats,
            window,
            chance,
        } = self.0;
        write!(
            f,
            "dropped {} of the last {} calls in {window:?} ({} failed, {} succeeded; drop \
             chance {chance}%)",
            stats.drops, stats.total, stats.failures, stats.accepts
        )
    }
}

impl fmt::Display for BreakerOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("circuit breaker is open")?;
        match self.figures.as_deref() {
            Some(x) => write!(f, ": {}", Explained(*x)),
            None => Ok(()),
        }
    }
}

impl std::error::Error for BreakerOpen {}

#[cfg(test)]
mod tests;
