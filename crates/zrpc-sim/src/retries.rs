//! Client retries with and without a budget: the real [`RetryBudget`] and gRFC A6 [`backoff`] of
//! `zrpc_core::retry`, driven by an open-loop caller against simulated servers that fail some or
//! all of their calls.
//!
//! A caller request makes attempt 1; an attempt answered with a retryable code (`Unavailable`)
//! is retried after the A6 back-off while the attempts stay below `max_attempts` and the back-off
//! ends before the caller's deadline. A retry goes to another server than the one that just
//! failed (when there is one). Under a budget, each request deposits when it starts and each
//! retry withdraws when it is decided; a refused withdrawal ends the request with the failure.
//!
//! Servers are picked uniformly at random, not by a load-aware balancer: the balancer's own
//! steering and ejection would otherwise hide part of what the retries do. Servers have no
//! capacity limit here: the load they receive is counted, not fed back into their answers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::time::Duration;

use zrpc_client::sim::RandomSource;
use zrpc_core::grpc::code::{DEADLINE_EXCEEDED, OK, UNAVAILABLE};
use zrpc_core::retry::{RetryBudget, backoff};

use crate::model::Window;
use crate::ns;
use crate::rng::SimRng;

/// A6 back-off of the compared retry policies (grpc's example service config).
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// The largest back-off.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Growth of the back-off per retry.
pub const BACKOFF_MULTIPLIER: f64 = 2.0;
/// The budget's floor: retries per second allowed whatever the traffic.
pub const BUDGET_MIN_PER_SEC: u32 = 10;
/// The window over which the budget counts calls and retries.
pub const BUDGET_WINDOW: Duration = Duration::from_secs(10);
/// Codes a retry policy retries.
pub const RETRYABLE: [i32; 1] = [UNAVAILABLE];

/// A healthy server answers after this, plus up to [`JITTER`].
const LATENCY: u64 = 10_000_000;
const JITTER: u64 = 500_000;
/// A failing server answers after this.
const FAIL_LATENCY: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

/// The client's retry behaviour.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum RetryClient {
    /// go-zero: no retries.
    GoZero,
    /// grpc-go's gRFC A6 retry policy without `retryThrottling`.
    GrpcGo {
        /// `maxAttempts`, the first attempt included.
        max_attempts: u32,
    },
    /// zrpc: the same policy under a [`RetryBudget`] of `ratio`, [`BUDGET_MIN_PER_SEC`] and
    /// [`BUDGET_WINDOW`].
    Zrpc {
        /// `maxAttempts`, the first attempt included.
        max_attempts: u32,
        /// Retries allowed per recent call.
        ratio: f64,
    },
}

impl RetryClient {
    /// The clients compared in the tables, in order.
    pub const ALL: [RetryClient; 7] = [
        RetryClient::GoZero,
        RetryClient::GrpcGo { max_attempts: 3 },
        RetryClient::GrpcGo { max_attempts: 5 },
        RetryClient::Zrpc {
            max_attempts: 3,
            ratio: 0.1,
        },
        RetryClient::Zrpc {
            max_attempts: 5,
            ratio: 0.1,
        },
        RetryClient::Zrpc {
            max_attempts: 3,
            ratio: 0.2,
        },
        RetryClient::Zrpc {
            max_attempts: 5,
            ratio: 0.2,
        },
    ];

    /// The name used in tables.
    #[must_use]
    pub fn name(self) -> String {
        match self {
            RetryClient::GoZero => "go-zero (no retries)".into(),
            RetryClient::GrpcGo { max_attempts } => {
                format!("grpc-go, maxAttempts {max_attempts}, no throttling")
            }
            RetryClient::Zrpc {
                max_attempts,
                ratio,
            } => format!("zrpc, maxAttempts {max_attempts}, budget {ratio}"),
        }
    }

    fn max_attempts(self) -> u32 {
        match self {
            RetryClient::GoZero => 1,
            RetryClient::GrpcGo { max_attempts } | RetryClient::Zrpc { max_attempts, .. } => {
                max_attempts.max(1)
            }
        }
    }

