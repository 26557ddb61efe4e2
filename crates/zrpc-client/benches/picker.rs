//! Pick cost of the P2C+EWMA picker (v2 rules, and v1 for comparison): 3, 10 and 100 endpoints,
//! 1 and 2 threads; and of the `consistent_hash` ring beside it (`consistent_hash`, 3 and 100
//! endpoints: one murmur3 hash of a 9..11-byte key, a binary search over 100 points per endpoint,
//! the same in-flight accounting as P2C).
//!
//! Run: `cargo bench -p zrpc-client --bench picker -- --warm-up-time 1 --measurement-time 2`.
//! Each iteration is one clock read (`Clock::coarse_now`, the cheapest a pick can make), one pick
//! and the release of the in-flight slot (so the counters stay bounded); `1_thread_instant` reads
//! `Instant::now()` instead, `1_thread_no_clock` reads none. zrpc's client picks at the attempt's
//! start, the `Instant::now()` it reads for the call's latency anyway: its pick adds no clock read,
//! so `1_thread_no_clock` is what a call pays for it. The `_cpu` variants time the same loops with the
//! thread's CPU time instead of the wall clock: on a shared machine they stay comparable when
//! other jobs take the cores (the wall-clock figures then grow with the time spent waiting for
//! a core). The completion math (EWMA update) is measured
//! separately (`complete`), and the two clock reads alone (`clock_read`, `clock_read_coarse`).
//!
//! The endpoints are live: each has answered within the last second when a batch of picks starts
//! (`refresh`), as in a client whose endpoints answer calls. (Until this was added the warm-up
//! completed a call that was never picked, which left every endpoint with `u64::MAX` calls in
//! flight: a state no client reaches.)
//!
//! `1_thread_alone` is the pick as the client makes it (clock read included): the slot is released
//! outside the timed spans, as a client releases it when its call ends, long after the pick; the
//! release alone is `release`. `1_thread` keeps the release in the loop (pick and release back to
//! back on one cache line: two atomic read-modify-writes in one dependency chain).
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rustix::time::{ClockId, clock_gettime};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use zrpc_client::sim::{Clock, EndpointStats, HashRing, P2cPicker, P2cRules, ThreadRng};
use zrpc_core::grpc::code;

fn endpoints(n: usize) -> Vec<Arc<EndpointStats>> {
    (0..n).map(|_| Arc::new(EndpointStats::new())).collect()
}

/// One completed call per endpoint ending at `now` (ns), of 1..n ms: the endpoints are warm and
/// have answered recently (no re-probe is due within the next second).
fn refresh(set: &[Arc<EndpointStats>], now: u64) {
    for (i, e) in set.iter().enumerate() {
        let lag = 1_000_000 * (1 + i as u64);
        e.on_pick();
        e.on_done(now.saturating_sub(lag), now, code::OK);
    }
}

/// What a batch of picks is timed with.
#[derive(Clone, Copy)]
enum Timer {
    /// Wall-clock time (`Instant`): what a caller waits, inflated on an oversubscribed machine.
    Wall,
    /// The thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): the time the pick ran on a CPU. On a
    /// shared machine where other jobs take the cores, wall time per pick grows by the time the
    /// thread waits for a core; CPU time does not, so this figure stays comparable across loads.
    Cpu,
}

impl Timer {
    fn elapsed(self, run: impl FnOnce()) -> Duration {
        match self {
            Timer::Wall => {
                let start = Instant::now();
                run();
                start.elapsed()
            }
            Timer::Cpu => {
                let start = thread_cpu();
                run();
                thread_cpu().saturating_sub(start)
            }
        }
    }
}

fn thread_cpu() -> Duration {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap(),
        u32::try_from(t.tv_nsec).unwrap(),
    )
}

/// Where a timed loop releases the in-flight slot each pick takes.
#[derive(Clone, Copy)]
enum Release {
    /// Right after the pick, inside the timed span (pick and release back to back).
    InSpan,
    /// After each span of [`CHUNK`] (or [`CHUNK_CPU`]) picks, outside it: as a client releases
    /// a slot when its call ends, 100 µs or more after the pick, never in the pick's dependency
    /// chain. The release is timed separately (`release`).
    Outside,
}

/// Picks per wall-clock span with [`Release::Outside`]: long enough that the two timer reads
/// around a span add under 1 ns per pick (counted against the pick), short enough that the set's
/// in-flight counts stay in a busy client's range (0..64 calls).
const CHUNK: usize = 64;
/// Picks per CPU-time span: reading the thread's CPU time is a system call (~0.3-1 µs), so the
/// spans are longer (in flight 0..4096: the same code path as 0..64, in-flight counts only scale
/// the cost).
const CHUNK_CPU: usize = 4096;

/// Times `iters` picks on a set refreshed at the current time.
fn timed_live(
    timer: Timer,
    release: Release,
    iters: u64,
    set: &[Arc<EndpointStats>],
    clock: Clock,
    pick: impl FnMut() -> usize,
) -> Duration {
    timed(
        timer,
        release,
        iters,
        set,
        clock.nanos(Instant::now()),
        pick,
    )
}

/// Times `iters` picks after refreshing the set at `refresh_at`, releasing their slots as
/// `release` says.
fn timed(
    timer: Timer,
    release: Release,
    iters: u64,
    set: &[Arc<EndpointStats>],
    refresh_at: u64,
    mut pick: impl FnMut() -> usize,
) -> Duration {
    refresh(set, refresh_at);
    let chunk = match (release, timer) {
        (Release::InSpan, _) => {
            return timer.elapsed(|| {
                for _ in 0..iters {
                    let i = pick();
                    set[i].on_abandon();
                }
            });
        }
        (Release::Outside, Timer::Wall) => CHUNK,
        (Release::Outside, Timer::Cpu) => CHUNK_CPU,
    };
    let mut picked = vec![0usize; chunk];
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let k = usize::try_from(left.min(chunk as u64)).unwrap();
        total += timer.elapsed(|| {
            for slot in &mut picked[..k] {
                *slot = pick();
            }
        });
        for &i in &picked[..k] {
            set[i].on_abandon();
        }
        left -= k as u64;
    }
    total
}

