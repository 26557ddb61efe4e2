//! Discovery against a real etcd: the etcd resolver's endpoint stream (go-zero key layout, duplicates,
//! coalescing, outage, restart, compaction, shared watch lifetime).

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{CompactionOptions, Txn, TxnOp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zrpc_client::resolver::{EndpointUpdates, etcd as etcd_resolver};
use zrpc_core::conf::EtcdConf;
use zrpc_tests::etcd::{EtcdServer, TcpProxy, unique_key};

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
    let mut rx = r.updates.clone();
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

    // A confirmed empty prefix is an empty set (not None).
    kv.delete(
        format!("{key}/"),
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .unwrap();
    wait_for(&mut rx, &[], Duration::from_secs(1)).await;
    assert_eq!(
        etcd_resolver::reloads(&conf(etcd.endpoints(), &key)),
        Some(1)
    );
}

#[tokio::test]
async fn etcd_resolver_applies_events_arriving_together_as_one_update() {
    let etcd = EtcdServer::start().await;
    let mut kv = etcd.client().await;
    let key = unique_key("disco-coalesce");
    let r = etcd_resolver::resolve(conf(etcd.endpoints(), &key)).unwrap();
    let mut rx = r.updates.clone();
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
    let mut etcd = EtcdServer::start().await;
    if etcd.skip_if_external("etcd_resolver_waits_for_etcd_then_resolves") {
        return;
    }
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
    let mut rx = r.updates.clone();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(current(&rx), None);
    etcd.restart().await;
    let took = wait_for(&mut rx, &["127.0.0.1:9001"], Duration::from_secs(10)).await;
    println!("discovery: etcd up -> first resolution in {took:?}");
}

#[tokio::test]
async fn etcd_resolver_keeps_last_set_while_etcd_is_down_and_converges_after() {
    let mut etcd = EtcdServer::start().await;
    if etcd.skip_if_external("etcd_resolver_keeps_last_set_while_etcd_is_down_and_converges_after")
    {
        return;
    }
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
    let mut rx = r.updates.clone();
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
    let etcd = EtcdServer::start().await;
    let key = unique_key("disco-compact");
    let proxy = TcpProxy::start(etcd.endpoint()).await;
    let mut kv = etcd.client().await;
    kv.put(format!("{key}/1"), "127.0.0.1:9001", None)
        .await
        .unwrap();
    let c = conf(vec![proxy.endpoint()], &key);
    let r = etcd_resolver::resolve(c.clone()).unwrap();
    let mut rx = r.updates.clone();
    wait_for(&mut rx, &["127.0.0.1:9001"], Duration::from_secs(5)).await;
    assert_eq!(etcd_resolver::reloads(&c), Some(1));

    // Partition the resolver from etcd, change the keys, compact the history past its revision.
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(300)).await;
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
    let mut rx = r.updates.clone();
    wait_for(&mut rx, &["127.0.0.1:9001"], Duration::from_secs(5)).await;

    proxy.cut();
    tokio::time::sleep(Duration::from_millis(300)).await;
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
    let etcd = EtcdServer::start().await;
    let key = unique_key("disco-shared");
    let mut kv = etcd.client().await;
    kv.put(format!("{key}/1"), "127.0.0.1:9001", None)
        .await
        .unwrap();
    let base = etcd_watchers(&etcd.endpoint()).await;
    assert!(
        base.is_some() || etcd.is_external(),
        "etcd /metrics has no etcd_debugging_mvcc_watcher_total"
    );

    // Host order does not matter: same cluster, same key -> one watch.
    let mut hosts = etcd.endpoints();
    hosts.push(etcd.endpoint());
    let a = etcd_resolver::resolve(conf(etcd.endpoints(), &key)).unwrap();
    let b = etcd_resolver::resolve(conf(hosts, &key)).unwrap();
    assert!(
        Arc::ptr_eq(&a.guard, &b.guard),
        "both clients share one watch"
    );
    let mut rx_a = a.updates.clone();
    let mut rx_b = b.updates.clone();
    wait_for(&mut rx_a, &["127.0.0.1:9001"], Duration::from_secs(5)).await;
    wait_for(&mut rx_b, &["127.0.0.1:9001"], Duration::from_secs(1)).await;
    let c = conf(etcd.endpoints(), &key);
    assert_eq!(etcd_resolver::reloads(&c), Some(1), "one get for both");
    if let Some(base) = base {
        assert_eq!(
            etcd_watchers(&etcd.endpoint()).await,
            Some(base + 1),
            "one watcher in etcd"
        );
    }

    // A late client gets the current set at once.
    let late = etcd_resolver::resolve(c.clone()).unwrap();
    assert_eq!(current(&late.updates), Some(sorted(&["127.0.0.1:9001"])));

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
    let mut rx = again.updates.clone();
    wait_for(&mut rx, &["127.0.0.1:9001"], Duration::from_secs(5)).await;
}