    fn budget(self) -> Option<RetryBudget> {
        match self {
            RetryClient::Zrpc { ratio, .. } => {
                Some(RetryBudget::new(ratio, BUDGET_MIN_PER_SEC, BUDGET_WINDOW))
            }
            _ => None,
        }
    }
}

/// A server failing a share of its calls with `Unavailable`.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct FlakyServer {
    /// Share of the calls failed, in `[0, 1]`.
    pub fail_share: f64,
    /// When it fails them (`None`: all the time).
    pub window: Option<Window>,
}

impl FlakyServer {
    /// A server failing `fail_share` of the calls arriving during `window` (`None`: always).
    #[must_use]
    pub fn new(fail_share: f64, window: Option<Window>) -> Self {
        FlakyServer { fail_share, window }
    }

    fn fails(&self, t: u64, draw: f64) -> bool {
        let inside = self.window.is_none_or(|(a, b)| t >= ns(a) && t < ns(b));
        inside && draw < self.fail_share
    }
}

/// Servers, caller rate, duration, deadline and seed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RetryScenario {
    /// The servers.
    pub servers: Vec<FlakyServer>,
    /// Caller requests per second (evenly spaced).
    pub rps: f64,
    /// Requests start during this long.
    pub duration: Duration,
    /// The caller's deadline per request.
    pub timeout: Duration,
    /// The seed of every random choice.
    pub seed: u64,
}

impl RetryScenario {
    /// Three servers failing every call, 1000 requests/s for 60 s, deadline 2 s.
    #[must_use]
    pub fn all_failing(seed: u64) -> Self {
        RetryScenario {
            servers: vec![FlakyServer::new(1.0, None); 3],
            rps: 1000.0,
            duration: Duration::from_secs(60),
            timeout: Duration::from_secs(2),
            seed,
        }
    }

    /// Three servers, one failing 30 % of its calls, 1000 requests/s for 60 s, deadline 2 s.
    #[must_use]
    pub fn one_flaky(seed: u64) -> Self {
        let mut servers = vec![FlakyServer::default(); 3];
        servers[0] = FlakyServer::new(0.3, None);
        RetryScenario {
            servers,
            ..RetryScenario::all_failing(seed)
        }
    }

    /// Three servers, healthy for 10 s, failing every call for 20 s, healthy again for 30 s;
    /// 1000 requests/s, deadline 2 s.
    #[must_use]
    pub fn outage(seed: u64) -> Self {
        let window = Some(OUTAGE);
        RetryScenario {
            servers: vec![FlakyServer::new(1.0, window); 3],
            ..RetryScenario::all_failing(seed)
        }
    }
}

/// The failure window of [`RetryScenario::outage`].
pub const OUTAGE: Window = (Duration::from_secs(10), Duration::from_secs(30));

/// What a run measured.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RetryReport {
    /// Caller requests started.
    pub calls: u64,
    /// Requests sent to servers (first attempts and retries).
    pub attempts: u64,
    /// Caller requests that ended OK.
    pub succeeded: u64,
    /// Retries the budget refused.
    pub refused: u64,
    /// Caller requests started in each second.
    pub calls_per_sec: Vec<u64>,
    /// Requests sent to servers in each second.
    pub attempts_per_sec: Vec<u64>,
}

impl RetryReport {
    /// Requests sent to servers per caller request.
    #[must_use]
    pub fn attempts_per_call(&self) -> f64 {
        self.attempts as f64 / self.calls.max(1) as f64
    }

    /// Share of the caller requests that ended OK.
    #[must_use]
    pub fn success_ratio(&self) -> f64 {
        self.succeeded as f64 / self.calls.max(1) as f64
    }

