//! Overload of a server bound by a downstream resource rather than by its CPU: the real
//! [`ConcurrencyLimit`] (with and without tiers) and the real [`AdaptiveShedder`] in front of a
//! simulated handler that holds one of `slots` places of a resource (a database's connection
//! pool, say) for `hold` each.
//!
//! The handler waits for a free place in FIFO order, holds it for `hold` (± 5 %), and answers.
//! A call whose deadline passes first is answered `DeadlineExceeded` at its deadline (the
//! server's timeout drops the handler, which gives its place back or leaves the queue). Its CPU
//! stays low: the shedder reads 50 µs of CPU per call on 2 cores (200 ‰ at 8,000 calls/s), far
//! below its 900 ‰ threshold. Each arrival is asked of the shedder or the limit, as the server's
//! stages do; a call's round-trip time (admission to answer) is a sample of the limit whether it
//! ended `OK` or `DeadlineExceeded`.
//!
//! Arrivals are Poisson; with tiers, each call is critical with probability
//! [`Downstream::critical`], else of the default tier.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zrpc_client::sim::RandomSource;
use zrpc_core::cpu::FixedCpu;
use zrpc_core::limit::{ConcurrencyLimit, LimitConfig, LimitPermit, RejectReason, Tier};
use zrpc_core::shedder::{AdaptiveShedder, ShedderConfig, ShedderPromise};

use crate::model::Window;
use crate::rng::SimRng;
use crate::{ns, percentile};

/// What guards the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// Nothing (`CpuThreshold: 0`).
    Off,
    /// go-zero's CPU shedder (`CpuThreshold: 900`, the default).
    Cpu,
    /// The adaptive concurrency limit, every call of the default tier.
    Limit,
    /// The limit, with [`Downstream::critical`] of the calls marked critical.
    Tiers,
}

impl Protection {
    /// Every protection, in table order.
    pub const ALL: [Protection; 4] = [
        Protection::Off,
        Protection::Cpu,
        Protection::Limit,
        Protection::Tiers,
    ];

    /// Its name in tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Protection::Off => "no shedding",
            Protection::Cpu => "CPU shedder (default)",
            Protection::Limit => "concurrency limit",
            Protection::Tiers => "limit + tiers (10 % critical)",
        }
    }
}

/// A server bound by a downstream resource, and the load offered to it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Downstream {
    /// Places of the resource.
    pub slots: u32,
    /// How long a call holds its place (± 5 %).
    pub hold: Duration,
    /// The offered load in phases: until each end, this multiple of the capacity.
    pub phases: Vec<(Duration, f64)>,
    /// The calls that arrive in this window are the ones reported.
    pub measure: Window,
    /// The callers' deadline (and the server's timeout).
    pub timeout: Duration,
    /// What guards the server.
    pub protection: Protection,
    /// With [`Protection::Tiers`]: the share of critical calls.
    pub critical: f64,
    /// The seed of arrivals, tiers and hold times.
    pub seed: u64,
    /// The server stalls for the second duration every first one (a busy neighbour, a
    /// pause): what falls in a stall (arrivals reaching its stages, ends of holds, deadlines)
    /// is handled at its end, at once. `None`: never.
    pub stalls: Option<(Duration, Duration)>,
}

impl Downstream {
    /// 20 places of 10 ms (capacity 2,000 calls/s), `load` times the capacity offered for
    /// `secs` seconds, the last `secs - 10` reported; 2 s deadline.
    #[must_use]
    pub fn steady(load: f64, protection: Protection, secs: u64) -> Self {
        Downstream {
            slots: 20,
            hold: Duration::from_millis(10),
            phases: vec![(Duration::from_secs(secs), load)],
            measure: (
                Duration::from_secs(10.min(secs / 2)),
                Duration::from_secs(secs),
            ),
            timeout: Duration::from_secs(2),
            protection,
            critical: 0.1,
            seed: 1,
            stalls: None,
        }
    }

