//! Pick cost of the P2C+EWMA picker (v2 rules, and v1 for comparison): 3, 10 and 100 endpoints,
//! 1 and 2 threads.
//!
//! Run: `cargo bench -p zrpc-client --bench picker -- --warm-up-time 1 --measurement-time 2`.
//! Each iteration is one clock read (the client's: `Clock::coarse_now`), one pick and the release
//! of the in-flight slot (so the counters stay bounded); `1_thread_instant` reads `Instant::now()`
//! instead, `1_thread_no_clock` reads none. The completion math (EWMA update) is measured
//! separately (`complete`), and the two clock reads alone (`clock_read`, `clock_read_coarse`).
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use zrpc_client::balancer::{EndpointStats, P2cPicker, P2cRules, ThreadRng};
use zrpc_core::grpc::code;

fn endpoints(n: usize) -> Vec<Arc<EndpointStats>> {
    (0..n)
        .map(|i| {
            let e = Arc::new(EndpointStats::new());
            // warm: one completed 1..n ms sample each
            e.on_done(0, 1_000_000 * (1 + i as u64), code::OK);
            e
        })
        .collect()
}

fn pick(c: &mut Criterion) {
    let mut g = c.benchmark_group("pick");
    for n in [3usize, 10, 100] {
        let set = endpoints(n);
        let picker = P2cPicker::new(Instant::now());
        let clock = picker.clock();
        g.bench_with_input(BenchmarkId::new("1_thread", n), &n, |b, _| {
            b.iter(|| {
                let now = clock.coarse_now();
                let i = picker
                    .pick_at(black_box(&set), now, &mut ThreadRng)
                    .unwrap();
                set[i].on_abandon();
            });
        });
        g.bench_with_input(BenchmarkId::new("1_thread_instant", n), &n, |b, _| {
            b.iter(|| {
                let now = Instant::now();
                let i = picker.pick(black_box(&set), now, &mut ThreadRng).unwrap();
                set[i].on_abandon();
            });
        });
        // the same pick with go-zero's rules (v1), side by side in one run
        let v1 = P2cPicker::with_rules(Instant::now(), P2cRules::V1);
        g.bench_with_input(BenchmarkId::new("1_thread_v1", n), &n, |b, _| {
            b.iter(|| {
                let now = clock.coarse_now();
                let i = v1.pick_at(black_box(&set), now, &mut ThreadRng).unwrap();
                set[i].on_abandon();
            });
        });
        let fixed = clock.coarse_now();
        g.bench_with_input(BenchmarkId::new("1_thread_no_clock", n), &n, |b, _| {
            b.iter(|| {
                let i = picker
                    .pick_at(black_box(&set), black_box(fixed), &mut ThreadRng)
                    .unwrap();
                set[i].on_abandon();
            });
        });
        g.bench_with_input(BenchmarkId::new("2_threads", n), &n, |b, _| {
            b.iter_custom(|iters| {
                let barrier = Arc::new(Barrier::new(2));
                let set = Arc::new(endpoints(n));
                let run = {
                    let set = set.clone();
                    let barrier = barrier.clone();
                    move || {
                        barrier.wait();
                        let start = Instant::now();
                        for _ in 0..iters {
                            let now = clock.coarse_now();
                            let i = picker
                                .pick_at(black_box(&set[..]), now, &mut ThreadRng)
                                .unwrap();
                            set[i].on_abandon();
                        }
                        start.elapsed()
                    }
                };
                let other = std::thread::spawn(run.clone());
                let mine = run();
                let theirs = other.join().unwrap();
                // wall time per pick per thread
                (mine + theirs) / 2
            });
        });
    }
    g.finish();
}

fn clock(c: &mut Criterion) {
    c.bench_function("clock_read", |b| b.iter(Instant::now));
    let clock = P2cPicker::new(Instant::now()).clock();
    c.bench_function("clock_read_coarse", |b| b.iter(|| clock.coarse_now()));
}

fn complete(c: &mut Criterion) {
    let e = EndpointStats::new();
    let mut t = 0u64;
    c.bench_function("complete", |b| {
        b.iter(|| {
            t += 1_000;
            e.on_pick();
            e.on_done(t.saturating_sub(500), t, black_box(code::OK));
        });
    });
}

criterion_group!(benches, pick, complete, clock);
criterion_main!(benches);
