#![allow(clippy::float_cmp)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zrpc_core::grpc::code;

use super::*;
use crate::balancer::stats::EJECT_AFTER;
use rand::SeedableRng;
use rand::rngs::SmallRng;

/// Replays scripted indices for `below`.
struct Script(VecDeque<usize>);

impl RandomSource for Script {
    fn next_u64(&mut self) -> u64 {
        0
    }
    fn below(&mut self, n: usize) -> usize {
        let i = self.0.pop_front().expect("script exhausted");
        assert!(i < n);
        i
    }
}

fn script(v: &[usize]) -> Script {
    Script(v.iter().copied().collect())
}

fn set(n: usize) -> Vec<Arc<EndpointStats>> {
    (0..n).map(|_| Arc::new(EndpointStats::new())).collect()
}

const MS: u64 = 1_000_000;

/// A picker with go-zero's rules (forcePick, `sqrt(lag)` load): the tests of those rules.
fn v1(t0: Instant) -> P2cPicker {
    P2cPicker::with_rules(t0, P2cRules::V1)
}

/// Gives endpoint `e` a completed sample of `lag_ms`, completing at `at` ns.
fn warm(e: &EndpointStats, lag_ms: u64, at: u64) {
    e.on_pick();
    e.on_done(at - lag_ms * MS, at, code::OK);
}

#[test]
fn empty_set_picks_nothing() {
    let p = P2cPicker::new(Instant::now());
    let empty: Vec<Arc<EndpointStats>> = Vec::new();
    assert_eq!(
        p.pick(&empty, Instant::now(), &mut SmallRng::seed_from_u64(1)),
        None
    );
}

#[test]
fn picks_lower_load_of_the_drawn_pair() {
    let t0 = Instant::now();
    let p = v1(t0);
    let s = set(3);
    let at = 100 * MS;
    warm(&s[0], 50, at);
    warm(&s[1], 10, at);
    warm(&s[2], 1, at);
    // all just picked (last_pick = 0, now < 1 s): no force pick.
    let now = t0 + Duration::from_millis(120);
    // draw a=0, b=0 -> b becomes 1: pair (0, 1) -> 1 (lag 10 < 50)
    assert_eq!(p.pick(&s, now, &mut script(&[0, 0])), Some(1));
    // pair (2, 0) -> 2
    assert_eq!(p.pick(&s, now, &mut script(&[2, 0])), Some(2));
    // in flight counts: pair (1, 2) with 1 in flight on each: 2 wins while
    // sqrt(1e6) * (n + 1) <= sqrt(1e7) * 2 = 6325, i.e. up to n = 5 in flight, then 1.
    let mut seq = Vec::new();
    for _ in 0..6 {
        seq.push(p.pick(&s, now, &mut script(&[1, 1])).unwrap());
    }
    assert_eq!(seq, vec![2, 2, 2, 2, 2, 1]);
    assert_eq!(s[2].inflight(), 6);
    assert_eq!(s[1].inflight(), 2);
}

#[test]
fn never_draws_the_same_endpoint_twice() {
    let t0 = Instant::now();
    let p = P2cPicker::new(t0);
    let s = set(5);
    for (i, e) in s.iter().enumerate() {
        warm(e, 1 + i as u64, 10 * MS);
    }
    let mut rng = SmallRng::seed_from_u64(42);
    let mut counts = [0u32; 5];
    for _ in 0..5000 {
        let i = p
            .pick(&s, t0 + Duration::from_millis(20), &mut rng)
            .unwrap();
        counts[i] += 1;
        s[i].on_abandon();
    }
    // the slowest endpoint is never the lower load of any pair
    assert_eq!(counts[4], 0, "{counts:?}");
    assert!(counts[0] > counts[1] && counts[1] > counts[2], "{counts:?}");
}

