//! The limit itself and its permit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use super::{LimitConfig, Rejected, Tier};
use crate::stamp::AtomicStamp;

/// Windows in a row at the lowest limit after which the minimum round-trip time is measured
/// again at once: it may be wrong (Envoy's rule).
const WINDOWS_AT_MIN: u32 = 5;

/// Latencies below this count as this (a call answered within the clock's resolution).
const FLOOR: Duration = Duration::from_micros(1);

/// A snapshot of a limit's state, for gauges and logs.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct LimitStats {
    /// The limit: critical calls are admitted while fewer critical calls are in flight, the
    /// other tiers while fewer calls of every tier are in flight than their share of it (and
    /// only `min_limit` of them at once while `measuring`).
    pub limit: u32,
    /// Calls admitted and not ended.
    pub inflight: u32,
    /// The last measured minimum round-trip time (`None` before the first measurement ends).
    pub min_rtt: Option<Duration>,
    /// The mean round-trip time of the last sample window.
    pub sample_rtt: Option<Duration>,
    /// Whether the minimum round-trip time is being measured.
    pub measuring: bool,
}

/// An adaptive concurrency limit: Envoy's gradient controller, with Netflix's rule against
/// growing a limit the traffic does not use (see the [module docs](super)).
///
/// Share one per server (or per method) behind an [`Arc`]. Admission is a few atomic
/// operations; a call's end takes a short lock once.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, Instant};
/// use zrpc_core::limit::{ConcurrencyLimit, LimitConfig, Tier};
///
/// let start = Instant::now();
/// let limit = Arc::new(ConcurrencyLimit::new(LimitConfig::default(), start));
/// let permit = limit.acquire(Tier::Default, start).expect("an idle server admits");
/// permit.sample(start + Duration::from_millis(10)); // or drop it: no sample
/// assert_eq!(limit.stats().inflight, 0);
/// ```
#[derive(Debug)]
pub struct ConcurrencyLimit {
    config: LimitConfig,
    /// Calls admitted and not ended.
    inflight: AtomicU32,
    /// Critical calls admitted and not ended.
    critical: AtomicU32,
    /// Calls admitted at the measurement's concurrency and not ended.
    measured: AtomicU32,
    /// The limit, rounded down.
    limit: AtomicU32,
    /// While the minimum round-trip time is measured.
    measuring: AtomicBool,
    /// When the measurement under way ends even without its samples.
    measure_until: AtomicStamp,
    state: Mutex<State>,
}

/// What changes at the end of calls.
#[derive(Debug)]
struct State {
    /// The computed limit, unrounded (kept while measuring, and restored after).
    limit: f64,
    min_rtt: Option<Duration>,
    sample_rtt: Option<Duration>,
    /// The round-trip times of the measurement under way.
    measurement: Option<Vec<Duration>>,
    /// When the last measurement started: calls admitted before are not sampled.
    epoch: Instant,
    /// When the next measurement starts.
    next_measurement: Instant,
    /// Windows in a row that ended at the lowest limit.
    at_min: u32,
    window: Window,
    rng: SmallRng,
}

/// One sample window.
#[derive(Debug)]
struct Window {
    start: Instant,
    sum: Duration,
    count: u32,
    /// The most calls in flight seen as one of them was admitted.
    peak: u32,
}

impl Window {
    fn new(start: Instant) -> Self {
        Window {
            start,
            sum: Duration::ZERO,
            count: 0,
            peak: 0,
        }
    }
}

impl ConcurrencyLimit {
    /// A limit created at `now`, measuring its minimum round-trip time first (at
    /// `min_limit`); jitter from a random seed.
    #[must_use]
    pub fn new(config: LimitConfig, now: Instant) -> Self {
        Self::with_seed(config, crate::random_seed(), now)
    }

    /// [`new`](Self::new) with the jitter's seed given (for simulations and tests).
    #[must_use]
    pub fn with_seed(config: LimitConfig, seed: u64, now: Instant) -> Self {
        let mut config = config;
        config.min_limit = config.min_limit.max(1);
        config.max_limit = config.max_limit.max(config.min_limit);
        config.min_rtt_samples = config.min_rtt_samples.max(1);
        let min = config.min_limit;
        let limit = ConcurrencyLimit {
            inflight: AtomicU32::new(0),
            critical: AtomicU32::new(0),
            measured: AtomicU32::new(0),
            limit: AtomicU32::new(min),
            measuring: AtomicBool::new(false),
            measure_until: AtomicStamp::default(),
            state: Mutex::new(State {
                limit: f64::from(min),
                min_rtt: None,
                sample_rtt: None,
                measurement: None,
                epoch: now,
                next_measurement: now,
                at_min: 0,
                window: Window::new(now),
                rng: SmallRng::seed_from_u64(seed),
            }),
            config,
        };
        limit.start_measurement(&mut limit.state.lock(), now);
        limit
    }

