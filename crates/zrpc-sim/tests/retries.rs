//! Retry storms and the retry budget: the bounds `docs/retries.md` reports, over several seeds.

use zrpc_sim::retries::{BUDGET_MIN_PER_SEC, BUDGET_WINDOW, OUTAGE, floor_share};
use zrpc_sim::{RetryClient, RetryScenario, simulate_retries};

const SEEDS: [u64; 3] = [1, 2, 3];

/// The most retries a budget of `ratio` can grant per request over a run of `s`: within any ten
/// consecutive one-second slots (one window), retries <= ratio x calls + the floor's
/// `min_per_sec x window`. Retries are decided from the first request to the last deadline, a
/// span covered by `ceil((duration + timeout) / window)` disjoint windows.
fn budget_bound(s: &RetryScenario, ratio: f64, calls: u64) -> f64 {
    let span = (s.duration + s.timeout).as_secs_f64();
    let windows = (span / BUDGET_WINDOW.as_secs_f64()).ceil();
    let floor = f64::from(BUDGET_MIN_PER_SEC) * BUDGET_WINDOW.as_secs_f64() * windows;
    1.0 + ratio + floor / calls as f64
}

#[test]
fn when_every_server_fails_only_the_budget_stops_the_storm() {
    for seed in SEEDS {
        let s = RetryScenario::all_failing(seed);
        for client in RetryClient::ALL {
            let r = simulate_retries(&s, client);
            assert_eq!(r.calls, 60_000);
            assert_eq!(r.succeeded, 0);
            let per_call = r.attempts_per_call();
            match client {
                RetryClient::GoZero => assert_eq!(r.attempts, r.calls, "{}", client.name()),
                // the back-offs of four retries (at most 1.5 s) fit in the 2 s deadline: every
                // request makes all its attempts
                RetryClient::GrpcGo { max_attempts } => {
                    assert_eq!(r.attempts, r.calls * u64::from(max_attempts), "seed {seed}");
                }
                RetryClient::Zrpc { ratio, .. } => {
                    let bound = budget_bound(&s, ratio, r.calls);
                    assert!(per_call <= bound, "{}: {per_call} > {bound}", client.name());
                    // and the budget is used, not refused wholesale
                    assert!(per_call >= 1.0 + ratio, "{}: {per_call}", client.name());
                    assert!(r.refused > 0);
                }
                _ => unreachable!(),
            }
        }
    }
}

#[test]
fn with_one_flaky_server_budgeted_retries_recover_nearly_every_call() {
    for seed in SEEDS {
        let s = RetryScenario::one_flaky(seed);
        for client in RetryClient::ALL {
            let r = simulate_retries(&s, client);
            let ok = r.success_ratio();
            let extra = r.attempts_per_call() - 1.0;
            match client {
                // a third of the requests reach the flaky server, which fails 30 % of them
                RetryClient::GoZero => {
                    assert!((0.88..0.92).contains(&ok), "seed {seed}: {ok}");
                    assert_eq!(extra, 0.0);
                }
                _ => {
                    assert!(ok >= 0.999, "{} seed {seed}: {ok}", client.name());
                    // one retry per failed first attempt, about 10 % of the requests
                    assert!((0.09..0.11).contains(&extra), "{}: {extra}", client.name());
                }
            }
        }
    }
}

#[test]
fn during_an_outage_the_budget_holds_the_load_near_one_plus_the_ratio() {
    let (a, b) = (OUTAGE.0.as_secs() as usize, OUTAGE.1.as_secs() as usize);
    for seed in SEEDS {
        let s = RetryScenario::outage(seed);
        for client in RetryClient::ALL {
            let r = simulate_retries(&s, client);
            let during = r.load(a, b);
            let after = r.load(b + 5, s.duration.as_secs() as usize);
            assert!((after - 1.0).abs() < 1e-9, "{}: {after}", client.name());
            match client {
                RetryClient::GoZero => assert!((during - 1.0).abs() < 1e-9),
                RetryClient::GrpcGo { max_attempts } => {
                    let m = f64::from(max_attempts);
                    assert!(
                        during > m - 0.1 && during <= m,
                        "{}: {during}",
                        client.name()
                    );
                }
                // the outage spans two whole windows, so its retries are at most
                // ratio x its calls + two windows' floor (no retry is decided before it)
                RetryClient::Zrpc { ratio, .. } => {
                    let bound = 1.0 + ratio + floor_share(s.rps) + 1e-9;
                    assert!(during <= bound, "{}: {during} > {bound}", client.name());
                    assert!(during >= 1.0 + ratio, "{}: {during}", client.name());
                }
                _ => unreachable!(),
            }
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let s = RetryScenario::outage(4);
    let c = RetryClient::Zrpc {
        max_attempts: 3,
        ratio: 0.1,
    };
    let (x, y) = (simulate_retries(&s, c), simulate_retries(&s, c));
    assert_eq!(format!("{x:?}"), format!("{y:?}"));
}
