//! Load shedding under overload: the real [`AdaptiveShedder`] in front of a simulated CPU-bound
//! server, with go-zero's CPU sampler (every 250 ms, `cpu = cpu * 0.95 + current * 0.05`)
//! reproduced in simulated time.
//!
//! The server has `cores` workers taking calls from one FIFO queue; a call costs `service` of CPU
//! (plus up to 10 % jitter) and, once started, runs to the end (a CPU-bound handler cannot be cut
//! off in the middle). A queued call whose deadline passes before a worker takes it is abandoned
//! (the client cancelled it; no CPU is spent). The shedder is asked when a call arrives, as the
//! server's shedding layer does; a call that ends `DeadlineExceeded` fails its promise, every other
//! one passes it (go-zero's `UnaryShedderInterceptor`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use zrpc_core::cpu::{CPU_MAX, FixedCpu, REFRESH_INTERVAL, SMOOTHING_BETA};
use zrpc_core::shedder::{AdaptiveShedder, ShedderConfig, ShedderPromise};

use crate::model::Window;
use crate::{ns, percentile};

/// A step overload of a CPU-bound server.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Overload {
    /// Workers (CPU cores) of the server.
    pub cores: u32,
    /// CPU time of one call (plus up to 10 % jitter).
    pub service: Duration,
    /// Calls per second outside the overload window.
    pub base_rps: f64,
    /// Calls per second inside it.
    pub overload_rps: f64,
    /// The overload window.
    pub overload: Window,
    /// Simulated time in all.
    pub duration: Duration,
    /// The callers' deadline.
    pub timeout: Duration,
    /// The adaptive shedder is on (`CpuThreshold` 900) or off (`CpuThreshold: 0`).
    pub shedding: bool,
    /// The seed of arrival times and jitter.
    pub seed: u64,
}

impl Overload {
    /// 2 cores, 5 ms of CPU per call (capacity 400 calls/s): 200 calls/s (50 %) for 10 s, then
    /// 800 calls/s (2x capacity) for 60 s, then 200 calls/s again for 20 s; deadline 2 s.
    #[must_use]
    pub fn twice_capacity(shedding: bool) -> Self {
        Overload {
            cores: 2,
            service: Duration::from_millis(5),
            base_rps: 200.0,
            overload_rps: 800.0,
            overload: (Duration::from_secs(10), Duration::from_secs(70)),
            duration: Duration::from_secs(90),
            timeout: Duration::from_secs(2),
            shedding,
            seed: 1,
        }
    }

    /// Calls per second the server can serve (`cores / service`, jitter aside).
    #[must_use]
    pub fn capacity(&self) -> f64 {
        f64::from(self.cores) / self.service.as_secs_f64()
    }
}

/// What [`simulate_overload`] measured.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ShedReport {
    /// Calls per second the server can serve.
    pub capacity: f64,
    /// From the start of the overload to the first shed call (`None`: never shed).
    pub first_shed: Option<Duration>,
    /// Calls that arrived during the overload's steady part (its second half).
    pub offered: u64,
    /// Of those, shed at once (`ResourceExhausted`).
    pub shed: u64,
    /// Of those, answered OK within the deadline.
    pub ok: u64,
    /// Of those, `DeadlineExceeded` (abandoned in the queue or finished too late).
    pub timed_out: u64,
    /// OK calls per second in the steady part.
    pub goodput: f64,
    /// Latency of the admitted calls in the steady part (timeouts count as the deadline), ms.
    pub admitted_p50_ms: f64,
    /// The same, 99th percentile.
    pub admitted_p99_ms: f64,
    /// p99 of the calls before the overload, ms.
    pub unloaded_p99_ms: f64,
    /// Smoothed CPU usage (millicpu) seen by the shedder at the end of the overload.
    pub cpu_at_end: u64,
    /// After the overload, until the last call that failed (timed out or shed): recovery.
    pub recovery: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The CPU sampler refreshes.
    Sample,
    /// Worker `w` finishes its call.
    Done { w: usize },
    /// The next call arrives.
    Arrival,
}

struct Queued {
    arrival: u64,
    promise: Option<ShedderPromise>,
}

struct Running {
    arrival: u64,
    promise: Option<ShedderPromise>,
}

#[derive(Clone, Copy, PartialEq)]
enum Outcome {
    Ok,
    Shed,
    TimedOut,
}

