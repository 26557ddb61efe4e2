//! The real adaptive shedder under a 2x step overload of a simulated CPU-bound server.

use std::time::Duration;

use zrpc_sim::{Overload, simulate_overload};

#[test]
fn the_shedder_keeps_goodput_and_admitted_latency_under_twice_capacity() {
    let o = Overload::twice_capacity(true);
    let r = simulate_overload(&o);
    println!("{r:?}");
    // go-zero's CPU average (0.95 every 250 ms) climbs from 50 % to the 90 % threshold in about
    // 31 samples: the shedder cannot engage sooner than ~8 s into a step overload.
    let first = r.first_shed.expect("the shedder engages");
    assert!(
        first > Duration::from_secs(5) && first < Duration::from_secs(12),
        "{first:?}"
    );
    assert!(r.goodput >= 0.8 * r.capacity, "goodput {}", r.goodput);
    let shed = r.shed as f64 / r.offered as f64;
    assert!((0.4..0.65).contains(&shed), "shed share {shed}");
    assert!(
        r.admitted_p99_ms <= 3.0 * r.unloaded_p99_ms,
        "admitted p99 {} vs unloaded {}",
        r.admitted_p99_ms,
        r.unloaded_p99_ms
    );
    assert_eq!(r.timed_out, 0, "no admitted call waits past its deadline");
    assert!(r.recovery < Duration::from_secs(1), "{:?}", r.recovery);
}

#[test]
fn without_the_shedder_the_queue_eats_the_deadline_and_goodput_collapses() {
    let o = Overload::twice_capacity(false);
    let r = simulate_overload(&o);
    println!("{r:?}");
    assert_eq!(r.first_shed, None);
    assert!(r.goodput < 0.2 * r.capacity, "goodput {}", r.goodput);
    assert!(r.admitted_p99_ms >= o.timeout.as_secs_f64() * 1000.0);
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let o = Overload::twice_capacity(true);
    let (a, b) = (simulate_overload(&o), simulate_overload(&o));
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}
