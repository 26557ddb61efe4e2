//! The limit driven with explicit instants, and properties of its math.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::gradient::next_limit;
use super::*;

const MS: Duration = Duration::from_millis(1);

fn config() -> LimitConfig {
    LimitConfig {
        jitter: 0.0,
        ..LimitConfig::default()
    }
}

fn limit(cfg: LimitConfig, t0: Instant) -> Arc<ConcurrencyLimit> {
    Arc::new(ConcurrencyLimit::with_seed(cfg, 7, t0))
}

/// Ends the startup measurement with `n` sequential calls of `rtt` each; returns the clock.
fn measure(l: &Arc<ConcurrencyLimit>, mut now: Instant, rtt: Duration) -> Instant {
    let n = l.config().min_rtt_samples;
    for _ in 0..n {
        let p = l.acquire(Tier::Default, now).expect("admitted");
        now += rtt;
        p.sample(now);
    }
    now
}

/// Runs one sample window: `calls` calls at once, every one taking `rtt`, then one more call
/// of `rtt` that ends the window. Returns the clock at the window's end.
fn window(l: &Arc<ConcurrencyLimit>, now: Instant, calls: u32, rtt: Duration) -> Instant {
    let permits: Vec<_> = (0..calls)
        .map_while(|_| l.acquire(Tier::Critical, now).ok())
        .collect();
    let end = now + rtt.max(l.config().window);
    for p in permits {
        p.sample(now + rtt);
    }
    if let Ok(p) = l.acquire(Tier::Critical, end - rtt) {
        p.sample(end);
    }
    end
}

#[test]
fn starts_by_measuring_the_minimum_rtt_at_the_lowest_limit() {
    let t0 = Instant::now();
    let l = limit(config(), t0);
    let s = l.stats();
    assert!(s.measuring);
    assert_eq!((s.limit, s.min_rtt), (3, None));
    // Three calls at once are admitted, a fourth is not.
    let held: Vec<_> = (0..3)
        .map(|_| l.acquire(Tier::Default, t0).unwrap())
        .collect();
    let err = l.acquire(Tier::Default, t0).unwrap_err();
    assert_eq!(err.reason(), RejectReason::Limit);
    // go-zero's words, then the bound and its figures.
    assert_eq!(
        err.to_string(),
        "service overloaded: 3 calls in flight while the concurrency limit measures the minimum \
         round-trip time (at most 3 at once; limit 3)"
    );
    assert_eq!((err.limit(), err.bound(), err.inflight()), (3, 3, 3));
    assert!(err.measuring());
    drop(held);
    let now = measure(&l, t0, 10 * MS);
    let s = l.stats();
    assert!(!s.measuring);
    assert_eq!(s.min_rtt, Some(10 * MS));
    assert_eq!((s.limit, s.inflight), (3, 0), "the limit from before");
    assert!(now > t0);
}

#[test]
fn the_minimum_is_the_median_so_one_slow_call_does_not_move_it() {
    let t0 = Instant::now();
    let l = limit(config(), t0);
    let mut now = t0;
    for i in 0..50 {
        let p = l.acquire(Tier::Default, now).unwrap();
        now += if i == 7 {
            2000 * MS
        } else {
            10 * MS + i * Duration::from_micros(10)
        };
        p.sample(now);
    }
    let min = l.stats().min_rtt.unwrap();
    assert!(min >= 10 * MS && min < 11 * MS, "{min:?}");
}

#[test]
fn grows_while_latency_stays_at_the_minimum_and_the_calls_use_the_limit() {
    let t0 = Instant::now();
    let l = limit(config(), t0);
    let mut now = measure(&l, t0, 10 * MS);
    let mut limits = vec![l.stats().limit];
    for _ in 0..6 {
        let full = l.stats().limit;
        now = window(&l, now, full, 10 * MS);
        limits.push(l.stats().limit);
    }
    // gradient 1.25 (latency at the minimum): limit * 1.25 + sqrt(limit * 1.25)
    assert_eq!(limits, [3, 5, 9, 15, 24, 35, 51], "{limits:?}");
}

#[test]
fn shrinks_when_the_calls_queue() {
    let t0 = Instant::now();
    let l = limit(config(), t0);
    let mut now = measure(&l, t0, 10 * MS);
    for _ in 0..8 {
        let full = l.stats().limit;
        now = window(&l, now, full, 10 * MS);
    }
    let high = l.stats().limit;
    // Latency four times the minimum: gradient 0.3125, clamped to 0.5: about halved (the
    // limit before was in [high, high + 1)).
    window(&l, now, high, 40 * MS);
    let low = f64::from(l.stats().limit);
    let halved = |h: f64| (h / 2.0 + (h / 2.0).sqrt()).floor();
    assert!(
        (halved(f64::from(high))..=halved(f64::from(high) + 1.0)).contains(&low),
        "{high} -> {low}"
    );
    assert_eq!(l.stats().sample_rtt, Some(40 * MS));
}