    /// The parameters (as sanitized: `min_limit >= 1`, `max_limit >= min_limit`).
    #[must_use]
    pub fn config(&self) -> &LimitConfig {
        &self.config
    }

    /// Asks to start a call of `tier` at `now`. A critical call is admitted while fewer
    /// critical calls than the limit are in flight, whatever the other tiers hold; a call of
    /// another tier while fewer calls of every tier are in flight than its share of the limit
    /// ([`Tier::share`]), and while the minimum round-trip time is measured, only `min_limit`
    /// of them at once.
    ///
    /// # Errors
    ///
    /// [`Rejected`], saying whether the limit itself or the tier's share of it was reached.
    pub fn acquire(self: &Arc<Self>, tier: Tier, now: Instant) -> Result<LimitPermit, Rejected> {
        let full = self.limit.load(Ordering::Acquire);
        let class = if tier == Tier::Critical {
            Class::Critical
        } else if self.measuring.load(Ordering::Acquire) {
            Class::Measured
        } else {
            Class::Plain
        };
        let (own, bound) = match class {
            Class::Critical => (Some((&self.critical, full)), u32::MAX),
            Class::Measured => (Some((&self.measured, self.config.min_limit)), full),
            Class::Plain => {
                let (n, d) = tier.share();
                (None, (full * n / d).max(1))
            }
        };
        if let Some((count, max)) = own {
            let before = count.fetch_add(1, Ordering::AcqRel);
            if before >= max {
                count.fetch_sub(1, Ordering::AcqRel);
                let measured = class == Class::Measured;
                if measured {
                    self.end_overdue_measurement(now);
                }
                return Err(Rejected::at_limit(tier, full, max, before, measured));
            }
        }
        let before = self.inflight.fetch_add(1, Ordering::AcqRel);
        if before < bound {
            return Ok(LimitPermit {
                limit: Some(Arc::clone(self)),
                start: now,
                inflight: before + 1,
                class,
            });
        }
        self.end(class);
        Err(if before < full {
            Rejected::at_share(tier, full, bound, before)
        } else {
            Rejected::at_limit(tier, full, full, before, false)
        })
    }

    /// Ends a measurement past its deadline, with the samples it has: no call ended in time.
    #[cold]
    fn end_overdue_measurement(&self, now: Instant) {
        if self.measure_until.load().is_some_and(|t| now >= t) {
            let mut st = self.state.lock();
            if st.measurement.is_some() {
                self.end_measurement(&mut st, now);
            }
        }
    }

    /// A snapshot of the state.
    #[must_use]
    pub fn stats(&self) -> LimitStats {
        let st = self.state.lock();
        LimitStats {
            limit: self.limit.load(Ordering::Acquire),
            inflight: self.inflight.load(Ordering::Acquire),
            min_rtt: st.min_rtt,
            sample_rtt: st.sample_rtt,
            measuring: st.measurement.is_some(),
        }
    }

    /// The end of a call admitted at `start` with `inflight` in flight, at `now`.
    fn record(&self, start: Instant, inflight: u32, class: Class, now: Instant) {
        self.end(class);
        let rtt = now.saturating_duration_since(start).max(FLOOR);
        let mut st = self.state.lock();
        if start < st.epoch {
            // Admitted before the last measurement started: under another limit.
            return;
        }
        if let Some(samples) = st.measurement.as_mut() {
            if class == Class::Measured {
                samples.push(rtt);
            }
            // Past its deadline it ends with the samples it has, also at a critical call's end:
            // a server whose calls are all critical gives it none, and would keep its limit.
            let overdue = self.measure_until.load().is_some_and(|t| now >= t);
            if samples.len() >= self.config.min_rtt_samples as usize || overdue {
                self.end_measurement(&mut st, now);
            }
            return;
        }
        let w = &mut st.window;
        w.sum += rtt;
        w.count += 1;
        w.peak = w.peak.max(inflight);
        if now.saturating_duration_since(w.start) >= self.config.window {
            self.end_window(&mut st, now);
        }
    }

    /// Computes the limit from the window's mean round-trip time and starts a new window.
    fn end_window(&self, st: &mut State, now: Instant) {
        let w = std::mem::replace(&mut st.window, Window::new(now));
        let sample = w.sum / w.count.max(1);
        st.sample_rtt = Some(sample);
        let min_rtt = st.min_rtt.unwrap_or(sample);
        let idle = idle(&self.config, st.limit, min_rtt, sample, w.peak);
        st.limit = next_limit(&self.config, st.limit, min_rtt, sample, w.peak);
        self.publish(st.limit);
        st.at_min = if st.limit < f64::from(self.config.min_limit) + 1.0 {
            st.at_min + 1
        } else {
            0
        };
        // A measurement that is due waits for a window in which the calls queued or used half
        // the limit: on an idle server it would find the minimum again, at the cost of the
        // calls it holds back.
        if st.at_min >= WINDOWS_AT_MIN || (now >= st.next_measurement && !idle) {
            self.start_measurement(st, now);
        }
    }

