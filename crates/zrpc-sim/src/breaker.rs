//! The breaker under a total outage: the real [`GoogleBreaker`] with simulated time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zrpc_core::breaker::{BreakerConfig, GoogleBreaker};

/// Which breaker rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BreakerRules {
    /// [`BreakerConfig::go_zero`]: recovery scaled over the whole 10 s window.
    GoZero,
    /// zrpc's default (breaker v2): recovery scaled over 1.5 s of working buckets.
    V2,
}

impl BreakerRules {
    /// The name used in tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            BreakerRules::GoZero => "go-zero",
            BreakerRules::V2 => "zrpc v2",
        }
    }

    fn config(self) -> BreakerConfig {
        match self {
            BreakerRules::GoZero => BreakerConfig::go_zero(),
            BreakerRules::V2 => BreakerConfig::default(),
        }
    }
}

/// What the callers saw around an outage.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct BreakerReport {
    /// From the start of the outage to the first 100 ms with >= 95 % of calls rejected.
    pub time_to_open: Option<Duration>,
    /// Calls that reached the dead backend during the outage.
    pub leaked: u64,
    /// Calls that reached the dead backend in the first two seconds of the outage.
    pub leaked_first_2s: u64,
    /// From healing to the start of the 100 ms slot from which every slot has >= 95 % successes.
    pub recovered_after: Option<Duration>,
}

const SLOT: u64 = 100_000_000;

/// `rps` calls per second (evenly spaced) for `outage + after`; every call fails during the first
/// `outage`, every call succeeds after it.
#[must_use]
pub fn simulate_outage(
    rules: BreakerRules,
    rps: u32,
    outage: Duration,
    after: Duration,
    seed: u64,
) -> BreakerReport {
    let b = Arc::new(GoogleBreaker::with_seed(rules.config(), seed));
    let epoch = Instant::now();
    let step = 1_000_000_000 / u64::from(rps.max(1));
    let outage_ns = u64::try_from(outage.as_nanos()).unwrap_or(u64::MAX);
    let end = outage_ns + u64::try_from(after.as_nanos()).unwrap_or(u64::MAX);
    let slots = usize::try_from(end.div_ceil(SLOT)).unwrap_or(0);
    // (passed, dropped) per slot
    let mut per_slot = vec![(0u64, 0u64); slots];
    let mut r = BreakerReport::default();
    let mut t = 0;
    while t < end {
        let now = epoch + Duration::from_nanos(t);
        let slot = &mut per_slot[usize::try_from(t / SLOT).unwrap_or(0)];
        match b.allow(now) {
            Ok(p) if t < outage_ns => {
                slot.0 += 1;
                r.leaked += 1;
                if t < 2_000_000_000 {
                    r.leaked_first_2s += 1;
                }
                p.reject(now);
            }
            Ok(p) => {
                slot.0 += 1;
                p.accept(now);
            }
            Err(_) => slot.1 += 1,
        }
        t += step;
    }
    let outage_slots = usize::try_from(outage_ns / SLOT).unwrap_or(0);
    r.time_to_open = per_slot[..outage_slots]
        .iter()
        .position(|&(p, d)| p + d > 0 && d * 100 >= 95 * (p + d))
        .map(|i| Duration::from_nanos(i as u64 * SLOT));
    let ok = |&(p, d): &(u64, u64)| p * 100 >= 95 * (p + d);
    let healed = &per_slot[outage_slots..];
    r.recovered_after = (0..healed.len())
        .find(|&i| healed[i..].iter().all(ok))
        .map(|i| Duration::from_nanos(i as u64 * SLOT));
    r
}
