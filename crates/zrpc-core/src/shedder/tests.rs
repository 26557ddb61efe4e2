//! Ports of go-zero's `adaptiveshedder_test.go` with explicit time, plus behaviour tests.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::*;
use crate::cpu::{CpuUsage, FixedCpu};

/// go-zero's tests use 10 buckets and `windowScale = 0.01` (1/s per ms): 10 buckets of 100 ms.
const BUCKETS: u32 = 10;
const BUCKET: Duration = Duration::from_millis(100);
const MS: u64 = 1000; // µs

fn shedder(threshold: u64, cpu: Arc<FixedCpu>) -> Arc<AdaptiveShedder> {
    let cfg = ShedderConfig {
        window: BUCKET * BUCKETS,
        buckets: BUCKETS,
        cpu_threshold: threshold,
        ..ShedderConfig::default()
    };
    Arc::new(AdaptiveShedder::new(cfg, cpu))
}

/// Records one passed request with a response time of `rt_us` in the bucket of `now`.
fn record(s: &AdaptiveShedder, rt_us: u64, now: Instant) {
    s.stat.lock().add(rt_us, now);
}

/// go-zero's shared fixture: bucket i passes (i + 1) * 100 requests whose response times average
/// those of j in i*10+1 ..= i*10+10 ms (go-zero keeps passes and response times in two windows; we
/// keep one, so each bucket gets (i + 1) * 100 samples cycling through those ten values).
fn fixture(s: &AdaptiveShedder, t0: Instant) -> Instant {
    let mut now = t0;
    for i in 0..10u64 {
        if i > 0 {
            now += BUCKET;
        }
        for n in 0..(i + 1) * 100 {
            record(s, (i * 10 + 1 + n % 10) * MS, now);
        }
    }
    now
}

fn set_avg_flying(s: &AdaptiveShedder, v: f64) {
    s.avg_flying.store(v.to_bits(), Ordering::Relaxed);
}

#[test]
fn max_pass() {
    // TestAdaptiveShedderMaxPass
    let s = shedder(900, Arc::new(FixedCpu::new(0)));
    let t0 = Instant::now();
    let mut now = t0;
    for i in 1..=10u64 {
        (0..i * 100).for_each(|_| record(&s, MS, now));
        now += BUCKET;
    }
    assert_eq!(s.window_stats(now).0, 1000);
    // The default max pass is 1.
    let s = shedder(900, Arc::new(FixedCpu::new(0)));
    assert_eq!(s.window_stats(t0).0, 1);
}

#[test]
fn min_rt() {
    // TestAdaptiveShedderMinRt
    let s = shedder(900, Arc::new(FixedCpu::new(0)));
    let t0 = Instant::now();
    let mut now = t0;
    for i in 0..10u64 {
        if i > 0 {
            now += BUCKET;
        }
        for j in i * 10 + 1..=i * 10 + 10 {
            record(&s, j * MS, now);
        }
    }
    // The current bucket (91..=100 ms) is ignored; bucket 0 averages 5.5 ms.
    assert_eq!(s.window_stats(now).1, 5500.0);
    // Without samples: the default 1 s.
    let s = shedder(900, Arc::new(FixedCpu::new(0)));
    assert_eq!(s.window_stats(t0).1, 1e6);
    assert_eq!(s.stats(t0).min_rt, Duration::from_secs(1));
}

#[test]
fn max_flight() {
    // TestAdaptiveShedderMaxFlight: 900 passes per 100 ms * min_rt => go-zero 900 * 6 ms * 0.01 = 54.
    // With µs resolution min_rt is 5.5 ms (go-zero rounds the bucket average to whole ms: 6).
    let s = shedder(900, Arc::new(FixedCpu::new(0)));
    let now = fixture(&s, Instant::now());
    let (max_pass, min_rt) = s.window_stats(now);
    assert_eq!((max_pass, min_rt), (900, 5500.0));
    assert!((s.max_flight(now) - 49.5).abs() < 1e-9);
}