    /// Requests sent to servers in seconds `[from, to)` per caller request started in them.
    #[must_use]
    pub fn load(&self, from: usize, to: usize) -> f64 {
        let sum = |v: &[u64]| {
            v.iter()
                .skip(from)
                .take(to.saturating_sub(from))
                .sum::<u64>()
        };
        sum(&self.attempts_per_sec) as f64 / sum(&self.calls_per_sec).max(1) as f64
    }

    /// The largest one-second [`load`](RetryReport::load) within seconds `[from, to)`.
    #[must_use]
    pub fn peak_load(&self, from: usize, to: usize) -> f64 {
        (from..to).map(|s| self.load(s, s + 1)).fold(0.0, f64::max)
    }
}

/// A draw in `[0, 1)`.
fn unit(rng: &mut SimRng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The next caller request starts.
    Arrival,
    /// An attempt of request `call` is answered.
    Answer { call: usize, code: i32 },
    /// Request `call` retries.
    Retry { call: usize },
}

struct Call {
    arrival: u64,
    attempts: u32,
    /// The server of the last attempt.
    last: usize,
}

/// Runs `scenario` with `client`'s retries.
#[must_use]
pub fn simulate_retries(scenario: &RetryScenario, client: RetryClient) -> RetryReport {
    let n = scenario.servers.len().max(1);
    let mut rng = SimRng::new(scenario.seed);
    let budget = client.budget();
    let max_attempts = client.max_attempts();
    let end = ns(scenario.duration);
    let timeout = ns(scenario.timeout);
    let interval = (1e9 / scenario.rps.max(1e-3)) as u64;
    let seconds = usize::try_from((end + timeout).div_ceil(SEC) + 1).unwrap_or(0);
    let mut report = RetryReport {
        calls_per_sec: vec![0; seconds],
        attempts_per_sec: vec![0; seconds],
        ..RetryReport::default()
    };
    let second = |t: u64| {
        usize::try_from(t / SEC)
            .unwrap_or(usize::MAX)
            .min(seconds - 1)
    };

    let mut heap: BinaryHeap<Reverse<(u64, u64, Event)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |heap: &mut BinaryHeap<_>, t: u64, e: Event| {
        seq += 1;
        heap.push(Reverse((t, seq, e)));
    };
    push(&mut heap, 0, Event::Arrival);
    let mut calls: Vec<Call> = Vec::new();

    while let Some(Reverse((now, _, event))) = heap.pop() {
        let (call, exclude) = match event {
            Event::Arrival => {
                if now >= end {
                    continue;
                }
                push(&mut heap, now + interval, Event::Arrival);
                report.calls += 1;
                report.calls_per_sec[second(now)] += 1;
                if let Some(b) = &budget {
                    b.deposit(now);
                }
                calls.push(Call {
                    arrival: now,
                    attempts: 0,
                    last: 0,
                });
                (calls.len() - 1, None)
            }
            Event::Retry { call } => (call, Some(calls[call].last)),
            Event::Answer { call, code } => {
                if code == OK {
                    report.succeeded += 1;
                    continue;
                }
                let c = &calls[call];
                if !RETRYABLE.contains(&code) || c.attempts >= max_attempts {
                    continue;
                }
                let delay = backoff(
                    INITIAL_BACKOFF,
                    MAX_BACKOFF,
                    BACKOFF_MULTIPLIER,
                    c.attempts,
                    unit(&mut rng),
                );
                let at = now + ns(delay);
                if at >= c.arrival + timeout {
                    continue;
                }
                if budget.as_ref().is_some_and(|b| !b.try_withdraw(now)) {
                    report.refused += 1;
                    continue;
                }
                push(&mut heap, at, Event::Retry { call });
                continue;
            }
        };
        // send an attempt of `call` at `now`
        let server = match exclude {
            Some(failed) if n > 1 => {
                let i = rng.below(n - 1);
                if i >= failed { i + 1 } else { i }
            }
            _ => rng.below(n),
        };
        let c = &mut calls[call];
        c.attempts += 1;
        c.last = server;
        report.attempts += 1;
        report.attempts_per_sec[second(now)] += 1;
        let fails = scenario.servers[server].fails(now, unit(&mut rng));
        let (at, code) = if fails {
            (now + FAIL_LATENCY, UNAVAILABLE)
        } else {
            (now + LATENCY + rng.next_u64() % JITTER, OK)
        };
        let deadline = c.arrival + timeout;
        let (at, code) = if at > deadline {
            (deadline, DEADLINE_EXCEEDED)
        } else {
            (at, code)
        };
        push(&mut heap, at, Event::Answer { call, code });
    }
    report
}

