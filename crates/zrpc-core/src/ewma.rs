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
//! Two flavours are provided: [`Ewma`] (plain, `&mut self`) and [`AtomicEwma`] (lock-free, `&self`,
//! the `f64` is kept as bits in an `AtomicU64` and updated with a compare-and-swap loop, the way
//! tower's `peak_ewma` and go-zero's p2c keep per-node stats without a lock).
//!
//! Time is always a parameter (`now: Instant`), so tests run on constructed instants.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// Blends `old` and `sample` with the weight `w` of the old value.
#[inline]
fn blend(old: f64, sample: f64, w: f64) -> f64 {
    old * w + sample * (1.0 - w)
}

/// A time-decayed EWMA owned by one user (`&mut self`).
///
/// See the [module docs](self) for the formula.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// use zrpc_core::ewma::Ewma;
///
/// let t0 = Instant::now();
/// let mut e = Ewma::new(Duration::from_secs(10));
/// assert!(e.is_empty());
/// e.update(100.0, t0);
/// assert_eq!(e.value(), 100.0); // the first sample replaces
/// e.update(200.0, t0 + Duration::from_secs(10));
/// assert!(e.value() > 100.0 && e.value() < 200.0);
/// ```
#[derive(Debug, Clone)]
pub struct Ewma {
    decay: Duration,
    value: f64,
    last: Option<Instant>,
}

impl Ewma {
    /// Creates an empty average with the given decay time.
    #[must_use]
    pub fn new(decay: Duration) -> Self {
        Ewma {
            decay,
            value: 0.0,
            last: None,
        }
    }

    /// Adds a sample observed at `now`.
    ///
    /// The first sample replaces the empty average. A `now` earlier than the previous sample counts
    /// as no elapsed time.
    pub fn update(&mut self, sample: f64, now: Instant) {
        self.value = match self.last {
            None => sample,
            Some(last) => {
                let w = decay_weight(now.saturating_duration_since(last), self.decay);
                blend(self.value, sample, w)
            }
        };
        self.last = Some(match self.last {
            Some(last) if last > now => last,
            _ => now,
        });
    }

    /// The current average (0 while empty).
    #[must_use]
    pub fn value(&self) -> f64 {
        self.value
    }

    /// True until the first sample.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.last.is_none()
    }

    /// The decay time.
    #[must_use]
    pub fn decay(&self) -> Duration {
        self.decay
    }
}

impl Default for Ewma {
    /// An empty average with [`DEFAULT_DECAY`].
    fn default() -> Self {
        Ewma::new(DEFAULT_DECAY)
    }
}

/// Bit pattern marking an empty [`AtomicEwma`] (a NaN that `f64` arithmetic never produces here).
const EMPTY: u64 = u64::MAX;

/// A lock-free time-decayed EWMA shared between threads (`&self`).
///
/// The average is an `f64` stored as bits in an [`AtomicU64`] and updated by a compare-and-swap loop;
/// the time of the last sample is another atomic (nanoseconds since the first sample, plus one, so
/// that 0 means "never"). As in go-zero's p2c picker, the time stamp and the value are separate
/// atomics: two updates racing at the same instant may both use the same previous time stamp, which
/// only slightly changes the weight. No allocation, no lock.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// use zrpc_core::ewma::AtomicEwma;
///
/// let t0 = Instant::now();
/// let e = AtomicEwma::new(Duration::from_secs(10));
/// e.update(5.0, t0);
/// e.update(15.0, t0 + Duration::from_secs(1));
/// assert!(e.value() > 5.0 && e.value() < 15.0);
/// ```
#[derive(Debug)]
pub struct AtomicEwma {
    decay: Duration,
    bits: AtomicU64,
    /// Nanoseconds since `base` of the last sample, plus one; 0 = no sample yet.
    last: AtomicU64,
    /// The instant of the first sample, the origin of `last`.
    base: OnceLock<Instant>,
}

impl AtomicEwma {
    /// Creates an empty average with the given decay time.
    #[must_use]
    pub fn new(decay: Duration) -> Self {
        AtomicEwma {
            decay,
            bits: AtomicU64::new(EMPTY),
            last: AtomicU64::new(0),
            base: OnceLock::new(),
        }
    }

    /// Adds a sample observed at `now`. Lock-free.
    ///
    /// The first sample replaces the empty average. Instants earlier than the previous sample count as
    /// no elapsed time.
    pub fn update(&self, sample: f64, now: Instant) {
        let base = *self.base.get_or_init(|| now);
        let stamp = u64::try_from(now.saturating_duration_since(base).as_nanos())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1);
        let prev = self.last.fetch_max(stamp, Ordering::AcqRel);
        let w = if prev == 0 {
            0.0
        } else {
            decay_weight(Duration::from_nanos(stamp.saturating_sub(prev)), self.decay)
        };
        let mut old = self.bits.load(Ordering::Acquire);
        loop {
            let new = if old == EMPTY {
                sample
            } else {
                blend(f64::from_bits(old), sample, w)
            };
            match self.bits.compare_exchange_weak(
                old,
                new.to_bits(),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(current) => old = current,
            }
        }
    }

    /// The current average (0 while empty).
    #[must_use]
    pub fn value(&self) -> f64 {
        match self.bits.load(Ordering::Acquire) {
            EMPTY => 0.0,
            bits => f64::from_bits(bits),
        }
    }

    /// True until the first sample.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.bits.load(Ordering::Acquire) == EMPTY
    }

    /// The decay time.
    #[must_use]
    pub fn decay(&self) -> Duration {
        self.decay
    }
}

impl Default for AtomicEwma {
    /// An empty average with [`DEFAULT_DECAY`].
    fn default() -> Self {
        AtomicEwma::new(DEFAULT_DECAY)
    }
}

#[cfg(test)]
mod tests;
