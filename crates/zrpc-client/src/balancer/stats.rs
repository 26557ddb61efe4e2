//! Per-endpoint load statistics: lock-free atomics updated on pick and completion.
//!
//! Times are nanoseconds since the picker's epoch ([`Clock`]), so one `Instant` read per event is
//! converted once and everything else is integer arithmetic.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use zrpc_core::ewma::decay_weight;
use zrpc_core::grpc::code;

/// go-zero `decayTime`: 10 s (from Finagle).
pub(crate) const DECAY_TIME: Duration = Duration::from_secs(10);
/// go-zero `initSuccess`: the success score of a perfect endpoint.
pub(crate) const INIT_SUCCESS: f64 = 1000.0;
/// go-zero `throttleSuccess`: healthy while the success score is above this.
pub(crate) const THROTTLE_SUCCESS: f64 = 500.0;
/// Latency recorded for a failure on an endpoint that has no sample yet, so that a fast failure
/// never looks like a fast endpoint.
pub(crate) const FAILED_PROBE_LAG: Duration = Duration::from_secs(1);
/// First back-off after a transport failure; doubles on each consecutive one.
pub(crate) const BACKOFF_BASE: Duration = Duration::from_millis(100);
/// Longest back-off after transport failures.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// v2: consecutive failed calls (failure codes, timeouts) that eject an endpoint.
pub(crate) const EJECT_AFTER: u32 = 3;
/// v2: the first ejection lasts this long; each further ejection without a success in between
/// doubles it, up to [`EJECT_MAX`].
pub(crate) const EJECT_BASE: Duration = Duration::from_secs(1);
/// v2: the longest ejection.
pub(crate) const EJECT_MAX: Duration = Duration::from_secs(30);
/// After an answered probe, calls that reach their deadline make the endpoint suspect again only
/// once this has passed.
pub(crate) const PROBE_COOLDOWN: Duration = Duration::from_secs(1);
/// Calls in flight and no answer for this long (and for ten latencies) make an endpoint
/// suspect: probed out of band before any of its calls reaches its deadline.
pub(crate) const STALL_MIN: Duration = Duration::from_millis(250);

const EMPTY: u64 = u64::MAX;

/// Converts instants to nanoseconds since an epoch (the only time representation in the stats),
/// and reads the current time cheaply ([`Clock::coarse_now`]) for a pick with no precise reading
/// at hand (zrpc's client picks at the attempt's start, which it reads for the latency anyway).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: Instant,
    /// `CLOCK_MONOTONIC` (the clock behind `Instant` on Linux) at the epoch, in ns.
    #[cfg(target_os = "linux")]
    mono_epoch: u64,
}

impl Clock {
    /// A clock counting from `epoch`.
    #[must_use]
    pub fn new(epoch: Instant) -> Self {
        Clock {
            epoch,
            #[cfg(target_os = "linux")]
            mono_epoch: {
                // `Instant` is CLOCK_MONOTONIC on Linux: two adjacent reads tie the two together
                // (to within the few ns between them)
                let since = nanos_between(epoch, Instant::now());
                coarse::monotonic().saturating_sub(since)
            },
        }
    }

    /// Nanoseconds from the epoch to `now` (0 before the epoch).
    #[inline]
    #[must_use]
    pub fn nanos(&self, now: Instant) -> u64 {
        nanos_between(self.epoch, now)
    }

    /// The current time (ns since the epoch) from the kernel's coarse monotonic clock
    /// (`CLOCK_MONOTONIC_COARSE`: one read of the vDSO page, several times cheaper than
    /// `Instant::now()`, which reads the TSC); it lags the precise clock by at most one scheduler
    /// tick (1-4 ms).
    ///
    /// For the picker's decisions only, which work in 100 ms..30 s steps (back-offs, ejections,
    /// re-probe intervals): latencies are measured with [`Clock::nanos`] of `Instant::now()`.
    /// Elsewhere than Linux it is `Instant::now()`.
    #[inline]
    #[must_use]
    pub fn coarse_now(&self) -> u64 {
        #[cfg(target_os = "linux")]
        {
            coarse::monotonic_coarse().saturating_sub(self.mono_epoch)
        }
        #[cfg(not(target_os = "linux"))]
        {
            self.nanos(Instant::now())
        }
    }
}

