//! The shedder itself and its promise.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Overloaded, ShedderConfig};
use crate::cpu::{CPU_MAX, CpuUsage};
use crate::stamp::AtomicStamp;
use crate::window::{RollingWindow, SumBucket};

/// go-zero `overloadFactorLowerBound`: at least 10 % of the estimated capacity is always accepted.
const OVERLOAD_FACTOR_LOWER_BOUND: f64 = 0.1;

/// A snapshot of a shedder's state, for gauges and logs.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct ShedderStats {
    /// CPU usage in millicpu as read now.
    pub cpu: u64,
    /// Requests in progress, those waiting for their first poll included
    /// ([`AdaptiveShedder::queue`]).
    pub flying: i64,
    /// Moving average of `flying`.
    pub avg_flying: f64,
    /// Most requests passed in one bucket of the window.
    pub max_pass: u64,
    /// Lowest average response time of a bucket of the window.
    pub min_rt: Duration,
    /// Estimated capacity in requests in flight (Little's law), before the overload factor.
    pub max_flight: f64,
    /// The overload factor applied to `max_flight` at this CPU usage, in `[0.1, 1]`.
    pub overload_factor: f64,
    /// Whether the service is over the CPU threshold or still cooling off after a drop.
    pub hot: bool,
}

/// The adaptive load shedder (go-zero `adaptiveShedder`).
///
/// See the [module docs](super) for the algorithm. Share one per server behind an [`Arc`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, Instant};
/// use zrpc_core::cpu::FixedCpu;
/// use zrpc_core::shedder::{AdaptiveShedder, ShedderConfig};
///
/// let shedder = Arc::new(AdaptiveShedder::new(ShedderConfig::default(), Arc::new(FixedCpu::new(0))));
/// let start = Instant::now();
/// let promise = shedder.allow(start).expect("cool CPU never sheds");
/// promise.pass(start + Duration::from_micros(300)); // or promise.fail(now) on error
/// ```
#[derive(Debug)]
pub struct AdaptiveShedder {
    config: ShedderConfig,
    cpu_threshold: u64,
    /// Buckets per second, per microsecond of response time (go-zero `windowScale` for µs).
    window_scale: f64,
    cpu: Arc<dyn CpuUsage>,
    pub(super) flying: AtomicI64,
    /// Requests the transport accepted that have not asked yet (see [`Queued`]).
    pub(super) queued: AtomicI64,
    /// `f64` bits.
    pub(super) avg_flying: AtomicU64,
    pub(super) overload_time: AtomicStamp,
    pub(super) dropped_recently: AtomicBool,
    /// Per bucket: `count` = passed requests, `sum` = their response times in µs.
    pub(super) stat: Mutex<RollingWindow<SumBucket<u64>>>,
}

