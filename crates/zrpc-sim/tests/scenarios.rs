//! Scenario bounds on zrpc's real balancing and breaking code under simulated time (the bounds
//! `docs/balancing.md` reports).
//! Each test runs minutes of simulated traffic in well under a second (release) or a few
//! seconds (debug).

use std::time::Duration;

use zrpc_sim::{BreakerRules, Load, Policy, Report, Scenario, ServerSpec, run, simulate_outage};

const MIN: Duration = Duration::from_secs(60);

fn seed_example(policy: Policy, load: Load, seed: u64) -> Report {
    run(&Scenario::seed_example(load, MIN, seed), policy)
}

#[test]
fn simulator_reproduces_go_zero_figures() {
    // reference figures from an independent, line-by-line simulation of go-zero's p2c_ewma in
    // the slow-node scenario: 5.8 / 1.56 / 1.10 % at 20 / 200 / 2000 rps
    let expected = [(20.0, 5.8), (200.0, 1.56), (2000.0, 1.10)];
    for (rps, share) in expected {
        let r = seed_example(Policy::GoZero, Load::Open { rps }, 1);
        assert!(
            (r.slow_share - share).abs() < share * 0.25,
            "{rps} rps: {:.3}% vs {share}%",
            r.slow_share
        );
    }
    // one call at a time: about two thirds to the slow server (measured with go-zero: 69 %)
    let r = seed_example(Policy::GoZero, Load::Closed { clients: 1 }, 1);
    assert!(r.slow_share > 55.0, "{:.1}%", r.slow_share);
}

#[test]
fn v2_keeps_traffic_off_the_slow_server_open_loop() {
    let bounds = [(20.0, 0.25), (200.0, 0.05), (2000.0, 0.015)];
    for seed in 1..=3 {
        for (rps, bound) in bounds {
            let r = seed_example(Policy::V2, Load::Open { rps }, seed);
            assert!(
                r.slow_share <= bound,
                "seed {seed}, {rps} rps: slow share {:.4}% > {bound}%",
                r.slow_share
            );
            assert!(
                r.p99 <= Duration::from_millis(15),
                "seed {seed}, {rps} rps: p99 {:?}",
                r.p99
            );
            assert_eq!(r.failed, 0);
        }
    }
}

#[test]
fn v2_keeps_traffic_off_the_slow_server_closed_loop() {
    for seed in 1..=3 {
        let one = seed_example(Policy::V2, Load::Closed { clients: 1 }, seed);
        assert!(one.slow_share <= 2.0, "C=1: {:.3}%", one.slow_share);
        let twenty = seed_example(Policy::V2, Load::Closed { clients: 20 }, seed);
        assert!(twenty.slow_share <= 0.2, "C=20: {:.3}%", twenty.slow_share);
        // the v1 rules send a one-call-at-a-time client mostly to the slow server
        let v1 = seed_example(Policy::V1, Load::Closed { clients: 1 }, seed);
        assert!(v1.slow_share > 50.0, "v1 C=1: {:.1}%", v1.slow_share);
    }
}

#[test]
fn v2_beats_peak_ewma_on_the_seed_example() {
    for rps in [20.0, 200.0, 2000.0] {
        let (mut v2, mut peak) = (0.0, 0.0);
        for seed in 1..=3 {
            v2 += seed_example(Policy::V2, Load::Open { rps }, seed).slow_share;
            peak += seed_example(Policy::PeakEwma, Load::Open { rps }, seed).slow_share;
        }
        assert!(
            v2 <= peak,
            "{rps} rps: v2 {v2:.4} vs PeakEwma {peak:.4} (sums)"
        );
    }
}

#[test]
fn a_healed_slow_server_is_measured_again_and_used() {
    // the slow server answers in 1000 ms for the first 30 s, then in 10 ms (fixed)
    let mut s = Scenario::seed_example(Load::Open { rps: 200.0 }, Duration::from_secs(120), 4);
    s.servers[2] = ServerSpec::new(Duration::from_millis(10))
        .slow_until(Duration::from_secs(30), Duration::from_millis(1000));
    let r = run(&s, Policy::V2);
    // re-probed within the 30 s cap after healing, it takes its third of the rest: > 10 % overall
    assert!(r.slow_share > 10.0, "{:.2}%", r.slow_share);
}

