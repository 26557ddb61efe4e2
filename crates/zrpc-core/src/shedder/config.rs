//! Shedder tuning.

use std::time::Duration;

/// Tuning of an [`AdaptiveShedder`](super::AdaptiveShedder). [`Default`] is go-zero's constants.
///
/// Fields are public; the struct is `#[non_exhaustive]`, so start from `ShedderConfig::default()`
/// and change what you need.
///
/// # Examples
///
/// ```
/// use zrpc_core::shedder::ShedderConfig;
///
/// let mut cfg = ShedderConfig::default();
/// cfg.cpu_threshold = 800;
/// assert_eq!(cfg.bucket_duration(), std::time::Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ShedderConfig {
    /// Length of the statistics window. Default 5 s.
    pub window: Duration,
    /// Number of buckets in the window (at least 1). Default 50 (100 ms each).
    pub buckets: u32,
    /// CPU usage in millicpu at or above which the service counts as overloaded. Default 900
    /// (90 %). Values of 1000 and more are treated as 999.
    pub cpu_threshold: u64,
    /// How long the service stays "hot" after the CPU was last seen over the threshold, once a
    /// request was dropped. Default 1 s.
    pub cool_off: Duration,
    /// Weight of the previous value in the in-flight moving average. Default 0.9.
    pub flying_beta: f64,
    /// `min_rt` used while the window holds no completed request. Default 1 s.
    pub default_min_rt: Duration,
}

impl Default for ShedderConfig {
    fn default() -> Self {
        ShedderConfig {
            window: Duration::from_secs(5),
            buckets: 50,
            cpu_threshold: 900,
            cool_off: Duration::from_secs(1),
            flying_beta: 0.9,
            default_min_rt: Duration::from_secs(1),
        }
    }
}

impl ShedderConfig {
    /// The duration of one bucket: `window / buckets` (at least 1 µs).
    #[must_use]
    pub fn bucket_duration(&self) -> Duration {
        (self.window / self.buckets.max(1)).max(Duration::from_micros(1))
    }
}