impl AdaptiveShedder {
    /// Creates a shedder reading CPU usage from `cpu` (use [`crate::cpu::system_cpu()`] in
    /// production, [`crate::cpu::FixedCpu`] in tests).
    #[must_use]
    pub fn new(config: ShedderConfig, cpu: Arc<dyn CpuUsage>) -> Self {
        let buckets = config.buckets.max(1);
        let bucket = config.bucket_duration();
        let window = RollingWindow::new(buckets as usize, bucket).ignore_current(true);
        AdaptiveShedder {
            cpu_threshold: config.cpu_threshold.min(CPU_MAX - 1),
            window_scale: 1.0 / bucket.as_secs_f64() / 1e6,
            config,
            cpu,
            flying: AtomicI64::new(0),
            queued: AtomicI64::new(0),
            avg_flying: AtomicU64::new(0f64.to_bits()),
            overload_time: AtomicStamp::default(),
            dropped_recently: AtomicBool::new(false),
            stat: Mutex::new(window),
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ShedderConfig {
        &self.config
    }

    /// Asks to start a request at `now`.
    ///
    /// # Errors
    ///
    /// [`Overloaded`] when the request should be shed.
    pub fn allow(self: &Arc<Self>, now: Instant) -> Result<ShedderPromise, Overloaded> {
        self.decide(now, 0)
    }

    /// Counts a request the transport has accepted but that has not asked yet (it waits for
    /// its turn to run): until it asks with [`allow_queued`](Self::allow_queued), or the
    /// [`Queued`] is dropped, it counts as in flight for the requests that do ask.
    ///
    /// go-zero needs no such count: grpc-go starts a goroutine per request as it reads the
    /// request's headers, and Go preempts a busy handler, so every accepted request reaches
    /// the shedder at once. A tokio task runs only when a worker thread is free: with handlers
    /// that keep their thread busy, accepted requests wait in the run queue unseen, the count
    /// in flight never passes the bound, and nothing is shed while their latency grows.
    pub fn queue(self: &Arc<Self>) -> Queued {
        self.queued.fetch_add(1, Ordering::AcqRel);
        Queued {
            shedder: Arc::clone(self),
        }
    }

    /// [`allow`](Self::allow) for a request counted by [`queue`](Self::queue): the requests
    /// queued behind it count as in flight, and it moves from the queued to the flying.
    ///
    /// # Errors
    ///
    /// [`Overloaded`] when the request should be shed.
    pub fn allow_queued(
        self: &Arc<Self>,
        queued: Queued,
        now: Instant,
    ) -> Result<ShedderPromise, Overloaded> {
        // Counted in `queued` until the decision: it is not one of the others (unless it was
        // queued on another shedder).
        let own = i64::from(Arc::ptr_eq(&queued.shedder, self));
        let decision = self.decide(now, own);
        // Allowed, it is flying already; shed, it is done.
        drop(queued);
        decision
    }

    /// Admits or drops a request, `own` of the queued requests being its own count.
    fn decide(self: &Arc<Self>, now: Instant, own: i64) -> Result<ShedderPromise, Overloaded> {
        let cpu = self.cpu.millicpu();
        if let Some((flying, max_flight)) = self.should_drop_at(now, cpu, own) {
            self.dropped_recently.store(true, Ordering::Relaxed);
            return Err(Overloaded::at(
                cpu,
                self.cpu_threshold,
                flying,
                self.avg_flying(),
                max_flight,
            ));
        }
        self.flying.fetch_add(1, Ordering::AcqRel);
        Ok(ShedderPromise {
            shedder: Some(Arc::clone(self)),
            start: now,
        })
    }

    /// Requests in progress: those allowed and not ended, and those accepted that have not
    /// asked yet ([`queue`](Self::queue)).
    #[must_use]
    pub fn flying(&self) -> i64 {
        self.flying.load(Ordering::Acquire) + self.queued.load(Ordering::Acquire)
    }

    /// Moving average of the requests in progress.
    #[must_use]
    pub fn avg_flying(&self) -> f64 {
        f64::from_bits(self.avg_flying.load(Ordering::Acquire))
    }

    /// A snapshot of the state at `now` (reads the CPU; does not change the hot state).
    #[must_use]
    pub fn stats(&self, now: Instant) -> ShedderStats {
        let cpu = self.cpu.millicpu();
        let (max_pass, min_rt_us) = self.window_stats(now);
        let hot = cpu >= self.cpu_threshold
            || (self.dropped_recently.load(Ordering::Relaxed)
                && self
                    .overload_time
                    .load()
                    .is_some_and(|t| now.saturating_duration_since(t) < self.config.cool_off));
        ShedderStats {
            cpu,
            flying: self.flying(),
            avg_flying: self.avg_flying(),
            max_pass,
            min_rt: Duration::from_secs_f64(min_rt_us / 1e6),
            max_flight: self.max_flight_of(max_pass, min_rt_us),
            overload_factor: self.overload_factor(cpu),
            hot,
        }
    }

    /// go-zero `shouldDrop()`.
    #[cfg(test)]
    pub(super) fn should_drop(&self, now: Instant, cpu: u64) -> bool {
        self.should_drop_at(now, cpu, 0).is_some()
    }

    /// go-zero `shouldDrop()`, for a request that is `own` of the queued ones: when it drops
    /// the request, the requests in flight and the capacity (after the overload factor) they
    /// passed.
    fn should_drop_at(&self, now: Instant, cpu: u64, own: i64) -> Option<(i64, f64)> {
        if self.system_overloaded(now, cpu) || self.still_hot(now) {
            self.high_thru(now, cpu, own)
        } else {
            None
        }
    }

    fn system_overloaded(&self, now: Instant, cpu: u64) -> bool {
        if cpu < self.cpu_threshold {
            return false;
        }
        self.overload_time.store(now);
        true
    }

    /// go-zero `stillHot()`.
    pub(super) fn still_hot(&self, now: Instant) -> bool {
        if !self.dropped_recently.load(Ordering::Relaxed) {
            return false;
        }
        let Some(overload_time) = self.overload_time.load() else {
            return false;
        };
        if now.saturating_duration_since(overload_time) < self.config.cool_off {
            return true;
        }
        self.dropped_recently.store(false, Ordering::Relaxed);
        false
    }

    /// The requests in flight and the capacity they passed, when they did.
    fn high_thru(&self, now: Instant, cpu: u64, own: i64) -> Option<(i64, f64)> {
        let flying = self.flying() - own;
        // max_flight * factor >= 0.1, so nothing in flight never sheds; skip the window lock.
        if flying <= 0 {
            return None;
        }
        let (max_pass, min_rt_us) = self.window_stats(now);
        let max_flight = self.max_flight_of(max_pass, min_rt_us) * self.overload_factor(cpu);
        (self.avg_flying() > max_flight && flying as f64 > max_flight)
            .then_some((flying, max_flight))
    }

    /// `max(1, max_pass * min_rt * buckets_per_second)` (go-zero `maxFlight()`).
    fn max_flight_of(&self, max_pass: u64, min_rt_us: f64) -> f64 {
        (max_pass as f64 * min_rt_us * self.window_scale).max(1.0)
    }

    /// The estimated capacity in requests in flight at `now` (before the overload factor).
    #[must_use]
    pub fn max_flight(&self, now: Instant) -> f64 {
        let (max_pass, min_rt_us) = self.window_stats(now);
        self.max_flight_of(max_pass, min_rt_us)
    }

    /// go-zero `overloadFactor()`.
    pub(super) fn overload_factor(&self, cpu: u64) -> f64 {
        let factor = (CPU_MAX as f64 - cpu as f64) / (CPU_MAX - self.cpu_threshold) as f64;
        factor.clamp(OVERLOAD_FACTOR_LOWER_BOUND, 1.0)
    }

    /// `(max_pass, min_rt in µs)` over the window (go-zero `maxPass()` and `minRt()`) in one pass.
    ///
    /// `min_rt` is the smallest bucket average, rounded (go-zero rounds each average, then takes the
    /// minimum; rounding is monotonic, so this is the same). Averages are compared by
    /// cross-multiplication so the loop has no division.
    pub(super) fn window_stats(&self, now: Instant) -> (u64, f64) {
        let mut max_pass = 1;
        // The smallest average as a fraction sum / count.
        let mut min: Option<(u64, u64)> = None;
        self.stat.lock().reduce(now, |b| {
            max_pass = max_pass.max(b.count);
            if b.count > 0
                && min.is_none_or(|(sum, count)| {
                    u128::from(b.sum) * u128::from(count) < u128::from(sum) * u128::from(b.count)
                })
            {
                min = Some((b.sum, b.count));
            }
        });
        let default = self.config.default_min_rt.as_secs_f64() * 1e6;
        let min_rt = min.map_or(default, |(sum, count)| {
            (sum as f64 / count as f64).round().min(default)
        });
        (max_pass, min_rt)
    }

    /// go-zero `addFlying(-1)`: one request ended; update the moving average.
    fn finish(&self) {
        let flying =
            self.flying.fetch_sub(1, Ordering::AcqRel) - 1 + self.queued.load(Ordering::Acquire);
        let beta = self.config.flying_beta;
        let mut old = self.avg_flying.load(Ordering::Acquire);
        loop {
            let new = f64::from_bits(old) * beta + flying as f64 * (1.0 - beta);
            match self.avg_flying.compare_exchange_weak(
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
}

/// A request let through by the shedder; end it with [`pass`](Self::pass) or
/// [`fail`](Self::fail) (go-zero `Promise`). Dropping it unresolved is a `fail`.
#[derive(Debug)]
#[must_use = "end the request with pass() or fail(); dropping it counts as fail()"]
pub struct ShedderPromise {
    shedder: Option<Arc<AdaptiveShedder>>,
    start: Instant,
}

impl ShedderPromise {
    /// The request succeeded at `now`: its response time (`now - start`, in µs) and the pass are
    /// recorded.
    pub fn pass(mut self, now: Instant) {
        if let Some(s) = self.shedder.take() {
            let rt = now.saturating_duration_since(self.start);
            // Whole microseconds, rounded up (go-zero: whole milliseconds, rounded up).
            let rt_us = u64::try_from(rt.as_nanos().div_ceil(1000)).unwrap_or(u64::MAX);
            s.finish();
            s.stat.lock().add(rt_us, now);
        }
    }

    /// The request failed: it only stops counting as in flight. `now` is accepted for symmetry.
    pub fn fail(mut self, _now: Instant) {
        if let Some(s) = self.shedder.take() {
            s.finish();
        }
    }

    /// When the request was allowed.
    #[must_use]
    pub fn start(&self) -> Instant {
        self.start
    }
}

/// A request counted as in flight before it asks the shedder (see
/// [`AdaptiveShedder::queue`]); dropping it uncounts the request.
#[derive(Debug)]
pub struct Queued {
    shedder: Arc<AdaptiveShedder>,
}

/// A clone is one more count, dropped on its own, so that a `Queued` can travel in a
/// request's extensions (which must be `Clone`).
impl Clone for Queued {
    fn clone(&self) -> Self {
        self.shedder.queue()
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.shedder.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for ShedderPromise {
    fn drop(&mut self) {
        if let Some(s) = self.shedder.take() {
            s.finish();
        }
    }
}
