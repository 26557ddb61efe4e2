use super::*;
use proptest::prelude::*;

const DECAY: Duration = Duration::from_secs(10);

#[test]
fn decay_weight_bounds() {
    assert_eq!(decay_weight(Duration::ZERO, DECAY), 1.0);
    assert_eq!(decay_weight(Duration::from_secs(1), Duration::ZERO), 0.0);
    let w = decay_weight(Duration::from_secs(1), DECAY);
    assert!((w - (-0.1f64).exp()).abs() < 1e-12);
    let w = decay_weight(DEFAULT_DECAY, DEFAULT_DECAY);
    assert!((w - (-1.0f64).exp()).abs() < 1e-12);
}

proptest! {
    #[test]
    fn weight_is_in_unit_interval_and_falls_with_elapsed_time(
        a_ms in 0u64..600_000,
        b_ms in 0u64..600_000,
        decay_ms in 1u64..60_000,
    ) {
        let decay = Duration::from_millis(decay_ms);
        let (lo, hi) = (a_ms.min(b_ms), a_ms.max(b_ms));
        let w_lo = decay_weight(Duration::from_millis(lo), decay);
        let w_hi = decay_weight(Duration::from_millis(hi), decay);
        prop_assert!((0.0..=1.0).contains(&w_lo) && (0.0..=1.0).contains(&w_hi));
        prop_assert!(w_hi <= w_lo, "more elapsed time must not weigh the past more");
    }
}
