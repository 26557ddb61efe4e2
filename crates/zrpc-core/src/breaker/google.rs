//! The breaker itself and its promise.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use super::{BreakerConfig, BreakerOpen};
use crate::stamp::AtomicStamp;
use crate::window::{Bucket, RollingWindow};

/// What happened to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Success,
    Failure,
    Drop,
}

/// go-zero `breaker.bucket`: `sum` counts all three outcomes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OutcomeBucket {
    sum: u64,
    success: u64,
    failure: u64,
    drop: u64,
}

impl Bucket for OutcomeBucket {
    type Value = Outcome;

    #[inline]
    fn add(&mut self, v: Outcome) {
        self.sum += 1;
        match v {
            Outcome::Success => self.success += 1,
            Outcome::Failure => self.failure += 1,
            Outcome::Drop => self.drop += 1,
        }
    }

    #[inline]
    fn reset(&mut self) {
        *self = OutcomeBucket::default();
    }
}

/// A snapshot of a breaker's window (go-zero `windowResult`, plus the failure and drop counts), for
/// gauges and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerStats {
    /// Successful requests in the window.
    pub accepts: u64,
    /// All requests in the window: successes, failures and drops.
    pub total: u64,
    /// Failed requests in the window.
    pub failures: u64,
    /// Requests rejected by the breaker in the window.
    pub drops: u64,
    /// The trailing run of buckets with failures and no success.
    pub failing_buckets: u64,
    /// The trailing run of buckets with successes and no failure.
    pub working_buckets: u64,
}

/// The window and the random source of the drop draws, under one lock (a draw happens only while
/// the window is locked anyway).
#[derive(Debug)]
struct Window {
    outcomes: RollingWindow<OutcomeBucket>,
    /// 53 random bits per draw, `[0, 1)`.
    rng: SmallRng,
}

/// The Google SRE adaptive-throttling breaker (go-zero `googleBreaker`).
///
/// See the [module docs](super) for the algorithm. Share it behind an [`Arc`]; every method takes
/// `&self` (or `&Arc<Self>`) and is safe to call from many threads.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Instant;
/// use zrpc_core::breaker::{BreakerConfig, GoogleBreaker};
///
/// let breaker = Arc::new(GoogleBreaker::new(BreakerConfig::default()));
/// let now = Instant::now();
/// match breaker.allow(now) {
///     Ok(promise) => promise.accept(now), // or promise.reject(now) on failure
///     Err(open) => eprintln!("{open}"),
/// }
/// ```
#[derive(Debug)]
pub struct GoogleBreaker {
    config: BreakerConfig,
    buckets: f64,
    /// Working buckets after which nothing is dropped (go-zero: all of them).
    recovery_buckets: f64,
    stat: Mutex<Window>,
    pub(super) last_pass: AtomicStamp,
    /// When the newest failure or drop leaves the window; until then `allow` must read the window.
    bad_until: AtomicStamp,
    /// `min_k >= 1`: a window without failures and drops can never drop (see `try_accept`).
    pub(super) fast_path: bool,
}

impl GoogleBreaker {
    /// Creates a breaker with a random seed.
    #[must_use]
    pub fn new(config: BreakerConfig) -> Self {
        Self::with_seed(config, crate::random_seed())
    }

