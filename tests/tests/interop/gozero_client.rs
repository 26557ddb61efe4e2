//! A go-zero client (`gz-client`, go-zero v1.10.3) calling two zrpc servers registered in etcd,
//! with every configuration shape go-zero fleets use: `Etcd.Hosts` of 1, 2 and 3 hosts,
//! `Endpoints` of 1 and 2, `Target: etcd:///h1,h2?key=k` and the legacy `etcd://h/key` and
//! `discov://h1,h2/key`. Every call must succeed and each server must get a fair share.
//!
//! Two or more hosts or endpoints make grpc-go send `:authority: h1:p1,h2:p2`, which h2 rejects
//! unless zrpc's server rewrites it (`crates/zrpc-server/src/authority/`).

use std::time::Duration;

use zrpc_tests::etcd::{EtcdCluster, unique_key};
use zrpc_tests::gozero::{ClientYaml, GzClient};
use zrpc_tests::gozero_or_skip;

use crate::support::{MIN_SHARE, Shape, zrpc_pair};

pub(crate) const CALLS: u64 = 120;

/// go-zero's P2C picks the node with the lower `sqrt(lag+1) * (inflight+1)` every time (bar a
/// forced pick per second), so with sub-millisecond handlers the node that happens to have the
/// lower latency EWMA gets nearly every call. A 5 ms handler (as real ones take) and 6 workers
/// make in-flight counts, not noise, decide.
pub(crate) fn spread_load(c: GzClient) -> GzClient {
    c.name("sleep:5")
        .n(CALLS)
        .c(6)
        .gap(Duration::from_millis(10))
}

async fn gz_client_to_zrpc_servers(case: &str, shape: Shape) {
    let p = gozero_or_skip!();
    let cluster = EtcdCluster::start(shape.members()).await;
    let key = unique_key(case);
    let servers = zrpc_pair(&cluster, &key).await;
    let addrs: Vec<String> = servers.iter().map(|s| s.listen_on()).collect();
    let discovery = shape.discovery(&cluster, &key, &addrs);
    let run = spread_load(GzClient::new(p, &ClientYaml::new(discovery.clone())))
        .run()
        .await;
    let expected = shape.expected(&addrs);
    println!(
        "go-zero client -> zrpc servers [{case}] {}: {} calls, {} failed, codes {:?}, shares {}, p99 {:.1} ms",
        discovery.describe(),
        run.summary.calls,
        run.summary.failed,
        run.summary.codes,
        run.shares_text(&addrs),
        run.summary.p99_ms
    );
    run.assert_all_ok(case, Some(CALLS));
    run.assert_shares(
        case,
        &expected,
        if expected.len() > 1 { MIN_SHARE } else { 1.0 },
    );
    // The zrpc servers saw exactly those calls.
    let served: u64 = servers.iter().map(|s| s.greeter.calls()).sum();
    assert_eq!(served, CALLS, "{case}: calls seen by the zrpc servers");
}

#[tokio::test]
async fn gz_client_etcd_1_host() {
    gz_client_to_zrpc_servers("gz-etcd-1-host", Shape::EtcdHosts(1)).await;
}

#[tokio::test]
async fn gz_client_etcd_2_hosts_one_etcd_two_spellings() {
    gz_client_to_zrpc_servers("gz-etcd-2-spellings", Shape::EtcdTwoSpellings).await;
}

#[tokio::test]
async fn gz_client_etcd_2_hosts_of_a_3_member_cluster() {
    gz_client_to_zrpc_servers("gz-etcd-2-members", Shape::EtcdHosts(2)).await;
}

#[tokio::test]
async fn gz_client_etcd_3_hosts_of_a_3_member_cluster() {
    gz_client_to_zrpc_servers("gz-etcd-3-members", Shape::EtcdHosts(3)).await;
}

#[tokio::test]
async fn gz_client_endpoints_1() {
    gz_client_to_zrpc_servers("gz-endpoints-1", Shape::Endpoints(1)).await;
}

#[tokio::test]
async fn gz_client_endpoints_2() {
    gz_client_to_zrpc_servers("gz-endpoints-2", Shape::Endpoints(2)).await;
}

#[tokio::test]
async fn gz_client_target_etcd_2_hosts() {
    gz_client_to_zrpc_servers("gz-target-etcd-2", Shape::TargetEtcd(2)).await;
}

#[tokio::test]
async fn gz_client_target_legacy_etcd_1_host() {
    gz_client_to_zrpc_servers("gz-target-legacy-etcd", Shape::LegacyEtcd).await;
}

#[tokio::test]
async fn gz_client_target_legacy_discov_2_hosts() {
    gz_client_to_zrpc_servers("gz-target-legacy-discov", Shape::LegacyDiscov(2)).await;
}

/// Server streams from zrpc servers to a go-zero client: every stream delivers all messages.
#[tokio::test]
async fn gz_client_streams_from_zrpc_servers() {
    let p = gozero_or_skip!();
    let cluster = EtcdCluster::start(1).await;
    let key = unique_key("gz-streams");
    let servers = zrpc_pair(&cluster, &key).await;
    let addrs: Vec<String> = servers.iter().map(|s| s.listen_on()).collect();
    let run = GzClient::new(
        p,
        &ClientYaml::new(Shape::EtcdHosts(1).discovery(&cluster, &key, &addrs)),
    )
    .n(20)
    .c(2)
    .gap(Duration::from_millis(20))
    .stream(5)
    .verbose()
    .run()
    .await;
    println!(
        "go-zero client streams (5 messages each) from zrpc servers: {} streams, {} failed, shares {}",
        run.summary.calls,
        run.summary.failed,
        run.shares_text(&addrs)
    );
    run.assert_all_ok("streams", Some(20));
    for c in &run.calls {
        assert_eq!(
            c.message,
            (0..5)
                .map(|i| format!("hello world {i}"))
                .collect::<Vec<_>>()
                .join(";"),
            "{c:?}"
        );
    }
}
