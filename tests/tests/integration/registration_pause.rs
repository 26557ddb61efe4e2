//! Pausing a server's registration: out of discovery without stopping it, under load from a
//! zrpc client that discovers through etcd; back on resume; still out after an etcd restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use zrpc_client::conf::RpcClientConf;
use zrpc_server::registry::RegistrationState;
use zrpc_tests::etcd::{EtcdServer, TcpProxy, keys_under, unique_key};
use zrpc_tests::greeter::{TestGreeter, TestServer, start_server, test_conf};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::wait::within;

async fn registered_server(etcd: &EtcdServer, key: &str, name: &str) -> TestServer {
    registered_at(etcd.etcd_conf(key), name).await
}

/// A server registered with `etcd`, once it is.
async fn registered_at(etcd: zrpc_core::conf::EtcdConf, name: &str) -> TestServer {
    let conf = test_conf(name).with_etcd(etcd).with_cpu_threshold(0);
    let server = start_server(conf, TestGreeter::new()).await;
    let handle = server.handle.clone();
    assert!(
        soon(Duration::from_secs(5), || matches!(
            handle.registration(),
            RegistrationState::Registered { .. }
        ))
        .await,
        "{name} registers"
    );
    server
}

/// Whether `cond` comes true within `limit` (polled; the shared wait helpers' way).
async fn soon(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    within(limit, || std::future::ready(cond())).await.is_some()
}

