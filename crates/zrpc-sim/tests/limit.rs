//! The adaptive concurrency limit in front of a handler bound by a downstream resource (20
//! places of 10 ms: 2,000 calls/s), against go-zero's CPU shedder, which never acts there.
//! The bounds are the targets `docs/overload.md` reports.

use std::time::Duration;

use zrpc_sim::{Downstream, Protection, simulate_downstream};

/// 70 s runs, the last 60 s reported: the limit measures its minimum round-trip time again
/// (due 60 s after its start, plus up to 15 %) inside the reported part.
const SECS: u64 = 70;

fn unloaded_p99() -> f64 {
    simulate_downstream(&Downstream::steady(0.5, Protection::Off, 20)).admitted_p99_ms
}

#[test]
fn at_two_and_four_times_capacity_the_limit_keeps_goodput_and_latency() {
    let unloaded = unloaded_p99();
    assert!(unloaded > 10.0 && unloaded < 11.0, "{unloaded}");
    for load in [2.0, 4.0] {
        for p in [Protection::Limit, Protection::Tiers] {
            let r = simulate_downstream(&Downstream::steady(load, p, SECS));
            let name = format!("{load}x {}", p.name());
            assert!(
                r.goodput >= 0.9 * r.capacity,
                "{name}: goodput {}",
                r.goodput
            );
            assert!(
                r.admitted_p99_ms <= 3.0 * unloaded,
                "{name}: admitted p99 {} vs unloaded {unloaded}",
                r.admitted_p99_ms
            );
            // What is not served is rejected at once, not left to time out.
            let shed = 1.0 - 1.0 / load;
            assert!(
                (r.rejected_share() - shed).abs() < 0.02,
                "{name}: {}",
                r.rejected_share()
            );
            assert_eq!(r.timed_out, 0, "{name}");
        }
    }
}

#[test]
fn the_cpu_shedder_never_acts_and_goodput_collapses() {
    for load in [2.0, 4.0] {
        for p in [Protection::Off, Protection::Cpu] {
            let r = simulate_downstream(&Downstream::steady(load, p, 30));
            let name = format!("{load}x {}", p.name());
            assert_eq!(r.rejected_total(), 0, "{name}: the CPU stays cool");
            assert!(
                r.goodput < 0.01 * r.capacity,
                "{name}: goodput {}",
                r.goodput
            );
            assert!(r.admitted_p50_ms >= 1999.0, "{name}: {}", r.admitted_p50_ms);
        }
    }
}

#[test]
fn critical_calls_are_served_while_the_default_tier_is_shed() {
    for load in [2.0, 4.0] {
        let r = simulate_downstream(&Downstream::steady(load, Protection::Tiers, SECS));
        let critical = r.critical_success().expect("critical calls were sent");
        assert!(critical >= 0.999, "{load}x: critical {critical}");
        // Every rejected call is of the default tier: the critical ones were all served.
        assert_eq!(r.critical.0, r.critical.1, "{load}x");
        assert!(r.rejected_total() > 0);
    }
}

#[test]
fn when_the_server_stalls_the_lower_tier_absorbs_the_bursts() {
    // 50 ms stalls every second: the calls of a stall reach the limit together when it
    // resumes, a burst of a hundred at 2x. Critical calls are counted against the limit by
    // themselves, so the default tier's calls of the burst cannot crowd them out.
    let r = simulate_downstream(&Downstream::stalling(2.0, Protection::Tiers, SECS));
    let critical = r.critical_success().expect("critical calls were sent");
    assert!(critical >= 0.999, "critical {critical}");
    assert!(r.goodput >= 0.9 * r.capacity, "goodput {}", r.goodput);
}

#[test]
fn at_half_capacity_nothing_is_rejected() {
    for p in [Protection::Limit, Protection::Tiers] {
        let r = simulate_downstream(&Downstream::steady(0.5, p, SECS));
        assert_eq!(r.rejected_total(), 0, "{}", p.name());
        assert_eq!(r.timed_out, 0);
    }
}

#[test]
fn after_a_spike_the_limit_and_the_service_recover_within_a_window_or_two() {
    let slow = 3.0 * unloaded_p99();
    for peak in [1.4, 2.0, 4.0] {
        let d = Downstream::spike(peak, Protection::Limit);
        let r = simulate_downstream(&d);
        let before = r.limit_median(10.0, 20.0).expect("a limit");
        let back = r
            .back_to_90_percent(40.0, before)
            .expect("the limit comes back");
        assert!(back <= Duration::from_millis(250), "{peak}x: {back:?}");
        let service = r.service_recovery(slow);
        assert!(service <= Duration::from_millis(50), "{peak}x: {service:?}");
        // During the spike the limit held the calls to about what the resource serves.
        let during = r.limit_median(30.0, 40.0).expect("a limit");
        assert!((30..=60).contains(&during), "{peak}x: {during}");
    }
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let d = Downstream::steady(2.0, Protection::Tiers, 15);
    let (a, b) = (simulate_downstream(&d), simulate_downstream(&d));
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}
