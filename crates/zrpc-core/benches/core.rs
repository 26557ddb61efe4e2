//! Criterion benches for zrpc-core's hot paths.
//!
//! Run with `cargo bench -p zrpc-core --bench core -- --warm-up-time 1 --measurement-time 2`.
//! Time is simulated: each iteration advances a synthetic `Instant` by 1 µs, so buckets roll as in
//! production at 1 M req/s and no clock is read.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use zrpc_core::breaker::{BreakerConfig, GoogleBreaker};
use zrpc_core::cpu::FixedCpu;
use zrpc_core::ewma::{DEFAULT_DECAY, decay_weight};
use zrpc_core::shedder::{AdaptiveShedder, ShedderConfig};
use zrpc_core::window::{RollingWindow, SumBucket};

const STEP: Duration = Duration::from_micros(1);

fn breaker(c: &mut Criterion) {
    let b = Arc::new(GoogleBreaker::new(BreakerConfig::default()));
    let mut now = Instant::now();
    c.bench_function("breaker allow+accept (closed)", |bench| {
        bench.iter(|| {
            now += STEP;
            b.allow(black_box(now)).unwrap().accept(now);
        });
    });

    // Open breaker: mostly the drop path (one lock, counts the drop).
    let open = Arc::new(GoogleBreaker::new(BreakerConfig::default()));
    let mut now = Instant::now();
    for _ in 0..10_000 {
        now += STEP;
        if let Ok(p) = open.allow(now) {
            p.reject(now);
        }
    }
    c.bench_function("breaker allow (open, mostly dropping)", |bench| {
        bench.iter(|| {
            now += STEP;
            if let Ok(p) = open.allow(black_box(now)) {
                p.reject(now);
            }
        });
    });

    // Two threads on one breaker: the cost of the window mutex under contention.
    let shared = Arc::new(GoogleBreaker::new(BreakerConfig::default()));
    let base = Instant::now();
    c.bench_function("breaker allow+accept (2 threads, per op)", |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let b = shared.clone();
                    std::thread::spawn(move || {
                        let mut now = base;
                        for _ in 0..iters / 2 + 1 {
                            now += STEP;
                            b.allow(now).unwrap().accept(now);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            start.elapsed()
        });
    });
}

fn shedder(c: &mut Criterion) {
    for (name, cpu) in [
        ("shedder allow+pass (cpu cool)", 100),
        ("shedder allow+pass (cpu hot)", 950),
    ] {
        let s = Arc::new(AdaptiveShedder::new(
            ShedderConfig::default(),
            Arc::new(FixedCpu::new(cpu)),
        ));
        let mut now = Instant::now();
        c.bench_function(name, |bench| {
            bench.iter(|| {
                now += STEP;
                if let Ok(p) = s.allow(black_box(now)) {
                    p.pass(now + Duration::from_micros(200));
                }
            });
        });
    }
    // Hot CPU with a request in flight: allow() also reads the window (lock + 50-bucket reduce).
    let s = Arc::new(AdaptiveShedder::new(
        ShedderConfig::default(),
        Arc::new(FixedCpu::new(950)),
    ));
    let mut now = Instant::now();
    let held = s.allow(now).unwrap();
    c.bench_function("shedder allow+pass (cpu hot, 1 in flight)", |bench| {
        bench.iter(|| {
            now += STEP;
            if let Ok(p) = s.allow(black_box(now)) {
                p.pass(now + Duration::from_micros(200));
            }
        });
    });
    held.fail(now);
}

fn window(c: &mut Criterion) {
    let mut w: RollingWindow<SumBucket<u64>> = RollingWindow::new(50, Duration::from_millis(100));
    let mut now = Instant::now();
    c.bench_function("window add", |bench| {
        bench.iter(|| {
            now += STEP;
            w.add(black_box(200), now);
        });
    });
    let w40: RollingWindow<SumBucket<u64>> = RollingWindow::new(40, Duration::from_millis(250));
    let now = Instant::now();
    c.bench_function("window reduce (40 buckets)", |bench| {
        bench.iter(|| {
            let mut sum = 0;
            w40.reduce(black_box(now), |b| sum += b.sum);
            sum
        });
    });
}

fn ewma(c: &mut Criterion) {
    // The client's P2C stats blend each sample with this weight (one `exp` per sample).
    let mut dt = Duration::ZERO;
    c.bench_function("ewma decay_weight", |bench| {
        bench.iter(|| {
            dt += STEP;
            decay_weight(black_box(dt), DEFAULT_DECAY)
        });
    });
}

criterion_group!(benches, breaker, shedder, window, ewma);
criterion_main!(benches);