#[test]
fn should_drop() {
    // TestAdaptiveShedderShouldDrop; "overloaded" is cpu == threshold (overload factor 1).
    let cpu = Arc::new(FixedCpu::new(900));
    let s = shedder(900, cpu.clone());
    let now = fixture(&s, Instant::now());
    let max_flight = s.max_flight(now); // 49.5
    // cpu >= threshold, avg_flying < max_flight
    set_avg_flying(&s, 45.0);
    assert!(!s.should_drop(now, cpu.millicpu()));
    // cpu >= threshold, avg_flying > max_flight but flying < max_flight
    set_avg_flying(&s, 80.0);
    s.flying.store(
        (max_flight * s.overload_factor(cpu.millicpu())) as i64 - 5,
        Ordering::Relaxed,
    );
    assert!(!s.should_drop(now, cpu.millicpu()));
    // cpu >= threshold, both above
    set_avg_flying(&s, 80.0);
    s.flying.store(80, Ordering::Relaxed);
    assert!(s.should_drop(now, cpu.millicpu()));
    // cpu < threshold and not hot (no drop recorded yet)
    cpu.set(100);
    assert!(!s.should_drop(now, cpu.millicpu()));
    // allow() returns the error and records the drop
    cpu.set(950);
    let err = s.allow(now).unwrap_err();
    assert_eq!(err.cpu(), Some(950));
    let text = err.to_string();
    assert!(
        text.starts_with("service overloaded: CPU 950 millicpu over threshold 900, "),
        "{text}"
    );
    let (flying, max_flight) = (err.flying().unwrap(), err.max_flight().unwrap());
    assert_eq!(flying, 80, "{text}");
    // 49.5 at the threshold, times the overload factor at 950 millicpu (0.5).
    assert!((max_flight - 24.75).abs() < 0.051, "{text}");
    assert!(text.ends_with("(average 80.0)"), "{text}");
    assert!(
        text.contains(&format!("{flying} calls in flight over {max_flight:.1}")),
        "{text}"
    );
    assert!(s.dropped_recently.load(Ordering::Relaxed));
    assert_eq!(Overloaded::new().to_string(), "service overloaded");
}

#[test]
fn still_hot() {
    // TestAdaptiveShedderStillHot
    let s = shedder(900, Arc::new(FixedCpu::new(0)));
    let now = Instant::now() + Duration::from_secs(10);
    s.dropped_recently.store(true, Ordering::Relaxed);
    assert!(!s.still_hot(now)); // never overloaded
    s.overload_time.store(now - Duration::from_secs(2));
    assert!(!s.still_hot(now)); // cooled off: clears dropped_recently
    assert!(!s.dropped_recently.load(Ordering::Relaxed));
    s.dropped_recently.store(true, Ordering::Relaxed);
    s.overload_time.store(now);
    assert!(s.still_hot(now));
    assert!(s.still_hot(now + Duration::from_millis(999)));
    assert!(!s.still_hot(now + Duration::from_secs(1)));
}

#[test]
fn concurrent_requests_balance_flying() {
    // TestAdaptiveShedder: 100 threads x 30 requests, random latency, 1 % failures.
    let s = shedder(100, Arc::new(FixedCpu::new(500)));
    let t0 = Instant::now();
    let threads: Vec<_> = (0..100u64)
        .map(|i| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut drops = 0;
                for j in 0..30u64 {
                    let start = t0 + Duration::from_millis(i * 7 + j * 5);
                    match s.allow(start) {
                        Ok(p) if (i + j) % 100 == 0 => p.fail(start),
                        Ok(p) => p.pass(start + Duration::from_millis((i * j) % 5)),
                        Err(_) => drops += 1,
                    }
                }
                drops
            })
        })
        .collect();
    let drops: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(drops < 3000);
    assert_eq!(s.flying(), 0);
}