#[test]
fn does_not_grow_a_limit_the_calls_never_use() {
    let t0 = Instant::now();
    let l = limit(config(), t0);
    let mut now = measure(&l, t0, 10 * MS);
    for _ in 0..5 {
        let full = l.stats().limit;
        now = window(&l, now, full, 10 * MS);
    }
    let before = l.stats().limit;
    assert!(before >= 18, "{before}");
    // A few calls at a time, well below half the limit, at the minimum latency: no growth.
    for _ in 0..10 {
        now = window(&l, now, before / 2 - 2, 10 * MS);
    }
    assert_eq!(l.stats().limit, before);
    // Slow calls still bring it down, used or not.
    window(&l, now, 2, 30 * MS);
    assert!(l.stats().limit < before);
}

#[test]
fn measures_again_after_the_interval_and_ignores_calls_admitted_before() {
    let t0 = Instant::now();
    let l = limit(config(), t0);
    let mut now = measure(&l, t0, 10 * MS);
    for _ in 0..5 {
        let full = l.stats().limit;
        now = window(&l, now, full, 10 * MS);
    }
    let computed = l.stats().limit;
    // A call admitted before the next measurement, ending during it.
    let early = l.acquire(Tier::Default, now).unwrap();
    now += Duration::from_secs(60);
    // The calls use the limit (an idle server would put the measurement off): the window
    // under way when the measurement fell due ends with its first sample, the next one starts
    // the measurement.
    for _ in 0..2 {
        now = window(&l, now, computed - 1, 10 * MS);
    }
    let s = l.stats();
    assert!(s.measuring, "due after 60 s");
    let computed = s.limit;
    // Three calls below critical at once (the early call aside), and critical calls up to the
    // limit (counted by themselves).
    let measured: Vec<_> = (0..3)
        .map(|_| l.acquire(Tier::Sheddable, now).unwrap())
        .collect();
    assert_eq!(
        l.acquire(Tier::Default, now).unwrap_err().reason(),
        RejectReason::Limit
    );
    let critical: Vec<_> = (0..computed)
        .map(|_| l.acquire(Tier::Critical, now).unwrap())
        .collect();
    assert_eq!(
        l.acquire(Tier::Critical, now).unwrap_err().reason(),
        RejectReason::Limit
    );
    drop(measured);
    // Neither the early call nor the critical ones are measurement samples.
    early.sample(now + 500 * MS);
    for p in critical {
        p.sample(now + 900 * MS);
    }
    assert!(l.stats().measuring);
    let now = measure(&l, now, 20 * MS);
    let s = l.stats();
    assert!(!s.measuring);
    assert_eq!(s.min_rtt, Some(20 * MS));
    assert_eq!(s.limit, computed, "restored");
    assert!(now > t0);
}

#[test]
fn jitter_delays_the_next_measurement_by_at_most_its_share() {
    for seed in 0..20 {
        let t0 = Instant::now();
        let cfg = LimitConfig {
            min_rtt_interval: Duration::from_secs(10),
            ..LimitConfig::default()
        };
        let l = Arc::new(ConcurrencyLimit::with_seed(cfg, seed, t0));
        let mut now = measure(&l, t0, MS);
        let end = now + Duration::from_millis(11_500);
        let mut started = None;
        while now < end && started.is_none() {
            let full = l.stats().limit;
            now = window(&l, now, full, MS);
            if l.stats().measuring {
                started = Some(now);
            }
        }
        let at = started.expect("measured again within 11.5 s");
        let after = at.duration_since(t0 + 50 * MS);
        assert!(
            after >= Duration::from_secs(10) && after <= Duration::from_millis(11_600),
            "seed {seed}: {after:?}"
        );
    }
}

#[test]
fn an_idle_server_puts_the_measurement_off() {
    let t0 = Instant::now();
    let l = limit(config(), t0);
    let mut now = measure(&l, t0, 10 * MS);
    for _ in 0..5 {
        let full = l.stats().limit;
        now = window(&l, now, full, 10 * MS);
    }
    let limit = l.stats().limit;
    // Few calls at a time, at the minimum latency, for two minutes: never measured again.
    let end = now + Duration::from_secs(120);
    while now < end {
        now = window(&l, now, 3, 10 * MS);
        assert!(!l.stats().measuring);
    }
    // Calls that queue (latency past the buffer) are measured at the next window.
    window(&l, now, 3, 20 * MS);
    assert!(l.stats().measuring);
    assert!(l.stats().limit < limit);
}