fn pick(c: &mut Criterion) {
    let mut g = c.benchmark_group("pick");
    for n in [3usize, 10, 100] {
        let set = endpoints(n);
        let picker = P2cPicker::new(Instant::now());
        let clock = picker.clock();
        for (name, timer) in [("1_thread", Timer::Wall), ("1_thread_cpu", Timer::Cpu)] {
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter_custom(|iters| {
                    timed_live(timer, Release::InSpan, iters, &set, clock, || {
                        let now = clock.coarse_now();
                        picker
                            .pick_at(black_box(&set), now, &mut ThreadRng)
                            .unwrap()
                    })
                });
            });
        }
        // the pick alone (clock read included), its release outside the timed spans
        for (name, timer) in [
            ("1_thread_alone", Timer::Wall),
            ("1_thread_alone_cpu", Timer::Cpu),
        ] {
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter_custom(|iters| {
                    timed_live(timer, Release::Outside, iters, &set, clock, || {
                        let now = clock.coarse_now();
                        picker
                            .pick_at(black_box(&set), now, &mut ThreadRng)
                            .unwrap()
                    })
                });
            });
        }
        g.bench_with_input(BenchmarkId::new("1_thread_instant", n), &n, |b, _| {
            b.iter_custom(|iters| {
                timed_live(Timer::Wall, Release::InSpan, iters, &set, clock, || {
                    let now = Instant::now();
                    picker.pick(black_box(&set), now, &mut ThreadRng).unwrap()
                })
            });
        });
        // the same pick with go-zero's rules (v1), side by side in one run
        let v1 = P2cPicker::with_rules(Instant::now(), P2cRules::V1);
        g.bench_with_input(BenchmarkId::new("1_thread_v1", n), &n, |b, _| {
            b.iter_custom(|iters| {
                timed_live(Timer::Wall, Release::InSpan, iters, &set, clock, || {
                    let now = clock.coarse_now();
                    v1.pick_at(black_box(&set), now, &mut ThreadRng).unwrap()
                })
            });
        });
        for (name, timer) in [
            ("1_thread_no_clock", Timer::Wall),
            ("1_thread_no_clock_cpu", Timer::Cpu),
        ] {
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter_custom(|iters| {
                    let fixed = clock.coarse_now();
                    timed(timer, Release::InSpan, iters, &set, fixed, || {
                        picker
                            .pick_at(black_box(&set), black_box(fixed), &mut ThreadRng)
                            .unwrap()
                    })
                });
            });
        }
        g.bench_with_input(BenchmarkId::new("2_threads", n), &n, |b, _| {
            b.iter_custom(|iters| {
                let barrier = Arc::new(Barrier::new(2));
                let set = Arc::new(endpoints(n));
                refresh(&set, clock.nanos(Instant::now()));
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

fn pick_consistent_hash(c: &mut Criterion) {
    let mut g = c.benchmark_group("pick");
    // keys as an application's: user ids, a different one each call
    let keys: Vec<String> = (0..4096)
        .map(|i| format!("user-{}", 100_000 + i * 7))
        .collect();
    for n in [3usize, 100] {
        let set = endpoints(n);
        let addrs: Vec<String> = (0..n)
            .map(|i| format!("10.0.{}.{}:8080", i / 256, i % 256))
            .collect();
        let ring = HashRing::new(&addrs);
        let clock = P2cPicker::new(Instant::now()).clock();
        for (name, timer) in [
            ("consistent_hash", Timer::Wall),
            ("consistent_hash_cpu", Timer::Cpu),
        ] {
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                let mut k = 0usize;
                b.iter_custom(|iters| {
                    timed_live(timer, Release::InSpan, iters, &set, clock, || {
                        k = (k + 1) % keys.len();
                        let now = clock.coarse_now();
                        ring.pick(black_box(&keys[k]), black_box(&set), now)
                            .unwrap()
                    })
                });
            });
        }
    }
    g.finish();
}

fn clock(c: &mut Criterion) {
    c.bench_function("clock_read", |b| b.iter(Instant::now));
    let clock = P2cPicker::new(Instant::now()).clock();
    c.bench_function("clock_read_coarse", |b| b.iter(|| clock.coarse_now()));
    c.bench_function("clock_read_coarse_cpu", |b| {
        b.iter_custom(|iters| {
            Timer::Cpu.elapsed(|| {
                for _ in 0..iters {
                    black_box(clock.coarse_now());
                }
            })
        });
    });
}

fn release(c: &mut Criterion) {
    // the release of a slot that was never sent (`on_abandon`): one atomic decrement, after the
    // increment that a pick makes (untimed, in chunks)
    let e = EndpointStats::new();
    c.bench_function("release", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let k = left.min(CHUNK as u64);
                for _ in 0..k {
                    e.on_pick();
                }
                total += Timer::Wall.elapsed(|| {
                    for _ in 0..k {
                        black_box(&e).on_abandon();
                    }
                });
                left -= k;
            }
            total
        });
    });
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

criterion_group!(
    benches,
    pick,
    pick_consistent_hash,
    release,
    complete,
    clock
);
criterion_main!(benches);
