//! Resilience on a real 3-member etcd cluster: three zrpc servers registered, a zrpc
//! client discovering them over all three hosts under steady load, and the faults of a real
//! cluster in sequence: SIGKILL of the leader, of a follower, then of two members (no quorum)
//! for 20 s. Checked all along: no failed call, exactly one key per server whenever etcd can
//! be read, every registration healthy within 2 s of the quorum coming back, and the client's
//! watch resumed without a reload storm. The fault table is printed (`--nocapture`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zrpc_client::Client;
use zrpc_client::conf::RpcClientConf;
use zrpc_client::resolver::etcd as etcd_resolver;
use zrpc_core::conf::EtcdConf;
use zrpc_server::registry::{Publisher, RegistrationState};
use zrpc_tests::etcd::{EtcdCluster, unique_key};
use zrpc_tests::greeter::{TestGreeter, TestServer, start_server, test_conf};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

const PHASES: [&str; 5] = [
    "steady",
    "leader killed",
    "follower killed",
    "2 of 3 killed (no quorum)",
    "healed",
];

/// What the monitor saw at one check: keys per server, or etcd unreadable.
#[derive(Debug, Default, Clone)]
struct PhaseStats {
    checks_read: u64,
    checks_unreadable: u64,
    /// key count per server -> how many checks saw it
    counts: BTreeMap<String, BTreeMap<usize, u64>>,
    foreign: u64,
}