#[test]
fn health_gating_redraws_for_a_healthy_pair() {
    let t0 = Instant::now();
    let p = v1(t0);
    let s = set(3);
    warm(&s[0], 1, 10 * MS);
    warm(&s[1], 5, 10 * MS);
    warm(&s[2], 5, 10 * MS);
    // endpoint 0 fails: success drops to 0 (w = 0 after 10 s without completions)
    s[0].on_pick();
    s[0].on_done(10_000 * MS, 20_000 * MS, code::UNAVAILABLE);
    assert!(s[0].success() < 500.0);
    assert!(!s[0].is_healthy(20_000 * MS));
    let now = t0 + Duration::from_millis(20_000);
    for e in &s {
        // recently picked: no force pick in this test
        e.last_pick
            .store(p.clock().nanos(now), std::sync::atomic::Ordering::Relaxed);
    }
    // draws (0,1) unhealthy, (1,2) healthy -> stop, choose between 1 and 2 (equal load: first)
    let mut r = script(&[0, 0, 1, 1]);
    assert_eq!(p.pick(&s, now, &mut r), Some(1));
    assert!(r.0.is_empty(), "stopped after the healthy pair");
    // three unhealthy draws: the last pair is used anyway (go-zero)
    let mut r = script(&[0, 0, 0, 1, 2, 0]);
    let picked = p.pick(&s, now, &mut r).unwrap();
    assert!(r.0.is_empty());
    assert!(picked == 2 || picked == 0);
}

#[test]
fn force_picks_an_endpoint_idle_for_a_second() {
    let t0 = Instant::now();
    let p = v1(t0);
    let s = set(2);
    warm(&s[0], 1, 10 * MS);
    warm(&s[1], 100, 200 * MS);
    let mut rng = SmallRng::seed_from_u64(1);
    // t = 0.5 s: both "picked" at 0 (never): not yet due
    assert_eq!(
        p.pick(&s, t0 + Duration::from_millis(500), &mut rng),
        Some(0)
    );
    // t = 1.2 s: endpoint 1 was last picked at 0 -> forced
    assert_eq!(
        p.pick(&s, t0 + Duration::from_millis(1200), &mut rng),
        Some(1)
    );
    // right after: not due any more
    assert_eq!(
        p.pick(&s, t0 + Duration::from_millis(1300), &mut rng),
        Some(0)
    );
    assert_eq!(
        p.pick(&s, t0 + Duration::from_millis(2100), &mut rng),
        Some(0)
    );
    assert_eq!(
        p.pick(&s, t0 + Duration::from_millis(2201), &mut rng),
        Some(1)
    );
}

#[test]
fn ewma_math_matches_hand_computed_values() {
    let e = EndpointStats::new();
    assert_eq!(e.lag(), None);
    assert_eq!(e.success(), 1000.0);
    // first sample replaces: 10 ms
    e.on_pick();
    e.on_done(0, 10 * MS, code::OK);
    assert_eq!(e.lag_nanos(), 10_000_000.0);
    // 5 s later a 30 ms sample: w = exp(-0.5) = 0.6065306597
    e.on_pick();
    e.on_done(5_010 * MS - 30 * MS, 5_010 * MS, code::OK);
    let w = (-0.5f64).exp();
    let expected = 10e6 * w + 30e6 * (1.0 - w);
    assert!(
        (e.lag_nanos() - expected).abs() < 1.0,
        "{} vs {expected}",
        e.lag_nanos()
    );
    assert!((e.lag_nanos() - 17_869_387.6).abs() < 10.0);
    assert_eq!(e.success(), 1000.0);
    // 10 s later a failure (Internal) taking 1 ms: success = 1000 * e^-1 = 367.88;
    // the failure's lag sample is max(1 ms, lag): the lag cannot drop
    let before = e.lag_nanos();
    e.on_pick();
    e.on_done(15_010 * MS - MS, 15_010 * MS, code::INTERNAL);
    assert!(
        (e.success() - 1000.0 * (-1.0f64).exp()).abs() < 1e-6,
        "{}",
        e.success()
    );
    assert!((e.lag_nanos() - before).abs() < 1.0);
    assert_eq!(e.inflight(), 0);
}

#[test]
fn a_failure_is_never_a_fast_sample() {
    // go-zero would record 1 ms for a fast failure on a cold endpoint and make it the favourite.
    let e = EndpointStats::new();
    e.on_pick();
    e.on_done(0, MS, code::UNAVAILABLE);
    assert!(e.lag().unwrap() >= Duration::from_secs(1));
    assert_eq!(e.success(), 0.0);
    // acceptable codes (NotFound) are ordinary samples
    let e = EndpointStats::new();
    e.on_pick();
    e.on_done(0, MS, code::NOT_FOUND);
    assert_eq!(e.lag(), Some(Duration::from_millis(1)));
    assert_eq!(e.success(), 1000.0);
}

