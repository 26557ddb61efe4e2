//! The balancing policies compared: zrpc's real pickers and two reimplementations.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zrpc_client::sim::{EndpointStats, P2cPicker, P2cRules, RandomSource, RoundRobin};

use crate::rng::SimRng;

/// A balancing policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Policy {
    /// go-zero's `p2c_ewma` exactly (reimplemented here): cold nodes have lag 0, forcePick 1 s
    /// keyed to the last pick, `sqrt(lag)` load.
    GoZero,
    /// zrpc's real picker, [`P2cRules::V1`] (go-zero's rules with zrpc's cold-start fix).
    V1,
    /// zrpc's real picker, [`P2cRules::V2`].
    V2,
    /// zrpc's real round robin.
    RoundRobin,
    /// tower's `PeakEwma` (decay 10 s, default RTT 30 ms as in linkerd2-proxy) behind power of
    /// two choices, reimplemented here.
    PeakEwma,
}

impl Policy {
    /// Every policy, in table order.
    pub const ALL: [Policy; 5] = [
        Policy::GoZero,
        Policy::V1,
        Policy::V2,
        Policy::RoundRobin,
        Policy::PeakEwma,
    ];

    /// The name used in tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Policy::GoZero => "go-zero p2c_ewma",
            Policy::V1 => "zrpc p2c v1",
            Policy::V2 => "zrpc p2c v2",
            Policy::RoundRobin => "round robin",
            Policy::PeakEwma => "tower PeakEwma",
        }
    }

    pub(crate) fn build(self, n: usize, epoch: Instant, seed: u64) -> Box<dyn Balance> {
        let rng = SimRng::new(seed);
        match self {
            Policy::GoZero => Box::new(GoZero {
                nodes: vec![GzNode::default(); n],
                rng,
            }),
            Policy::PeakEwma => Box::new(PeakEwma {
                nodes: vec![Peak::default(); n],
                rng,
            }),
            Policy::V1 | Policy::V2 | Policy::RoundRobin => {
                let kind = match self {
                    Policy::V1 => Kind::P2c(P2cPicker::with_rules(epoch, P2cRules::V1)),
                    Policy::V2 => Kind::P2c(P2cPicker::with_rules(epoch, P2cRules::V2)),
                    _ => Kind::Rr(RoundRobin::new(epoch)),
                };
                Box::new(Real {
                    set: (0..n).map(|_| Arc::new(EndpointStats::new())).collect(),
                    kind,
                    epoch,
                    rng,
                })
            }
        }
    }
}

/// A picker under simulation; times are nanoseconds of simulated time.
pub(crate) trait Balance {
    fn pick(&mut self, now: u64) -> usize;
    fn done(&mut self, i: usize, start: u64, now: u64, code: i32);
    /// The call never reached the server (connection refused).
    fn transport_failure(&mut self, i: usize, start: u64, now: u64) {
        self.done(i, start, now, 14);
    }
}

enum Kind {
    P2c(P2cPicker),
    Rr(RoundRobin),
}

/// zrpc's real code.
struct Real {
    set: Vec<Arc<EndpointStats>>,
    kind: Kind,
    epoch: Instant,
    rng: SimRng,
}

impl Balance for Real {
    fn pick(&mut self, now: u64) -> usize {
        let at = self.epoch + Duration::from_nanos(now);
        let i = match &self.kind {
            Kind::P2c(p) => p.pick(&self.set, at, &mut self.rng),
            Kind::Rr(r) => r.pick(&self.set, at),
        };
        i.unwrap_or(0)
    }

    fn done(&mut self, i: usize, start: u64, now: u64, code: i32) {
        self.set[i].on_done(start, now, code);
    }

    fn transport_failure(&mut self, i: usize, start: u64, now: u64) {
        self.set[i].on_transport_failure(start, now);
    }
}

const DECAY_NS: f64 = 10e9;
const FORCE_PICK_NS: u64 = 1_000_000_000;

#[derive(Debug, Clone, Copy)]
struct GzNode {
    lag: u64,
    inflight: i64,
    success: u64,
    last: u64,
    pick: u64,
}

impl Default for GzNode {
    fn default() -> Self {
        GzNode {
            lag: 0,
            inflight: 0,
            success: 1000,
            last: 0,
            pick: 0,
        }
    }
}