    /// Creates a breaker whose drop decisions come from a generator seeded with `seed`, so a
    /// simulation with explicit time is reproducible.
    #[must_use]
    pub fn with_seed(config: BreakerConfig, seed: u64) -> Self {
        let buckets = config.buckets.max(1);
        let window = RollingWindow::new(buckets as usize, config.bucket_duration());
        GoogleBreaker {
            buckets: f64::from(buckets),
            recovery_buckets: f64::from(config.recovery_buckets()),
            stat: Mutex::new(Window {
                outcomes: window,
                rng: SmallRng::seed_from_u64(seed),
            }),
            last_pass: AtomicStamp::default(),
            bad_until: AtomicStamp::default(),
            fast_path: config.min_k >= 1.0,
            config,
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// Asks to let a request through at `now`.
    ///
    /// On success, report the outcome through the returned promise.
    ///
    /// # Errors
    ///
    /// [`BreakerOpen`] when the request is dropped; the drop is counted in the window.
    pub fn allow(self: &Arc<Self>, now: Instant) -> Result<BreakerPromise, BreakerOpen> {
        self.try_accept(now)?;
        Ok(BreakerPromise {
            breaker: Some(Arc::clone(self)),
            allowed_at: now,
        })
    }

    /// Runs `req` if the breaker lets it through at `now`, and records its outcome: `Ok` is a success,
    /// `Err(e)` is a success when `acceptable(&e)` and a failure otherwise. A panic in `req` is
    /// recorded as a failure and resumes unwinding (go-zero `DoWithAcceptable`).
    ///
    /// The outcome is recorded at `now`; for long calls use [`allow`](Self::allow) and resolve the
    /// promise with the completion time.
    ///
    /// # Errors
    ///
    /// `E::from(BreakerOpen)` when the breaker drops the call (then `req` is not run), else `req`'s
    /// error.
    pub fn do_with_acceptable<T, E, F, A>(
        &self,
        now: Instant,
        req: F,
        acceptable: A,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Result<T, E>,
        A: FnOnce(&E) -> bool,
        E: From<BreakerOpen>,
    {
        self.try_accept(now)?;
        // Records a failure if `req` or `acceptable` unwinds.
        struct Guard<'a> {
            breaker: &'a GoogleBreaker,
            now: Instant,
            armed: bool,
        }
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                if self.armed {
                    self.breaker.mark_failure(self.now);
                }
            }
        }
        let mut guard = Guard {
            breaker: self,
            now,
            armed: true,
        };
        let result = req();
        let ok = match &result {
            Ok(_) => true,
            Err(e) => acceptable(e),
        };
        guard.armed = false;
        if ok {
            self.mark_success(now);
        } else {
            self.mark_failure(now);
        }
        result
    }

    /// Records a success at `now`.
    pub fn mark_success(&self, now: Instant) {
        self.stat.lock().outcomes.add(Outcome::Success, now);
    }

    /// Records a failure at `now`.
    pub fn mark_failure(&self, now: Instant) {
        let mut stat = self.stat.lock();
        stat.outcomes.add(Outcome::Failure, now);
        self.note_bad(&stat.outcomes);
    }

    /// After a failure or drop was added (under the lock): remember when its bucket expires.
    fn note_bad(&self, stat: &RollingWindow<OutcomeBucket>) {
        if let Some(start) = stat.current_bucket_start() {
            let until = start + stat.interval() * u32::try_from(stat.size()).unwrap_or(u32::MAX);
            if self.bad_until.load().is_none_or(|u| until > u) {
                self.bad_until.store(until);
            }
        }
    }

    /// The counts in the window at `now`.
    #[must_use]
    pub fn stats(&self, now: Instant) -> BreakerStats {
        history(&self.stat.lock().outcomes, now)
    }

    /// The probability that a request at `now` is dropped (ignoring the forced pass), in `[0, 1]`.
    #[must_use]
    pub fn drop_ratio(&self, now: Instant) -> f64 {
        let h = self.stats(now);
        let ratio = self.base_ratio(&h);
        if ratio <= 0.0 {
            return 0.0;
        }
        (ratio * self.working_scale(&h)).clamp(0.0, 1.0)
    }

    /// The SRE formula with the falling `k`.
    #[inline]
    pub(super) fn base_ratio(&self, h: &BreakerStats) -> f64 {
        let cfg = &self.config;
        let w = cfg.k - (cfg.k - cfg.min_k) * h.failing_buckets as f64 / self.buckets;
        let weighted_accepts = w.max(cfg.min_k) * h.accepts as f64;
        (h.total as f64 - cfg.protection as f64 - weighted_accepts) / (h.total as f64 + 1.0)
    }