struct Load {
    calls: Arc<[AtomicU64; 5]>,
    failures: Arc<[AtomicU64; 5]>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

fn start_load(client: &Client, phase: Arc<AtomicUsize>) -> Load {
    let calls: Arc<[AtomicU64; 5]> = Arc::new(Default::default());
    let failures: Arc<[AtomicU64; 5]> = Arc::new(Default::default());
    let stop = Arc::new(AtomicBool::new(false));
    let workers = (0..4)
        .map(|w| {
            let mut greeter = GreeterClient::new(client.clone());
            let (phase, calls, failures, stop) =
                (phase.clone(), calls.clone(), failures.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let r = greeter
                        .say_hello(HelloRequest {
                            name: format!("w{w}"),
                        })
                        .await;
                    let p = phase.load(Ordering::Relaxed);
                    calls[p].fetch_add(1, Ordering::Relaxed);
                    if let Err(s) = r {
                        eprintln!("call failed in phase {:?}: {s}", PHASES[p]);
                        failures[p].fetch_add(1, Ordering::Relaxed);
                    }
                    // about 400 calls/s in all: load, not a benchmark
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        })
        .collect();
    Load {
        calls,
        failures,
        stop,
        workers,
    }
}

/// Records every registration state change of `p` with its instant.
fn record_states(p: &Publisher) -> Arc<Mutex<Vec<(Instant, bool)>>> {
    let log = Arc::new(Mutex::new(vec![(Instant::now(), false)]));
    let mut rx = p.state();
    let out = log.clone();
    tokio::spawn(async move {
        loop {
            let registered = matches!(
                *rx.borrow_and_update(),
                RegistrationState::Registered { .. }
            );
            {
                let mut l = out.lock().unwrap();
                if l.last().map(|e| e.1) != Some(registered) {
                    l.push((Instant::now(), registered));
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_cluster_rides_through_member_crashes_and_quorum_loss() {
    let Some(mut cluster) = EtcdCluster::start_exclusive(
        3,
        "etcd_cluster_rides_through_member_crashes_and_quorum_loss",
        "kills and restarts members of a 3-member cluster",
    )
    .await
    else {
        return;
    };
    let hosts = cluster.endpoints();
    let key = unique_key("cluster-faults");
    let etcd_conf = EtcdConf::new(hosts.clone(), &key);

    // three real servers, each registered by the same publisher its lifecycle starts
    let mut servers: Vec<TestServer> = Vec::new();
    let mut publishers = Vec::new();
    let mut states = Vec::new();
    for i in 0..3 {
        let s = start_server(
            test_conf(&format!("cluster-{i}")).with_cpu_threshold(0),
            TestGreeter::new(),
        )
        .await;
        let p = Publisher::spawn(etcd_conf.clone(), s.addr.to_string());
        states.push(record_states(&p));
        publishers.push(p);
        servers.push(s);
    }
    let values: Vec<String> = servers.iter().map(|s| s.addr.to_string()).collect();

    let client =
        Client::new(RpcClientConf::etcd(hosts.clone(), &key).with_timeout(Duration::from_secs(3)))
            .await
            .unwrap();
    // all three discovered before the load starts
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.endpoints().len() < 3 {
        assert!(
            Instant::now() < deadline,
            "servers not discovered: {:?}",
            client.endpoints()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let phase = Arc::new(AtomicUsize::new(0));
    let load = start_load(&client, phase.clone());

    // the monitor: every 200 ms, the keys under Key/ through a client of all members
    let stats: Arc<Mutex<Vec<PhaseStats>>> = Arc::new(Mutex::new(vec![PhaseStats::default(); 5]));
    let monitor = {
        let mut kv = cluster.client().await;
        let (stats, phase, key, values, stop) = (
            stats.clone(),
            phase.clone(),
            key.clone(),
            values.clone(),
            load.stop.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let get = kv.get(
                    format!("{key}/"),
                    Some(etcd_client::GetOptions::new().with_prefix()),
                );
                let read = tokio::time::timeout(Duration::from_secs(1), get).await;
                let p = phase.load(Ordering::Relaxed);
                {
                    let mut all = stats.lock().unwrap();
                    let st = &mut all[p];
                    match read {
                        Ok(Ok(resp)) => {
                            st.checks_read += 1;
                            let got: Vec<String> = resp
                                .kvs()
                                .iter()
                                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
                                .collect();
                            for v in &values {
                                let n = got.iter().filter(|g| *g == v).count();
                                *st.counts
                                    .entry(v.clone())
                                    .or_default()
                                    .entry(n)
                                    .or_default() += 1;
                            }
                            st.foreign += got.iter().filter(|g| !values.contains(g)).count() as u64;
                        }
                        _ => st.checks_unreadable += 1,
                    }
                }
                // the checker's period (a sampling loop, not a wait)
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let reloads = || etcd_resolver::reloads(&etcd_conf).unwrap_or(0);
    let mut reloads_at = vec![reloads()];
    let t0 = Instant::now();
    // A phase of the scenario: 2 s of steady load before the first fault.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 1. SIGKILL the leader; a new one is elected; it comes back
    phase.store(1, Ordering::Relaxed);
    reloads_at.push(reloads());
    let leader = cluster
        .wait_leader(Duration::from_secs(5))
        .await
        .expect("a leader");
    cluster.kill_member(leader);
    let killed_at = Instant::now();
    let new_leader = cluster
        .wait_leader(Duration::from_secs(10))
        .await
        .expect("a new leader");
    let election = killed_at.elapsed();
    assert_ne!(new_leader, leader);
    // a client whose first host is the dead member still discovers every server (failover)
    let mut first_dead = vec![hosts[leader].clone()];
    first_dead.extend(hosts.iter().filter(|h| **h != hosts[leader]).cloned());
    let started = Instant::now();
    let late =
        Client::new(RpcClientConf::etcd(first_dead, &key).with_timeout(Duration::from_secs(3)))
            .await
            .unwrap();
    let mut greeter = GreeterClient::new(late.clone());
    greeter
        .say_hello(HelloRequest {
            name: "late".into(),
        })
        .await
        .unwrap();
    let late_took = started.elapsed();
    while late.endpoints().len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "late client: {:?}",
            late.endpoints()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop((greeter, late));
    // A phase of the scenario: the killed leader stays down 2 s under load.
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.restart_member(leader).await;

    // 2. SIGKILL a follower; it comes back
    phase.store(2, Ordering::Relaxed);
    reloads_at.push(reloads());
    let leader = cluster
        .wait_leader(Duration::from_secs(5))
        .await
        .expect("a leader");
    let follower = (leader + 1) % 3;
    cluster.kill_member(follower);
    // A phase of the scenario: the follower stays down 3 s under load.
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.restart_member(follower).await;

    // 3. SIGKILL the leader and a follower: no quorum for 20 s; then heal
    phase.store(3, Ordering::Relaxed);
    reloads_at.push(reloads());
    let leader = cluster
        .wait_leader(Duration::from_secs(5))
        .await
        .expect("a leader");
    let other = (leader + 1) % 3;
    cluster.kill_member(leader);
    cluster.kill_member(other);
    // A phase of the scenario: 20 s without quorum (longer than a lease's TTL).
    tokio::time::sleep(Duration::from_secs(20)).await;
    phase.store(4, Ordering::Relaxed);
    reloads_at.push(reloads());
    // restart_member returns once the member is healthy, i.e. it has a leader: quorum is back
    let quorum_back = cluster.restart_member(leader).await;
    cluster.restart_member(other).await;
    // every publisher registered, and etcd shows one key each, within 2 s of the quorum
    let mut kv = cluster.client().await;
    let mut etcd_ok_after = None;
    while quorum_back.elapsed() < Duration::from_secs(10) {
        let got = tokio::time::timeout(
            Duration::from_secs(1),
            kv.get(
                format!("{key}/"),
                Some(etcd_client::GetOptions::new().with_prefix()),
            ),
        )
        .await;
        if let Ok(Ok(resp)) = got {
            let mut vals: Vec<String> = resp
                .kvs()
                .iter()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
                .collect();
            vals.sort();
            let mut want = values.clone();
            want.sort();
            if vals == want
                && publishers
                    .iter()
                    .all(|p| matches!(*p.state().borrow(), RegistrationState::Registered { .. }))
            {
                etcd_ok_after = Some(quorum_back.elapsed());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reregistered: Vec<Option<Duration>> = states
        .iter()
        .map(|log| {
            let log = log.lock().unwrap();
            match log.last() {
                Some((at, true)) if *at > quorum_back => Some(*at - quorum_back),
                Some((_, true)) => Some(Duration::ZERO),
                _ => None,
            }
        })
        .collect();
    let left_registered: Vec<usize> = states
        .iter()
        .map(|log| log.lock().unwrap().iter().filter(|e| !e.1).count() - 1)
        .collect();
    // A phase of the scenario: 3 s of load after the heal, counted with the rest.
    tokio::time::sleep(Duration::from_secs(3)).await;
    reloads_at.push(reloads());

    load.stop.store(true, Ordering::Relaxed);
    for w in load.workers {
        w.await.unwrap();
    }
    monitor.await.unwrap();

    // the table
    let stats = stats.lock().unwrap().clone();
    println!(
        "etcd 3-member cluster faults (elapsed {:?}, leader election after SIGKILL {election:?}, a client whose first host is dead served its first call in {late_took:?})",
        t0.elapsed()
    );
    println!(
        "| phase | calls | failed | checks read / unreadable | keys per server seen (count: checks) | watch reloads |"
    );
    println!("|---|---|---|---|---|---|");
    for (p, name) in PHASES.iter().enumerate() {
        let st = &stats[p];
        let keys: Vec<String> = st
            .counts
            .values()
            .map(|m| {
                m.iter()
                    .map(|(n, c)| format!("{n}:{c}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        println!(
            "| {name} | {} | {} | {} / {} | {} | {} |",
            load.calls[p].load(Ordering::Relaxed),
            load.failures[p].load(Ordering::Relaxed),
            st.checks_read,
            st.checks_unreadable,
            keys.join(" ; "),
            reloads_at[p + 1] - reloads_at[p],
        );
    }
    println!(
        "reloads (full gets) at each phase start: {reloads_at:?}\nafter quorum returned: publishers registered at {reregistered:?} (times each left Registered: {left_registered:?}); etcd showed one key per server after {etcd_ok_after:?}"
    );

    let failed: u64 = load
        .failures
        .iter()
        .map(|f| f.load(Ordering::Relaxed))
        .sum();
    assert_eq!(failed, 0, "failed calls");
    for (p, name) in PHASES.iter().enumerate() {
        assert!(
            load.calls[p].load(Ordering::Relaxed) > 0,
            "no call in phase {name}"
        );
        let st = &stats[p];
        assert_eq!(st.foreign, 0, "foreign keys in phase {name}");
        for (v, counts) in &st.counts {
            assert!(
                counts.keys().all(|n| *n == 1),
                "server {v} had {counts:?} keys (count: checks) in phase {name}"
            );
        }
    }
    for p in [0, 1, 2, 4] {
        assert!(
            stats[p].checks_read > 0,
            "etcd never readable in phase {}",
            PHASES[p]
        );
    }
    let etcd_ok_after = etcd_ok_after.expect("registrations not back within 10 s of the quorum");
    assert!(
        etcd_ok_after <= Duration::from_secs(2),
        "one key per server and every publisher registered only {etcd_ok_after:?} after the quorum"
    );
    for (i, r) in reregistered.iter().enumerate() {
        let r = r.unwrap_or_else(|| panic!("server {i} not registered"));
        assert!(
            r <= Duration::from_secs(2),
            "server {i} re-registered {r:?} after the quorum"
        );
    }
    // resumed watches, not a reload storm: a watch that reconnects resumes from its revision
    // (no full get); the counter is live (the first load counted)
    assert!(
        reloads_at[0] >= 1,
        "the resolver's reload counter: {reloads_at:?}"
    );
    let total = reloads_at.last().unwrap() - reloads_at[0];
    assert!(
        total <= 12,
        "{total} full reloads over the faults: {reloads_at:?}"
    );
    for p in publishers {
        p.stop().await;
    }
}

/// With one member of three down, a server that lists all three in `Etcd.Hosts` registers at
/// its first attempt: a request the balanced channel sent toward the dead member (connection
/// refused, never reached etcd) is sent again, instead of failing the attempt and waiting a
/// second (a third of the requests picked the dead member; a registration takes five).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_with_a_member_down_succeeds_at_the_first_attempt() {
    let Some(mut cluster) = EtcdCluster::start_exclusive(
        3,
        "registration_with_a_member_down_succeeds_at_the_first_attempt",
        "kills a member of a 3-member cluster",
    )
    .await
    else {
        return;
    };
    let leader = cluster
        .wait_leader(Duration::from_secs(5))
        .await
        .expect("a leader");
    cluster.kill_member(leader);
    cluster
        .wait_leader(Duration::from_secs(10))
        .await
        .expect("a new leader");
    let key = unique_key("member-down");
    let conf = EtcdConf::new(cluster.endpoints(), &key);
    let mut failed_attempts = Vec::new();
    for i in 0..10 {
        let p = Publisher::spawn(conf.clone(), format!("127.0.0.1:{}", 30_000 + i));
        let mut state = p.state();
        // the state the publisher starts with is not an attempt
        state.borrow_and_update();
        // every failed attempt publishes `NotRegistered` again: count them until registered
        let mut failed = 0;
        let registered = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if state.changed().await.is_err() {
                    return false;
                }
                match *state.borrow_and_update() {
                    RegistrationState::Registered { .. } => return true,
                    _ => failed += 1,
                }
            }
        })
        .await;
        assert_eq!(registered, Ok(true), "publisher {i} never registered");
        failed_attempts.push(failed);
        p.stop().await;
    }
    assert!(
        failed_attempts.iter().all(|f| *f == 0),
        "failed attempts before registering, per publisher: {failed_attempts:?}"
    );
}
