//! Adaptive load shedding (BBR-like), go-zero flavour.
//!
//! Port of go-zero's `core/load/adaptiveshedder.go` (current master behaviour, including the
//! overload factor of v1.6.3 and the cool-off of v1.4.2), which follows the idea of TCP BBR: the
//! most a service can hold in flight is its best throughput times its best latency (Little's law).
//!
//! # Algorithm
//!
//! Completed requests are counted in a [`RollingWindow`](crate::window::RollingWindow) of `buckets`
//! buckets over `window` (default 50 × 100 ms = 5 s) that **ignores the current bucket**. Each
//! bucket holds how many requests passed and the sum of their response times.
//!
//! ```text
//! max_pass    = max over buckets of passed requests (at least 1)
//! min_rt      = min over non-empty buckets of round(rt_sum / passed)  (default 1 s when empty)
//! max_flight  = max(1, max_pass * buckets_per_second * min_rt_seconds)     // Little's law
//! factor      = clamp((1000 - cpu) / (1000 - cpu_threshold), 0.1, 1)       // overload factor
//! overloaded  = cpu >= cpu_threshold            (and then overload_time = now)
//! still_hot   = dropped_recently && now - overload_time < cool_off (1 s)
//! drop        = (overloaded || still_hot)
//!               && avg_flying > max_flight * factor && flying > max_flight * factor
//! ```
//!
//! `flying` is the number of requests in progress (see below for those not yet started); `avg_flying` is its moving average, updated when
//! a request finishes: `avg = avg * 0.9 + flying * 0.1`. A dropped request sets `dropped_recently`.
//! An allowed request returns a [`ShedderPromise`]: [`pass`](ShedderPromise::pass) records its
//! response time and counts it, [`fail`](ShedderPromise::fail) only ends it (as does dropping the
//! promise unresolved).
//!
//! # Difference from go-zero: microsecond response times
//!
//! go-zero records each response time as a whole number of milliseconds, rounded **up**
//! (`ceil(rt_ms)`), so its `min_rt` is never below 1 ms. For handlers that answer in a few hundred
//! microseconds (common in Rust) that overstates `max_flight` by the ratio 1 ms / real latency, so the
//! shedder lets far more requests pile up before it sheds. Here response times are recorded in
//! **microseconds** (rounded up to the next microsecond), and `min_rt` is the rounded average in
//! microseconds. For handlers slower than a few milliseconds the two agree to within rounding.
//!
//! # Difference from go-zero: requests waiting for a thread
//!
//! In grpc-go every request gets a goroutine as its headers are read, and Go preempts busy
//! handlers, so go-zero's interceptor counts a request in flight almost as soon as it arrives.
//! A tokio task runs when a worker thread is free: with handlers that hold their thread (CPU
//! work that never awaits), the requests behind them wait in the run queue without being
//! counted, `flying` stays at the number of worker threads, below the bound, and nothing is
//! shed while the queue (and every caller's latency) grows. The server therefore counts a
//! request with [`AdaptiveShedder::queue`] when its stream is accepted, before its task first
//! runs, and the request asks with [`AdaptiveShedder::allow_queued`]: `flying` (and the
//! moving average sampled from it) includes the requests waiting for their turn.
//!
//! # Implementation notes
//!
//! `flying`, `avg_flying` (f64 bits, compare-and-swap), `overload_time` and `dropped_recently` are
//! atomics. The window is behind a short `parking_lot::Mutex`, taken once by `pass` and, only while
//! the CPU is over the threshold or still hot, once by `allow`; when the CPU is below the threshold
//! `allow` takes no lock at all. The CPU source is an injected [`CpuUsage`](crate::cpu::CpuUsage), read
//! once per `allow`.

mod adaptive;
mod config;

pub use adaptive::{AdaptiveShedder, Queued, ShedderPromise, ShedderStats};
pub use config::ShedderConfig;

use std::fmt;

/// The error returned when the shedder drops a request (go-zero `ErrServiceOverloaded`).
///
/// Displays as `service overloaded` (go-zero's words), followed, when the shedder made it, by
/// the figures it dropped the request at: `service overloaded: CPU 950 millicpu over threshold
/// 900, 40 calls in flight over 32.4 (average 38.0)`. Servers map it to `ResourceExhausted`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overloaded {
    /// Boxed: `allow`'s result stays as small as the promise it carries when the call passes.
    figures: Option<Box<Figures>>,
}

/// What the shedder saw when it dropped a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Figures {
    cpu: u64,
    threshold: u64,
    flying: i64,
    /// Tenths of a request.
    avg_flying: u64,
    /// The estimated capacity after the overload factor, in tenths of a request.
    max_flight: u64,
}

impl Overloaded {
    /// Creates the marker error.
    #[must_use]
    pub fn new() -> Self {
        Overloaded { figures: None }
    }

    /// The drop of a request seen with `flying` in flight (moving average `avg_flying`) over
    /// the capacity `max_flight`, at `cpu` millicpu against `threshold`.
    pub(crate) fn at(
        cpu: u64,
        threshold: u64,
        flying: i64,
        avg_flying: f64,
        max_flight: f64,
    ) -> Self {
        let tenths = |v: f64| (v.max(0.0) * 10.0).round() as u64;
        Overloaded {
            figures: Some(Box::new(Figures {
                cpu,
                threshold,
                flying,
                avg_flying: tenths(avg_flying),
                max_flight: tenths(max_flight),
            })),
        }
    }

    /// The CPU usage (millicpu) the request was dropped at, when the shedder dropped it.
    #[must_use]
    pub fn cpu(&self) -> Option<u64> {
        self.figures.as_ref().map(|f| f.cpu)
    }

    /// The requests in flight the request was dropped at, when the shedder dropped it.
    #[must_use]
    pub fn flying(&self) -> Option<i64> {
        self.figures.as_ref().map(|f| f.flying)
    }

    /// The estimated capacity in requests in flight (after the overload factor) the request
    /// was dropped at, when the shedder dropped it.
    #[must_use]
    pub fn max_flight(&self) -> Option<f64> {
        self.figures.as_ref().map(|f| f.max_flight as f64 / 10.0)
    }
}

impl fmt::Display for Overloaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("service overloaded")?;
        let Some(x) = self.figures.as_deref() else {
            return Ok(());
        };
        let tenths = |v: u64| format!("{}.{}", v / 10, v % 10);
        match x.cpu.cmp(&x.threshold) {
            std::cmp::Ordering::Less => write!(
                f,
                ": CPU {} millicpu, under threshold {} but cooling off after recent drops",
                x.cpu, x.threshold
            )?,
            std::cmp::Ordering::Equal => write!(f, ": CPU {} millicpu at threshold", x.cpu)?,
            std::cmp::Ordering::Greater => {
                write!(f, ": CPU {} millicpu over threshold {}", x.cpu, x.threshold)?
            }
        }
        write!(
            f,
            ", {} calls in flight over {} (average {})",
            x.flying,
            tenths(x.max_flight),
            tenths(x.avg_flying)
        )
    }
}

impl std::error::Error for Overloaded {}

#[cfg(test)]
mod tests;