    #[inline]
    pub(super) fn working_scale(&self, h: &BreakerStats) -> f64 {
        ((self.recovery_buckets - h.working_buckets as f64) / self.recovery_buckets).max(0.0)
    }

    /// go-zero `accept()` + `markDrop()` under one lock.
    fn try_accept(&self, now: Instant) -> Result<(), BreakerOpen> {
        // Fast path, no lock: with only successes in the window, `total == accepts` and
        // `total - protection - max(w, min_k) * accepts <= -protection <= 0` when `min_k >= 1`, so
        // go-zero's first check (`drop_ratio <= 0` -> allow, `last_pass` untouched) decides.
        if self.fast_path && self.bad_until.load().is_none_or(|until| now >= until) {
            return Ok(());
        }
        let mut stat = self.stat.lock();
        let h = history(&stat.outcomes, now);
        let ratio = self.base_ratio(&h);
        if ratio <= 0.0 {
            return Ok(());
        }
        if let Some(last) = self.last_pass.load()
            && now.saturating_duration_since(last) > self.config.force_pass
        {
            self.last_pass.store(now);
            return Ok(());
        }
        let ratio = ratio * self.working_scale(&h);
        if stat.rng.random::<f64>() < ratio {
            stat.outcomes.add(Outcome::Drop, now);
            self.note_bad(&stat.outcomes);
            let mut h = h;
            h.drops += 1;
            h.total += 1;
            return Err(BreakerOpen::at(h, self.config.window, ratio));
        }
        self.last_pass.store(now);
        Ok(())
    }

    /// A uniform `f64` in `[0, 1)`: the next drop draw (tests).
    #[cfg(test)]
    pub(super) fn random(&self) -> f64 {
        self.stat.lock().rng.random::<f64>()
    }
}

/// go-zero `history()`: one pass over the window, oldest to newest.
fn history(stat: &RollingWindow<OutcomeBucket>, now: Instant) -> BreakerStats {
    let mut r = BreakerStats::default();
    stat.reduce(now, |b| {
        r.accepts += b.success;
        r.total += b.sum;
        r.failures += b.failure;
        r.drops += b.drop;
        if b.failure > 0 {
            r.working_buckets = 0;
        } else if b.success > 0 {
            r.working_buckets += 1;
        }
        if b.success > 0 {
            r.failing_buckets = 0;
        } else if b.failure > 0 {
            r.failing_buckets += 1;
        }
    });
    r
}

/// Permission to run one request; report its outcome with [`accept`](Self::accept) or
/// [`reject`](Self::reject) (go-zero `Promise`).
///
/// Dropping it unresolved records a failure (a panic or a cancelled future is a failure), at the
/// later of the current clock and the time the request was allowed.
#[derive(Debug)]
#[must_use = "report the outcome with accept() or reject(); dropping it counts as a failure"]
pub struct BreakerPromise {
    breaker: Option<Arc<GoogleBreaker>>,
    allowed_at: Instant,
}

impl BreakerPromise {
    /// Reports success at `now`.
    pub fn accept(mut self, now: Instant) {
        if let Some(b) = self.breaker.take() {
            b.mark_success(now);
        }
    }

    /// Reports failure at `now`.
    pub fn reject(mut self, now: Instant) {
        if let Some(b) = self.breaker.take() {
            b.mark_failure(now);
        }
    }

    /// The instant the request was allowed.
    #[must_use]
    pub fn allowed_at(&self) -> Instant {
        self.allowed_at
    }
}

impl Drop for BreakerPromise {
    fn drop(&mut self) {
        if let Some(b) = self.breaker.take() {
            b.mark_failure(Instant::now().max(self.allowed_at));
        }
    }
}