#[test]
fn measures_again_after_five_windows_at_the_lowest_limit() {
    let t0 = Instant::now();
    let l = limit(config(), t0);
    let mut now = measure(&l, t0, 10 * MS);
    // The service became five times slower for good: the limit sinks to 3 and stays.
    for _ in 0..5 {
        now = window(&l, now, 3, 50 * MS);
    }
    assert!(l.stats().measuring, "{:?}", l.stats());
    measure(&l, now, 50 * MS);
    assert_eq!(l.stats().min_rtt, Some(50 * MS));
}

#[test]
fn a_measurement_without_samples_ends_at_a_rejection_after_its_deadline() {
    let t0 = Instant::now();
    let l = limit(config(), t0);
    // Three calls that never end hold the measurement's places.
    let stuck: Vec<_> = (0..3)
        .map(|_| l.acquire(Tier::Default, t0).unwrap())
        .collect();
    assert!(l.acquire(Tier::Default, t0 + MS).is_err());
    assert!(l.stats().measuring);
    assert!(
        l.acquire(Tier::Default, t0 + Duration::from_secs(5))
            .is_err()
    );
    assert!(!l.stats().measuring);
    assert_eq!(l.stats().min_rtt, None, "nothing was measured");
    drop(stuck);
}

/// Critical calls give the measurement no sample (they are admitted under the whole limit,
/// queueing included): with only critical calls, the measurement still ends at its deadline,
/// and the limit then follows their round-trip times.
#[test]
fn a_server_with_only_critical_calls_ends_its_measurement_and_grows() {
    let t0 = Instant::now();
    let l = limit(config(), t0);
    let mut now = t0;
    for _ in 0..200 {
        now = window(&l, now, l.stats().limit, 10 * MS);
    }
    let s = l.stats();
    assert!(!s.measuring, "{s:?}");
    assert!(s.limit > 3, "{s:?}");
}

#[test]
fn tiers_are_admitted_up_to_their_share_and_say_so() {
    let t0 = Instant::now();
    let l = limit(config(), t0);
    let mut now = measure(&l, t0, 10 * MS);
    while l.stats().limit < 40 {
        let full = l.stats().limit;
        now = window(&l, now, full, 10 * MS);
    }
    let full = l.stats().limit;
    let mut held = Vec::new();
    let admit = |tier: Tier, held: &mut Vec<LimitPermit>| {
        let mut n = 0;
        while let Ok(p) = l.acquire(tier, now) {
            held.push(p);
            n += 1;
        }
        n
    };
    let sheddable = admit(Tier::Sheddable, &mut held);
    assert_eq!(sheddable, full / 2);
    let err = l.acquire(Tier::Sheddable, now).unwrap_err();
    assert_eq!(err.reason(), RejectReason::Tier);
    assert_eq!(
        err.to_string(),
        format!(
            "service overloaded: the sheddable tier's share of the concurrency limit is in use \
             ({} in flight, share {} of limit {full})",
            full / 2,
            full / 2
        )
    );
    assert_eq!(err.call_tier(), Tier::Sheddable);
    let default = admit(Tier::Default, &mut held);
    assert_eq!(sheddable + default, full * 3 / 4);
    assert_eq!(
        l.acquire(Tier::Default, now).unwrap_err().reason(),
        RejectReason::Tier
    );
    // Critical calls are counted against the whole limit by themselves: a burst of them is
    // admitted whatever the lower tiers hold.
    let critical = admit(Tier::Critical, &mut held);
    assert_eq!(critical, full);
    let err = l.acquire(Tier::Critical, now).unwrap_err();
    assert_eq!(err.reason(), RejectReason::Limit);
    assert_eq!(
        err.to_string(),
        format!(
            "service overloaded: concurrency limit {full} reached by critical calls ({full} \
             critical in flight)"
        )
    );
    assert_eq!(l.stats().inflight, full * 3 / 4 + full);
    // Past the whole limit, a call of a lower tier meets the limit itself.
    let err = l.acquire(Tier::Default, now).unwrap_err();
    assert_eq!(err.reason(), RejectReason::Limit);
    assert_eq!(
        err.to_string(),
        format!(
            "service overloaded: concurrency limit {full} reached ({} in flight)",
            full * 3 / 4 + full
        )
    );
    // The lower tiers get no place until the calls in flight are below their share again
    // (here: three quarters of the limit are critical calls, and more of them would be
    // admitted).
    let lower: Vec<_> = held.drain(..full as usize).collect();
    drop(lower);
    assert_eq!(l.stats().inflight, full * 3 / 4);
    assert_eq!(
        l.acquire(Tier::Default, now).unwrap_err().reason(),
        RejectReason::Tier
    );
    drop(held);
    assert_eq!(l.stats().inflight, 0);
    assert!(l.acquire(Tier::Sheddable, now).is_ok());
}

