//! Discovery against a real etcd: the etcd resolver's endpoint stream (go-zero key layout, duplicates,
//! coalescing, outage, restart, compaction, shared watch lifetime), then end to end with zrpc servers
//! registering themselves and a zrpc `Client` discovering them under load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{CompactionOptions, PutOptions, Txn, TxnOp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zrpc_client::Client;
use zrpc_client::conf::RpcClientConf;
use zrpc_client::resolver::{EndpointUpdates, etcd as etcd_resolver};
use zrpc_core::conf::EtcdConf;
use zrpc_server::conf::ShutdownConf;
use zrpc_tests::etcd::{EtcdServer, TcpProxy, keys_under, unique_key};
use zrpc_tests::greeter::{TestGreeter, TestServer, start_server, test_conf};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::wait;

fn conf(hosts: Vec<String>, key: &str) -> EtcdConf {
    EtcdConf::new(hosts, key)
}

fn current(rx: &EndpointUpdates) -> Option<Vec<String>> {
    rx.borrow().as_deref().cloned()
}

fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// Waits until the published set equals `want` (sorted); panics with the last value after `within`.
async fn wait_for(rx: &mut EndpointUpdates, want: &[&str], within: Duration) -> Duration {
    let want = sorted(want);
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if rx.borrow_and_update().as_deref() == Some(&want) {
            return start.elapsed();
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("resolver closed while waiting for {want:?}"),
            Err(_) => panic!(
                "resolver did not publish {want:?} within {within:?}; last: {:?}",
                current(rx)
            ),
        }
    }
}

/// Asserts no update is published during `quiet`.
async fn assert_quiet(rx: &mut EndpointUpdates, quiet: Duration) {
    let before = current(rx);
    rx.borrow_and_update();
    if tokio::time::timeout(quiet, rx.changed()).await.is_ok() {
        panic!(
            "unexpected update: {before:?} -> {:?}",
            rx.borrow().as_deref()
        );
    }
}

