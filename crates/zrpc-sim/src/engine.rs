//! The discrete-event loop: a binary heap of (time, sequence) events, simulated servers, open- and
//! closed-loop callers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use zrpc_client::sim::{MAX_ATTEMPTS, RandomSource};
use zrpc_core::grpc::code::{DEADLINE_EXCEEDED, OK, UNAVAILABLE};

use crate::model::{Load, Report, Scenario, ServerSpec, Window};
use crate::ns;
use crate::policy::Policy;
use crate::rng::SimRng;

/// A failing server answers after this long.
const FAIL_LATENCY: u64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The next open-loop call starts.
    Arrival,
    /// Call `id` ends.
    Done { id: usize },
    /// Closed-loop caller `worker` starts its next call.
    Next { worker: u32 },
}

#[derive(Debug, Clone, Copy)]
struct Call {
    arrival: u64,
    server: usize,
    code: i32,
    /// The caller (closed loop).
    worker: Option<u32>,
}

fn within(w: Option<Window>, t: u64) -> bool {
    w.is_some_and(|(a, b)| t >= ns(a) && t < ns(b))
}

/// When and how server `s` answers a call arriving at `t`.
fn respond(s: &ServerSpec, t: u64, rng: &mut SimRng) -> (u64, i32) {
    if within(s.fail, t) {
        return (t + FAIL_LATENCY, UNAVAILABLE);
    }
    let jitter = ns(s.jitter);
    let extra = if jitter == 0 {
        0
    } else {
        rng.next_u64() % jitter
    };
    let latency = match s.slow_until {
        Some((until, slow)) if t < ns(until) => slow,
        _ => s.latency,
    };
    let mut end = t + ns(latency) + extra;
    if let Some((a, b)) = s.freeze {
        let (a, b) = (ns(a), ns(b));
        // the process stops during [a, b): whatever was still running resumes at b
        if t < b && end > a {
            end += b - t.max(a);
        }
    }
    (end, OK)
}

/// Runs `scenario` with `policy` and reports what the callers saw.
#[must_use]
pub fn run(scenario: &Scenario, policy: Policy) -> Report {
    let n = scenario.servers.len();
    let epoch = Instant::now();
    let mut balancer = policy.build(n, epoch, scenario.seed);
    let mut server_rng = SimRng::new(scenario.seed ^ 0x5e5e_5e5e);
    let end = ns(scenario.duration);
    let timeout = ns(scenario.timeout);
    let mut heap: BinaryHeap<Reverse<(u64, u64, Event)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |heap: &mut BinaryHeap<_>, t: u64, e: Event| {
        seq += 1;
        heap.push(Reverse((t, seq, e)));
    };
    let interval = match scenario.load {
        Load::Open { rps } => {
            push(&mut heap, 0, Event::Arrival);
            (1e9 / rps) as u64
        }
        Load::Closed { clients } => {
            for w in 0..clients {
                push(&mut heap, 0, Event::Next { worker: w });
            }
            0
        }
    };
    let mut calls: Vec<Call> = Vec::new();
    let mut latencies: Vec<u64> = Vec::new();
    let mut report = Report {
        per_server: vec![0; n],
        ..Report::default()
    };
    let watched = scenario.watched;
    let freeze = scenario.servers.get(watched).and_then(|s| s.freeze);
    let mut prev_frozen_send: Option<u64> = None;
    while let Some(Reverse((now, _, event))) = heap.pop() {
        let worker = match event {
            Event::Arrival => {
                if now >= end {
                    continue;
                }
                push(&mut heap, now + interval, Event::Arrival);
                None
            }
            Event::Next { worker } => {
                if now >= end {
                    continue;
                }
                Some(worker)
            }
            Event::Done { id } => {
                let c = calls[id];
                balancer.done(c.server, c.arrival, now, c.code);
                latencies.push(now - c.arrival);
                if c.code != OK {
                    report.failed += 1;
                }
                if let Some(w) = c.worker {
                    push(&mut heap, now, Event::Next { worker: w });
                }
                continue;
            }
        };
        // a new call: pick, retry on another endpoint while the connection is refused
        report.calls += 1;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let s = balancer.pick(now);
            report.per_server[s] += 1;
            let spec = &scenario.servers[s];
            if s == watched && within(freeze, now) {
                report.sent_while_frozen += 1;
                let since = freeze.map(|(a, _)| Duration::from_nanos(now - ns(a)));
                if prev_frozen_send.is_none_or(|p| now - p < 1_000_000_000) {
                    report.stream_into_freeze = since;
                }
                prev_frozen_send = Some(now);
                report.last_sent_into_freeze = since;
            }
            if within(spec.down, now) {
                balancer.transport_failure(s, now, now);
                if attempt < MAX_ATTEMPTS {
                    continue;
                }
                latencies.push(0);
                report.failed += 1;
                if let Some(w) = worker {
                    // back off 1 ms rather than spinning at one instant
                    push(&mut heap, now + 1_000_000, Event::Next { worker: w });
                }
                break;
            }
            let (at, code) = respond(spec, now, &mut server_rng);
            let (at, code) = if at > now + timeout {
                (now + timeout, DEADLINE_EXCEEDED)
            } else {
                (at, code)
            };
            calls.push(Call {
                arrival: now,
                server: s,
                code,
                worker,
            });
            push(
                &mut heap,
                at,
                Event::Done {
                    id: calls.len() - 1,
                },
            );
            break;
        }
    }
    let total: u64 = report.per_server.iter().sum();
    if total > 0 {
        report.slow_share = 100.0 * report.per_server[watched] as f64 / total as f64;
    }
    latencies.sort_unstable();
    let q = |p: f64| {
        if latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        Duration::from_nanos(latencies[i])
    };
    report.p50 = q(0.50);
    report.p99 = q(0.99);
    report
}
