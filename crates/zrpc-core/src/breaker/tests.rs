//! Ports of go-zero's `googlebreaker_test.go` / `breakers_test.go` with explicit time, plus
//! behaviour and property tests.

mod sim;

use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

/// go-zero's `testBuckets` / `testInterval`.
const TEST_BUCKETS: u32 = 10;
const TEST_INTERVAL: Duration = Duration::from_millis(10);

fn config(buckets: u32, interval: Duration, k: f64) -> BreakerConfig {
    BreakerConfig {
        window: interval * buckets,
        buckets,
        k,
        ..BreakerConfig::default()
    }
}

/// go-zero `getGoogleBreaker()`: 10 buckets of 10 ms, k = 5.
fn test_breaker(seed: u64) -> Arc<GoogleBreaker> {
    Arc::new(GoogleBreaker::with_seed(
        config(TEST_BUCKETS, TEST_INTERVAL, 5.0),
        seed,
    ))
}

/// go-zero `markSuccess`: allow + accept, stop at the first rejection.
fn mark_success(b: &Arc<GoogleBreaker>, count: usize, now: Instant) {
    for _ in 0..count {
        match b.allow(now) {
            Ok(p) => p.accept(now),
            Err(_) => break,
        }
    }
}

/// go-zero `markFailed`: allow + reject when allowed.
fn mark_failed(b: &Arc<GoogleBreaker>, count: usize, now: Instant) {
    for _ in 0..count {
        if let Ok(p) = b.allow(now) {
            p.reject(now);
        }
    }
}

/// go-zero `verify`: at least 75 of 100 tries hold.
fn verify(mut f: impl FnMut() -> bool) {
    let count = (0..100).filter(|_| f()).count();
    assert!(count >= 75, "should be at least 75, actual {count}");
}

fn accepts(b: &GoogleBreaker, now: Instant) -> bool {
    b.do_with_acceptable(now, || Ok::<_, BreakerOpen>(()), |_| true)
        .is_ok()
}

#[test]
fn closed_while_successful() {
    // TestGoogleBreakerClose
    let b = test_breaker(1);
    let now = Instant::now();
    mark_success(&b, 80, now);
    assert!(b.allow(now).is_ok());
    mark_success(&b, 120, now);
    assert!(b.allow(now).is_ok());
    assert_eq!(b.stats(now).drops, 0);
}

#[test]
fn opens_after_many_failures() {
    // TestGoogleBreakerOpen
    let b = test_breaker(2);
    let t0 = Instant::now();
    mark_success(&b, 10, t0);
    assert!(b.allow(t0).is_ok());
    mark_failed(&b, 100_000, t0);
    let now = t0 + TEST_INTERVAL * 2;
    verify(|| b.allow(now).is_err());
}

#[test]
fn recovers_when_old_successes_outweigh() {
    // TestGoogleBreakerRecover: 20 buckets, k = 1.5; 10 buckets of 100 successes then 10 of 100
    // failures (recorded directly), one interval later.
    let b = Arc::new(GoogleBreaker::with_seed(
        config(TEST_BUCKETS * 2, TEST_INTERVAL, 1.5),
        3,
    ));
    let t0 = Instant::now();
    let mut now = t0;
    for _ in 0..TEST_BUCKETS {
        (0..100).for_each(|_| b.mark_success(now));
        now += TEST_INTERVAL;
    }
    for _ in 0..TEST_BUCKETS {
        (0..100).for_each(|_| b.mark_failure(now));
        now += TEST_INTERVAL;
    }
    // The oldest success bucket has left the window: 900 accepts of 1900, 10 failing buckets.
    let h = b.stats(now);
    assert_eq!((h.accepts, h.total, h.failing_buckets), (900, 1900, 10));
    // w = 1.5 - 0.4 * 10 / 20 = 1.3; ratio = (1900 - 5 - 1170) / 1901 = 0.381.
    let ratio = b.drop_ratio(now);
    assert!((ratio - 725.0 / 1901.0).abs() < 1e-9, "{ratio}");
    // go-zero's test asks for >= 75 passes of 100 here; with its exact formula the pass rate is
    // about 62-67 % (go-zero divides by its 40-bucket constant), so we assert the formula's band.
    // go-zero's `accept()` does not count drops, so neither does this probe.
    let passes = (0..1000)
        .filter(|_| {
            let h = b.stats(now);
            b.random() >= b.base_ratio(&h) * b.working_scale(&h)
        })
        .count();
    assert!((560..=680).contains(&passes), "passes {passes}/1000");
}