/// `etcd_debugging_mvcc_watcher_total` from etcd's /metrics (watchers open in etcd).
async fn etcd_watchers(endpoint: &str) -> Option<u64> {
    let mut s = TcpStream::connect(endpoint).await.ok()?;
    let req = format!("GET /metrics HTTP/1.0\r\nHost: {endpoint}\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).await.ok()?;
    body.lines()
        .find(|l| l.starts_with("etcd_debugging_mvcc_watcher_total "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
}

#[tokio::test]
async fn etcd_resolver_reads_go_zero_layout_and_follows_changes() {
    let etcd = EtcdServer::start().await;
    let mut kv = etcd.client().await;
    let key = unique_key("disco-layout");
    // Written like go-zero servers do: Key/<lease id in decimal> -> host:port (a plain put, no zrpc code).
    kv.put(format!("{key}/7587884203452301832"), "127.0.0.1:9001", None)
        .await
        .unwrap();
    kv.put(format!("{key}/12345"), "127.0.0.1:9002", None)
        .await
        .unwrap();
    // The same address under a second key (a duplicate registration) counts once.
    kv.put(format!("{key}/12346"), "127.0.0.1:9002", None)
        .await
        .unwrap();
    // Not under `Key/`: another service whose name starts like ours.
    kv.put(format!("{key}x/1"), "127.0.0.1:9999", None)
        .await
        .unwrap();

    let r = etcd_resolver::resolve(conf(etcd.endpoints(), &key)).unwrap();
    let mut rx = r.updates();
    wait_for(
        &mut rx,
        &["127.0.0.1:9001", "127.0.0.1:9002"],
        Duration::from_secs(5),
    )
    .await;

    // New key -> update.
    let took = {
        kv.put(format!("{key}/3"), "127.0.0.1:9003", None)
            .await
            .unwrap();
        wait_for(
            &mut rx,
            &["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"],
            Duration::from_secs(1),
        )
        .await
    };
    println!("discovery: put -> resolver update in {took:?}");

    // PUT of an unchanged value: no update. Deleting one of two keys holding an address: no update.
    kv.put(format!("{key}/3"), "127.0.0.1:9003", None)
        .await
        .unwrap();
    kv.delete(format!("{key}/12346"), None).await.unwrap();
    assert_quiet(&mut rx, Duration::from_millis(500)).await;

    // Deleting the last key of an address removes it; a key moving to a new address replaces it.
    kv.delete(format!("{key}/12345"), None).await.unwrap();
    wait_for(
        &mut rx,
        &["127.0.0.1:9001", "127.0.0.1:9003"],
        Duration::from_secs(1),
    )
    .await;
    kv.put(format!("{key}/3"), "127.0.0.1:9004", None)
        .await
        .unwrap();
    wait_for(
        &mut rx,
        &["127.0.0.1:9001", "127.0.0.1:9004"],
        Duration::from_secs(1),
    )
    .await;

    // An emptied prefix keeps every endpoint whose key went within a lease TTL (a partition
    // between the servers and etcd expires their leases while they run, one after another); the
    // status says no endpoint is registered, and the next registration replaces the kept set.
    kv.delete(
        format!("{key}/"),
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .unwrap();
    let problem = tokio::time::timeout(Duration::from_secs(1), r.status().failed())
        .await
        .expect("the resolver reports the empty prefix");
    assert!(problem.contains("no endpoints registered"), "{problem}");
    wait_for(
        &mut rx,
        &[
            "127.0.0.1:9001",
            "127.0.0.1:9002",
            "127.0.0.1:9003",
            "127.0.0.1:9004",
        ],
        Duration::from_secs(1),
    )
    .await;
    kv.put(format!("{key}/5"), "127.0.0.1:9005", None)
        .await
        .unwrap();
    wait_for(&mut rx, &["127.0.0.1:9005"], Duration::from_secs(1)).await;
    assert_eq!(
        etcd_resolver::reloads(&conf(etcd.endpoints(), &key)),
        Some(1)
    );
}

/// Answers over tonic's 4 MiB default: a prefix whose get answer holds three values of 1.4 MiB
/// (each within etcd's request limit) is read, and the watch goes on after a cut that missed
/// three more (etcd's Go client, go-zero's, reads up to 2 GiB).
#[tokio::test]
async fn etcd_resolver_reads_answers_over_4_mib() {
    /// Waits until the published set is `want` (compared by length and content; a failure
    /// names the sizes, not the megabytes of the values).
    async fn wait_for_large(rx: &mut EndpointUpdates, want: &[String], within: Duration) {
        let mut want = want.to_vec();
        want.sort();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(got) = rx.borrow_and_update().as_deref() {
                let mut got = got.clone();
                got.sort();
                if got == want {
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                let got = current(rx).map(|v| v.iter().map(String::len).collect::<Vec<_>>());
                panic!(
                    "not published within {within:?}: want {} values, last value sizes {got:?}",
                    want.len()
                );
            }
        }
    }
    let etcd = EtcdServer::start().await;
    let mut kv = etcd.client().await;
    let key = unique_key("disco-large");
    let big = |i: usize| format!("{i}{}", "x".repeat(1_400_000));
    for i in 0..3 {
        kv.put(format!("{key}/big{i}"), big(i), None).await.unwrap();
    }
    kv.put(format!("{key}/1"), "127.0.0.1:9001", None)
        .await
        .unwrap();
    let proxy = TcpProxy::start(etcd.endpoint()).await;
    let r = etcd_resolver::resolve(conf(vec![proxy.endpoint()], &key)).unwrap();
    let mut rx = r.updates();
    let mut want: Vec<String> = (0..3).map(big).collect();
    want.push("127.0.0.1:9001".to_owned());
    wait_for_large(&mut rx, &want, Duration::from_secs(10)).await;

    // Missed while cut: three more large values and a server.
    proxy.cut_and_wait().await;
    for i in 3..6 {
        kv.put(format!("{key}/big{i}"), big(i), None).await.unwrap();
    }
    kv.put(format!("{key}/2"), "127.0.0.1:9002", None)
        .await
        .unwrap();
    proxy.heal();
    want.extend((3..6).map(big));
    want.push("127.0.0.1:9002".to_owned());
    wait_for_large(&mut rx, &want, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn etcd_resolver_applies_events_arriving_together_as_one_update() {
    let etcd = EtcdServer::start().await;
    let mut kv = etcd.client().await;
    let key = unique_key("disco-coalesce");
    let r = etcd_resolver::resolve(conf(etcd.endpoints(), &key)).unwrap();
    let mut rx = r.updates();
    wait_for(&mut rx, &[], Duration::from_secs(5)).await;

    // One transaction = one revision = one watch response with 5 events: exactly one update.
    let ops: Vec<TxnOp> = (1..=5)
        .map(|i| {
            TxnOp::put(
                format!("{key}/{i}"),
                format!("127.0.0.1:{}", 9000 + i),
                None,
            )
        })
        .collect();
    kv.txn(Txn::new().and_then(ops)).await.unwrap();
    rx.changed().await.unwrap();
    let seen = current(&rx).unwrap();
    assert_eq!(
        seen.len(),
        5,
        "all five events in the first update: {seen:?}"
    );
    assert_quiet(&mut rx, Duration::from_millis(300)).await;
}

#[tokio::test]
async fn etcd_resolver_waits_for_etcd_then_resolves() {
    let Some(mut etcd) = EtcdServer::start_exclusive(
        "etcd_resolver_waits_for_etcd_then_resolves",
        "kills and restarts etcd",
    )
    .await
    else {
        return;
    };
    let key = unique_key("disco-late");
    {
        let mut kv = etcd.client().await;
        kv.put(format!("{key}/1"), "127.0.0.1:9001", None)
            .await
            .unwrap();
    }
    etcd.kill();
    // etcd is down: the resolver starts anyway and publishes nothing (None, not an empty set).
    let r = etcd_resolver::resolve(conf(etcd.endpoints(), &key)).unwrap();
    let mut rx = r.updates();
    // An absence check: nothing may be published while etcd is down; 1.5 s covers the
    // resolver's first attempt and its first retry (back-off ~1 s).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(current(&rx), None);
    etcd.restart().await;
    let took = wait_for(&mut rx, &["127.0.0.1:9001"], Duration::from_secs(10)).await;
    println!("discovery: etcd up -> first resolution in {took:?}");
}

#[tokio::test]
async fn etcd_resolver_keeps_last_set_while_etcd_is_down_and_converges_after() {
    let Some(mut etcd) = EtcdServer::start_exclusive(
        "etcd_resolver_keeps_last_set_while_etcd_is_down_and_converges_after",
        "kills and restarts etcd",
    )
    .await
    else {
        return;
    };
    let key = unique_key("disco-outage");
    let mut kv = etcd.client().await;
    kv.put(format!("{key}/1"), "127.0.0.1:9001", None)
        .await
        .unwrap();
    kv.put(format!("{key}/2"), "127.0.0.1:9002", None)
        .await
        .unwrap();
    drop(kv);
    let r = etcd_resolver::resolve(conf(etcd.endpoints(), &key)).unwrap();
    let mut rx = r.updates();
    wait_for(
        &mut rx,
        &["127.0.0.1:9001", "127.0.0.1:9002"],
        Duration::from_secs(5),
    )
    .await;

    etcd.kill();
    // Several reconnect attempts fail meanwhile: the last known set stays, nothing is published.
    assert_quiet(&mut rx, Duration::from_secs(4)).await;
    assert_eq!(
        current(&rx),
        Some(sorted(&["127.0.0.1:9001", "127.0.0.1:9002"]))
    );

    // etcd returns; changes are made at once, before the resolver reconnects (its back-off is ~1 s).
    etcd.restart().await;
    let mut kv = etcd.client().await;
    kv.delete(format!("{key}/1"), None).await.unwrap();
    kv.put(format!("{key}/3"), "127.0.0.1:9003", None)
        .await
        .unwrap();
    let changed_at = Instant::now();
    wait_for(
        &mut rx,
        &["127.0.0.1:9002", "127.0.0.1:9003"],
        Duration::from_secs(10),
    )
    .await;
    println!(
        "discovery: change after etcd restart picked up in {:?}",
        changed_at.elapsed()
    );
}

#[tokio::test]
async fn etcd_resolver_reloads_after_compaction_past_its_revision() {
    // Compaction is cluster-wide: on a shared etcd it would compact the history under the other
    // tests' watches too (one resuming after a partition would have to reload).
    let Some(etcd) = EtcdServer::start_exclusive(
        "etcd_resolver_reloads_after_compaction_past_its_revision",
        "compacts the cluster's history",
    )
    .await
    else {
        return;
    };
    let key = unique_key("disco-compact");
    let proxy = TcpProxy::start(etcd.endpoint()).await;
    let mut kv = etcd.client().await;
    kv.put(format!("{key}/1"), "127.0.0.1:9001", None)
        .await
        .unwrap();
    let c = conf(vec![proxy.endpoint()], &key);
    let r = etcd_resolver::resolve(c.clone()).unwrap();
    let mut rx = r.updates();
    wait_for(&mut rx, &["127.0.0.1:9001"], Duration::from_secs(5)).await;
    assert_eq!(etcd_resolver::reloads(&c), Some(1));

    // Partition the resolver from etcd, change the keys, compact the history past its revision.
    proxy.cut_and_wait().await;
    kv.put(format!("{key}/2"), "127.0.0.1:9002", None)
        .await
        .unwrap();
    kv.delete(format!("{key}/1"), None).await.unwrap();
    kv.put(format!("{key}/3"), "127.0.0.1:9003", None)
        .await
        .unwrap();
    let rev = kv
        .put(format!("{key}/4"), "127.0.0.1:9004", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    kv.delete(format!("{key}/3"), None).await.unwrap();
    kv.compact(rev, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    assert_eq!(
        current(&rx),
        Some(sorted(&["127.0.0.1:9001"])),
        "last known set kept"
    );

    // Back: resuming the watch at the old revision hits the compaction -> full reload -> correct set.
    proxy.heal();
    wait_for(
        &mut rx,
        &["127.0.0.1:9002", "127.0.0.1:9004"],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        etcd_resolver::reloads(&c),
        Some(2),
        "exactly one reload (the compaction)"
    );
    // And it keeps watching.
    kv.put(format!("{key}/5"), "127.0.0.1:9005", None)
        .await
        .unwrap();
    wait_for(
        &mut rx,
        &["127.0.0.1:9002", "127.0.0.1:9004", "127.0.0.1:9005"],
        Duration::from_secs(1),
    )
    .await;
}

#[tokio::test]
async fn etcd_resolver_resumes_after_a_partition_without_reloading() {
    let etcd = EtcdServer::start().await;
    let key = unique_key("disco-resume");
    let proxy = TcpProxy::start(etcd.endpoint()).await;
    let mut kv = etcd.client().await;
    kv.put(format!("{key}/1"), "127.0.0.1:9001", None)
        .await
        .unwrap();
    let c = conf(vec![proxy.endpoint()], &key);
    let r = etcd_resolver::resolve(c.clone()).unwrap();
    let mut rx = r.updates();
    wait_for(&mut rx, &["127.0.0.1:9001"], Duration::from_secs(5)).await;

    proxy.cut_and_wait().await;
    kv.put(format!("{key}/2"), "127.0.0.1:9002", None)
        .await
        .unwrap();
    kv.delete(format!("{key}/1"), None).await.unwrap();
    assert_quiet(&mut rx, Duration::from_millis(1500)).await;
    proxy.heal();
    // The missed events are replayed from the watch revision (no full reload needed).
    wait_for(&mut rx, &["127.0.0.1:9002"], Duration::from_secs(10)).await;
    assert_eq!(etcd_resolver::reloads(&c), Some(1));
}

#[tokio::test]
async fn etcd_watch_is_shared_and_closed_when_the_last_client_drops() {
    // It counts the cluster's watchers, which every test on a shared etcd adds to.
    let Some(etcd) = EtcdServer::start_exclusive(
        "etcd_watch_is_shared_and_closed_when_the_last_client_drops",
        "counts the cluster's watchers",
    )
    .await
    else {
        return;
    };
    let key = unique_key("disco-shared");
    let mut kv = etcd.client().await;
    kv.put(format!("{key}/1"), "127.0.0.1:9001", None)
        .await
        .unwrap();
    let base = etcd_watchers(&etcd.endpoint()).await;
    assert!(
        base.is_some(),
        "etcd /metrics has no etcd_debugging_mvcc_watcher_total"
    );

    // Host order does not matter: same cluster, same key -> one watch.
    let mut hosts = etcd.endpoints();
    hosts.push(etcd.endpoint());
    let a = etcd_resolver::resolve(conf(etcd.endpoints(), &key)).unwrap();
    let b = etcd_resolver::resolve(conf(hosts, &key)).unwrap();
    assert!(a.shares_source_with(&b), "both clients share one watch");
    let mut rx_a = a.updates();
    let mut rx_b = b.updates();
    wait_for(&mut rx_a, &["127.0.0.1:9001"], Duration::from_secs(5)).await;
    wait_for(&mut rx_b, &["127.0.0.1:9001"], Duration::from_secs(1)).await;
    let c = conf(etcd.endpoints(), &key);
    assert_eq!(etcd_resolver::reloads(&c), Some(1), "one get for both");
    // The set is published after the get and before the watch is created (it starts at the get's revision
    // + 1, so nothing is missed), and etcd registers the watcher only once it has read the create request:
    // wait for it, but never accept more than one.
    if let Some(base) = base {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let n = etcd_watchers(&etcd.endpoint()).await;
            if n == Some(base + 1) {
                break;
            }
            assert!(
                n.is_none_or(|n| n <= base),
                "more than one watcher in etcd: {n:?} (base {base})"
            );
            assert!(
                Instant::now() < deadline,
                "one watcher in etcd: still {n:?} (base {base}) after 5 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // A late client gets the current set at once.
    let late = etcd_resolver::resolve(c.clone()).unwrap();
    assert_eq!(current(&late.updates()), Some(sorted(&["127.0.0.1:9001"])));

    drop(a);
    drop(late);
    assert!(etcd_resolver::is_watching(&c), "b still uses it");
    drop(b);
    assert!(!etcd_resolver::is_watching(&c));
    // The watch task ends: every receiver sees the channel closed.
    tokio::time::timeout(Duration::from_secs(2), async {
        while rx_a.changed().await.is_ok() {}
    })
    .await
    .expect("receiver closed");
    // And etcd cancels the watcher.
    if let Some(base) = base {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let n = etcd_watchers(&etcd.endpoint()).await;
            if n == Some(base) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "etcd still has {n:?} watchers (base {base})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // A new client starts a new watch.
    let again = etcd_resolver::resolve(c.clone()).unwrap();
    let mut rx = again.updates();
    wait_for(&mut rx, &["127.0.0.1:9001"], Duration::from_secs(5)).await;
}

// ---------------------------------------------------------------------------------------------
// End to end: zrpc servers registering through their etcd publisher, a zrpc Client discovering them.
// ---------------------------------------------------------------------------------------------

/// Steady load through one client: `workers` loops of SayHello with `pause` between calls.
struct Load {
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    errors: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(client: &Client, workers: usize, pause: Duration) -> Load {
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..workers)
            .map(|_| {
                let mut greeter = GreeterClient::new(client.clone());
                let (ok, failed, errors, stop) =
                    (ok.clone(), failed.clone(), errors.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let call = greeter.say_hello(HelloRequest {
                            name: "load".into(),
                        });
                        match call.await {
                            Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                            Err(status) => {
                                errors.lock().unwrap().push(format!(
                                    "{:?}: {}",
                                    status.code(),
                                    status.message()
                                ));
                                failed.fetch_add(1, Ordering::Relaxed)
                            }
                        };
                        tokio::time::sleep(pause).await;
                    }
                })
            })
            .collect();
        Load {
            ok,
            failed,
            errors,
            stop,
            tasks,
        }
    }

    /// Stops the load; returns (ok, failed, first errors).
    async fn finish(self) -> (u64, u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        let errors = self
            .errors
            .lock()
            .unwrap()
            .iter()
            .take(10)
            .cloned()
            .collect();
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            errors,
        )
    }
}

/// The shedder is off in these servers (`CpuThreshold: 0`): it reads the whole machine's CPU,
/// which other jobs on a shared machine can fill, and these tests are not about it.
fn registered_conf(name: &str, etcd: &EtcdServer, key: &str) -> zrpc_server::RpcServerConf {
    // WrapUpTime 1 s (go-zero's default): clients have a second to see the deregistration.
    test_conf(name)
        .with_cpu_threshold(0)
        .with_etcd(conf(etcd.endpoints(), key))
        .with_shutdown(ShutdownConf::new(
            Duration::from_secs(1),
            Duration::from_secs(10),
        ))
}

/// Waits until `server` has received at least one call; returns how long it took.
async fn wait_traffic(server: &TestServer, within: Duration) -> Duration {
    let start = Instant::now();
    while server.greeter.started() == 0 {
        assert!(
            start.elapsed() < within,
            "{} got no traffic within {within:?}",
            server.addr
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    start.elapsed()
}

/// Watches `server`'s call counter for `window`; returns when it last moved (relative to `since`).
async fn last_traffic(server: &TestServer, since: Instant, window: Duration) -> Option<Duration> {
    let mut last = server.greeter.started();
    let mut moved = None;
    while since.elapsed() < window {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = server.greeter.started();
        if now != last {
            last = now;
            moved = Some(since.elapsed());
        }
    }
    moved
}

/// Waits until `server` registered itself under `key/`.
async fn wait_registered(etcd: &EtcdServer, key: &str, server: &TestServer) {
    let mut kv = etcd.client().await;
    let want = server.addr.to_string();
    let start = Instant::now();
    while !keys_under(&mut kv, key)
        .await
        .iter()
        .any(|(_, v)| *v == want)
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{want} did not register under {key}/"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn etcd_client(etcd: &EtcdServer, key: &str) -> Client {
    let client = Client::new(RpcClientConf::etcd(etcd.endpoints(), key))
        .await
        .unwrap();
    // First call: waits for the first resolution.
    GreeterClient::new(client.clone())
        .say_hello(HelloRequest {
            name: "warm-up".into(),
        })
        .await
        .unwrap();
    client
}

#[tokio::test]
async fn registered_server_gets_traffic_within_1s_and_none_1s_after_deregistering() {
    let etcd = EtcdServer::start().await;
    let key = unique_key("disco-e2e-register");
    let a = start_server(registered_conf("disco-a", &etcd, &key), TestGreeter::new()).await;
    wait_registered(&etcd, &key, &a).await;
    let client = etcd_client(&etcd, &key).await;
    let load = Load::start(&client, 4, Duration::from_millis(2));
    // the load runs (one call more than the client's warm-up)
    a.greeter
        .wait_for("the load's first calls", |g| g.started() > 1)
        .await;

    // B registers: the running client sends it traffic within 1 s (measured from B serving, so it
    // includes B's own lease grant and put).
    let b = start_server(registered_conf("disco-b", &etcd, &key), TestGreeter::new()).await;
    let took = wait_traffic(&b, Duration::from_secs(1)).await;
    println!("discovery e2e: server registered -> first request in {took:?}");

    // B is in rotation.
    b.greeter
        .wait_for("50 calls on B", |g| g.started() >= 50)
        .await;
    // B deregisters (graceful shutdown: revoke, 1 s wrap-up, drain): no traffic 1 s later.
    let a_before = a.greeter.started();
    let b_addr = b.addr.to_string();
    let resolution = etcd_resolver::resolve(conf(etcd.endpoints(), &key)).unwrap();
    let mut rx = resolution.updates();
    let stopping = Instant::now();
    b.begin_shutdown();
    let (last, gone) = tokio::join!(last_traffic(&b, stopping, Duration::from_secs(2)), async {
        rx.wait_for(|v| v.as_ref().is_some_and(|v| !v.contains(&b_addr)))
            .await
            .unwrap();
        stopping.elapsed()
    });
    println!(
        "discovery e2e: shutdown began -> B removed from the client's endpoint set in {gone:?}"
    );
    println!("discovery e2e: deregistered -> last request at {last:?} after shutdown began");
    assert!(
        last.is_none_or(|t| t < Duration::from_secs(1)),
        "traffic at {last:?} after deregistering"
    );
    b.join().await.unwrap();
    let (ok, failed, errors) = load.finish().await;
    assert!(a.greeter.started() > a_before, "A keeps serving");
    assert_eq!(
        failed,
        0,
        "{failed} failed calls of {}: {errors:?}",
        ok + failed
    );
    println!("discovery e2e: {ok} calls, 0 failed");
}

#[tokio::test]
async fn keys_written_in_go_zero_layout_are_discovered() {
    let etcd = EtcdServer::start().await;
    let key = unique_key("disco-e2e-gozero");
    // Servers that do not register themselves (like go-zero servers, seen only through their keys).
    let s1 = start_server(
        test_conf("disco-gz1").with_cpu_threshold(0),
        TestGreeter::new(),
    )
    .await;
    let s2 = start_server(
        test_conf("disco-gz2").with_cpu_threshold(0),
        TestGreeter::new(),
    )
    .await;
    let mut kv = etcd.client().await;
    // go-zero: Key/<lease id in decimal> -> host:port (plain puts, with a lease like a go-zero server).
    let lease = kv.lease_grant(10, None).await.unwrap().id();
    kv.put(
        format!("{key}/{lease}"),
        s1.addr.to_string(),
        Some(PutOptions::new().with_lease(lease)),
    )
    .await
    .unwrap();
    kv.put(format!("{key}/12345"), s2.addr.to_string(), None)
        .await
        .unwrap();
    // A duplicate registration of s2 (a go-zero server re-registered under a new lease).
    kv.put(format!("{key}/12346"), s2.addr.to_string(), None)
        .await
        .unwrap();

    let client = etcd_client(&etcd, &key).await;
    let mut greeter = GreeterClient::new(client.clone());
    let calls: Vec<_> = (0..200)
        .map(|_| {
            let mut g = greeter.clone();
            tokio::spawn(async move { g.say_hello(HelloRequest { name: "gz".into() }).await })
        })
        .collect();
    for c in calls {
        c.await.unwrap().unwrap();
    }
    assert!(
        s1.greeter.started() > 0 && s2.greeter.started() > 0,
        "both go-zero-layout endpoints get traffic: {} / {}",
        s1.greeter.started(),
        s2.greeter.started()
    );
    assert_eq!(client.endpoints().len(), 2, "duplicates collapse");
    greeter
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .unwrap();
}

#[tokio::test]
async fn etcd_down_15s_under_load_loses_no_call_and_changes_after_restart_are_picked_up() {
    let Some(mut etcd) =
        EtcdServer::start_exclusive("etcd_down_15s_under_load", "kills and restarts etcd").await
    else {
        return;
    };
    let key = unique_key("disco-e2e-outage");
    let a = start_server(registered_conf("disco-oa", &etcd, &key), TestGreeter::new()).await;
    wait_registered(&etcd, &key, &a).await;
    // C is registered by a plain put (no lease): it will be deleted right after etcd returns.
    let c = start_server(
        test_conf("disco-oc").with_cpu_threshold(0),
        TestGreeter::new(),
    )
    .await;
    let mut kv = etcd.client().await;
    kv.put(format!("{key}/c"), c.addr.to_string(), None)
        .await
        .unwrap();
    drop(kv);
    let client = etcd_client(&etcd, &key).await;
    let load = Load::start(&client, 4, Duration::from_millis(5));
    wait_traffic(&c, Duration::from_secs(2)).await;

    etcd.kill();
    let killed = Instant::now();
    // Meanwhile a new server B starts; its publisher keeps trying to register.
    let b = start_server(registered_conf("disco-ob", &etcd, &key), TestGreeter::new()).await;
    tokio::time::sleep(Duration::from_secs(15).saturating_sub(killed.elapsed())).await;
    assert_eq!(b.greeter.started(), 0, "B is unknown while etcd is down");
    let during = load.ok.load(Ordering::Relaxed);

    etcd.restart().await;
    let mut kv = etcd.client().await;
    kv.delete(format!("{key}/c"), None).await.unwrap();
    let took_b = wait_traffic(&b, Duration::from_secs(15)).await;
    println!("discovery e2e: etcd back -> B (registered meanwhile) gets traffic after {took_b:?}");
    // C's key was deleted after the restart: its traffic stops.
    let since = Instant::now();
    let last_c = last_traffic(&c, since, Duration::from_secs(3)).await;
    assert!(
        last_c.is_none_or(|t| t < Duration::from_secs(2)),
        "C still gets traffic {last_c:?} after its key was deleted"
    );
    println!("discovery e2e: etcd back -> C's key deleted -> C's last request {last_c:?} later");
    let (ok, failed, errors) = load.finish().await;
    assert!(
        during > 100,
        "load ran while etcd was down ({during} calls)"
    );
    assert!(a.greeter.started() > 0);
    assert_eq!(
        failed,
        0,
        "{failed} failed calls of {}: {errors:?}",
        ok + failed
    );
    println!("discovery e2e: etcd down 15 s: {ok} calls, 0 failed");
}

/// Registration-to-first-request latency over 50 trials (printed: p50, p99, max).
///
/// `cargo test -p zrpc-tests --test integration -- discovery::registration_to_first_request_latency --nocapture`
#[tokio::test]
async fn registration_to_first_request_latency() {
    let etcd = EtcdServer::start().await;
    let key = unique_key("disco-latency");
    let base = start_server(
        test_conf("disco-lat-base").with_cpu_threshold(0),
        TestGreeter::new(),
    )
    .await;
    let mut kv = etcd.client().await;
    kv.put(format!("{key}/base"), base.addr.to_string(), None)
        .await
        .unwrap();
    let client = etcd_client(&etcd, &key).await;
    let load = Load::start(&client, 4, Duration::from_millis(1));

    // The client's resolver (the shared watch of this cluster and key), to time the discovery part alone.
    let resolution = etcd_resolver::resolve(conf(etcd.endpoints(), &key)).unwrap();
    let mut rx = resolution.updates();
    let mut to_request = Vec::with_capacity(50);
    let mut to_update = Vec::with_capacity(50);
    let mut put_rtt = Vec::with_capacity(50);
    for i in 0..50 {
        let s = start_server(
            test_conf("disco-lat").with_cpu_threshold(0),
            TestGreeter::new(),
        )
        .await;
        let addr = s.addr.to_string();
        rx.borrow_and_update();
        let put_at = Instant::now();
        let put = kv.put(format!("{key}/{i}"), addr.clone(), None);
        let (updated, request) = tokio::join!(
            async {
                put.await.unwrap();
                put_rtt.push(put_at.elapsed());
                rx.wait_for(|v| v.as_ref().is_some_and(|v| v.contains(&addr)))
                    .await
                    .unwrap();
                put_at.elapsed()
            },
            wait_traffic_since(&s, put_at, Duration::from_secs(2))
        );
        to_update.push(updated);
        to_request.push(request);
        kv.delete(format!("{key}/{i}"), None).await.unwrap();
        // The client drops it before the server goes away.
        wait::until(&format!("the client to drop {addr}"), || {
            client.endpoints().iter().all(|e| e.addr != addr)
        })
        .await;
        s.shutdown().await.unwrap();
    }
    let (ok, failed, errors) = load.finish().await;
    let pct = |v: &mut Vec<Duration>, p: f64| {
        v.sort();
        v[((v.len() as f64 * p).ceil() as usize).saturating_sub(1)]
    };
    println!(
        "discovery: etcd put round trip (commit + fsync) over 50 trials: p50 {:?}, p99 {:?}",
        pct(&mut put_rtt, 0.50),
        pct(&mut put_rtt, 0.99)
    );
    println!(
        "discovery: put -> resolver update over 50 trials: p50 {:?}, p99 {:?}",
        pct(&mut to_update, 0.50),
        pct(&mut to_update, 0.99)
    );
    println!(
        "discovery: registration (put) -> first request over 50 trials: p50 {:?}, p99 {:?}, max {:?} (under load: {ok} calls, {failed} failed)",
        pct(&mut to_request, 0.50),
        pct(&mut to_request, 0.99),
        pct(&mut to_request, 1.0)
    );
    assert_eq!(failed, 0, "{errors:?}");
    assert!(pct(&mut to_request, 0.99) < Duration::from_secs(1));
}

/// Like [`wait_traffic`], measured from `since`.
async fn wait_traffic_since(server: &TestServer, since: Instant, within: Duration) -> Duration {
    while server.greeter.started() == 0 {
        assert!(
            since.elapsed() < within,
            "{} got no traffic within {within:?}",
            server.addr
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    since.elapsed()
}

#[tokio::test]
async fn dns_target_reaches_a_server() {
    let s = start_server(
        test_conf("disco-dns").with_cpu_threshold(0),
        TestGreeter::new(),
    )
    .await;
    let target = format!("dns:///localhost:{}", s.addr.port());
    let client = Client::new(RpcClientConf::target(target.clone()))
        .await
        .unwrap();
    let mut greeter = GreeterClient::new(client.clone());
    for _ in 0..10 {
        greeter
            .say_hello(HelloRequest { name: "dns".into() })
            .await
            .unwrap_or_else(|e| panic!("{target}: {e}"));
    }
    assert_eq!(s.greeter.started(), 10);
}

#[tokio::test]
async fn client_subset_is_32_and_one_change_moves_at_most_one_member() {
    let etcd = EtcdServer::start().await;
    let key = unique_key("disco-subset");
    let mut kv = etcd.client().await;
    let mut servers = Vec::new();
    for i in 0..45 {
        let s = start_server(
            test_conf("disco-subset").with_cpu_threshold(0),
            TestGreeter::new(),
        )
        .await;
        kv.put(format!("{key}/{i}"), s.addr.to_string(), None)
            .await
            .unwrap();
        servers.push(s);
    }
    let index_of = |addr: &str| {
        servers
            .iter()
            .position(|s| s.addr.to_string() == addr)
            .unwrap()
    };
    let client = etcd_client(&etcd, &key).await;
    let members = |c: &Client| {
        let mut v: Vec<String> = c.endpoints().into_iter().map(|e| e.addr).collect();
        v.sort();
        v
    };
    // The client has applied all 45 registrations once its subset stops changing; any 32 of them
    // will do as the start, but the test needs servers it knows rank in the top 32: members of
    // a subset of all 45 do. Five of them are deregistered here (each is replaced by the next
    // best) and come back one by one below as the "added" servers: a server that outranks a
    // member, so its arrival must move exactly one member. A new server that ranks below the
    // subset would move none, and the test could not tell that from an update not yet applied.
    wait::until("the client's subset of 32 endpoints", || {
        client.endpoints().len() == 32
    })
    .await;
    let mut comebacks = Vec::new();
    for addr in members(&client).into_iter().take(5) {
        kv.delete(format!("{key}/{}", index_of(&addr)), None)
            .await
            .unwrap();
        comebacks.push(addr);
    }
    wait::until("the client to drop the five deregistered members", || {
        let m = members(&client);
        comebacks.iter().all(|a| !m.contains(a))
    })
    .await;
    let mut before = members(&client);
    assert_eq!(before.len(), 32, "a subset of 32 of 40");
    let mut moved = 0;
    // Alternate: add a server that outranks a member, remove a member. Each step waits until the
    // client applied it (the changed server entered or left its subset), then checks that
    // exactly one member left and exactly one entered.
    for step in 0..10 {
        let changed = if step % 2 == 0 {
            let addr = comebacks[step / 2].clone();
            kv.put(format!("{key}/{}", index_of(&addr)), addr.clone(), None)
                .await
                .unwrap();
            wait::until(&format!("step {step}: {addr} to enter the subset"), || {
                members(&client).contains(&addr)
            })
            .await;
            addr
        } else {
            let addr = before
                .iter()
                .find(|a| !comebacks.contains(a))
                .unwrap()
                .clone();
            kv.delete(format!("{key}/{}", index_of(&addr)), None)
                .await
                .unwrap();
            wait::until(&format!("step {step}: {addr} to leave the subset"), || {
                !members(&client).contains(&addr)
            })
            .await;
            addr
        };
        let after = members(&client);
        assert_eq!(after.len(), 32);
        let left: Vec<&String> = before.iter().filter(|a| !after.contains(a)).collect();
        let entered: Vec<&String> = after.iter().filter(|a| !before.contains(a)).collect();
        assert!(
            left.len() == 1 && entered.len() == 1,
            "step {step} ({changed}): {left:?} left, {entered:?} entered"
        );
        moved += entered.len();
        before = after;
    }
    println!(
        "discovery: 10 membership changes moved {moved} subset members (go-zero draws a fresh random subset on every update)"
    );
}
