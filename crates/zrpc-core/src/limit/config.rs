//! The concurrency limit's parameters.

use std::time::Duration;

/// Parameters of a [`ConcurrencyLimit`](super::ConcurrencyLimit). [`Default`] is Envoy's
/// gradient controller's defaults, with a 100 ms sample window.
///
/// Fields are public; the struct is `#[non_exhaustive]`, so start from
/// `LimitConfig::default()` and change what you need.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use zrpc_core::limit::LimitConfig;
///
/// let mut cfg = LimitConfig::default();
/// cfg.max_limit = 200;
/// assert_eq!(cfg.window, Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LimitConfig {
    /// The lowest limit, and the concurrency the minimum round-trip time is measured at
    /// (Envoy `min_concurrency`). Default 3; at least 1.
    pub min_limit: u32,
    /// The highest limit (Envoy `max_concurrency_limit`). Default 1000.
    pub max_limit: u32,
    /// The latency above the minimum round-trip time that does not count as queueing, as a
    /// fraction of it (Envoy `buffer`). Default 0.25.
    pub buffer: f64,
    /// How long the latencies of a sample window are gathered before the limit is computed
    /// again (Envoy `concurrency_update_interval`). Default 100 ms.
    pub window: Duration,
    /// How often the minimum round-trip time is measured again (Envoy's `min_rtt_calc_params`
    /// `interval`). Default 60 s.
    pub min_rtt_interval: Duration,
    /// The latest start of each measurement after `min_rtt_interval`, as a fraction of it, so
    /// that servers started together do not measure together (Envoy `jitter`). Default 0.15.
    pub jitter: f64,
    /// Calls whose median round-trip time is the minimum (Envoy `request_count`). Default 50.
    pub min_rtt_samples: u32,
}

impl Default for LimitConfig {
    fn default() -> Self {
        LimitConfig {
            min_limit: 3,
            max_limit: 1000,
            buffer: 0.25,
            window: Duration::from_millis(100),
            min_rtt_interval: Duration::from_secs(60),
            jitter: 0.15,
            min_rtt_samples: 50,
        }
    }
}