#[test]
fn fallback_runs_when_open() {
    // TestGoogleBreakerFallback
    #[derive(Debug)]
    enum E {
        Any,
        Open,
    }
    impl From<BreakerOpen> for E {
        fn from(_: BreakerOpen) -> Self {
            E::Open
        }
    }
    let b = test_breaker(4);
    let t0 = Instant::now();
    mark_success(&b, 1, t0);
    assert!(b.allow(t0).is_ok());
    mark_failed(&b, 10_000, t0);
    let now = t0 + TEST_INTERVAL * 2;
    verify(|| {
        // fallback(err) = nil
        match b.do_with_acceptable(now, || Err::<(), _>(E::Any), |_| false) {
            Err(E::Open) => true,
            Err(E::Any) | Ok(()) => false,
        }
    });
}

#[test]
fn rejected_call_returns_breaker_error() {
    // TestGoogleBreakerReject
    let b = test_breaker(5);
    let t0 = Instant::now();
    mark_success(&b, 100, t0);
    assert!(b.allow(t0).is_ok());
    mark_failed(&b, 10_000, t0);
    let now = t0 + TEST_INTERVAL;
    let r = b.do_with_acceptable(now, || Err::<(), _>(BreakerOpen::new()), |_| false);
    // The breaker's own error (with its window), not the request's.
    let open = r.unwrap_err();
    assert_ne!(open, BreakerOpen::new());
    let s = open.stats().expect("the breaker's figures");
    // 100 successes; 10 000 failed or dropped calls, the unresolved promise's failure and
    // this drop.
    assert_eq!(
        (s.accepts, s.failures + s.drops, s.total),
        (100, 10_002, 10_102)
    );
    assert_eq!(
        open.to_string(),
        format!(
            "circuit breaker is open: dropped {} of the last 10102 calls in 100ms ({} failed, \
             100 succeeded; drop chance {}%)",
            s.drops,
            s.failures,
            (b.drop_ratio(now) * 100.0).round()
        )
    );
}

#[test]
fn more_falling_buckets_drop_more() {
    // TestGoogleBreakerMoreFallingBuckets: failing calls every 1 ms for 6 intervals, then >90 %
    // of the next 100 (still failing) calls are dropped.
    let b = test_breaker(6);
    let t0 = Instant::now();
    let mut now = t0;
    while now < t0 + TEST_INTERVAL * 6 {
        now += Duration::from_millis(1);
        let r = b.do_with_acceptable(now, || Err::<(), _>(BreakerOpen::new()), |_| false);
        assert!(r.is_err());
    }
    // go-zero counts every error here (its req returns ErrServiceUnavailable itself); we count only
    // the calls the breaker dropped without running them.
    let dropped = (0..100)
        .filter(|_| {
            let mut ran = false;
            let r = b.do_with_acceptable(
                now,
                || {
                    ran = true;
                    Err::<(), _>(BreakerOpen::new())
                },
                |_| false,
            );
            assert!(r.is_err());
            !ran
        })
        .count();
    assert!(dropped > 80, "dropped {dropped}");
}

#[test]
fn acceptable_errors_are_successes() {
    // TestGoogleBreakerAcceptable / NotAcceptable
    let b = test_breaker(7);
    let now = Instant::now();
    let r = b.do_with_acceptable(now, || Err::<(), _>(BreakerOpen::new()), |_| true);
    assert!(r.is_err());
    let r = b.do_with_acceptable(now, || Err::<(), _>(BreakerOpen::new()), |_| false);
    assert!(r.is_err());
    let h = b.stats(now);
    assert_eq!((h.accepts, h.failures, h.total), (1, 1, 2));
}

#[test]
fn panic_counts_as_failure() {
    // TestGoogleBreakerPanic
    let b = test_breaker(8);
    let now = Instant::now();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = b.do_with_acceptable(
            now,
            || -> Result<(), BreakerOpen> { panic!("fail") },
            |_| true,
        );
    }));
    assert!(r.is_err());
    assert_eq!(b.stats(now).failures, 1);
}

#[test]
fn half_open_then_closed() {
    // TestGoogleBreakerHalfOpen
    let b = test_breaker(9);
    let t0 = Instant::now();
    assert!(b.allow(t0).is_ok());
    mark_failed(&b, 10_000, t0);
    let now = t0 + TEST_INTERVAL * 2;
    verify(|| b.allow(now).is_err());
    mark_failed(&b, 10_000, now);
    let now = now + TEST_INTERVAL * 2;
    verify(|| b.allow(now).is_err());
    // A whole window later everything has expired.
    let now = now + TEST_INTERVAL * TEST_BUCKETS;
    assert!(accepts(&b, now));
    mark_success(&b, 10_000, now);
    verify(|| accepts(&b, now));
}

