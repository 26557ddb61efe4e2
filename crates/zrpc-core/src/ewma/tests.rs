#![allow(clippy::unwrap_used)]

use super::*;
use proptest::prelude::*;

const DECAY: Duration = Duration::from_secs(10);

#[test]
fn first_sample_replaces() {
    let t0 = Instant::now();
    let mut e = Ewma::new(DECAY);
    let a = AtomicEwma::new(DECAY);
    assert!(e.is_empty() && a.is_empty());
    assert_eq!(e.value(), 0.0);
    assert_eq!(a.value(), 0.0);
    e.update(42.0, t0);
    a.update(42.0, t0);
    assert_eq!(e.value(), 42.0);
    assert_eq!(a.value(), 42.0);
    assert!(!e.is_empty() && !a.is_empty());
}

#[test]
fn zero_is_a_real_sample() {
    // go-zero treats lag == 0 as empty; we track emptiness explicitly.
    let t0 = Instant::now();
    let mut e = Ewma::new(DECAY);
    e.update(0.0, t0);
    e.update(100.0, t0 + DECAY);
    let w = (-1.0f64).exp();
    assert!((e.value() - 100.0 * (1.0 - w)).abs() < 1e-9);
}

#[test]
fn weight_follows_elapsed_time() {
    let t0 = Instant::now();
    let mut e = Ewma::new(DECAY);
    let a = AtomicEwma::new(DECAY);
    e.update(10.0, t0);
    a.update(10.0, t0);
    let t1 = t0 + Duration::from_secs(5);
    e.update(20.0, t1);
    a.update(20.0, t1);
    let w = (-0.5f64).exp();
    let want = 10.0 * w + 20.0 * (1.0 - w);
    assert!((e.value() - want).abs() < 1e-9);
    assert!((a.value() - want).abs() < 1e-9);
}

#[test]
fn same_instant_keeps_value_and_long_gap_forgets() {
    let t0 = Instant::now();
    let mut e = Ewma::new(DECAY);
    e.update(10.0, t0);
    e.update(1000.0, t0); // dt = 0 -> w = 1
    assert_eq!(e.value(), 10.0);
    e.update(7.0, t0 + Duration::from_secs(3600));
    assert!((e.value() - 7.0).abs() < 1e-9);
}

#[test]
fn earlier_instant_counts_as_no_elapsed_time() {
    let t0 = Instant::now() + Duration::from_secs(100);
    let mut e = Ewma::new(DECAY);
    let a = AtomicEwma::new(DECAY);
    e.update(10.0, t0);
    a.update(10.0, t0);
    e.update(99.0, t0 - Duration::from_secs(1));
    a.update(99.0, t0 - Duration::from_secs(1));
    assert_eq!(e.value(), 10.0);
    assert_eq!(a.value(), 10.0);
}

#[test]
fn decay_weight_bounds() {
    assert_eq!(decay_weight(Duration::ZERO, DECAY), 1.0);
    assert_eq!(decay_weight(Duration::from_secs(1), Duration::ZERO), 0.0);
    let w = decay_weight(Duration::from_secs(1), DECAY);
    assert!((w - (-0.1f64).exp()).abs() < 1e-12);
    assert_eq!(Ewma::default().decay(), DEFAULT_DECAY);
    assert_eq!(AtomicEwma::default().decay(), DEFAULT_DECAY);
}

#[test]
fn atomic_is_consistent_under_threads() {
    let t0 = Instant::now();
    let e = std::sync::Arc::new(AtomicEwma::new(DECAY));
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let e = e.clone();
            std::thread::spawn(move || {
                for j in 0..1000u64 {
                    e.update(50.0 + f64::from(i), t0 + Duration::from_micros(j));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let v = e.value();
    assert!((50.0..=53.0).contains(&v), "{v}");
}

proptest! {
    #[test]
    fn stays_within_inputs(
        samples in prop::collection::vec((-1.0e6f64..1.0e6, 0u64..30_000), 1..200),
        decay_ms in 1u64..60_000,
    ) {
        let t0 = Instant::now();
        let decay = Duration::from_millis(decay_ms);
        let mut e = Ewma::new(decay);
        let a = AtomicEwma::new(decay);
        let mut now = t0;
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for (s, gap) in samples {
            now += Duration::from_millis(gap);
            e.update(s, now);
            a.update(s, now);
            lo = lo.min(s);
            hi = hi.max(s);
            let tol = 1e-9 * hi.abs().max(lo.abs()).max(1.0);
            prop_assert!(e.value() >= lo - tol && e.value() <= hi + tol);
            prop_assert!(a.value() >= lo - tol && a.value() <= hi + tol);
            prop_assert!((e.value() - a.value()).abs() <= tol);
        }
    }
}
