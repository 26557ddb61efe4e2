//! Breaker tuning.

use std::time::Duration;

/// Tuning of a [`GoogleBreaker`](super::GoogleBreaker). [`Default`] is go-zero's constants with
/// zrpc's faster recovery ([`recovery`](Self::recovery) 1.5 s); [`BreakerConfig::go_zero`] is
/// go-zero exactly.
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
    /// Breaker v2: the drop ratio scales down linearly with the trailing run of *working* buckets
    /// (successes, no failure) and reaches 0 after this much working time, so a healed backend
    /// gets full traffic back within about `recovery` of its first successful call. go-zero scales
    /// over the whole window (10 s), which keeps dropping for about 9 s after an outage at
    /// 1000 req/s. A bucket with a failure restarts the run, so partial failure keeps the SRE
    /// formula's proportional drops. Clamped to `[one bucket, window]`. Default 1.5 s.
    pub recovery: Duration,
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
            recovery: Duration::from_millis(1500),
        }
    }
}

impl BreakerConfig {
    /// go-zero's constants and behaviour exactly: like [`Default`], with
    /// [`recovery`](Self::recovery) equal to the window.
    #[must_use]
    pub fn go_zero() -> Self {
        let d = BreakerConfig::default();
        BreakerConfig {
            recovery: d.window,
            ..d
        }
    }

    /// The number of working buckets after which the drop ratio is 0 (in `1..=buckets`).
    #[must_use]
    pub fn recovery_buckets(&self) -> u32 {
        let n = self.recovery.as_nanos() / self.bucket_duration().as_nanos().max(1);
        u32::try_from(n)
            .unwrap_or(u32::MAX)
            .clamp(1, self.buckets.max(1))
    }

    /// The duration of one bucket: `window / buckets` (at least 1 ns).
    #[must_use]
    pub fn bucket_duration(&self) -> Duration {
        (self.window / self.buckets.max(1)).max(Duration::from_nanos(1))
    }
}