/// Runs `o` and reports goodput, shed share and admitted latency in the steady part of the
/// overload (its second half, once the shedder had time to engage).
#[must_use]
pub fn simulate_overload(o: &Overload) -> ShedReport {
    let t0 = Instant::now();
    let at = |t: u64| t0 + Duration::from_nanos(t);
    let mut rng = SmallRng::seed_from_u64(o.seed);
    let cpu = Arc::new(FixedCpu::new(0));
    let shedder = Arc::new(AdaptiveShedder::new(ShedderConfig::default(), cpu.clone()));
    let (over_start, over_end) = (ns(o.overload.0), ns(o.overload.1));
    let steady_start = over_start + (over_end - over_start) / 2;
    let end = ns(o.duration);
    let timeout = ns(o.timeout);

    let mut events = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BinaryHeap<_>, t: u64, e: Event| {
        seq += 1;
        events.push(Reverse((t, seq, e)));
    };
    push(&mut events, 0, Event::Arrival);
    push(&mut events, ns(REFRESH_INTERVAL), Event::Sample);

    let mut queue: VecDeque<Queued> = VecDeque::new();
    let mut workers: Vec<Option<Running>> = (0..o.cores).map(|_| None).collect();
    let mut busy_since: Vec<u64> = vec![0; workers.len()];
    let mut busy_ns = 0u64; // CPU time used since the last sample
    let mut smoothed = 0.0f64;
    let mut last_sample = 0u64;

    let mut report = ShedReport {
        capacity: o.capacity(),
        ..ShedReport::default()
    };
    let mut admitted = Vec::new();
    let mut unloaded = Vec::new();
    let mut last_failure_after = 0u64;
    let mut record = |report: &mut ShedReport, arrival: u64, latency: u64, outcome: Outcome| {
        let ms = latency as f64 / 1e6;
        if arrival < over_start && outcome == Outcome::Ok {
            unloaded.push(ms);
        }
        if (steady_start..over_end).contains(&arrival) {
            report.offered += 1;
            match outcome {
                Outcome::Ok => report.ok += 1,
                Outcome::Shed => report.shed += 1,
                Outcome::TimedOut => report.timed_out += 1,
            }
            if outcome != Outcome::Shed {
                admitted.push(ms);
            }
        }
        if arrival >= over_end && outcome != Outcome::Ok {
            last_failure_after = last_failure_after.max(arrival + latency - over_end);
        }
    };

    while let Some(Reverse((now, _, event))) = events.pop() {
        if now > end {
            break;
        }
        match event {
            Event::Sample => {
                for (w, slot) in workers.iter().enumerate() {
                    if slot.is_some() {
                        busy_ns += now - busy_since[w];
                        busy_since[w] = now;
                    }
                }
                let wall = (now - last_sample) * u64::from(o.cores);
                let current = (busy_ns as f64 / wall as f64 * CPU_MAX as f64).min(CPU_MAX as f64);
                smoothed = smoothed * SMOOTHING_BETA + current * (1.0 - SMOOTHING_BETA);
                cpu.set(smoothed.round() as u64);
                busy_ns = 0;
                last_sample = now;
                if (over_end - ns(REFRESH_INTERVAL)..over_end).contains(&now) {
                    report.cpu_at_end = smoothed.round() as u64;
                }
                push(&mut events, now + ns(REFRESH_INTERVAL), Event::Sample);
            }
            Event::Arrival => {
                let rps = if (over_start..over_end).contains(&now) {
                    o.overload_rps
                } else {
                    o.base_rps
                };
                // Poisson arrivals
                let gap = -(1.0 - rng.random::<f64>()).ln() / rps;
                push(&mut events, now + (gap * 1e9) as u64, Event::Arrival);
                let promise = if o.shedding {
                    match shedder.allow(at(now)) {
                        Ok(p) => Some(p),
                        Err(_) => {
                            if now >= over_start && report.first_shed.is_none() {
                                report.first_shed = Some(Duration::from_nanos(now - over_start));
                            }
                            record(&mut report, now, 0, Outcome::Shed);
                            continue;
                        }
                    }
                } else {
                    None
                };
                queue.push_back(Queued {
                    arrival: now,
                    promise,
                });
            }
            Event::Done { w } => {
                busy_ns += now - busy_since[w];
                if let Some(r) = workers[w].take() {
                    let latency = now - r.arrival;
                    if latency > timeout {
                        if let Some(p) = r.promise {
                            p.fail(at(now));
                        }
                        record(&mut report, r.arrival, timeout, Outcome::TimedOut);
                    } else {
                        if let Some(p) = r.promise {
                            p.pass(at(now));
                        }
                        record(&mut report, r.arrival, latency, Outcome::Ok);
                    }
                }
            }
        }
        // Idle workers take the next live call; calls past their deadline are abandoned.
        for w in 0..workers.len() {
            if workers[w].is_some() {
                continue;
            }
            while let Some(q) = queue.pop_front() {
                if now - q.arrival >= timeout {
                    if let Some(p) = q.promise {
                        p.fail(at(now));
                    }
                    record(&mut report, q.arrival, timeout, Outcome::TimedOut);
                    continue;
                }
                let cost = ns(o.service) + rng.random_range(0..=ns(o.service) / 10);
                busy_since[w] = now;
                workers[w] = Some(Running {
                    arrival: q.arrival,
                    promise: q.promise,
                });
                push(&mut events, now + cost, Event::Done { w });
                break;
            }
        }
    }
    admitted.sort_by(f64::total_cmp);
    unloaded.sort_by(f64::total_cmp);
    let steady_secs = (over_end - steady_start) as f64 / 1e9;
    report.goodput = report.ok as f64 / steady_secs;
    report.admitted_p50_ms = percentile(&admitted, 0.5);
    report.admitted_p99_ms = percentile(&admitted, 0.99);
    report.unloaded_p99_ms = percentile(&unloaded, 0.99);
    report.recovery = Duration::from_nanos(last_failure_after);
    report
}

/// The shedder on and off under [`Overload::twice_capacity`], as a Markdown table.
#[must_use]
pub fn shed_markdown() -> String {
    let mut s = String::from(
        "| shedder | first shed after | offered/s | shed | goodput/s (capacity 400) | admitted p50 ms | admitted p99 ms | unloaded p99 ms | CPU at end | recovery after the overload |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for shedding in [true, false] {
        let o = Overload::twice_capacity(shedding);
        let r = simulate_overload(&o);
        let secs = (o.overload.1 - o.overload.0).as_secs_f64() / 2.0;
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.1} % | {:.0} | {:.1} | {:.1} | {:.1} | {} | {:.1} s |\n",
            if shedding {
                "on (CpuThreshold 900)"
            } else {
                "off"
            },
            r.first_shed
                .map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64())),
            r.offered as f64 / secs,
            r.shed as f64 * 100.0 / r.offered.max(1) as f64,
            r.goodput,
            r.admitted_p50_ms,
            r.admitted_p99_ms,
            r.unloaded_p99_ms,
            r.cpu_at_end,
            r.recovery.as_secs_f64(),
        ));
    }
    s
}
