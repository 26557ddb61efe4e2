//! The math of client retries: a retry budget shared by every call of a client, gRFC A6's
//! exponential back-off with full jitter, and the server's pushback.
//!
//! go-zero has no client retries (added and removed again "to prevent retry storms"); grpc-go
//! implements gRFC A6 with a token bucket (`retryThrottling`); linkerd bounds retries with a
//! budget. zrpc takes the budget: whatever the per-method policies say, retries and hedges of a
//! client never exceed `ratio` times its recent calls plus a small floor, so a failing service
//! sees at most `1 + ratio` requests per call from it, never `MaxAttempts`.
//!
//! Time is a parameter (`now`, nanoseconds since any fixed origin), so the simulator and the
//! tests drive it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Slots of a budget's window: the window slides in tenths.
const SLOTS: usize = 10;

/// A retry budget (linkerd's and Finagle's rule): within the last `window`, retries (and hedges)
/// may be at most `ratio` times the calls made plus `min_per_sec` per second of the window.
///
/// Calls [`deposit`](RetryBudget::deposit); a retry asks [`try_withdraw`](RetryBudget::try_withdraw)
/// and is not made when it says no. Shared by every call of a client (`&self`, lock-free: a
/// ring of ten slots of atomic counters, each a tenth of the window). Counting is approximate
/// only when a slot is recycled while another thread adds to it (a few counts of that instant
/// may be lost); the cap itself is never exceeded by concurrent withdrawals.
///
/// tower's `TpsBudget` implements the same rule but reads the clock itself; this one takes the
/// time so that the simulator can replay storms deterministically.
///
/// ```
/// use std::time::Duration;
/// use zrpc_core::retry::RetryBudget;
///
/// let budget = RetryBudget::new(0.1, 0, Duration::from_secs(10));
/// for _ in 0..100 {
///     budget.deposit(0);
/// }
/// let granted = (0..100).filter(|_| budget.try_withdraw(0)).count();
/// assert_eq!(granted, 10);
/// ```
#[derive(Debug)]
pub struct RetryBudget {
    ratio: f64,
    /// The floor: retries allowed in a window whatever the traffic.
    floor: f64,
    slot_nanos: u64,
    slots: [Slot; SLOTS],
}

#[derive(Debug, Default)]
struct Slot {
    /// The slot's index in time (`now / slot_nanos`) + 1; 0 = never used.
    epoch: AtomicU64,
    calls: AtomicU64,
    retries: AtomicU64,
}

impl RetryBudget {
    /// A budget of `ratio` retries per call plus `min_per_sec` per second, over `window`.
    ///
    /// A zero `window` is taken as one second.
    #[must_use]
    pub fn new(ratio: f64, min_per_sec: u32, window: Duration) -> Self {
        let window = if window.is_zero() {
            Duration::from_secs(1)
        } else {
            window
        };
        let slot_nanos = u64::try_from(window.as_nanos() / SLOTS as u128)
            .unwrap_or(u64::MAX)
            .max(1);
        RetryBudget {
            ratio: if ratio.is_finite() {
                ratio.max(0.0)
            } else {
                0.0
            },
            floor: f64::from(min_per_sec) * window.as_secs_f64(),
            slot_nanos,
            slots: Default::default(),
        }
    }

    /// The slot of `now`, emptied first when it last served an older tenth of the window.
    fn slot(&self, now: u64) -> &Slot {
        let index = now / self.slot_nanos;
        let epoch = index + 1;
        let slot = &self.slots[(index % SLOTS as u64) as usize];
        let seen = slot.epoch.load(Ordering::Acquire);
        if seen != epoch
            && seen < epoch
            && slot
                .epoch
                .compare_exchange(seen, epoch, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            slot.calls.store(0, Ordering::Relaxed);
            slot.retries.store(0, Ordering::Relaxed);
        }
        slot
    }

    /// Calls and retries within the window ending at `now`.
    fn totals(&self, now: u64) -> (u64, u64) {
        let epoch = now / self.slot_nanos + 1;
        let oldest = epoch.saturating_sub(SLOTS as u64 - 1);
        self.slots
            .iter()
            .filter(|s| {
                let e = s.epoch.load(Ordering::Acquire);
                e >= oldest && e <= epoch
            })
            .fold((0, 0), |(c, r), s| {
                (
                    c + s.calls.load(Ordering::Relaxed),
                    r + s.retries.load(Ordering::Relaxed),
                )
            })
    }