#[test]
fn low_traffic_is_protected() {
    // TestGoogleBreakerSelfProtection
    let b = test_breaker(10);
    let t0 = Instant::now();
    mark_failed(&b, 4, t0);
    assert!(b.allow(t0 + TEST_INTERVAL).is_ok());

    let b = test_breaker(11);
    mark_success(&b, 5_001, t0);
    assert!(b.allow(t0).is_ok());
    assert_eq!(b.drop_ratio(t0), 0.0);
}

#[test]
fn history_counts_outcomes() {
    // TestGoogleBreakerHistory
    let t0 = Instant::now();
    let step = TEST_INTERVAL / 2;
    let b = test_breaker(12);
    for i in 0..10 {
        b.mark_success(t0 + step * i);
    }
    let h = b.stats(t0 + step * 10);
    assert_eq!((h.accepts, h.total), (10, 10));

    let b = test_breaker(13);
    for i in 0..10 {
        b.mark_failure(t0 + step * i);
    }
    let h = b.stats(t0 + step * 10);
    assert_eq!((h.accepts, h.total), (0, 10));

    let b = test_breaker(14);
    for i in 0..5 {
        b.mark_failure(t0 + step * i);
    }
    for i in 5..10 {
        b.mark_success(t0 + step * i);
    }
    let h = b.stats(t0 + step * 10);
    assert_eq!((h.accepts, h.total), (5, 10));

    // auto reset rolling counter
    let b = test_breaker(15);
    b.mark_success(t0);
    let h = b.stats(t0 + TEST_INTERVAL * TEST_BUCKETS);
    assert_eq!((h.accepts, h.total), (0, 0));
}

#[test]
fn drops_are_counted_in_total() {
    let b = test_breaker(16);
    let now = Instant::now();
    mark_failed(&b, 1000, now);
    let h = b.stats(now);
    assert!(h.drops > 0);
    assert_eq!(h.total, h.accepts + h.failures + h.drops);
    assert_eq!(h.total, 1000);
}

#[test]
fn k_falls_with_failing_buckets_and_working_buckets_scale_down() {
    let b = Arc::new(GoogleBreaker::with_seed(BreakerConfig::go_zero(), 17));
    let t0 = Instant::now();
    let bucket = b.config().bucket_duration();
    assert_eq!(bucket, Duration::from_millis(250));
    // 20 buckets: 1 success + 1 failure each, then 10 failure-only buckets.
    let mut now = t0;
    for _ in 0..20 {
        b.mark_success(now);
        b.mark_failure(now);
        now += bucket;
    }
    for _ in 0..10 {
        b.mark_failure(now);
        now += bucket;
    }
    let h = b.stats(now - bucket);
    assert_eq!((h.accepts, h.total, h.failing_buckets), (20, 50, 10));
    // w = 1.5 - 0.4 * 10 / 40 = 1.4; ratio = (50 - 5 - 28) / 51
    assert!((b.drop_ratio(now - bucket) - 17.0 / 51.0).abs() < 1e-9);
    // Then 20 working buckets halve the ratio.
    for _ in 0..20 {
        (0..3).for_each(|_| b.mark_success(now));
        now += bucket;
    }
    let h = b.stats(now - bucket);
    assert_eq!((h.working_buckets, h.failing_buckets), (20, 0));
    let base = b.base_ratio(&h);
    assert!((b.drop_ratio(now - bucket) - (base.max(0.0) * 0.5)).abs() < 1e-9);
}

#[test]
fn forced_pass_after_one_second() {
    let b = Arc::new(GoogleBreaker::with_seed(BreakerConfig::default(), 18));
    let t0 = Instant::now();
    assert!(b.allow(t0).is_ok()); // ratio <= 0: allowed without recording a pass
    assert!(b.last_pass.load().is_none());
    mark_failed(&b, 10_000, t0);
    // Some requests passed on the dice before the breaker opened fully.
    let last = b.last_pass.load().unwrap();
    let soon = last + Duration::from_millis(500);
    verify(|| b.allow(soon).is_err());
    let last = b.last_pass.load().unwrap();
    // More than force_pass (1 s) after the last pass, one probe goes through...
    let probe = last + Duration::from_millis(1001);
    assert!(b.drop_ratio(probe) > 0.99);
    assert!(b.allow(probe).is_ok(), "forced pass");
    assert_eq!(b.last_pass.load(), Some(probe));
    // ...and the breaker is open again right after.
    verify(|| b.allow(probe).is_err());
}