#[test]
fn equal_servers_share_the_load_at_low_rates() {
    // Three servers of the same speed (0.3 ms + up to 0.5 ms jitter), open loop, one minute.
    // Without the near-tie rule, the server whose first samples looked slowest gets no call
    // (hence no sample) and a growing re-probe interval, and its share drifts far from a third.
    for seed in 1..=3 {
        for rps in [20.0, 200.0] {
            let r = run(&Scenario::equal(Load::Open { rps }, MIN, seed), Policy::V2);
            for (i, &n) in r.per_server.iter().enumerate() {
                let share = n as f64 * 100.0 / r.calls as f64;
                assert!(
                    (30.0..=37.0).contains(&share),
                    "seed {seed}, {rps}/s: server {i} took {share:.1}% ({:?})",
                    r.per_server
                );
            }
        }
    }
}

#[test]
fn a_frozen_server_stops_getting_calls_within_three_seconds() {
    let freeze = (Duration::from_secs(10), Duration::from_secs(25));
    for seed in 1..=3 {
        let s = Scenario::freeze(
            Load::Open { rps: 1000.0 },
            Duration::from_secs(40),
            freeze,
            seed,
        );
        let r = run(&s, Policy::V2);
        // the stream of calls into it stops within 3 s; after that only spaced trial calls
        // (ejections of 1 s, 2 s, 4 s... each trial hanging until the 2 s timeout)
        let stream = r.stream_into_freeze.unwrap();
        assert!(
            stream <= Duration::from_secs(3),
            "seed {seed}: calls kept flowing for {stream:?}"
        );
        assert!(
            r.sent_while_frozen <= 20,
            "seed {seed}: {} calls into the freeze",
            r.sent_while_frozen
        );
        assert!(r.failed <= 20, "seed {seed}: {} failed", r.failed);
        // go-zero's forcePick keeps sending it a call per second for the whole freeze
        let gz = run(&s, Policy::GoZero);
        assert!(gz.last_sent_into_freeze.unwrap() > Duration::from_secs(10));
    }
}

#[test]
fn a_failing_server_is_ejected_and_comes_back() {
    let mut s = Scenario::seed_example(Load::Open { rps: 500.0 }, MIN, 5);
    s.servers[2] = ServerSpec::new(Duration::from_millis(10))
        .failing((Duration::from_secs(10), Duration::from_secs(30)));
    s.watched = 2;
    let v2 = run(&s, Policy::V2);
    let v1 = run(&s, Policy::V1);
    assert!(
        v2.failed * 3 < v1.failed,
        "v2 {} vs v1 {} failed",
        v2.failed,
        v1.failed
    );
    // healthy again for the last 30 s: it gets a fair share of them (> 15 % overall)
    assert!(v2.slow_share > 15.0, "{:.2}%", v2.slow_share);
}

#[test]
fn a_restarting_server_costs_no_failed_call() {
    // connection refused for 5 s: transparent retries go elsewhere
    let mut s = Scenario::seed_example(Load::Open { rps: 1000.0 }, Duration::from_secs(20), 6);
    for sv in &mut s.servers {
        *sv = ServerSpec::new(Duration::from_millis(10));
    }
    s.servers[1] = s.servers[1]
        .clone()
        .down((Duration::from_secs(5), Duration::from_secs(10)));
    let r = run(&s, Policy::V2);
    assert_eq!(r.failed, 0);
    assert!(r.p99 <= Duration::from_millis(15), "{:?}", r.p99);
}

#[test]
fn breaker_v2_opens_fast_and_recovers_within_three_seconds() {
    for seed in [7, 8, 9] {
        let r = simulate_outage(
            BreakerRules::V2,
            1000,
            Duration::from_secs(20),
            Duration::from_secs(20),
            seed,
        );
        assert!(r.time_to_open.unwrap() <= Duration::from_secs(2), "{r:?}");
        assert!(r.leaked_first_2s <= 1000, "{r:?}");
        assert!(
            r.recovered_after.unwrap() <= Duration::from_secs(3),
            "{r:?}"
        );
        let gz = simulate_outage(
            BreakerRules::GoZero,
            1000,
            Duration::from_secs(20),
            Duration::from_secs(20),
            seed,
        );
        assert!(
            gz.recovered_after.unwrap() > Duration::from_secs(6),
            "{gz:?}"
        );
    }
}

#[test]
fn same_seed_same_report() {
    let a = seed_example(Policy::V2, Load::Open { rps: 200.0 }, 9);
    let b = seed_example(Policy::V2, Load::Open { rps: 200.0 }, 9);
    assert_eq!(a.per_server, b.per_server);
    assert_eq!(a.p99, b.p99);
}
