//! Breaker tuning.

use std::time::Duration;

/// Tuning of a [`GoogleBreaker`](super::GoogleBreaker). [`Default`] is go-zero's constants.
///
/// Fields are public; the struct is `#[non_exhaustive]`, so start from `BreakerConfig::default()`
/// and change what you need.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use zrpc_core::breaker::BreakerConfig;
///
/// let mut cfg = BreakerConfig::default();
/// assert_eq!(cfg.window, Duration::from_secs(10));
/// cfg.k = 2.0;
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BreakerConfig {
    /// Length of the statistics window. Default 10 s.
    pub window: Duration,
    /// Number of buckets in the window (at least 1). Default 40 (250 ms each).
    pub buckets: u32,
    /// Accept multiplier `K` of the SRE formula while healthy. Default 1.5.
    pub k: f64,
    /// The lowest multiplier, reached after a full window of failing buckets. Default 1.1.
    pub min_k: f64,
    /// Requests always let through per window (low-traffic protection). Default 5.
    pub protection: u64,
    /// A request is forced through when nothing passed for this long (recovery probe). Default 1 s.
    pub force_pass: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window: Duration::from_secs(10),
            buckets: 40,
            k: 1.5,
            min_k: 1.1,
            protection: 5,
            force_pass: Duration::from_secs(1),
        }
    }
}

impl BreakerConfig {
    /// The duration of one bucket: `window / buckets` (at least 1 ns).
    #[must_use]
    pub fn bucket_duration(&self) -> Duration {
        (self.window / self.buckets.max(1)).max(Duration::from_nanos(1))
    }
}