#[test]
fn overload_factor_is_clamped() {
    let s = shedder(900, Arc::new(FixedCpu::new(0)));
    assert_eq!(s.overload_factor(0), 1.0);
    assert_eq!(s.overload_factor(900), 1.0);
    assert!((s.overload_factor(950) - 0.5).abs() < 1e-12);
    assert!((s.overload_factor(1000) - 0.1).abs() < 1e-12);
    // A threshold of 1000 or more would divide by zero: treated as 999.
    let s = shedder(1000, Arc::new(FixedCpu::new(0)));
    assert!((s.overload_factor(999) - 1.0).abs() < 1e-12);
}

#[test]
fn flying_average_updates_on_completion() {
    let s = shedder(900, Arc::new(FixedCpu::new(0)));
    let now = Instant::now();
    let ps: Vec<_> = (0..10).map(|_| s.allow(now).unwrap()).collect();
    assert_eq!(s.flying(), 10);
    assert_eq!(s.avg_flying(), 0.0); // only updated when a request ends
    let mut expect = 0.0;
    for (i, p) in ps.into_iter().enumerate() {
        p.pass(now + Duration::from_millis(1));
        expect = expect * 0.9 + (9 - i) as f64 * 0.1;
        assert!((s.avg_flying() - expect).abs() < 1e-12);
    }
    assert_eq!(s.flying(), 0);
}

#[test]
fn fail_and_drop_do_not_count_as_passes() {
    let s = shedder(900, Arc::new(FixedCpu::new(0)));
    let t0 = Instant::now();
    s.allow(t0).unwrap().fail(t0);
    drop(s.allow(t0).unwrap());
    assert_eq!(s.flying(), 0);
    let later = t0 + BUCKET * 2;
    assert_eq!(s.window_stats(later), (1, 1e6));
    let p = s.allow(t0).unwrap();
    assert_eq!(p.start(), t0);
    p.pass(t0 + Duration::from_micros(250));
    assert_eq!(s.window_stats(later), (1, 250.0));
}

#[test]
fn sub_millisecond_handlers_get_a_sub_millisecond_min_rt() {
    // go-zero would record ceil(0.2 ms) = 1 ms and allow 5x more in flight.
    let s = shedder(900, Arc::new(FixedCpu::new(0)));
    let t0 = Instant::now();
    for n in 0..1000u32 {
        let start = t0 + Duration::from_micros(u64::from(n) * 100);
        s.allow(start)
            .unwrap()
            .pass(start + Duration::from_nanos(199_001));
    }
    let now = t0 + BUCKET * 2;
    let st = s.stats(now);
    assert_eq!(st.min_rt, Duration::from_micros(200));
    assert_eq!(st.max_pass, 1000);
    // 1000 per 100 ms = 10 000/s; x 200 µs = 2 in flight (go-zero: 10).
    assert!((st.max_flight - 2.0).abs() < 1e-9);
    assert!(!st.hot);
}

#[test]
fn sheds_when_cpu_hot_and_recovers_after_cool_off() {
    let cpu = Arc::new(FixedCpu::new(0));
    let s = shedder(900, cpu.clone());
    let t0 = Instant::now();
    // A healthy second: 100 requests per 100 ms bucket, 10 ms each => max_flight = 1000/s * 10 ms = 10.
    let mut now = t0;
    for _ in 0..100 * BUCKETS {
        s.allow(now).unwrap().pass(now + Duration::from_millis(10));
        now += Duration::from_millis(1);
    }
    assert!((s.max_flight(now) - 10.0).abs() < 1e-9);
    // The CPU goes hot (950: factor 0.5, capacity 5) while 40 requests pile up.
    cpu.set(950);
    let mut held: Vec<_> = (0..40).filter_map(|_| s.allow(now).ok()).collect();
    // Without completions avg_flying is still 0: nothing is shed yet (go-zero's lag).
    assert_eq!(held.len(), 40);
    // Completions lift avg_flying above the capacity; then new requests are shed.
    for p in held.drain(..20) {
        p.fail(now);
    }
    assert!(s.avg_flying() > 5.0 && s.flying() > 5);
    assert!(s.allow(now).is_err());
    assert!(s.stats(now).hot);
    // CPU back to normal, but still hot for the cool-off second after the last overload.
    cpu.set(100);
    assert!(s.allow(now + Duration::from_millis(500)).is_err());
    let p = s.allow(now + Duration::from_millis(1000)).unwrap();
    assert!(!s.stats(now + Duration::from_millis(1000)).hot);
    drop(p);
    drop(held);
    assert_eq!(s.flying(), 0);
}