    /// Counts one call (a first attempt) at `now`.
    pub fn deposit(&self, now: u64) {
        self.slot(now).calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one retry (or hedge) from the budget at `now`: false when it is spent.
    pub fn try_withdraw(&self, now: u64) -> bool {
        let slot = self.slot(now);
        // count first, then check: concurrent withdrawals cannot all pass the same last unit
        slot.retries.fetch_add(1, Ordering::AcqRel);
        let (calls, retries) = self.totals(now);
        let allowed = self.ratio * calls as f64 + self.floor;
        if retries as f64 <= allowed {
            return true;
        }
        slot.retries.fetch_sub(1, Ordering::AcqRel);
        false
    }

    /// Retries still allowed at `now` (for reports and tests).
    #[must_use]
    pub fn remaining(&self, now: u64) -> f64 {
        let (calls, retries) = self.totals(now);
        (self.ratio * calls as f64 + self.floor - retries as f64).max(0.0)
    }
}

/// gRFC A6's back-off before retry `n` (1 = the first retry): a uniformly random delay in
/// `[0, min(initial * multiplier^(n-1), max))`, `jitter` being the random draw in `[0, 1)`.
///
/// ```
/// use std::time::Duration;
/// use zrpc_core::retry::backoff;
///
/// let ms = Duration::from_millis;
/// assert_eq!(backoff(ms(100), ms(1000), 2.0, 1, 0.5), ms(50));
/// assert_eq!(backoff(ms(100), ms(1000), 2.0, 3, 0.5), ms(200));
/// assert_eq!(backoff(ms(100), ms(1000), 2.0, 9, 0.5), ms(500));
/// ```
#[must_use]
pub fn backoff(initial: Duration, max: Duration, multiplier: f64, n: u32, jitter: f64) -> Duration {
    let exp = i32::try_from(n.saturating_sub(1)).unwrap_or(i32::MAX);
    let ceiling = (initial.as_secs_f64() * multiplier.max(1.0).powi(exp)).min(max.as_secs_f64());
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    Duration::try_from_secs_f64(ceiling * jitter).unwrap_or(max)
}

/// The header by which a server asks a client to wait before retrying (gRFC A6).
pub const PUSHBACK_HEADER: &str = "grpc-retry-pushback-ms";

/// What a server's pushback asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// No pushback header: the policy's back-off applies.
    None,
    /// Retry after exactly this delay.
    After(Duration),
    /// Do not retry (a negative or malformed value, as gRFC A6 says).
    Stop,
}

impl Pushback {
    /// Reads `grpc-retry-pushback-ms` from `headers` (a trailers-only response's, or trailers).
    #[must_use]
    pub fn from_headers(headers: &http::HeaderMap) -> Pushback {
        let Some(value) = headers.get(PUSHBACK_HEADER) else {
            return Pushback::None;
        };
        match value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
        {
            Some(ms) if ms >= 0 => Pushback::After(Duration::from_millis(ms.unsigned_abs())),
            _ => Pushback::Stop,
        }
    }
}

/// The header carrying how many attempts of a call came before this one (gRFC A6).
pub const PREVIOUS_ATTEMPTS_HEADER: &str = "grpc-previous-rpc-attempts";

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn a_budget_allows_ratio_times_calls_plus_the_floor() {
        let b = RetryBudget::new(0.2, 1, Duration::from_secs(10));
        // no calls: only the floor, 1/s over 10 s
        let floor = (0..100).filter(|_| b.try_withdraw(0)).count();
        assert_eq!(floor, 10);
        for _ in 0..1000 {
            b.deposit(SEC);
        }
        let more = (0..1000).filter(|_| b.try_withdraw(SEC)).count();
        assert_eq!(more, 200, "20% of 1000 calls on top of the spent floor");
        assert!(b.remaining(SEC) < 1.0);
    }

    #[test]
    fn spent_retries_and_old_calls_leave_the_window() {
        let b = RetryBudget::new(0.5, 0, Duration::from_secs(10));
        for _ in 0..10 {
            b.deposit(0);
        }
        assert_eq!((0..10).filter(|_| b.try_withdraw(0)).count(), 5);
        // 5 s later the calls and the retries are still in the window
        assert!(!b.try_withdraw(5 * SEC));
        // 11 s later both have left it: nothing deposited, nothing allowed
        assert!(!b.try_withdraw(11 * SEC));
        assert_eq!(b.remaining(11 * SEC), 0.0);
        for _ in 0..4 {
            b.deposit(11 * SEC);
        }
        assert_eq!((0..4).filter(|_| b.try_withdraw(11 * SEC)).count(), 2);
    }

    #[test]
    fn concurrent_withdrawals_never_exceed_the_cap() {
        let b = std::sync::Arc::new(RetryBudget::new(0.1, 0, Duration::from_secs(10)));
        for _ in 0..1000 {
            b.deposit(SEC);
        }
        let granted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let b = &b;
                    s.spawn(move || (0..100).filter(|_| b.try_withdraw(SEC)).count())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
        });
        // never above the cap; a withdrawal racing another one at the cap may be refused
        assert!((90..=100).contains(&granted), "{granted}");
    }

    #[test]
    fn backoff_grows_to_its_maximum_with_full_jitter() {
        let ms = Duration::from_millis;
        assert_eq!(backoff(ms(10), ms(100), 2.0, 1, 0.0), Duration::ZERO);
        assert_eq!(backoff(ms(10), ms(100), 2.0, 1, 1.0), ms(10));
        assert_eq!(backoff(ms(10), ms(100), 2.0, 2, 1.0), ms(20));
        assert_eq!(backoff(ms(10), ms(100), 2.0, 30, 1.0), ms(100));
        // a multiplier below 1 does not shrink the delay; a NaN draw is no delay
        assert_eq!(backoff(ms(10), ms(100), 0.5, 3, 1.0), ms(10));
        assert_eq!(backoff(ms(10), ms(100), 2.0, 3, f64::NAN), Duration::ZERO);
    }

    #[test]
    fn pushback_is_a_delay_or_a_stop() {
        let mut h = http::HeaderMap::new();
        assert_eq!(Pushback::from_headers(&h), Pushback::None);
        h.insert(PUSHBACK_HEADER, http::HeaderValue::from_static("250"));
        assert_eq!(
            Pushback::from_headers(&h),
            Pushback::After(Duration::from_millis(250))
        );
        h.insert(PUSHBACK_HEADER, http::HeaderValue::from_static("-1"));
        assert_eq!(Pushback::from_headers(&h), Pushback::Stop);
        h.insert(PUSHBACK_HEADER, http::HeaderValue::from_static("soon"));
        assert_eq!(Pushback::from_headers(&h), Pushback::Stop);
    }
}
