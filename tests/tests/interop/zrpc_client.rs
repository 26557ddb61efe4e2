//! A zrpc client calling two go-zero servers (`gz-server`, go-zero v1.10.3) registered in etcd,
//! with the same configuration shapes as the go-zero client tests. Calls are counted per server
//! by the `x-server` response header.

use std::time::Duration;

use zrpc_tests::etcd::{EtcdCluster, unique_key};
use zrpc_tests::gozero::{Load, zrpc_load};
use zrpc_tests::gozero_or_skip;
use zrpc_tests::pb::HelloStreamRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

use crate::support::{MIN_SHARE, Shape, gz_pair};

const LOAD: Load = Load {
    calls_per_worker: 20,
    workers: 4,
    gap: Duration::from_millis(10),
    duration: None,
    name: "sleep:5",
};

async fn zrpc_client_to_gz_servers(case: &str, shape: Shape) {
    let p = gozero_or_skip!();
    let cluster = EtcdCluster::start(shape.members()).await;
    let key = unique_key(case);
    let servers = gz_pair(p, &cluster, &key).await;
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
    let discovery = shape.discovery(&cluster, &key, &addrs);
    let client = zrpc::client(discovery.zrpc_conf())
        .await
        .unwrap_or_else(|e| panic!("{case}: zrpc client: {e}"));
    let run = zrpc_load(&client, LOAD, Duration::from_secs(10)).await;
    println!(
        "zrpc client -> go-zero servers [{case}] {}: {} calls, {} failed, codes {:?}, shares {}, in {:?}",
        discovery.describe(),
        run.calls,
        run.failed,
        run.codes,
        run.shares_text(&addrs),
        run.elapsed
    );
    let expected = shape.expected(&addrs);
    assert_eq!(run.calls, LOAD.calls_per_worker * LOAD.workers, "{case}");
    run.assert_ok_and_shares(
        case,
        &expected,
        if expected.len() > 1 { MIN_SHARE } else { 1.0 },
    );
    // The go-zero servers counted the same calls.
    let mut stopped = 0;
    for s in servers {
        let st = s.stop().await;
        assert_eq!(st.exit_code, Some(0), "{case}: gz-server exit: {st:?}");
        stopped += st.calls.unwrap_or(0);
    }
    assert_eq!(
        stopped, run.calls,
        "{case}: calls counted by the gz-servers"
    );
}

#[tokio::test]
async fn zrpc_client_etcd_1_host() {
    zrpc_client_to_gz_servers("zrpc-etcd-1-host", Shape::EtcdHosts(1)).await;
}

#[tokio::test]
async fn zrpc_client_etcd_2_hosts_one_etcd_two_spellings() {
    zrpc_client_to_gz_servers("zrpc-etcd-2-spellings", Shape::EtcdTwoSpellings).await;
}

#[tokio::test]
async fn zrpc_client_etcd_2_hosts_of_a_3_member_cluster() {
    zrpc_client_to_gz_servers("zrpc-etcd-2-members", Shape::EtcdHosts(2)).await;
}

#[tokio::test]
async fn zrpc_client_etcd_3_hosts_of_a_3_member_cluster() {
    zrpc_client_to_gz_servers("zrpc-etcd-3-members", Shape::EtcdHosts(3)).await;
}

#[tokio::test]
async fn zrpc_client_endpoints_1() {
    zrpc_client_to_gz_servers("zrpc-endpoints-1", Shape::Endpoints(1)).await;
}

#[tokio::test]
async fn zrpc_client_endpoints_2() {
    zrpc_client_to_gz_servers("zrpc-endpoints-2", Shape::Endpoints(2)).await;
}

#[tokio::test]
async fn zrpc_client_target_etcd_2_hosts() {
    zrpc_client_to_gz_servers("zrpc-target-etcd-2", Shape::TargetEtcd(2)).await;
}

#[tokio::test]
async fn zrpc_client_target_legacy_etcd_1_host() {
    zrpc_client_to_gz_servers("zrpc-target-legacy-etcd", Shape::LegacyEtcd).await;
}

#[tokio::test]
async fn zrpc_client_target_legacy_discov_2_hosts() {
    zrpc_client_to_gz_servers("zrpc-target-legacy-discov", Shape::LegacyDiscov(2)).await;
}

/// Server streams from go-zero servers through a zrpc client: every stream delivers all messages.
#[tokio::test]
async fn zrpc_client_streams_from_gz_servers() {
    let p = gozero_or_skip!();
    let cluster = EtcdCluster::start(1).await;
    let key = unique_key("zrpc-streams");
    let servers = gz_pair(p, &cluster, &key).await;
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
    let client = zrpc::client(
        Shape::EtcdHosts(1)
            .discovery(&cluster, &key, &addrs)
            .zrpc_conf(),
    )
    .await
    .expect("zrpc client");
    let mut greeter = GreeterClient::new(client);
    let mut per_server = std::collections::BTreeMap::<String, u64>::new();
    let started = std::time::Instant::now();
    let mut streams = 0;
    while streams < 20 {
        let resp = match greeter
            .say_hello_stream(HelloStreamRequest {
                name: "world".into(),
                count: 5,
                interval_ms: 0,
            })
            .await
        {
            Ok(r) => r,
            // Discovery may lag the first call; go-zero's client waits the same way.
            Err(e) if streams == 0 && started.elapsed() < Duration::from_secs(10) => {
                println!("first stream: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(e) => panic!("stream {streams}: {e}"),
        };
        let server = resp
            .metadata()
            .get("x-server")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let mut stream = resp.into_inner();
        let mut got = Vec::new();
        while let Some(m) = stream.message().await.expect("stream message") {
            got.push(m.message);
        }
        let want: Vec<String> = (0..5).map(|i| format!("hello world {i}")).collect();
        assert_eq!(got, want, "stream {streams} from {server}");
        *per_server.entry(server).or_default() += 1;
        streams += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "zrpc client streams (5 messages each) from go-zero servers: {streams} streams, per server {per_server:?}"
    );
    assert!(
        per_server.keys().all(|s| addrs.contains(s)),
        "{per_server:?}"
    );
}
