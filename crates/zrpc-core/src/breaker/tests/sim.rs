//! Deterministic simulation: a client at a fixed request rate against a backend that fails every
//! request for 20 s and then heals, with explicit 1 ms (or finer) time steps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::breaker::{BreakerConfig, GoogleBreaker};

const OUTAGE: Duration = Duration::from_secs(20);
const SLOT: Duration = Duration::from_millis(100);

/// Requests of one 100 ms slot.
#[derive(Debug, Default, Clone, Copy)]
struct Slot {
    passed: u32,
    dropped: u32,
}

impl Slot {
    fn drop_fraction(self) -> f64 {
        let total = self.passed + self.dropped;
        if total == 0 {
            0.0
        } else {
            f64::from(self.dropped) / f64::from(total)
        }
    }
}

#[derive(Debug)]
struct Outcome {
    slots: Vec<Slot>,
    first_drop: Option<Duration>,
}

fn simulate(qps: u32, horizon: Duration, seed: u64) -> Outcome {
    let b = Arc::new(GoogleBreaker::with_seed(BreakerConfig::default(), seed));
    let step = Duration::from_secs(1) / qps;
    let t0 = Instant::now();
    let n_slots = (horizon.as_nanos() / SLOT.as_nanos()) as usize;
    let mut slots = vec![Slot::default(); n_slots];
    let mut first_drop = None;
    let mut t = Duration::ZERO;
    while t < horizon {
        let now = t0 + t;
        let slot = &mut slots[(t.as_nanos() / SLOT.as_nanos()) as usize];
        match b.allow(now) {
            Ok(p) if t < OUTAGE => {
                slot.passed += 1;
                p.reject(now);
            }
            Ok(p) => {
                slot.passed += 1;
                p.accept(now);
            }
            Err(_) => {
                slot.dropped += 1;
                first_drop.get_or_insert(t);
            }
        }
        t += step;
    }
    Outcome { slots, first_drop }
}

fn slot_time(i: usize) -> Duration {
    SLOT * u32::try_from(i).unwrap_or(u32::MAX)
}

/// Passes per whole second in `[from, to)` seconds.
fn passes_per_second(o: &Outcome, from: usize, to: usize) -> Vec<u32> {
    (from..to)
        .map(|s| o.slots[s * 10..s * 10 + 10].iter().map(|x| x.passed).sum())
        .collect()
}

/// First slot at which the breaker counts as open: >= 95 % of the slot's requests dropped.
fn open_at(o: &Outcome) -> Option<Duration> {
    o.slots
        .iter()
        .position(|s| s.drop_fraction() >= 0.95)
        .map(slot_time)
}

/// Time after healing from which every later slot drops less than `fraction` of its requests.
fn recovered_after(o: &Outcome, fraction: f64) -> Option<Duration> {
    let heal = (OUTAGE.as_nanos() / SLOT.as_nanos()) as usize;
    let last_bad = o.slots[heal..]
        .iter()
        .rposition(|s| s.drop_fraction() >= fraction);
    match last_bad {
        None => Some(Duration::ZERO),
        Some(i) if heal + i + 1 < o.slots.len() => Some(slot_time(i + 1)),
        Some(_) => None,
    }
}

fn report(qps: u32, o: &Outcome) -> (Duration, Duration, u32, Duration, Duration) {
    let first_drop = o.first_drop.expect("never dropped");
    let open = open_at(o).expect("never opened");
    let open_secs = passes_per_second(o, open.as_secs() as usize + 1, OUTAGE.as_secs() as usize);
    let max_open_pass = open_secs.iter().copied().max().unwrap_or(0);
    let half = recovered_after(o, 0.5).expect("never recovered to < 50 % drops");
    let full = recovered_after(o, 0.01).expect("never recovered to < 1 % drops");
    let after: Vec<u32> = (20..20 + 12)
        .map(|s| {
            let (p, d) = o.slots[s * 10..s * 10 + 10]
                .iter()
                .fold((0, 0), |(p, d), x| (p + x.passed, d + x.dropped));
            (d * 100).checked_div(p + d).unwrap_or(0)
        })
        .collect();
    eprintln!(
        "breaker sim @ {qps} req/s: first drop {first_drop:?}, open (>=95 % drops) at {open:?}; \
         passes/s while open {open_secs:?} (max {max_open_pass}); after healing at 20 s: \
         < 50 % drops after {half:?}, < 1 % drops after {full:?}; drop % per second from 20 s: {after:?}"
    );
    (first_drop, open, max_open_pass, half, full)
}