    /// [`steady`](Self::steady) with the server stalled 50 ms every second.
    #[must_use]
    pub fn stalling(load: f64, protection: Protection, secs: u64) -> Self {
        Downstream {
            stalls: Some((Duration::from_secs(1), Duration::from_millis(50))),
            ..Self::steady(load, protection, secs)
        }
    }

    /// 0.5x for 20 s, `peak` times the capacity for 20 s, then 0.5x for 40 s; the spike's
    /// calls are reported.
    #[must_use]
    pub fn spike(peak: f64, protection: Protection) -> Self {
        Downstream {
            phases: vec![
                (Duration::from_secs(20), 0.5),
                (Duration::from_secs(40), peak),
                (Duration::from_secs(80), 0.5),
            ],
            measure: (Duration::from_secs(20), Duration::from_secs(40)),
            ..Self::steady(0.5, protection, 80)
        }
    }

    /// Calls per second the resource serves.
    #[must_use]
    pub fn capacity(&self) -> f64 {
        f64::from(self.slots) / self.hold.as_secs_f64()
    }

    /// When the last phase above the capacity ends (the end of the overload).
    #[must_use]
    pub fn overload_end(&self) -> Option<Duration> {
        self.phases
            .iter()
            .filter(|(_, load)| *load > 1.0)
            .map(|(end, _)| *end)
            .max()
    }
}

/// What [`simulate_downstream`] measured over the calls that arrived in the reported window.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct DownstreamReport {
    /// Calls per second the resource serves.
    pub capacity: f64,
    /// Calls that arrived.
    pub offered: u64,
    /// Answered OK within the deadline.
    pub ok: u64,
    /// Rejected at once (`ResourceExhausted`): by the CPU shedder, the limit, a tier's share.
    pub rejected: [u64; 3],
    /// `DeadlineExceeded`.
    pub timed_out: u64,
    /// OK calls per second.
    pub goodput: f64,
    /// Latency of the admitted calls (timeouts count as the deadline), ms.
    pub admitted_p50_ms: f64,
    /// The same, 99th percentile.
    pub admitted_p99_ms: f64,
    /// Critical calls that arrived, and of those answered OK.
    pub critical: (u64, u64),
    /// The limit every 10 ms of the whole run: (seconds, limit).
    pub limit_trace: Vec<(f64, u32)>,
    /// The calls that arrived in the 10 s after the overload: (seconds after its end, latency
    /// in ms or `None` when rejected).
    pub after_overload: Vec<(f64, Option<f64>)>,
}

impl DownstreamReport {
    /// Calls rejected at once, all reasons.
    #[must_use]
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }

    /// The share of offered calls rejected at once.
    #[must_use]
    pub fn rejected_share(&self) -> f64 {
        self.rejected_total() as f64 / self.offered.max(1) as f64
    }

    /// The share of critical calls answered OK (`None` without critical calls).
    #[must_use]
    pub fn critical_success(&self) -> Option<f64> {
        (self.critical.0 > 0).then(|| self.critical.1 as f64 / self.critical.0 as f64)
    }

    /// The median of the limit over `[from, to)` seconds of the trace.
    #[must_use]
    pub fn limit_median(&self, from: f64, to: f64) -> Option<u32> {
        let mut v: Vec<u32> = self
            .limit_trace
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, l)| *l)
            .collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied()
    }

    /// From `from` seconds, the time until the limit is back to at least 90 % of `steady`
    /// (within 10 % of it, or past it: the limit moves by steps of up to a quarter plus its
    /// square root per window, and can step over the band).
    #[must_use]
    pub fn back_to_90_percent(&self, from: f64, steady: u32) -> Option<Duration> {
        self.limit_trace
            .iter()
            .find(|(t, l)| *t >= from && f64::from(*l) >= 0.9 * f64::from(steady))
            .map(|(t, _)| Duration::from_secs_f64(t - from))
    }

    /// After the overload, the arrival of the last call rejected or answered later than
    /// `slow_ms` (0 when none was).
    #[must_use]
    pub fn service_recovery(&self, slow_ms: f64) -> Duration {
        let last = self
            .after_overload
            .iter()
            .filter(|(_, l)| l.is_none_or(|l| l > slow_ms))
            .map(|(t, _)| *t)
            .fold(0.0, f64::max);
        Duration::from_secs_f64(last)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The limit is read into the trace.
    Probe,
    /// Call `id` gives its place back.
    Done { id: usize },
    /// Call `id`'s deadline.
    Deadline { id: usize },
    /// Call `id` reaches the server's stages.
    Admit { id: usize },
    /// The next call arrives.
    Arrival,
}