static_assertions::assert_impl_all!(AdaptiveShedder: Send, Sync);
static_assertions::assert_impl_all!(ShedderPromise: Send, Sync);
static_assertions::assert_impl_all!(Overloaded: std::error::Error, Send, Sync, Clone);

#[test]
fn queued_requests_count_as_in_flight_until_they_ask() {
    // max_flight 49.5 at cpu == threshold (factor 1): 60 requests accepted, none asked yet.
    let cpu = Arc::new(FixedCpu::new(900));
    let s = shedder(900, cpu.clone());
    let now = fixture(&s, Instant::now());
    set_avg_flying(&s, 80.0);
    let mut queued: Vec<Queued> = (0..60).map(|_| s.queue()).collect();
    assert_eq!(s.flying(), 60);
    // A request that was never queued sees the 60 waiting ones: shed.
    assert!(s.allow(now).is_err());
    // The first to ask counts the 59 behind it, not itself: shed, and uncounted.
    assert!(s.allow_queued(queued.pop().unwrap(), now).is_err());
    assert_eq!(s.flying(), 59);
    // Ten more give up before asking (their stream was reset): uncounted as they drop.
    queued.truncate(49);
    assert_eq!(s.flying(), 49);
    // Now 48 others wait behind the next one, under the bound: allowed, and it moves from the
    // queued to the flying (the count does not change).
    let promise = s.allow_queued(queued.pop().unwrap(), now).unwrap();
    assert_eq!(s.flying(), 49);
    // Its end samples the moving average with the queued ones in: 80 * 0.9 + 48 * 0.1.
    promise.pass(now + Duration::from_millis(1));
    assert_eq!(s.flying(), 48);
    assert!((s.avg_flying() - 76.8).abs() < 1e-9, "{}", s.avg_flying());
    drop(queued);
    assert_eq!(s.flying(), 0);
    assert_eq!(s.stats(now).flying, 0);
}

#[test]
fn a_request_queued_on_another_shedder_asks_as_an_unqueued_one() {
    let cpu = Arc::new(FixedCpu::new(0));
    let (a, b) = (shedder(900, cpu.clone()), shedder(900, cpu));
    let q = a.queue();
    let promise = b.allow_queued(q, Instant::now()).unwrap();
    assert_eq!((a.flying(), b.flying()), (0, 1));
    drop(promise);
    assert_eq!(b.flying(), 0);
}

#[test]
fn a_cloned_queued_count_is_one_more_request_until_it_drops() {
    let s = shedder(900, Arc::new(FixedCpu::new(0)));
    let q = s.queue();
    let copy = q.clone();
    assert_eq!(s.flying(), 2);
    drop(q);
    assert_eq!(s.flying(), 1);
    // The copy asks as the queued request it counts.
    let promise = s.allow_queued(copy, Instant::now()).unwrap();
    assert_eq!(s.flying(), 1);
    drop(promise);
    assert_eq!(s.flying(), 0);
}
// The figures of a drop are boxed: a call that passes moves no more than its promise.
static_assertions::const_assert!(std::mem::size_of::<Overloaded>() <= 8);