#[test]
fn cancellation_of_a_cold_probe_records_nothing() {
    let e = EndpointStats::new();
    e.on_pick();
    e.on_done(0, MS, code::CANCELLED);
    assert_eq!(e.lag(), None);
    assert!(e.is_probing());
    assert_eq!(e.inflight(), 0);
}

#[test]
fn cold_endpoint_gets_one_probe_until_it_answers() {
    let t0 = Instant::now();
    let p = P2cPicker::new(t0);
    let s = set(3);
    warm(&s[0], 10, 10 * MS);
    warm(&s[1], 10, 10 * MS);
    // endpoint 2 is new (cold). go-zero's lag = 0 would give it load 1 and nearly all traffic.
    let now = t0 + Duration::from_millis(20);
    let mut rng = SmallRng::seed_from_u64(7);
    let mut to_cold = 0;
    for _ in 0..300 {
        let i = p.pick(&s, now, &mut rng).unwrap();
        if i == 2 {
            to_cold += 1;
        } else {
            s[i].on_done(p.clock().nanos(now), p.clock().nanos(now) + MS, code::OK);
        }
    }
    assert_eq!(to_cold, 1, "exactly one probe while it is in flight");
    // the probe answers slowly (1 s): now it is measured and avoided
    s[2].on_done(20 * MS, 1_020 * MS, code::OK);
    assert!(!s[2].is_probing());
    let now = t0 + Duration::from_millis(1_020);
    let mut to_slow = 0;
    for _ in 0..300 {
        let i = p.pick(&s, now, &mut rng).unwrap();
        if i == 2 {
            to_slow += 1;
        }
        s[i].on_abandon();
    }
    assert!(to_slow <= 1, "{to_slow}");
}

#[test]
fn all_cold_endpoints_share_the_load_without_failing() {
    let t0 = Instant::now();
    let p = P2cPicker::new(t0);
    let s = set(3);
    let mut rng = SmallRng::seed_from_u64(3);
    for _ in 0..30 {
        p.pick(&s, t0, &mut rng).unwrap();
    }
    let inflight: Vec<u64> = s.iter().map(|e| e.inflight()).collect();
    assert_eq!(inflight.iter().sum::<u64>(), 30);
    assert!(
        inflight.iter().all(|&i| (8..=12).contains(&i)),
        "{inflight:?}"
    );
}

#[test]
fn transport_failure_takes_an_endpoint_out_then_probes_it() {
    let t0 = Instant::now();
    let p = P2cPicker::new(t0);
    let s = set(3);
    for e in &s {
        warm(e, 1, 10 * MS);
    }
    s[1].on_pick();
    s[1].on_transport_failure(10 * MS, 11 * MS);
    assert!(s[1].is_down(11 * MS));
    let mut rng = SmallRng::seed_from_u64(9);
    let during = t0 + Duration::from_millis(50);
    for _ in 0..200 {
        let i = p.pick(&s, during, &mut rng).unwrap();
        assert_ne!(i, 1, "down endpoint picked");
        s[i].on_abandon();
    }
    // after the 100 ms back-off: one probe at a time
    let after = t0 + Duration::from_millis(200);
    let mut to_1 = 0;
    for _ in 0..200 {
        let i = p.pick(&s, after, &mut rng).unwrap();
        if i == 1 {
            to_1 += 1;
        } else {
            s[i].on_abandon();
        }
    }
    assert_eq!(to_1, 1);
    // the probe fails again: back-off doubles (200 ms)
    s[1].on_transport_failure(200 * MS, 201 * MS);
    assert!(s[1].is_down(400 * MS));
    assert!(!s[1].is_down(402 * MS));
}

/// A healed endpoint is back at once: the answer to its probe replaces the latency and the
/// success score left by the failure (whose 1.3 s measured how long the failure took to detect),
/// rather than being averaged with them for tens of seconds, during which it would lose every
/// pair and be re-probed only every 30 x its latency.
#[test]
fn a_probe_answered_after_a_transport_failure_replaces_the_stale_latency() {
    let s = EndpointStats::new();
    warm(&s, 1, 10 * MS);
    s.on_pick();
    s.on_transport_failure(100 * MS, 1_400 * MS);
    assert!(
        s.lag_nanos() > 100.0 * MS as f64,
        "the failure's mark: {}",
        s.lag_nanos()
    );
    assert!(s.success() < 1000.0);
    assert!(s.is_probing());
    // healed: the probe, 2 s later, answers in 1 ms
    s.on_pick();
    s.on_done(3_400 * MS, 3_401 * MS, code::OK);
    assert_eq!(s.lag(), Some(Duration::from_millis(1)));
    assert_eq!(s.success(), 1000.0);
    assert!(!s.is_probing());
}