impl GzNode {
    fn load(&self) -> i64 {
        #[allow(clippy::cast_possible_truncation)]
        let lag = ((self.lag + 1) as f64).sqrt() as i64;
        let load = lag * (self.inflight + 1);
        if load == 0 { i64::from(i32::MAX) } else { load }
    }
}

/// go-zero `zrpc/internal/balancer/p2c/p2c.go`, line by line.
struct GoZero {
    nodes: Vec<GzNode>,
    rng: SimRng,
}

impl GoZero {
    fn choose(&mut self, a: usize, b: usize, now: u64) -> usize {
        let (c1, c2) = if self.nodes[a].load() > self.nodes[b].load() {
            (b, a)
        } else {
            (a, b)
        };
        if now.saturating_sub(self.nodes[c2].pick) > FORCE_PICK_NS {
            self.nodes[c2].pick = now;
            return c2;
        }
        self.nodes[c1].pick = now;
        c1
    }
}

impl Balance for GoZero {
    fn pick(&mut self, now: u64) -> usize {
        let n = self.nodes.len();
        let i = match n {
            1 => {
                self.nodes[0].pick = now;
                0
            }
            2 => self.choose(0, 1, now),
            _ => {
                let (mut a, mut b) = (0, 1);
                for _ in 0..3 {
                    a = self.rng.below(n);
                    b = self.rng.below(n - 1);
                    if b >= a {
                        b += 1;
                    }
                    if self.nodes[a].success > 500 && self.nodes[b].success > 500 {
                        break;
                    }
                }
                self.choose(a, b, now)
            }
        };
        self.nodes[i].inflight += 1;
        i
    }

    fn done(&mut self, i: usize, start: u64, now: u64, code: i32) {
        let c = &mut self.nodes[i];
        c.inflight -= 1;
        let last = std::mem::replace(&mut c.last, now);
        let td = now.saturating_sub(last) as f64;
        let mut w = (-td / DECAY_NS).exp();
        let lag = now.saturating_sub(start) as f64;
        if c.lag == 0 {
            w = 0.0;
        }
        c.lag = (c.lag as f64 * w + lag * (1.0 - w)) as u64;
        let success = if zrpc_core::grpc::code::is_acceptable(code) {
            1000.0
        } else {
            0.0
        };
        c.success = (c.success as f64 * w + success * (1.0 - w)) as u64;
    }
}

/// linkerd2-proxy's default RTT estimate for an endpoint without samples.
const PEAK_DEFAULT_RTT_NS: f64 = 30e6;

#[derive(Debug, Clone, Copy, Default)]
struct Peak {
    rtt: Option<f64>,
    update_at: u64,
    pending: u32,
}

impl Peak {
    /// tower `RttEstimate::update`: a higher sample replaces (the peak), a lower one is averaged
    /// with a weight decaying with the time since the last update.
    fn update(&mut self, sent: u64, recv: u64) -> f64 {
        let rtt = recv.saturating_sub(sent) as f64;
        let est = self.rtt.unwrap_or(PEAK_DEFAULT_RTT_NS);
        let next = if est < rtt {
            rtt
        } else {
            let elapsed = recv.saturating_sub(self.update_at) as f64;
            let decay = (-elapsed / DECAY_NS).exp();
            est * decay + rtt * (1.0 - decay)
        };
        self.rtt = Some(next);
        self.update_at = recv;
        next
    }

    /// tower `PeakEwma::load`: the estimate decays toward 0 with time, times (pending + 1).
    fn cost(&mut self, now: u64) -> f64 {
        let rtt = self.update(now, now);
        rtt * (f64::from(self.pending) + 1.0)
    }
}

/// tower `p2c::Balance` over `PeakEwma` loads.
struct PeakEwma {
    nodes: Vec<Peak>,
    rng: SimRng,
}

impl Balance for PeakEwma {
    fn pick(&mut self, now: u64) -> usize {
        let n = self.nodes.len();
        let i = if n == 1 {
            0
        } else {
            let a = self.rng.below(n);
            let mut b = self.rng.below(n - 1);
            if b >= a {
                b += 1;
            }
            let (ca, cb) = (self.nodes[a].cost(now), self.nodes[b].cost(now));
            if ca <= cb { a } else { b }
        };
        self.nodes[i].pending += 1;
        i
    }

    fn done(&mut self, i: usize, start: u64, now: u64, _code: i32) {
        let p = &mut self.nodes[i];
        p.pending -= 1;
        p.update(start, now);
    }
}