#[derive(Debug, PartialEq)]
enum Phase {
    /// Sent, not yet admitted.
    Sent,
    Waiting,
    Running,
    Ended,
}

struct Call {
    arrival: u64,
    critical: bool,
    phase: Phase,
    permit: Option<LimitPermit>,
    promise: Option<ShedderPromise>,
}

#[derive(Clone, Copy, PartialEq)]
enum Outcome {
    Ok,
    Rejected(usize),
    TimedOut,
}

fn uniform(rng: &mut SimRng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// Runs `d` and reports what the callers saw of the calls that arrived in `d.measure`.
#[must_use]
pub fn simulate_downstream(d: &Downstream) -> DownstreamReport {
    let t0 = Instant::now();
    let at = |t: u64| t0 + Duration::from_nanos(t);
    let mut rng = SimRng::new(d.seed);
    let capacity = d.capacity();
    let cpu = Arc::new(FixedCpu::new(0));
    let shedder = (d.protection == Protection::Cpu)
        .then(|| Arc::new(AdaptiveShedder::new(ShedderConfig::default(), cpu.clone())));
    let limit = matches!(d.protection, Protection::Limit | Protection::Tiers).then(|| {
        Arc::new(ConcurrencyLimit::with_seed(
            LimitConfig::default(),
            d.seed,
            t0,
        ))
    });
    let end = d.phases.last().map_or(0, |(e, _)| ns(*e));
    let (m0, m1) = (ns(d.measure.0), ns(d.measure.1));
    let timeout = ns(d.timeout);
    let hold = ns(d.hold);
    let overload_end = d.overload_end().map(ns);

    let mut events = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BinaryHeap<_>, t: u64, e: Event| {
        seq += 1;
        events.push(Reverse((t, seq, e)));
    };
    push(&mut events, 0, Event::Arrival);
    push(&mut events, 0, Event::Probe);

    let mut calls: Vec<Call> = Vec::new();
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut free = d.slots;
    let mut report = DownstreamReport {
        capacity,
        ..DownstreamReport::default()
    };
    let mut admitted = Vec::new();
    let mut record = |report: &mut DownstreamReport, call: &Call, now: u64, outcome: Outcome| {
        if let Some(e) = overload_end
            && (e..e + 10_000_000_000).contains(&call.arrival)
        {
            let latency = match outcome {
                Outcome::Rejected(_) => None,
                _ => Some((now - call.arrival) as f64 / 1e6),
            };
            report
                .after_overload
                .push(((call.arrival - e) as f64 / 1e9, latency));
        }
        if !(m0..m1).contains(&call.arrival) {
            return;
        }
        report.offered += 1;
        if call.critical {
            report.critical.0 += 1;
        }
        match outcome {
            Outcome::Ok => {
                report.ok += 1;
                if call.critical {
                    report.critical.1 += 1;
                }
            }
            Outcome::Rejected(i) => report.rejected[i] += 1,
            Outcome::TimedOut => report.timed_out += 1,
        }
        if !matches!(outcome, Outcome::Rejected(_)) {
            admitted.push((now - call.arrival) as f64 / 1e6);
        }
    };

    while let Some(Reverse((now, _, event))) = events.pop() {
        if now > end + timeout {
            break;
        }
        // The server's events in a stall wait for its end (the callers' do not).
        if let Some((every, length)) = d.stalls
            && !matches!(event, Event::Arrival | Event::Probe)
        {
            let (every, length) = (ns(every), ns(length));
            if now % every < length {
                push(&mut events, now - now % every + length, event);
                continue;
            }
        }
        let mut freed = false;
        match event {
            Event::Probe => {
                if let Some(l) = &limit {
                    report.limit_trace.push((now as f64 / 1e9, l.stats().limit));
                }
                if now < end {
                    push(&mut events, now + 10_000_000, Event::Probe);
                }
            }
            Event::Arrival => {
                let Some(&(_, load)) = d.phases.iter().find(|(e, _)| now < ns(*e)) else {
                    continue;
                };
                let rate = load * capacity;
                cpu.set(((rate * 50e-6 / 2.0) * 1000.0).min(1000.0) as u64);
                let gap = -(1.0 - uniform(&mut rng)).ln() / rate;
                push(&mut events, now + (gap * 1e9) as u64, Event::Arrival);
                let critical = d.protection == Protection::Tiers && uniform(&mut rng) < d.critical;
                let id = calls.len();
                calls.push(Call {
                    arrival: now,
                    critical,
                    phase: Phase::Sent,
                    permit: None,
                    promise: None,
                });
                push(&mut events, now, Event::Admit { id });
            }
            Event::Admit { id } => {
                let call = &mut calls[id];
                let critical = call.critical;
                if let Some(s) = &shedder {
                    match s.allow(at(now)) {
                        Ok(p) => call.promise = Some(p),
                        Err(_) => {
                            call.phase = Phase::Ended;
                            record(&mut report, call, now, Outcome::Rejected(0));
                            continue;
                        }
                    }
                }
                if let Some(l) = &limit {
                    let tier = if critical {
                        Tier::Critical
                    } else {
                        Tier::Default
                    };
                    match l.acquire(tier, at(now)) {
                        Ok(p) => call.permit = Some(p),
                        Err(e) => {
                            let i = if e.reason() == RejectReason::Tier {
                                2
                            } else {
                                1
                            };
                            call.phase = Phase::Ended;
                            record(&mut report, call, now, Outcome::Rejected(i));
                            continue;
                        }
                    }
                }
                call.phase = Phase::Waiting;
                queue.push_back(id);
                push(&mut events, call.arrival + timeout, Event::Deadline { id });
            }
            Event::Done { id } => {
                let call = &mut calls[id];
                if call.phase == Phase::Running {
                    call.phase = Phase::Ended;
                    if let Some(p) = call.permit.take() {
                        p.sample(at(now));
                    }
                    if let Some(p) = call.promise.take() {
                        p.pass(at(now));
                    }
                    record(&mut report, call, now, Outcome::Ok);
                    freed = true;
                }
            }
            Event::Deadline { id } => {
                let call = &mut calls[id];
                if call.phase != Phase::Ended {
                    freed = call.phase == Phase::Running;
                    call.phase = Phase::Ended;
                    if let Some(p) = call.permit.take() {
                        p.sample(at(now));
                    }
                    if let Some(p) = call.promise.take() {
                        p.fail(at(now));
                    }
                    record(&mut report, call, now, Outcome::TimedOut);
                }
            }
        }
        if freed {
            free += 1;
        }
        // Free places go to the calls waiting longest that are still waiting.
        while free > 0 {
            let Some(id) = queue.pop_front() else { break };
            if calls[id].phase != Phase::Waiting {
                continue;
            }
            calls[id].phase = Phase::Running;
            free -= 1;
            let t = hold - hold / 20 + rng.next_u64() % (hold / 10).max(1);
            push(&mut events, now + t, Event::Done { id });
        }
    }
    admitted.sort_by(f64::total_cmp);
    let secs = (m1 - m0) as f64 / 1e9;
    report.goodput = report.ok as f64 / secs;
    report.admitted_p50_ms = percentile(&admitted, 0.5);
    report.admitted_p99_ms = percentile(&admitted, 0.99);
    report
}

/// The multiples of the capacity offered in the table.
pub const LOADS: [f64; 4] = [0.5, 1.0, 2.0, 4.0];

/// Every protection at every load of [`LOADS`] (70 s runs, the last 60 s reported), then the
/// recovery after a spike, as Markdown.
#[must_use]
pub fn limit_markdown() -> String {
    let unloaded = simulate_downstream(&Downstream::steady(0.5, Protection::Off, 70));
    let mut s = format!(
        "Capacity {:.0} calls/s (20 places of 10 ms); unloaded p99 (0.5x, no shedding): {:.1} ms.\n\n\
         | offered | protection | goodput/s | goodput / capacity | admitted p50 ms | admitted p99 ms | p99 / unloaded | rejected | critical OK |\n\
         |---|---|---|---|---|---|---|---|---|\n",
        unloaded.capacity, unloaded.admitted_p99_ms
    );
    for load in LOADS {
        for p in Protection::ALL {
            let r = simulate_downstream(&Downstream::steady(load, p, 70));
            s.push_str(&format!(
                "| {load}x | {} | {:.0} | {:.1} % | {:.1} | {:.1} | x{:.2} | {:.1} % | {} |\n",
                p.name(),
                r.goodput,
                r.goodput * 100.0 / r.capacity,
                r.admitted_p50_ms,
                r.admitted_p99_ms,
                r.admitted_p99_ms / unloaded.admitted_p99_ms,
                r.rejected_share() * 100.0,
                r.critical_success()
                    .map_or("-".into(), |c| format!("{:.3} %", c * 100.0)),
            ));
        }
    }
    s.push_str(
        "\nThe same with the server stalled 50 ms every second (a busy neighbour, a pause): \
         the calls that arrive meanwhile reach the stages together when it resumes.\n\n\
         | offered | protection | goodput / capacity | admitted p99 ms | p99 / unloaded | rejected | critical OK |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for load in LOADS {
        for p in [Protection::Cpu, Protection::Limit, Protection::Tiers] {
            let r = simulate_downstream(&Downstream::stalling(load, p, 70));
            s.push_str(&format!(
                "| {load}x | {} | {:.1} % | {:.1} | x{:.2} | {:.1} % | {} |\n",
                p.name(),
                r.goodput * 100.0 / r.capacity,
                r.admitted_p99_ms,
                r.admitted_p99_ms / unloaded.admitted_p99_ms,
                r.rejected_share() * 100.0,
                r.critical_success()
                    .map_or("-".into(), |c| format!("{:.3} %", c * 100.0)),
            ));
        }
    }
    s.push_str(&format!(
        "\nRecovery: 0.5x for 20 s, the spike for 20 s, 0.5x for 40 s. The limit before the spike \
         is its median over 10-20 s, after it over the last 10 s; from the end of the spike, the \
         time until the limit is back to at least 90 % of its value before; service recovery: from the \
         end of the spike to the arrival of the last call rejected or answered later than 3x \
         the unloaded p99 ({:.1} ms).\n\n\
         | spike | protection | limit before | limit during (median 30-40 s) | limit after | back to 90 % of before | service recovered after |\n\
         |---|---|---|---|---|---|---|\n",
        3.0 * unloaded.admitted_p99_ms
    ));
    for peak in [1.4, 2.0, 4.0] {
        for p in [Protection::Limit, Protection::Tiers] {
            let r = simulate_downstream(&Downstream::spike(peak, p));
            let before = r.limit_median(10.0, 20.0).unwrap_or(0);
            let after = r.limit_median(70.0, 80.0).unwrap_or(0);
            let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
            s.push_str(&format!(
                "| {peak}x | {} | {before} | {} | {after} | {} | {} |\n",
                p.name(),
                r.limit_median(30.0, 40.0).unwrap_or(0),
                r.back_to_90_percent(40.0, before)
                    .map_or("never".into(), ms),
                ms(r.service_recovery(3.0 * unloaded.admitted_p99_ms)),
            ));
        }
    }
    s
}