#[test]
fn dropped_promise_is_a_failure() {
    let b = test_breaker(19);
    let now = Instant::now() + Duration::from_secs(3600);
    let p = b.allow(now).unwrap();
    assert_eq!(p.allowed_at(), now);
    drop(p);
    assert_eq!(b.stats(now).failures, 1);
    b.allow(now).unwrap().accept(now);
    b.allow(now).unwrap().reject(now);
    let h = b.stats(now);
    assert_eq!((h.accepts, h.failures), (1, 2));
}

#[test]
fn breaker_open_says_circuit_breaker_is_open() {
    assert_eq!(BreakerOpen::new().to_string(), "circuit breaker is open");
}

#[test]
fn a_drop_explains_itself_with_the_window() {
    let b = Arc::new(GoogleBreaker::with_seed(BreakerConfig::default(), 7));
    let now = Instant::now();
    for _ in 0..200 {
        b.mark_failure(now);
    }
    // A call let through fails too (its promise dropped unresolved).
    let mut passed = 0;
    let open = (0..100)
        .find_map(|_| match b.allow(now) {
            Ok(_promise) => {
                passed += 1;
                None
            }
            Err(open) => Some(open),
        })
        .expect("200 failures open the breaker");
    let s = open.stats().expect("figures");
    // The drop itself is counted.
    assert_eq!((s.failures, s.accepts, s.drops), (200 + passed, 0, 1));
    assert_eq!(s.total, s.failures + s.drops);
    assert_eq!(s, b.stats(now));
    let text = open.to_string();
    let figures = format!(
        "dropped 1 of the last {} calls in 10s ({} failed, 0 succeeded; drop chance ",
        s.total, s.failures
    );
    assert!(
        text.starts_with(&format!("circuit breaker is open: {figures}")),
        "{text}"
    );
    assert!(text.ends_with("%)"), "{text}");
    let named = open.explain("/pkg.S/M");
    assert!(
        named.starts_with(&format!("circuit breaker is open: /pkg.S/M {figures}")),
        "{named}"
    );
}

#[test]
fn registry_reuses_breakers_by_name() {
    let r = BreakerRegistry::new(config(TEST_BUCKETS, TEST_INTERVAL, 5.0));
    assert!(r.is_empty());
    let a = r.get("/pkg.Svc/A");
    let b = r.get("/pkg.Svc/A");
    let c = r.get("/pkg.Svc/B");
    assert!(Arc::ptr_eq(&a, &b));
    assert!(!Arc::ptr_eq(&a, &c));
    assert_eq!(a.config().k, 5.0);
    assert_eq!(r.len(), 2);
    let mut names = r.names();
    names.sort();
    assert_eq!(names, ["/pkg.Svc/A", "/pkg.Svc/B"]);
    assert!(r.remove("/pkg.Svc/A").is_some());
    assert!(!Arc::ptr_eq(&a, &r.get("/pkg.Svc/A")));
    let g = BreakerRegistry::global().get("registry_reuses_breakers_by_name");
    assert!(Arc::ptr_eq(
        &g,
        &BreakerRegistry::global().get("registry_reuses_breakers_by_name")
    ));
}

static_assertions::assert_impl_all!(GoogleBreaker: Send, Sync);
static_assertions::assert_impl_all!(BreakerPromise: Send, Sync);
static_assertions::assert_impl_all!(BreakerRegistry: Send, Sync);
static_assertions::assert_impl_all!(BreakerOpen: std::error::Error, Send, Sync, Clone);

#[derive(Debug, Clone)]
enum Op {
    Success,
    Failure,
    Allow,
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Success),
        3 => Just(Op::Failure),
        3 => Just(Op::Allow),
        1 => (0u64..3000).prop_map(Op::Advance),
    ]
}