#[test]
fn breaker_opens_fast_and_recovers_at_1000_rps() {
    let o = simulate(1000, Duration::from_secs(90), 0x5eed);
    let (first_drop, open, max_open_pass, _half, full) = report(1000, &o);
    assert!(
        first_drop <= Duration::from_secs(5),
        "first drop {first_drop:?}"
    );
    assert!(open <= Duration::from_secs(5), "open at {open:?}");
    // "A few req/s" while open: at most 10 per second (about 0.6/s from the SRE formula's
    // (protection + 1) / (total + 1) with total ~= 10 000, plus one forced probe per second).
    assert!(max_open_pass <= 10, "passes while open {max_open_pass}");
    // Recovery to < 1 % drops within 30 s of healing (measured figure is printed above).
    assert!(full <= Duration::from_secs(30), "recovered after {full:?}");
}

#[test]
fn breaker_recovery_at_10000_rps() {
    // The #4101 scenario: higher rate, same outage. Figures are printed; the bounds are loose.
    let o = simulate(10_000, Duration::from_secs(80), 0xfeed);
    let (first_drop, open, max_open_pass, _half, full) = report(10_000, &o);
    assert!(first_drop <= Duration::from_secs(5));
    assert!(open <= Duration::from_secs(5));
    assert!(max_open_pass <= 20, "passes while open {max_open_pass}");
    assert!(full <= Duration::from_secs(45), "recovered after {full:?}");
}

/// For comparison only: the same outage against the SRE formula with drops counted and the falling
/// `k` but **without** the working-bucket factor (so what recovery would look like without it; the
/// shape #4101 complains about). A small model built on the same rolling window.
fn recovery_without_working_scale(qps: u32, horizon: Duration) -> Option<Duration> {
    use crate::window::{Bucket, RollingWindow};

    #[derive(Debug, Default)]
    struct B {
        success: u64,
        failure: u64,
        sum: u64,
    }
    impl Bucket for B {
        type Value = u8; // 0 success, 1 failure, 2 drop
        fn add(&mut self, v: u8) {
            self.sum += 1;
            match v {
                0 => self.success += 1,
                1 => self.failure += 1,
                _ => {}
            }
        }
        fn reset(&mut self) {
            *self = B::default();
        }
    }

    let cfg = BreakerConfig::default();
    let mut w: RollingWindow<B> = RollingWindow::new(40, cfg.bucket_duration());
    // Reuse the breaker's generator for the dice.
    let dice = GoogleBreaker::with_seed(cfg.clone(), 0xd1ce);
    let step = Duration::from_secs(1) / qps;
    let t0 = Instant::now();
    let mut last_pass: Option<Instant> = None;
    let mut slots = vec![Slot::default(); (horizon.as_nanos() / SLOT.as_nanos()) as usize];
    let mut t = Duration::ZERO;
    while t < horizon {
        let now = t0 + t;
        let (mut accepts, mut total, mut failing) = (0u64, 0u64, 0u64);
        w.reduce(now, |b| {
            accepts += b.success;
            total += b.sum;
            if b.success > 0 {
                failing = 0;
            } else if b.failure > 0 {
                failing += 1;
            }
        });
        let k = (cfg.k - (cfg.k - cfg.min_k) * failing as f64 / 40.0).max(cfg.min_k);
        let ratio = (total as f64 - 5.0 - k * accepts as f64) / (total as f64 + 1.0);
        let allowed = if ratio <= 0.0 {
            true
        } else if last_pass.is_some_and(|l| now - l > cfg.force_pass) || dice.random() >= ratio {
            last_pass = Some(now);
            true
        } else {
            false
        };
        let slot = &mut slots[(t.as_nanos() / SLOT.as_nanos()) as usize];
        if allowed {
            slot.passed += 1;
            w.add(u8::from(t < OUTAGE), now);
        } else {
            slot.dropped += 1;
            w.add(2, now);
        }
        t += step;
    }
    recovered_after(
        &Outcome {
            slots,
            first_drop: None,
        },
        0.01,
    )
}

#[test]
fn working_buckets_are_what_makes_recovery_fast() {
    let with = recovered_after(&simulate(1000, Duration::from_secs(90), 0x5eed), 0.01).unwrap();
    let without = recovery_without_working_scale(1000, Duration::from_secs(180));
    eprintln!(
        "breaker sim @ 1000 req/s: < 1 % drops {with:?} after healing; without the working-bucket \
         factor: {without:?}"
    );
    assert!(without.is_none_or(|w| w > with));
}
