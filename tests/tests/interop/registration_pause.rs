//! A go-zero client (`gz-client`, go-zero v1.10.3) calling two zrpc servers through etcd while
//! one of them is taken out of discovery (`ServerHandle::pause_registration`) and put back:
//! go-zero's watcher drops it with its key and picks it up again, and no call fails.

use std::time::{Duration, Instant};

use zrpc_server::registry::RegistrationState;
use zrpc_tests::etcd::{EtcdServer, unique_key};
use zrpc_tests::gozero::{ClientYaml, Discovery, GzClient};
use zrpc_tests::gozero_or_skip;
use zrpc_tests::greeter::{TestGreeter, start_server, test_conf};
use zrpc_tests::wait::within;

/// Whether `cond` comes true within `limit` (polled; the shared wait helpers' way).
async fn soon(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    within(limit, || std::future::ready(cond())).await.is_some()
}

#[tokio::test]
async fn a_go_zero_client_stops_calling_a_paused_server_and_comes_back_on_resume() {
    let p = gozero_or_skip!();
    let etcd = EtcdServer::start().await;
    let key = unique_key("gz-pause");
    let mut servers = Vec::new();
    for name in ["gz-pause-a.rpc", "gz-pause-b.rpc"] {
        let conf = test_conf(name)
            .with_etcd(etcd.etcd_conf(&key))
            .with_cpu_threshold(0);
        servers.push(start_server(conf, TestGreeter::new()).await);
    }
    for s in &servers {
        let h = s.handle.clone();
        assert!(
            soon(Duration::from_secs(5), || matches!(
                h.registration(),
                RegistrationState::Registered { .. }
            ))
            .await
        );
    }
    let (a, b) = (&servers[0], &servers[1]);
    let (a_addr, b_addr) = (a.addr.to_string(), b.addr.to_string());
    let client = GzClient::new(
        p,
        &ClientYaml::new(Discovery::Etcd(etcd.endpoints(), key.clone())),
    )
    .name("sleep:5")
    .c(2)
    .gap(Duration::from_millis(5))
    .duration(Duration::from_secs(12))
    .verbose()
    .spawn();
    let calls_to = |peer: &str| {
        client
            .calls_so_far()
            .iter()
            .filter(|c| c.peer == peer)
            .count()
    };
    assert!(
        soon(Duration::from_secs(8), || calls_to(&a_addr) > 5
            && calls_to(&b_addr) > 5)
        .await,
        "the go-zero client calls both servers"
    );

    a.handle.pause_registration();
    assert!(
        soon(Duration::from_secs(2), || a.handle.registration()
            == RegistrationState::Paused)
        .await
    );
    let paused_at = Instant::now();
    // The window the pause may take to reach the client's picker.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let a_quiet = calls_to(&a_addr);
    let b_from = calls_to(&b_addr);
    // Absence check: a bounded wait in which A must get no new call.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(calls_to(&a_addr), a_quiet, "no new call reaches A");
    assert!(calls_to(&b_addr) > b_from + 10, "B takes the calls");
    let a_before_resume = calls_to(&a_addr);

    a.handle.resume_registration();
    let resumed_at = Instant::now();
    assert!(
        soon(Duration::from_secs(1), || calls_to(&a_addr)
            > a_before_resume)
        .await,
        "A gets the go-zero client's calls again within 1 s of the resume"
    );
    println!(
        "go-zero client: paused at {:?}, calls back {:?} after resume",
        paused_at.elapsed(),
        resumed_at.elapsed()
    );
    let run = client.finish().await;
    assert_eq!(run.summary.failed, 0, "{}", run.explain());
}
