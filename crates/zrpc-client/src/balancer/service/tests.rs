use std::time::Duration;

use zrpc_core::grpc::code;

use super::*;

// The balancer's plain constructor: only tests use it (here and the retry stage's).

impl Balancer {
    /// Creates the balancer (no resolver status, no anchor timer) and spawns the task applying
    /// `updates`.
    pub(crate) fn new(
        target: Arc<str>,
        kind: BalancerName,
        updates: EndpointUpdates,
        connect: ConnectOptions,
        seed: u64,
    ) -> Balancer {
        Balancer::with_status(
            target,
            kind,
            updates,
            connect,
            seed,
            ResolverStatus::default(),
            None,
        )
    }
}

/// A P2C balancer of target `direct:///test` and the sender of its endpoint sets.
fn p2c_balancer() -> (watch::Sender<Option<Arc<Vec<String>>>>, Balancer) {
    let (tx, rx) = watch::channel(None);
    let b = Balancer::new(
        Arc::from("direct:///test"),
        BalancerName::P2cEwma,
        rx,
        ConnectOptions::default(),
        1,
    );
    (tx, b)
}

fn addrs(v: &[&str]) -> Arc<Vec<String>> {
    Arc::new(v.iter().map(|s| (*s).to_owned()).collect())
}

#[tokio::test]
async fn stats_and_connections_survive_endpoint_set_updates() {
    let (tx, b) = p2c_balancer();
    assert!(!b.shared.is_ready());
    tx.send_replace(Some(addrs(&["127.0.0.1:1", "127.0.0.1:2"])));
    b.shared.wait_ready().await;
    let first = b.shared.endpoints();
    assert_eq!(first.len(), 2);
    let a = first
        .iter()
        .find(|e| &*e.addr == "127.0.0.1:1")
        .unwrap()
        .clone();
    a.stats.on_pick();
    a.stats.on_done(0, 5_000_000, code::OK);
    assert_eq!(a.stats.lag(), Some(Duration::from_millis(5)));

    // b leaves, c joins: a keeps its Arc (stats and channel), c starts cold
    tx.send_replace(Some(addrs(&["127.0.0.1:1", "127.0.0.1:3"])));
    for _ in 0..100 {
        if b.shared
            .endpoints()
            .iter()
            .any(|e| &*e.addr == "127.0.0.1:3")
        {
            break;
        }
        tokio::task::yield_now().await;
    }
    let second = b.shared.endpoints();
    let names: Vec<&str> = second.iter().map(|e| &*e.addr).collect();
    assert!(
        names.contains(&"127.0.0.1:1") && names.contains(&"127.0.0.1:3") && names.len() == 2,
        "{names:?}"
    );
    let a2 = second.iter().find(|e| &*e.addr == "127.0.0.1:1").unwrap();
    assert!(Arc::ptr_eq(&a, a2), "same endpoint object");
    assert_eq!(a2.stats.lag(), Some(Duration::from_millis(5)));
    let c = second.iter().find(|e| &*e.addr == "127.0.0.1:3").unwrap();
    assert!(c.stats.is_probing() && c.stats.lag().is_none());
}

#[tokio::test]
async fn update_task_ends_when_the_balancer_is_dropped() {
    let (tx, b) = p2c_balancer();
    assert_eq!(tx.receiver_count(), 1, "the update task holds the receiver");
    drop(b);
    tokio::time::timeout(Duration::from_secs(5), tx.closed())
        .await
        .unwrap();
}

#[test]
fn the_anchor_runs_at_half_the_timeout_from_200_ms() {
    assert_eq!(
        anchor_period(Duration::from_secs(2)),
        Some(Duration::from_secs(1))
    );
    assert_eq!(
        anchor_period(Duration::from_millis(200)),
        Some(Duration::from_millis(100))
    );
    assert_eq!(anchor_period(Duration::from_millis(199)), None);
}

#[tokio::test(start_paused = true)]
async fn an_anchored_update_task_outlives_its_resolver_and_ends_with_the_balancer() {
    let (tx, rx) = watch::channel(Some(addrs(&["127.0.0.1:1"])));
    let b = Balancer::with_status(
        Arc::from("t"),
        BalancerName::P2cEwma,
        rx,
        ConnectOptions::default(),
        1,
        ResolverStatus::default(),
        Some(Duration::from_secs(2)),
    );
    let alive = b.shared.alive.subscribe();
    drop(tx);
    // the resolver is gone: the set stays, the task keeps its timer through many periods
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(b.shared.endpoints().len(), 1);
    assert_eq!(b.shared.alive.receiver_count(), 2, "the task still runs");
    drop(alive);
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    assert!(
        tasks() >= 1,
        "the update task (and the endpoint's channel worker)"
    );
    drop(b);
    for _ in 0..100 {
        if tasks() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(tasks(), 0, "the update task ends with the balancer");
}

/// The stall check of a client whose runtime did not run (its thread blocked, the process
/// starved of CPU) takes no server for stalled: its calls may not even have been sent. The same
/// silence seen by a runtime that ran makes the endpoint suspect.
#[tokio::test]
async fn a_late_stall_check_takes_no_server_for_stalled() {
    let (tx, b) = p2c_balancer();
    tx.send_replace(Some(addrs(&["127.0.0.1:1"])));
    b.shared.wait_ready().await;
    let e = b.shared.endpoints()[0].clone();
    let clock = b.shared.p2c.clock();
    e.stats.on_pick_at(clock.nanos(Instant::now()));
    let stalled = || e.stats.is_stalled(clock.nanos(Instant::now()));
    // the runtime's one thread held past the stall limit (250 ms): the check runs late
    std::thread::sleep(Duration::from_millis(400));
    assert!(stalled(), "400 ms of silence, not judged yet");
    // until the check has run: it starts the silence again, or (wrongly) suspects
    let judged = tokio::time::timeout(Duration::from_secs(2), async {
        while stalled() && !e.stats.is_suspect() {
            tokio::task::yield_now().await;
        }
    });
    judged.await.unwrap();
    assert!(!e.stats.is_suspect(), "a late check: nothing was observed");
    // the same silence, observed by a runtime that runs: the calls stall
    let suspected = tokio::time::timeout(Duration::from_secs(2), async {
        while !e.stats.is_suspect() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(
        suspected.await.is_ok(),
        "no answer for 2 s while the client ran"
    );
}

/// Addresses that are not `host:port` (a stray value under the etcd key) take no place in
/// the subset: every valid endpoint is in the set, whatever the garbage ranks.
#[tokio::test]
async fn invalid_addresses_take_no_place_in_the_subset() {
    let (tx, b) = p2c_balancer();
    let mut all: Vec<String> = (1..=5).map(|p| format!("127.0.0.1:{p}")).collect();
    all.extend((0..60).map(|i| format!("garbage value {i}")));
    all.push("x".repeat(1 << 20));
    tx.send_replace(Some(Arc::new(all)));
    b.shared.wait_ready().await;
    let mut names: Vec<String> = b
        .shared
        .endpoints()
        .iter()
        .map(|e| e.addr.to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        (1..=5)
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
    );
}