/// The share of a caller request the budget's floor adds when every attempt fails:
/// `BUDGET_MIN_PER_SEC / rps`.
#[must_use]
pub fn floor_share(rps: f64) -> f64 {
    f64::from(BUDGET_MIN_PER_SEC) / rps
}

/// The seed of the tables.
pub const TABLE_SEED: u64 = 1;

/// The three retry tables, in Markdown.
#[must_use]
pub fn retries_markdown() -> String {
    let mut out = String::new();
    let all = RetryScenario::all_failing(TABLE_SEED);
    let _ = writeln!(
        out,
        "All three servers fail every call with `Unavailable`; {} requests/s for {} s, deadline \
         {} s, seed {TABLE_SEED}. Back-off {} ms initial, {} s max, multiplier {}; budget floor \
         {BUDGET_MIN_PER_SEC}/s ({:.2} per request at this rate), window {} s.\n\n\
         | client | requests to servers per caller request | busiest second | retries refused by the budget |\n\
         |---|---|---|---|",
        all.rps,
        all.duration.as_secs(),
        all.timeout.as_secs(),
        INITIAL_BACKOFF.as_millis(),
        MAX_BACKOFF.as_secs(),
        BACKOFF_MULTIPLIER,
        floor_share(all.rps),
        BUDGET_WINDOW.as_secs(),
    );
    let secs = usize::try_from(all.duration.as_secs()).unwrap_or(0);
    for c in RetryClient::ALL {
        let r = simulate_retries(&all, c);
        let _ = writeln!(
            out,
            "| {} | {:.3} | {:.2} | {} |",
            c.name(),
            r.attempts_per_call(),
            r.peak_load(0, secs),
            r.refused
        );
    }

    let flaky = RetryScenario::one_flaky(TABLE_SEED);
    let _ = writeln!(
        out,
        "\nOne server of three fails 30 % of its calls with `Unavailable`; same rate, duration, \
         deadline and seed.\n\n\
         | client | caller requests OK | extra requests per caller request | retries refused by the budget |\n\
         |---|---|---|---|"
    );
    for c in RetryClient::ALL {
        let r = simulate_retries(&flaky, c);
        let _ = writeln!(
            out,
            "| {} | {:.3} % | {:.3} | {} |",
            c.name(),
            100.0 * r.success_ratio(),
            r.attempts_per_call() - 1.0,
            r.refused
        );
    }

    let outage = RetryScenario::outage(TABLE_SEED);
    let (a, b) = (
        usize::try_from(OUTAGE.0.as_secs()).unwrap_or(0),
        usize::try_from(OUTAGE.1.as_secs()).unwrap_or(0),
    );
    let _ = writeln!(
        out,
        "\nOutage: the three servers are healthy for {a} s, fail every call for {} s, then heal; \
         same rate and seed. Load = requests to servers per caller request.\n\n\
         | client | load during the failure | its busiest second | its last 10 s | after healing |\n\
         |---|---|---|---|---|",
        b - a
    );
    let tail = usize::try_from(outage.duration.as_secs()).unwrap_or(0);
    for c in RetryClient::ALL {
        let r = simulate_retries(&outage, c);
        let _ = writeln!(
            out,
            "| {} | {:.3} | {:.2} | {:.3} | {:.3} |",
            c.name(),
            r.load(a, b),
            r.peak_load(a, b),
            r.load(b.saturating_sub(10), b),
            r.load(b, tail)
        );
    }
    out
}