#[inline]
fn nanos_between(epoch: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

/// The kernel clocks behind [`Clock::coarse_now`], through rustix (safe, vDSO-backed).
#[cfg(target_os = "linux")]
mod coarse {
    use rustix::time::{ClockId, Timespec, clock_gettime};

    fn ns(t: Timespec) -> u64 {
        u64::try_from(t.tv_sec)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
    }

    pub(super) fn monotonic() -> u64 {
        ns(clock_gettime(ClockId::Monotonic))
    }

    #[inline]
    pub(super) fn monotonic_coarse() -> u64 {
        ns(clock_gettime(ClockId::MonotonicCoarse))
    }
}

/// The counters and averages of one endpoint (kept across endpoint-set updates, keyed by address).
///
/// Aligned to 128 bytes (two cache lines, the prefetch pair) so that the stats of two endpoints
/// never share a line: picks on different endpoints from different threads do not contend.
#[derive(Debug)]
#[repr(align(128))]
pub struct EndpointStats {
    /// EWMA latency in ns (f64 bits), `EMPTY` until the first sample.
    lag: AtomicU64,
    /// `lag` in whole ns (0 before the first sample): the v2 cost's latency, converted once per
    /// completion so that a pick's cost is integer math ([`EndpointStats::pick_cost`]).
    lag_ns: AtomicU64,
    /// EWMA success score 0..1000 (f64 bits).
    success: AtomicU64,
    /// Time of the last completion (ns + 1; 0 = never).
    last_done: AtomicU64,
    /// Time of the last pick (ns).
    pub(crate) last_pick: AtomicU64,
    inflight: AtomicU64,
    requests: AtomicU64,
    /// Unusable until this time (ns) after a transport failure; 0 = up.
    down_until: AtomicU64,
    /// Cold (no sample yet) or recovering from a transport failure: one request in flight at a time.
    pub(crate) probing: AtomicBool,
    /// Consecutive transport failures (the back-off exponent).
    failures: AtomicU32,
    /// v2: consecutive failed calls (reset by a success).
    pub(crate) fail_streak: AtomicU32,
    /// v2: ejections since the last success (the ejection back-off exponent; > 0 = on trial).
    pub(crate) ejections: AtomicU32,
    /// v2: ejected until this time (ns); 0 = never.
    pub(crate) eject_until: AtomicU64,
    /// v2: re-probes of a skipped endpoint since it last won a pair (the probe back-off exponent).
    pub(crate) probe_k: AtomicU32,
    /// v2: earliest time (ns) of the next re-probe; `u64::MAX` while one is in flight.
    pub(crate) probe_at: AtomicU64,
    /// v2: a re-probe is in flight; its sample replaces the stale latency.
    pub(crate) reprobe: AtomicBool,
    /// Time (ns) of the pick that found nothing in flight: the start of the current busy period.
    busy_from: AtomicU64,
    /// A call ran into its deadline here, or calls stalled: unusable until an out-of-band probe
    /// gets an answer (the endpoint's probe task clears it), so that no user call is spent
    /// finding out.
    suspect: AtomicBool,
    /// Time (ns) the endpoint was last heard from (an answered probe, bytes on its
    /// connections): a stall is counted from it too.
    heard: AtomicU64,
    /// Probes answered in the current busy period: each doubles the stall limit, so that a
    /// long silent call is not probed over and over (reset by a completed call).
    stall_k: AtomicU32,
    /// Time (ns) of the last answered probe (0 = never).
    verified: AtomicU64,
}

impl Default for EndpointStats {
    fn default() -> Self {
        EndpointStats::new()
    }
}

impl EndpointStats {
    /// A cold endpoint: no latency sample, success 1000, probing.
    #[must_use]
    pub fn new() -> Self {
        EndpointStats {
            lag: AtomicU64::new(EMPTY),
            lag_ns: AtomicU64::new(0),
            success: AtomicU64::new(INIT_SUCCESS.to_bits()),
            last_done: AtomicU64::new(0),
            last_pick: AtomicU64::new(0),
            inflight: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            down_until: AtomicU64::new(0),
            probing: AtomicBool::new(true),
            failures: AtomicU32::new(0),
            fail_streak: AtomicU32::new(0),
            ejections: AtomicU32::new(0),
            eject_until: AtomicU64::new(0),
            probe_k: AtomicU32::new(0),
            probe_at: AtomicU64::new(0),
            reprobe: AtomicBool::new(false),
            busy_from: AtomicU64::new(0),
            suspect: AtomicBool::new(false),
            heard: AtomicU64::new(0),
            stall_k: AtomicU32::new(0),
            verified: AtomicU64::new(0),
        }
    }

    /// The EWMA latency, `None` before the first sample.
    #[must_use]
    pub fn lag(&self) -> Option<Duration> {
        match self.lag.load(Ordering::Relaxed) {
            EMPTY => None,
            bits => Some(Duration::from_nanos(f64::from_bits(bits) as u64)),
        }
    }

    /// The EWMA latency in nanoseconds (0 before the first sample).
    #[inline]
    #[must_use]
    pub fn lag_nanos(&self) -> f64 {
        match self.lag.load(Ordering::Relaxed) {
            EMPTY => 0.0,
            bits => f64::from_bits(bits),
        }
    }

    /// The time of the last completion (ns since the epoch; 0 = never).
    #[inline]
    pub(crate) fn last_done_nanos(&self) -> u64 {
        self.last_done.load(Ordering::Relaxed).saturating_sub(1)
    }

    /// Whether a call completed here within `window` ns before `now` (ns).
    pub(crate) fn answered_within(&self, now: u64, window: u64) -> bool {
        match self.last_done.load(Ordering::Relaxed) {
            0 => false,
            done => now.saturating_sub(done - 1) <= window,
        }
    }

    /// The EWMA success score, 0..=1000.
    #[inline]
    #[must_use]
    pub fn success(&self) -> f64 {
        f64::from_bits(self.success.load(Ordering::Relaxed))
    }

    /// Requests picked and not yet completed.
    #[inline]
    #[must_use]
    pub fn inflight(&self) -> u64 {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Requests sent since creation (picked and not abandoned).
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Cold or recovering: limited to one request in flight while others are usable.
    #[inline]
    #[must_use]
    pub fn is_probing(&self) -> bool {
        self.probing.load(Ordering::Relaxed)
    }

    /// In back-off after a transport failure (connection refused, reset, lost) at `now` (ns): the
    /// one state in which the `consistent_hash` balancer passes the endpoint over, as go-zero's
    /// passes over a connection that is not READY.
    #[inline]
    #[must_use]
    pub fn is_unreachable(&self, now: u64) -> bool {
        now < self.down_until.load(Ordering::Relaxed)
    }

    /// In transport-failure back-off at `now` (ns), or suspect (see [`EndpointStats::is_suspect`]).
    #[inline]
    #[must_use]
    pub fn is_down(&self, now: u64) -> bool {
        now < self.down_until.load(Ordering::Relaxed) || self.is_suspect()
    }

    /// Suspect: a call ran into its deadline here, and no out-of-band probe has been answered
    /// since. Counted as down: chosen only when every endpoint is down.
    #[inline]
    #[must_use]
    pub fn is_suspect(&self) -> bool {
        self.suspect.load(Ordering::Relaxed)
    }

    /// Marks the endpoint suspect; true when it was not already (its caller starts the probe).
    pub(crate) fn suspect(&self) -> bool {
        !self.suspect.swap(true, Ordering::Relaxed)
    }

    /// An out-of-band probe was answered at `now` (ns): usable again, its next call a probe (one
    /// at a time).
    pub(crate) fn clear_suspect(&self, now: u64) {
        self.heard(now);
        self.verified.store(now.max(1), Ordering::Relaxed);
        let k = self.stall_k.load(Ordering::Relaxed);
        self.stall_k
            .store(k.saturating_add(1).min(16), Ordering::Relaxed);
        self.probing.store(true, Ordering::Relaxed);
        self.suspect.store(false, Ordering::Relaxed);
    }

    /// A probe was answered less than `PROBE_COOLDOWN` before `now` (ns): a call that runs
    /// into its deadline then says the server is slow, not gone, and asks for no new probe (a
    /// server whose calls keep timing out would otherwise be probed after each of them).
    #[must_use]
    pub fn recently_verified(&self, now: u64) -> bool {
        let at = self.verified.load(Ordering::Relaxed);
        at != 0 && now.saturating_sub(at) < PROBE_COOLDOWN.as_nanos() as u64
    }

    /// The endpoint was heard from at `now` (ns): bytes came in on its connections.
    pub(crate) fn heard(&self, now: u64) {
        self.heard.store(now, Ordering::Relaxed);
    }

    /// Calls are in flight and nothing was heard from the endpoint (no answer, no byte, no
    /// answered probe since the calls began) for `STALL_MIN` and ten times its latency (doubled
    /// by each probe answered while the same calls run): it may have stopped answering (frozen,
    /// a dead path), or it may only be running long silent calls; a probe tells which.
    #[must_use]
    pub fn is_stalled(&self, now: u64) -> bool {
        if self.inflight() == 0 || self.is_suspect() {
            return false;
        }
        let heard = self
            .last_done_nanos()
            .max(self.busy_from.load(Ordering::Relaxed))
            .max(self.heard.load(Ordering::Relaxed));
        let k = self.stall_k.load(Ordering::Relaxed).min(16);
        let limit =
            (self.lag_nanos() * 10.0).max(STALL_MIN.as_nanos() as f64) * f64::from(1u32 << k);
        now.saturating_sub(heard) as f64 > limit
    }

    /// The back-off deadline (ns; 0 = up).
    #[inline]
    #[must_use]
    pub fn down_until(&self) -> u64 {
        self.down_until.load(Ordering::Relaxed)
    }

    /// go-zero's `healthy()` (success > 500) and not down.
    #[inline]
    #[must_use]
    pub fn is_healthy(&self, now: u64) -> bool {
        self.success() > THROTTLE_SUCCESS && !self.is_down(now)
    }

    /// The P2C load at `now` (ns): go-zero's `sqrt(lag + 1) * (inflight + 1)`, with:
    /// - `f64::INFINITY` while down;
    /// - a probing endpoint: 0 with nothing in flight (send it the probe), else a penalty
    ///   (`1e12 + inflight`: chosen only when every candidate is penalised).
    #[inline]
    #[must_use]
    pub fn load(&self, now: u64) -> f64 {
        if self.is_down(now) {
            return f64::INFINITY;
        }
        let inflight = self.inflight() as f64;
        if self.is_probing() {
            return if inflight == 0.0 {
                0.0
            } else {
                PENALTY + inflight
            };
        }
        (self.lag_nanos() + 1.0).sqrt() * (inflight + 1.0)
    }

    /// Ejected (v2: consecutive failed calls) at `now` (ns).
    #[inline]
    #[must_use]
    pub fn is_ejected(&self, now: u64) -> bool {
        now < self.eject_until.load(Ordering::Relaxed)
    }

    /// The v2 cost at `now` (ns): PeakEwma's `latency * (inflight + 1)` (latency in µs), linear in
    /// the latency where go-zero takes its square root (with the square root a 100x slower endpoint
    /// beats a fast one as soon as the fast one has 10 calls in flight), and:
    /// - with calls in flight, the latency is at least the time since the endpoint last answered
    ///   (or since those calls began), so one that stops answering grows dear at once;
    /// - `f64::INFINITY` while down (transport back-off, suspect) or ejected;
    /// - cold, recovering from a transport failure or on trial after an ejection: 0 with nothing
    ///   in flight (send it the probe), else the penalty (`1e12 + inflight`: one probe at a time).
    ///
    /// For reports and tests; the picker compares the same cost in integers.
    #[must_use]
    pub fn cost(&self, now: u64) -> f64 {
        match self.pick_cost(now) {
            u64::MAX => f64::INFINITY,
            c if c >= COST_PENALTY => PENALTY + (c - COST_PENALTY) as f64,
            c => c as f64 / 1e3,
        }
    }

    /// [`EndpointStats::cost`] times 1000 in integers, the form the v2 picker compares:
    /// `(lag_ns + 1000) * (inflight + 1)` (capped below `COST_PENALTY`), `COST_PENALTY +
    /// inflight` for a probe already in flight, `u64::MAX` while down or ejected. Integer loads,
    /// one multiplication and integer compares: the float form's conversions and its
    /// multiply/min latency chain were a third of a pick's time (perf annotate of
    /// `pick/1_thread_alone_cpu/3`).
    #[inline]
    #[must_use]
    pub(crate) fn pick_cost(&self, now: u64) -> u64 {
        if self.is_down(now) || self.is_ejected(now) {
            return u64::MAX;
        }
        let inflight = self.inflight();
        if self.is_probing() || self.ejections.load(Ordering::Relaxed) > 0 {
            return if inflight == 0 {
                0
            } else {
                COST_PENALTY.saturating_add(inflight)
            };
        }
        let mut lag_ns = self.lag_ns.load(Ordering::Relaxed);
        if inflight > 0 {
            // Calls pending for longer than the latency estimate raise it (the "peak" of
            // Finagle's and linkerd's PeakEwma looks at pending calls the same way): a server
            // that stopped answering stops winning pairs within its normal latency rather than
            // at its calls' deadlines, however many calls it holds.
            let quiet = self
                .last_done_nanos()
                .max(self.busy_from.load(Ordering::Relaxed));
            lag_ns = lag_ns.max(now.saturating_sub(quiet));
        }
        lag_ns
            .saturating_add(1_000)
            .saturating_mul(inflight.saturating_add(1))
            .min(COST_PENALTY / 2)
    }

    /// go-zero's `healthy()` success test (success > 500) on the score's bits: the score is a
    /// weighted mean of 0 and 1000 with weights in 0..=1, never negative nor NaN, and for such
    /// floats the bit patterns order as the values do, so this is one integer compare.
    #[inline]
    pub(crate) fn succeeds(&self) -> bool {
        self.success.load(Ordering::Relaxed) > THROTTLE_SUCCESS_BITS
    }

    /// Records a pick (in flight + 1); the pickers call it.
    ///
    /// The request counter is approximate under concurrent picks (a plain load and store, no
    /// read-modify-write: it is only reported, never used to choose).
    #[inline]
    pub fn on_pick(&self) {
        self.inflight.fetch_add(1, Ordering::Relaxed);
        let r = self.requests.load(Ordering::Relaxed);
        self.requests.store(r + 1, Ordering::Relaxed);
    }

    /// [`EndpointStats::on_pick`] at `now` (ns): a pick that finds nothing in flight starts a busy
    /// period, from which the v2 cost counts how long the endpoint has not answered.
    #[inline]
    pub fn on_pick_at(&self, now: u64) {
        if self.inflight.fetch_add(1, Ordering::Relaxed) == 0 {
            self.busy_from.store(now, Ordering::Relaxed);
        }
        let r = self.requests.load(Ordering::Relaxed);
        self.requests.store(r + 1, Ordering::Relaxed);
    }

    /// Records the pick time `now` (ns). Written only when it moved by more than 1 ms, so that
    /// concurrent picks of a busy endpoint do not keep writing its cache line (forcePick works in
    /// seconds).
    #[inline]
    pub(crate) fn touch(&self, now: u64) {
        if now.saturating_sub(self.last_pick.load(Ordering::Relaxed)) > 1_000_000 {
            self.last_pick.store(now, Ordering::Relaxed);
        }
    }

    /// Records the completion of a request started at `start` (ns) with the final gRPC `code`, at
    /// `now` (ns). go-zero's `Done` math, with zrpc's fixes:
    ///
    /// ```text
    /// w       = exp(-(now - last_done) / 10s)   (0 for the first sample, a re-probe's and a
    ///                                            probe's answer: they replace)
    /// lag     = lag * w + sample * (1 - w)       sample = now - start, but for a failure or a
    ///                                            cancellation max(sample, lag) (never "fast")
    /// success = success * w + (1000 | 0) * (1 - w)
    /// ```
    ///
    /// A cancellation of a request to an endpoint without a sample records nothing (it says
    /// nothing about its speed) and keeps the endpoint probing.
    pub fn on_done(&self, start: u64, now: u64, code: i32) {
        self.complete(start, now, code, None);
    }

    /// [`EndpointStats::on_done`] for an endpoint of a balancer whose ejections are capped.
    pub(crate) fn on_done_limited(&self, start: u64, now: u64, code: i32, limit: &EjectionLimit) {
        self.complete(start, now, code, Some(limit));
    }

    fn complete(&self, start: u64, now: u64, code: i32, limit: Option<&EjectionLimit>) {
        self.inflight.fetch_sub(1, Ordering::Relaxed);
        let failure = !code::is_acceptable(code);
        let old_bits = self.lag.load(Ordering::Relaxed);
        let empty = old_bits == EMPTY;
        if empty && code == code::CANCELLED {
            return;
        }
        let prev = self
            .last_done
            .swap(now.saturating_add(1), Ordering::Relaxed);
        // a v2 re-probe measures an endpoint whose stats are stale: its sample replaces them;
        // so does a probe answered after a transport failure or a stall (the stats describe the
        // failure: how long it took to detect, not how fast the endpoint answers), so a healed
        // endpoint is back at once rather than after its failure's latency decays
        let reprobe =
            self.reprobe.load(Ordering::Relaxed) && self.reprobe.swap(false, Ordering::Relaxed);
        let answered_probe =
            !failure && code != code::CANCELLED && self.probing.load(Ordering::Relaxed);
        let w = if empty || prev == 0 || reprobe || answered_probe {
            0.0
        } else {
            decay_weight(
                Duration::from_nanos(now.saturating_add(1).saturating_sub(prev)),
                DECAY_TIME,
            )
        };
        let old_lag = if empty { 0.0 } else { f64::from_bits(old_bits) };
        let mut sample = now.saturating_sub(start) as f64;
        if failure || code == code::CANCELLED {
            sample = sample.max(old_lag);
            if empty {
                sample = sample.max(FAILED_PROBE_LAG.as_nanos() as f64);
            }
        }
        let lag = old_lag * w + sample * (1.0 - w);
        self.lag.store(lag.to_bits(), Ordering::Relaxed);
        self.lag_ns.store(lag as u64, Ordering::Relaxed);
        let score = if failure { 0.0 } else { INIT_SUCCESS };
        let success = self.success() * w + score * (1.0 - w);
        self.success.store(success.to_bits(), Ordering::Relaxed);
        self.probing.store(false, Ordering::Relaxed);
        if reprobe {
            self.probe_at.store(0, Ordering::Relaxed);
        }
        if self.stall_k.load(Ordering::Relaxed) != 0 {
            self.stall_k.store(0, Ordering::Relaxed);
        }
        if failure {
            self.on_failed_call(now, limit);
        } else if code != code::CANCELLED {
            self.failures.store(0, Ordering::Relaxed);
            if self.fail_streak.load(Ordering::Relaxed) != 0 {
                self.fail_streak.store(0, Ordering::Relaxed);
            }
            if self.ejections.load(Ordering::Relaxed) != 0 {
                self.ejections.store(0, Ordering::Relaxed);
            }
        }
    }

    /// v2 ejection: [`EJECT_AFTER`] consecutive failed calls (or one failed call while on trial
    /// after an ejection; failures arriving while ejected are calls sent before it and are ignored) eject the endpoint for [`EJECT_BASE`] doubling to [`EJECT_MAX`]. The v2
    /// picker never ejects the whole set (it falls back to ejected endpoints when nothing else is
    /// usable); the v1 rules ignore ejection. Under an [`EjectionLimit`] an ejection the cap does
    /// not admit does not happen (the streak stays, so the next failure asks again).
    fn on_failed_call(&self, now: u64, limit: Option<&EjectionLimit>) {
        if self.is_ejected(now) {
            // a call sent before the ejection (stuck on a frozen server, say): not a failed trial
            return;
        }
        let streak = self.fail_streak.fetch_add(1, Ordering::Relaxed) + 1;
        let ejections = self.ejections.load(Ordering::Relaxed);
        if streak < EJECT_AFTER && ejections == 0 {
            return;
        }
        let span = EJECT_BASE
            .saturating_mul(1 << ejections.min(16))
            .min(EJECT_MAX);
        let until = now.saturating_add(u64::try_from(span.as_nanos()).unwrap_or(u64::MAX));
        if limit.is_some_and(|l| !l.admit(now, until)) {
            return;
        }
        self.fail_streak.store(0, Ordering::Relaxed);
        self.ejections
            .store(ejections.saturating_add(1), Ordering::Relaxed);
        self.eject_until.store(until, Ordering::Relaxed);
    }

    /// Records a transport failure (refused, reset, a connection lost) of a request started at
    /// `start`:
    /// a failed completion, then down for an exponential back-off (100 ms doubling to 5 s), then
    /// probing again (one request at a time until one completes).
    pub fn on_transport_failure(&self, start: u64, now: u64) {
        self.transport_failure(start, now, None);
    }

    /// [`EndpointStats::on_transport_failure`] under an [`EjectionLimit`].
    pub(crate) fn on_transport_failure_limited(&self, start: u64, now: u64, limit: &EjectionLimit) {
        self.transport_failure(start, now, Some(limit));
    }

    fn transport_failure(&self, start: u64, now: u64, limit: Option<&EjectionLimit>) {
        self.complete(start, now, code::UNAVAILABLE, limit);
        let n = self.failures.fetch_add(1, Ordering::Relaxed).min(16);
        let backoff = BACKOFF_BASE.saturating_mul(1 << n).min(BACKOFF_MAX);
        let until = now.saturating_add(u64::try_from(backoff.as_nanos()).unwrap_or(u64::MAX));
        self.down_until.store(until, Ordering::Relaxed);
        self.probing.store(true, Ordering::Relaxed);
    }

    /// Releases an in-flight slot without recording anything (a request picked but never sent:
    /// not counted in [`EndpointStats::requests`] either).
    pub fn on_abandon(&self) {
        self.inflight.fetch_sub(1, Ordering::Relaxed);
        let r = self.requests.load(Ordering::Relaxed);
        self.requests.store(r.saturating_sub(1), Ordering::Relaxed);
        if self.reprobe.load(Ordering::Relaxed) && self.reprobe.swap(false, Ordering::Relaxed) {
            self.probe_at.store(0, Ordering::Relaxed);
        }
    }
}

/// The cap on the share of one balancer's endpoints ejected at the same time
/// (`P2c.MaxEjectedPercent`, [`crate::conf::P2cConf`]): at most `len * percent / 100` (rounded
/// down) of its current set. At 100 (the default) every ejection is admitted without a lock:
/// the rule before the cap existed.
///
/// Checked on ejection only (a rare event): a lock over the ejection deadlines of the endpoints
/// it admitted, the expired ones dropped each time.
#[derive(Debug)]
pub(crate) struct EjectionLimit {
    percent: u32,
    len: std::sync::atomic::AtomicUsize,
    until: parking_lot::Mutex<Vec<u64>>,
}

impl Default for EjectionLimit {
    fn default() -> Self {
        EjectionLimit::new(100)
    }
}

impl EjectionLimit {
    /// A cap of `percent` (0 = no ejection, >= 100 = no cap).
    pub(crate) fn new(percent: u32) -> Self {
        EjectionLimit {
            percent,
            len: std::sync::atomic::AtomicUsize::new(0),
            until: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// The size of the balancer's current set.
    pub(crate) fn set_len(&self, len: usize) {
        self.len.store(len, Ordering::Relaxed);
    }

    /// Admits an ejection at `now` lasting until `until` if the cap allows one more.
    fn admit(&self, now: u64, until: u64) -> bool {
        if self.percent >= 100 {
            return true;
        }
        let max = self.len.load(Ordering::Relaxed) * self.percent as usize / 100;
        let mut ejected = self.until.lock();
        ejected.retain(|&u| u > now);
        if ejected.len() >= max {
            return false;
        }
        ejected.push(until);
        true
    }
}

/// The load given to a probing endpoint that already has its probe in flight.
pub(crate) const PENALTY: f64 = 1e12;

/// [`PENALTY`] in [`EndpointStats::pick_cost`]'s integer form: above every finite cost
/// (`(lag_ns + 1000) * (inflight + 1)` is capped at half of it).
pub(crate) const COST_PENALTY: u64 = 1 << 62;

/// The bits of [`THROTTLE_SUCCESS`] (see [`EndpointStats::succeeds`]).
const THROTTLE_SUCCESS_BITS: u64 = THROTTLE_SUCCESS.to_bits();