    /// Uncounts a call.
    fn end(&self, class: Class) {
        self.inflight.fetch_sub(1, Ordering::AcqRel);
        match class {
            Class::Critical => self.critical.fetch_sub(1, Ordering::AcqRel),
            Class::Measured => self.measured.fetch_sub(1, Ordering::AcqRel),
            Class::Plain => 0,
        };
    }

    /// Admits at most `min_limit` calls below the critical tier at once until
    /// `min_rtt_samples` of them have ended; critical calls keep the limit.
    fn start_measurement(&self, st: &mut State, now: Instant) {
        st.measurement = Some(Vec::with_capacity(self.config.min_rtt_samples as usize));
        st.epoch = now;
        st.at_min = 0;
        // A measurement that gets no samples ends after as long as a sample window per
        // sample it waits for.
        self.measure_until
            .store(now + self.config.window * self.config.min_rtt_samples);
        self.measuring.store(true, Ordering::Release);
    }

    /// Takes the median of the measurement as the minimum round-trip time (keeping the
    /// previous one when it has no sample) and restores the computed limit.
    fn end_measurement(&self, st: &mut State, now: Instant) {
        if let Some(mut samples) = st.measurement.take()
            && !samples.is_empty()
        {
            let mid = samples.len() / 2;
            st.min_rtt = Some(*samples.select_nth_unstable(mid).1);
        }
        let jitter = self.config.min_rtt_interval.as_secs_f64()
            * self.config.jitter.max(0.0)
            * st.rng.random::<f64>();
        st.next_measurement =
            now + self.config.min_rtt_interval + Duration::from_secs_f64(jitter.min(1e9));
        st.window = Window::new(now);
        self.measuring.store(false, Ordering::Release);
        self.publish(st.limit);
    }

    fn publish(&self, limit: f64) {
        self.limit.store(rounded(limit), Ordering::Release);
    }
}

/// The admission bound of a computed limit.
fn rounded(limit: f64) -> u32 {
    // `as` saturates; the limit is clamped to `[min_limit, max_limit]` anyway.
    limit.floor() as u32
}

/// The next limit (Envoy's gradient controller): `gradient = min_rtt * (1 + buffer) / sample`
/// clamped to `[0.5, 2]`, `next = limit * gradient + sqrt(limit * gradient)`, not above
/// `limit` when at most half of it was in use at once (`peak`), within `[min_limit,
/// max_limit]`.
pub(super) fn next_limit(
    config: &LimitConfig,
    limit: f64,
    min_rtt: Duration,
    sample: Duration,
    peak: u32,
) -> f64 {
    let buffered = min_rtt.max(FLOOR).as_secs_f64() * (1.0 + config.buffer.max(0.0));
    let gradient = (buffered / sample.max(FLOOR).as_secs_f64()).clamp(0.5, 2.0);
    let scaled = limit * gradient;
    let mut next = scaled + scaled.sqrt();
    if next > limit && f64::from(peak) * 2.0 < limit {
        // App-limited (Netflix): the calls never needed this limit, so it says nothing about
        // a higher one.
        next = limit;
    }
    next.clamp(f64::from(config.min_limit), f64::from(config.max_limit))
}

/// Whether a window shows an idle server: at most half the limit in flight at once, and the
/// mean latency within the buffer of the minimum.
fn idle(config: &LimitConfig, limit: f64, min_rtt: Duration, sample: Duration, peak: u32) -> bool {
    f64::from(peak) * 2.0 < limit
        && sample.as_secs_f64() <= min_rtt.as_secs_f64() * (1.0 + config.buffer.max(0.0))
}

/// A call admitted by a [`ConcurrencyLimit`]. End it with [`sample`](Self::sample) when its
/// round-trip time says something about the server, or drop it (no sample).
#[derive(Debug)]
#[must_use = "a permit counts its call in flight until it is sampled or dropped"]
pub struct LimitPermit {
    limit: Option<Arc<ConcurrencyLimit>>,
    start: Instant,
    inflight: u32,
    class: Class,
}

/// Which count besides the total a permit holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// A critical call (counted against the limit by itself).
    Critical,
    /// Admitted at the measurement's concurrency: its round-trip time is a measurement sample.
    Measured,
    /// Any other call.
    Plain,
}

impl LimitPermit {
    /// The call ended at `now`: `now - start` is a round-trip time sample.
    pub fn sample(mut self, now: Instant) {
        if let Some(l) = self.limit.take() {
            l.record(self.start, self.inflight, self.class, now);
        }
    }

    /// When the call was admitted.
    #[must_use]
    pub fn start(&self) -> Instant {
        self.start
    }
}

impl Drop for LimitPermit {
    fn drop(&mut self) {
        if let Some(l) = self.limit.take() {
            l.end(self.class);
        }
    }
}