proptest! {
    #[test]
    fn the_next_limit_stays_within_its_bounds(
        limit in 1.0f64..2000.0,
        min_us in 0u64..1_000_000,
        sample_us in 0u64..10_000_000,
        peak in 0u32..3000,
    ) {
        let cfg = LimitConfig::default();
        let next = next_limit(
            &cfg,
            limit,
            Duration::from_micros(min_us),
            Duration::from_micros(sample_us),
            peak,
        );
        prop_assert!(next.is_finite());
        prop_assert!((3.0..=1000.0).contains(&next), "{next}");
    }

    #[test]
    fn latency_within_the_buffer_never_lowers_the_limit(
        limit in 3.0f64..1000.0,
        min_us in 1u64..1_000_000,
        ratio in 0.0f64..1.25,
        peak in 0u32..2000,
    ) {
        let cfg = LimitConfig::default();
        let min = Duration::from_micros(min_us);
        let sample = min.mul_f64(ratio);
        prop_assert!(next_limit(&cfg, limit, min, sample, peak) >= limit);
    }

    #[test]
    fn latency_past_twice_the_buffered_minimum_about_halves_the_limit(
        limit in 8.0f64..1000.0,
        min_us in 1u64..1_000_000,
        ratio in 2.5f64..100.0,
        peak in 0u32..2000,
    ) {
        let cfg = LimitConfig::default();
        let min = Duration::from_micros(min_us);
        let next = next_limit(&cfg, limit, min, min.mul_f64(ratio), peak);
        let half = limit / 2.0;
        prop_assert!((next - (half + half.sqrt()).max(3.0)).abs() < 1e-9, "{limit} -> {next}");
        prop_assert!(next < limit);
    }

    #[test]
    fn an_app_limited_window_never_raises_the_limit(
        limit in 3.0f64..1000.0,
        min_us in 1u64..1_000_000,
        ratio in 0.0f64..10.0,
        used in 0.0f64..0.5,
    ) {
        let cfg = LimitConfig::default();
        let min = Duration::from_micros(min_us);
        let peak = (limit * used).floor() as u32;
        prop_assert!(next_limit(&cfg, limit, min, min.mul_f64(ratio), peak) <= limit);
    }

    /// Whatever the order of admissions and ends, no tier passes its share of the limit and
    /// the count in flight goes back to zero.
    #[test]
    fn admissions_respect_the_shares_and_every_call_is_uncounted(
        ops in proptest::collection::vec((0u8..4, 0u16..500), 1..400),
    ) {
        let t0 = Instant::now();
        let l = limit(config(), t0);
        let mut now = measure(&l, t0, 10 * MS);
        let mut held: Vec<(Tier, bool, LimitPermit)> = Vec::new();
        for (op, x) in ops {
            now += Duration::from_micros(u64::from(x));
            if op == 3 {
                if !held.is_empty() {
                    let (_, _, p) = held.swap_remove(usize::from(x) % held.len());
                    p.sample(now);
                }
                continue;
            }
            let tier = Tier::ALL[usize::from(op)];
            let s = l.stats();
            let before = held.len() as u32;
            let measured_held = held.iter().filter(|(_, m, _)| *m).count() as u32;
            let critical_held = held.iter().filter(|(t, _, _)| *t == Tier::Critical).count() as u32;
            let measured = s.measuring && tier != Tier::Critical;
            let admissible = if tier == Tier::Critical {
                critical_held < s.limit
            } else if measured {
                measured_held < 3 && before < s.limit
            } else {
                let (n, d) = tier.share();
                before < (s.limit * n / d).max(1)
            };
            match l.acquire(tier, now) {
                Ok(p) => {
                    prop_assert!(admissible, "{tier} admitted at {before} of {}", s.limit);
                    held.push((tier, measured, p));
                }
                Err(_) => prop_assert!(!admissible, "{tier} rejected at {before} of {}", s.limit),
            }
            prop_assert_eq!(l.stats().inflight, held.len() as u32);
        }
        drop(held);
        prop_assert_eq!(l.stats().inflight, 0);
    }
}