#[tokio::test]
async fn a_paused_server_gets_no_new_calls_stays_out_across_an_etcd_restart_and_comes_back() {
    // The test restarts etcd: an etcd of its own, also where the others share one.
    let Some(mut etcd) = EtcdServer::start_exclusive(
        "registration_pause::a_paused_server_gets_no_new_calls",
        "restarts etcd",
    )
    .await
    else {
        return;
    };
    let key = unique_key("pause");
    let a = registered_server(&etcd, &key, "pause-a.rpc").await;
    let b = registered_server(&etcd, &key, "pause-b.rpc").await;
    let client = zrpc::client(RpcClientConf::etcd(etcd.endpoints(), key.clone()))
        .await
        .unwrap();

    // Steady load: one call at a time, each with a short handler delay, until told to stop.
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (failed, stop) = (failed.clone(), stop.clone());
        let mut greeter = GreeterClient::new(client.clone());
        tokio::spawn(async move {
            // bounded: at most 60 s of calls whatever the test does
            let end = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                let req = HelloRequest {
                    name: "sleep:5".into(),
                };
                if greeter.say_hello(req).await.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    assert!(
        soon(Duration::from_secs(5), || a.greeter.started() > 5
            && b.greeter.started() > 5)
        .await,
        "both servers get calls"
    );

    // Pause A: its key is deleted; within 1 s it gets no new call, while it goes on serving.
    let mut kv = etcd.client().await;
    let a_value = a.addr.to_string();
    let before = keys_under(&mut kv, &key).await;
    assert_eq!(before.len(), 2, "{before:?}");
    a.handle.pause_registration();
    assert!(
        soon(Duration::from_secs(2), || a.handle.registration()
            == RegistrationState::Paused)
        .await
    );
    let after = keys_under(&mut kv, &key).await;
    assert!(
        after.iter().all(|(_, v)| *v != a_value) && after.len() == 1,
        "A's key is gone: {after:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let quiet_from = a.greeter.started();
    let b_from = b.greeter.started();
    // Absence check: a bounded wait in which A must get nothing new while B keeps serving.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(a.greeter.started(), quiet_from, "no new call reaches A");
    assert!(b.greeter.started() > b_from + 10, "B takes the calls");
    assert_eq!(
        a.greeter.started(),
        a.greeter.finished(),
        "A's calls in flight finished"
    );
    // A still serves a direct call.
    let mut direct = a.client().await;
    assert!(
        direct
            .say_hello(HelloRequest { name: "x".into() })
            .await
            .is_ok()
    );

    // etcd restarts while A is paused: A stays out, B comes back.
    etcd.restart().await;
    let mut kv = etcd.client().await;
    let b_value = b.addr.to_string();
    let mut seen_b = false;
    for _ in 0..150 {
        let keys = keys_under(&mut kv, &key).await;
        assert!(
            keys.iter().all(|(_, v)| *v != a_value),
            "A stays out: {keys:?}"
        );
        if keys.iter().any(|(_, v)| *v == b_value) {
            seen_b = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(seen_b, "B registers again after the restart");
    assert_eq!(a.handle.registration(), RegistrationState::Paused);

    // Resume: A's key is back and calls reach it within a second.
    let resumed_from = a.greeter.started();
    a.handle.resume_registration();
    let resumed_at = Instant::now();
    assert!(
        soon(Duration::from_secs(1), || a.greeter.started()
            > resumed_from)
        .await,
        "A gets calls again within 1 s of the resume"
    );
    println!(
        "zrpc client: calls back {:?} after resume",
        resumed_at.elapsed()
    );
    let keys = keys_under(&mut kv, &key).await;
    assert!(keys.iter().any(|(_, v)| *v == a_value), "{keys:?}");

    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no call failed");
}

/// A pause whose revoke cannot reach etcd is not reported `Paused` while the key is still in
/// etcd: the state stays `NotRegistered`, the revoke is retried, and the server is `Paused`
/// once it reaches etcd; a resume registers one key again.
#[tokio::test]
async fn a_pause_that_cannot_revoke_is_paused_only_once_the_key_is_gone() {
    let etcd = EtcdServer::start().await;
    let key = unique_key("pause-unrevoked");
    let proxy = TcpProxy::start(etcd.endpoint()).await;
    let mut etcd_conf = etcd.etcd_conf(&key);
    etcd_conf.hosts = vec![proxy.endpoint()];
    let server = registered_at(etcd_conf, "pause-unrevoked.rpc").await;
    let handle = server.handle.clone();
    let value = server.addr.to_string();
    let mut kv = etcd.client().await;
    assert_eq!(keys_under(&mut kv, &key).await.len(), 1);

    // The server's link to etcd is cut, then it is paused: its revoke cannot reach etcd, and
    // its key stays (for up to its lease's 10 s): not `Paused` yet.
    proxy.cut_and_wait().await;
    handle.pause_registration();
    assert!(
        soon(Duration::from_secs(1), || !matches!(
            handle.registration(),
            RegistrationState::Registered { .. }
        ))
        .await,
        "out of Registered once paused"
    );
    let cut_for = Instant::now();
    while cut_for.elapsed() < Duration::from_secs(4) {
        let state = handle.registration();
        assert_eq!(
            state,
            RegistrationState::NotRegistered,
            "the key is still in etcd"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let keys = keys_under(&mut kv, &key).await;
    assert!(
        keys.iter().any(|(_, v)| *v == value),
        "the key is still in etcd: {keys:?}"
    );

    // etcd reachable again: the revoke goes through, and only then is the server `Paused`.
    proxy.heal();
    let healed = Instant::now();
    assert!(
        soon(Duration::from_secs(5), || handle.registration()
            == RegistrationState::Paused)
        .await,
        "paused once the revoke reaches etcd"
    );
    let keys = keys_under(&mut kv, &key).await;
    println!(
        "revoke unreachable for 4 s: Paused {:?} after the link healed; keys now {keys:?}",
        healed.elapsed()
    );
    assert!(keys.is_empty(), "{keys:?}");

    handle.resume_registration();
    assert!(
        soon(Duration::from_secs(5), || matches!(
            handle.registration(),
            RegistrationState::Registered { .. }
        ))
        .await,
        "registered again"
    );
    let keys = keys_under(&mut kv, &key).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    server.shutdown().await.unwrap();
}