proptest! {
    #[test]
    fn drop_ratio_stays_in_unit_interval(
        ops in prop::collection::vec(op(), 1..400),
        k in 1.0f64..3.0,
        protection in 0u64..10,
        seed in any::<u64>(),
    ) {
        let cfg = BreakerConfig { k, min_k: 1.0f64.min(k), protection, ..BreakerConfig::default() };
        let b = Arc::new(GoogleBreaker::with_seed(cfg, seed));
        let mut now = Instant::now();
        for op in ops {
            match op {
                Op::Success => b.mark_success(now),
                Op::Failure => b.mark_failure(now),
                Op::Allow => { let _ = b.allow(now).map(|p| p.reject(now)); }
                Op::Advance(ms) => now += Duration::from_millis(ms),
            }
            let r = b.drop_ratio(now);
            prop_assert!((0.0..=1.0).contains(&r), "ratio {}", r);
            let h = b.stats(now);
            prop_assert_eq!(h.total, h.accepts + h.failures + h.drops);
            prop_assert!(h.failing_buckets <= 40 && h.working_buckets <= 40);
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    Allow { succeed: bool },
    Mark { succeed: bool },
    Advance(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => any::<bool>().prop_map(|succeed| Step::Allow { succeed }),
        2 => any::<bool>().prop_map(|succeed| Step::Mark { succeed }),
        2 => (0u64..4000).prop_map(Step::Advance),
    ]
}

proptest! {
    /// The lock-free fast path of `allow` never changes a decision: a breaker using it and one that
    /// always reads the window, with the same seed, agree on every call.
    #[test]
    fn fast_path_matches_full_computation(
        steps in prop::collection::vec(step(), 1..400),
        seed in any::<u64>(),
        protection in 0u64..8,
    ) {
        let cfg = BreakerConfig { protection, ..BreakerConfig::default() };
        let fast = Arc::new(GoogleBreaker::with_seed(cfg.clone(), seed));
        let mut slow = GoogleBreaker::with_seed(cfg, seed);
        slow.fast_path = false;
        let slow = Arc::new(slow);
        prop_assert!(fast.fast_path);
        let mut now = Instant::now();
        for s in steps {
            match s {
                Step::Allow { succeed } => {
                    let (a, b) = (fast.allow(now), slow.allow(now));
                    prop_assert_eq!(a.is_ok(), b.is_ok());
                    for p in [a, b].into_iter().flatten() {
                        if succeed { p.accept(now) } else { p.reject(now) }
                    }
                }
                Step::Mark { succeed: true } => { fast.mark_success(now); slow.mark_success(now); }
                Step::Mark { succeed: false } => { fast.mark_failure(now); slow.mark_failure(now); }
                Step::Advance(ms) => now += Duration::from_millis(ms),
            }
            prop_assert_eq!(fast.stats(now), slow.stats(now));
            prop_assert_eq!(fast.last_pass.load(), slow.last_pass.load());
        }
    }
}

/// Breaker v2: partial failure (every bucket has failures) keeps go-zero's proportional drops.
#[test]
fn v2_keeps_proportional_drops_under_partial_failure() {
    let v2 = Arc::new(GoogleBreaker::with_seed(BreakerConfig::default(), 3));
    let gz = Arc::new(GoogleBreaker::with_seed(BreakerConfig::go_zero(), 3));
    let t0 = Instant::now();
    let bucket = v2.config().bucket_duration();
    let mut now = t0;
    for _ in 0..40 {
        for b in [&v2, &gz] {
            b.mark_success(now);
            (0..3).for_each(|_| b.mark_failure(now));
        }
        now += bucket;
    }
    let at = now - bucket;
    let (r2, rg) = (v2.drop_ratio(at), gz.drop_ratio(at));
    assert!(rg > 0.5, "{rg}");
    assert!((r2 - rg).abs() < 1e-12, "v2 {r2} go-zero {rg}");
}

/// Breaker v2: after an outage, drops reach 0 once `recovery` (6 buckets) of working buckets
/// passed; go-zero still drops about 85 % of its base ratio then.
#[test]
fn v2_stops_dropping_after_the_recovery_run() {
    let v2 = Arc::new(GoogleBreaker::with_seed(BreakerConfig::default(), 4));
    let gz = Arc::new(GoogleBreaker::with_seed(BreakerConfig::go_zero(), 4));
    assert_eq!(v2.config().recovery_buckets(), 6);
    assert_eq!(gz.config().recovery_buckets(), 40);
    let t0 = Instant::now();
    let bucket = v2.config().bucket_duration();
    let mut now = t0;
    for _ in 0..20 {
        for b in [&v2, &gz] {
            (0..100).for_each(|_| b.mark_failure(now));
        }
        now += bucket;
    }
    for k in 1..=6 {
        for b in [&v2, &gz] {
            b.mark_success(now);
        }
        let (r2, rg) = (v2.drop_ratio(now), gz.drop_ratio(now));
        let expected = rg * (40.0 / (40.0 - k as f64)) * ((6.0 - k as f64) / 6.0);
        assert!(
            (r2 - expected).abs() < 1e-9,
            "k={k}: v2 {r2} expected {expected}"
        );
        now += bucket;
    }
    assert_eq!(v2.drop_ratio(now - bucket), 0.0);
    assert!(gz.drop_ratio(now - bucket) > 0.5);
}
// The figures of a drop are boxed: a call that passes moves no more than its promise.
static_assertions::const_assert!(std::mem::size_of::<BreakerOpen>() <= 8);