#[test]
fn all_down_returns_the_first_to_recover() {
    let t0 = Instant::now();
    let p = P2cPicker::new(t0);
    let s = set(3);
    s[0].on_pick();
    s[0].on_transport_failure(0, 5 * MS);
    s[1].on_pick();
    s[1].on_transport_failure(0, MS);
    s[2].on_pick();
    s[2].on_transport_failure(0, 3 * MS);
    let mut rng = SmallRng::seed_from_u64(1);
    assert_eq!(p.pick(&s, t0 + Duration::from_millis(6), &mut rng), Some(1));
}

/// Discrete-event simulation of the design's scenario: A and B answer in 10 ms, C in 1000 ms,
/// 2000 requests/s for 5 s, all endpoints cold at start. Deterministic (seeded, simulated time).
fn simulate_share_of_slow(probe_cold: bool) -> f64 {
    let t0 = Instant::now();
    let p = P2cPicker::new(t0);
    let s = set(3);
    if !probe_cold {
        // go-zero: cold endpoints are not limited (emulated by leaving probing mode at once)
        for e in &s {
            e.probing.store(false, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let lat = [10 * MS, 10 * MS, 1000 * MS];
    let mut rng = SmallRng::seed_from_u64(11);
    let mut done: BinaryHeap<Reverse<(u64, usize, u64)>> = BinaryHeap::new();
    let total = 10_000u64;
    let mut to_c = 0;
    for k in 0..total {
        let now = k * MS / 2;
        while let Some(Reverse((t, i, start))) = done.peek().copied() {
            if t > now {
                break;
            }
            done.pop();
            s[i].on_done(start, t, code::OK);
        }
        let i = p
            .pick(&s, t0 + Duration::from_nanos(now), &mut rng)
            .unwrap();
        if i == 2 {
            to_c += 1;
        }
        done.push(Reverse((now + lat[i], i, now)));
    }
    f64::from(to_c) / total as f64
}

#[test]
fn slow_endpoint_share_with_cold_probing_is_tiny() {
    let zrpc = simulate_share_of_slow(true);
    let flood = simulate_share_of_slow(false);
    println!(
        "slow endpoint share: zrpc {:.3}%, without cold probing {:.3}%",
        zrpc * 100.0,
        flood * 100.0
    );
    assert!(zrpc < 0.002, "zrpc share {zrpc}");
    assert!(flood > zrpc, "flood {flood} zrpc {zrpc}");
}

proptest::proptest! {
    /// Any state, any seed: the pick is in range, marks exactly one endpoint in flight, and never
    /// chooses an endpoint in back-off while another one is usable.
    #[test]
    fn pick_invariants(
        seed in proptest::prelude::any::<u64>(),
        spec in proptest::collection::vec((0u64..2_000, 0u8..4, 0u64..5, proptest::prelude::any::<bool>()), 1..40),
        now_ms in 0u64..3_000,
    ) {
        let t0 = Instant::now();
        let p = P2cPicker::new(t0);
        let s = set(spec.len());
        for (e, &(lag_ms, kind, inflight, down)) in s.iter().zip(&spec) {
            match kind {
                0 => {} // cold
                1 => warm(e, lag_ms, 2_000 * MS + lag_ms * MS),
                2 => {
                    e.on_pick();
                    e.on_done(0, lag_ms * MS, code::UNAVAILABLE);
                }
                _ => {
                    warm(e, lag_ms, 2_000 * MS + lag_ms * MS);
                    e.on_pick();
                    e.on_done(3_000 * MS, 3_001 * MS, code::INTERNAL);
                }
            }
            for _ in 0..inflight {
                e.on_pick();
            }
            if down {
                e.on_pick();
                e.on_transport_failure(0, 2_500 * MS);
            }
        }
        let now = t0 + Duration::from_millis(now_ms);
        let now_ns = p.clock().nanos(now);
        let before: Vec<u64> = s.iter().map(|e| e.inflight()).collect();
        let i = p.pick(&s, now, &mut SmallRng::seed_from_u64(seed)).unwrap();
        proptest::prop_assert!(i < s.len());
        for (k, e) in s.iter().enumerate() {
            let expected = before[k] + u64::from(k == i);
            proptest::prop_assert_eq!(e.inflight(), expected);
        }
        if s.iter().any(|e| !e.is_down(now_ns)) {
            proptest::prop_assert!(!s[i].is_down(now_ns), "picked a down endpoint");
        }
    }
}

// ---- v2 rules ----

#[test]
fn v2_an_endpoint_that_stopped_answering_loses_its_pairs_before_any_deadline() {
    let t0 = Instant::now();
    let s = set(2);
    // the fast one (1 ms) took two calls at 1000 ms and has not answered for 300 ms since; the
    // slower one (10 ms) answers and has five calls in flight
    warm(&s[0], 1, 1000 * MS);
    warm(&s[1], 10, 1299 * MS);
    s[0].on_pick_at(1000 * MS);
    s[0].on_pick_at(1000 * MS);
    for _ in 0..5 {
        s[1].on_pick_at(1299 * MS);
    }
    let v2 = P2cPicker::new(t0);
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    // 5 ms of silence: still the cheaper one (5 ms x 3 against 10 ms x 6)
    assert_eq!(
        v2.pick(&s, at(1005), &mut SmallRng::seed_from_u64(1)),
        Some(0)
    );
    s[0].on_abandon();
    // 300 ms of silence count as its latency: (300 ms x 3) against (10 ms x 6)
    assert_eq!(
        v2.pick(&s, at(1300), &mut SmallRng::seed_from_u64(1)),
        Some(1)
    );
}

#[test]
fn v2_cost_is_linear_in_latency() {
    let t0 = Instant::now();
    let s = set(2);
    warm(&s[0], 10, 1000 * MS);
    warm(&s[1], 1000, 1000 * MS);
    // 20 calls in flight on the 10 ms endpoint: still cheaper than an idle 1000 ms one
    for _ in 0..20 {
        s[0].on_pick();
    }
    let now = t0 + Duration::from_millis(1001);
    let v2 = P2cPicker::new(t0);
    assert_eq!(v2.rules(), P2cRules::V2);
    assert_eq!(v2.pick(&s, now, &mut SmallRng::seed_from_u64(1)), Some(0));
    s[0].on_abandon();
    // go-zero's sqrt load sends it to the slow one (sqrt(1e7) * 21 > sqrt(1e9)); no forcePick due
    for e in &s {
        e.last_pick
            .store(1001 * MS, std::sync::atomic::Ordering::Relaxed);
    }
    assert_eq!(
        v1(t0).pick(&s, now, &mut SmallRng::seed_from_u64(1)),
        Some(1)
    );
}

/// Picks every 10 ms for `secs` on (fast 1 ms, slow `slow_ms`), completing each call at once
/// with its latency; returns the times (ms) the slow one was picked.
fn slow_pick_times(slow_ms: u64, secs: u64) -> Vec<u64> {
    let t0 = Instant::now();
    let p = P2cPicker::new(t0);
    let s = set(2);
    let mut out = Vec::new();
    let mut t = 0;
    while t < secs * 1000 {
        t += 10;
        let now = t * MS;
        let i = p
            .pick(
                &s,
                t0 + Duration::from_millis(t),
                &mut SmallRng::seed_from_u64(t),
            )
            .unwrap();
        let lat = if i == 0 { 1 } else { slow_ms };
        if i == 1 {
            out.push(t);
        }
        s[i].on_done(now, now + lat * MS, code::OK);
    }
    out
}

#[test]
fn v2_reprobes_a_skipped_slow_endpoint_on_a_doubling_schedule() {
    // 50 ms: the interval starts at max(1 s, 30 x 50 ms) = 1.5 s and doubles to the 30 s cap
    let picks = slow_pick_times(50, 120);
    let gaps: Vec<u64> = picks.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 5, "{picks:?}");
    assert!((1500..1600).contains(&gaps[0]), "{gaps:?}");
    for w in gaps.windows(2) {
        if w[0] < 15_000 {
            assert!(w[1] >= w[0] * 19 / 10, "not doubling: {gaps:?}");
        }
    }
    assert!(gaps.iter().all(|&g| g <= 30_100), "over the cap: {gaps:?}");
    // a 1000 ms endpoint: one cold probe, then one re-probe per 30 s at most
    let picks = slow_pick_times(1000, 60);
    assert!(picks.len() <= 3, "{picks:?}");
}

#[test]
fn v2_never_reprobes_while_a_call_is_in_flight() {
    let t0 = Instant::now();
    let p = P2cPicker::new(t0);
    let s = set(2);
    warm(&s[0], 1, 200 * MS);
    warm(&s[1], 100, 200 * MS);
    // due (60 s since its answer) but a call to it is still in flight
    s[1].on_pick();
    let now = t0 + Duration::from_secs(60);
    let mut rng = SmallRng::seed_from_u64(3);
    for _ in 0..100 {
        assert_eq!(p.pick(&s, now, &mut rng), Some(0));
        s[0].on_abandon();
    }
    // answered: the next pick is the probe, and only one
    s[1].on_done(200 * MS, 60_000 * MS, code::OK);
    let now = t0 + Duration::from_secs(120);
    assert_eq!(p.pick(&s, now, &mut rng), Some(1));
    assert_eq!(p.pick(&s, now, &mut rng), Some(0));
}

#[test]
fn v2_probe_answer_replaces_stale_latency() {
    let t0 = Instant::now();
    let p = P2cPicker::new(t0);
    let s = set(2);
    warm(&s[0], 10, 100 * MS);
    warm(&s[1], 1000, 1000 * MS);
    let now = t0 + Duration::from_secs(40);
    assert_eq!(
        p.pick(&s, now, &mut SmallRng::seed_from_u64(1)),
        Some(1),
        "due: probe"
    );
    // healed: answers in 10 ms, which replaces the 1 s average at once
    s[1].on_done(40_000 * MS, 40_010 * MS, code::OK);
    assert_eq!(s[1].lag(), Some(Duration::from_millis(10)));
}

#[test]
fn v2_ejects_after_consecutive_failures_but_never_the_whole_set() {
    let t0 = Instant::now();
    let p = P2cPicker::new(t0);
    let s = set(2);
    warm(&s[0], 1, 10 * MS);
    warm(&s[1], 1, 10 * MS);
    for k in 0..EJECT_AFTER as u64 {
        s[0].on_pick();
        s[0].on_done((20 + k) * MS, (21 + k) * MS, code::DEADLINE_EXCEEDED);
    }
    assert!(s[0].is_ejected(30 * MS));
    let now = t0 + Duration::from_millis(30);
    let mut rng = SmallRng::seed_from_u64(5);
    for _ in 0..50 {
        assert_eq!(p.pick(&s, now, &mut rng), Some(1));
        s[1].on_abandon();
    }
    // the other one fails too: both ejected, a pick still returns one of them
    for k in 0..EJECT_AFTER as u64 {
        s[1].on_pick();
        s[1].on_done((40 + k) * MS, (41 + k) * MS, code::UNAVAILABLE);
    }
    assert!(s[1].is_ejected(50 * MS));
    let any = p
        .pick(&s, t0 + Duration::from_millis(50), &mut rng)
        .unwrap();
    s[any].on_abandon();
    // after the ejection (1 s): one trial call at a time, a success ends the trial
    let later = t0 + Duration::from_millis(1100);
    let i = p.pick(&s, later, &mut rng).unwrap();
    let j = p.pick(&s, later, &mut rng).unwrap();
    assert_ne!(i, j, "one trial call at a time per endpoint");
    assert!(s[i].cost(1100 * MS) >= 1e12 && s[j].cost(1100 * MS) >= 1e12);
    s[i].on_done(1100 * MS, 1101 * MS, code::OK);
    assert!(!s[i].is_ejected(1101 * MS));
    assert!(s[i].cost(1101 * MS) < 1e6);
}

#[test]
fn v2_ejection_backs_off_while_trials_fail() {
    let e = EndpointStats::new();
    warm(&e, 1, 10 * MS);
    let mut t = 20 * MS;
    for _ in 0..EJECT_AFTER {
        e.on_pick();
        e.on_done(t, t + MS, code::UNAVAILABLE);
        t += MS;
    }
    let first = e.eject_until.load(std::sync::atomic::Ordering::Relaxed) - t;
    assert_eq!(first, 1_000 * MS);
    // the trial call fails: ejected again for twice as long
    t += 2_000 * MS;
    e.on_pick();
    e.on_done(t, t + MS, code::UNAVAILABLE);
    let second = e.eject_until.load(std::sync::atomic::Ordering::Relaxed) - (t + MS);
    assert_eq!(second, 2_000 * MS);
}

#[test]
fn v2_calls_failing_while_ejected_do_not_extend_the_ejection() {
    let e = EndpointStats::new();
    warm(&e, 1, 10 * MS);
    // 20 calls stuck on a frozen server time out together
    for _ in 0..20 {
        e.on_pick();
    }
    for k in 0..20 {
        e.on_done(100 * MS, (2100 + k) * MS, code::DEADLINE_EXCEEDED);
    }
    // ejected once, for 1 s from the third timeout
    assert!(e.is_ejected(3000 * MS));
    assert!(!e.is_ejected(3103 * MS));
}

#[test]
fn max_ejected_share_caps_ejections() {
    use crate::balancer::stats::EjectionLimit;
    // 50 % of two endpoints: one may be ejected at a time
    let limit = EjectionLimit::new(50);
    limit.set_len(2);
    let s = set(2);
    let fail = |e: &EndpointStats, t: u64| {
        for _ in 0..EJECT_AFTER {
            e.on_pick();
            e.on_done_limited(t, t + MS, code::UNAVAILABLE, &limit);
        }
    };
    let t = 1_000 * MS;
    fail(&s[0], t);
    assert!(s[0].is_ejected(t + 2 * MS));
    fail(&s[1], t);
    assert!(
        !s[1].is_ejected(t + 2 * MS),
        "the cap keeps the second one in"
    );
    // once the first ejection ends, the next failure of the second one ejects it
    let later = t + 2_000 * MS;
    s[1].on_pick();
    s[1].on_done_limited(later, later + MS, code::UNAVAILABLE, &limit);
    assert!(s[1].is_ejected(later + 2 * MS));
    // 0 %: never ejected; 100 % (the default): both
    for (percent, ejected) in [(0, false), (100, true)] {
        let limit = EjectionLimit::new(percent);
        limit.set_len(2);
        let s = set(2);
        for e in &s {
            for _ in 0..EJECT_AFTER {
                e.on_pick();
                e.on_done_limited(t, t + MS, code::UNAVAILABLE, &limit);
            }
        }
        assert!(
            s.iter().all(|e| e.is_ejected(t + 2 * MS) == ejected),
            "{percent}"
        );
    }
}

#[test]
fn calls_without_an_answer_for_ten_latencies_stall_an_endpoint_until_it_is_heard_from() {
    let s = EndpointStats::new();
    // 2 ms latency: the limit is STALL_MIN (250 ms), above ten latencies
    warm(&s, 2, 1000 * MS);
    s.on_pick_at(1000 * MS);
    assert!(!s.is_stalled(1200 * MS));
    assert!(s.is_stalled(1251 * MS));
    // bytes came in: heard from, the count starts again
    s.heard(1251 * MS);
    assert!(!s.is_stalled(1400 * MS));
    // suspect: down (not stalled again) until a probe answers
    assert!(s.suspect());
    assert!(!s.suspect(), "already suspect: one probe at a time");
    assert!(s.is_down(1400 * MS) && !s.is_stalled(2000 * MS));
    // an answered probe doubles the limit while the same calls run: 500 ms from the answer
    s.clear_suspect(2000 * MS);
    assert!(!s.is_down(2000 * MS) && s.is_probing());
    assert!(!s.is_stalled(2400 * MS));
    assert!(s.is_stalled(2501 * MS));
    // a completed call ends the busy period: nothing in flight, nothing stalled
    s.on_done(1000 * MS, 2600 * MS, code::OK);
    assert!(!s.is_stalled(9000 * MS));
}

#[test]
fn a_slow_endpoint_stalls_after_ten_of_its_latencies() {
    let s = EndpointStats::new();
    warm(&s, 100, 1000 * MS);
    s.on_pick_at(1000 * MS);
    assert!(!s.is_stalled(1900 * MS));
    assert!(s.is_stalled(2001 * MS));
}

#[test]
fn a_probe_answered_within_a_second_keeps_deadlines_from_asking_for_another() {
    let s = EndpointStats::new();
    assert!(!s.recently_verified(5000 * MS), "never probed");
    assert!(s.suspect());
    s.clear_suspect(5000 * MS);
    assert!(s.recently_verified(5999 * MS));
    assert!(!s.recently_verified(6001 * MS));
}
