//! `BalancerName: consistent_hash` in a mixed fleet: a go-zero v1.10.3 client and a zrpc client
//! send each key to the same server, and when a server leaves, only its keys move, to the same
//! new servers from both.
//!
//! First the rings alone: go-zero's `core/hash` (`gz-ring`) and zrpc's `HashRing` give the same
//! server for 5,000 keys, on loopback addresses and on addresses that share ring points.

use std::collections::BTreeMap;
use std::time::Duration;

use zrpc::BalancerName;
use zrpc_client::sim::HashRing;
use zrpc_tests::etcd::{EtcdCluster, unique_key};
use zrpc_tests::gozero::{
    ClientYaml, Discovery, GzClient, SERVER_HEADER, ZrpcServer, eventually, go_zero_owners,
    start_zrpc, wait_deregistered, wait_registered, zrpc_conf,
};
use zrpc_tests::gozero_or_skip;
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

use crate::support::REGISTER_WAIT;

const KEYS: usize = 1000;

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("key-{i}")).collect()
}

#[test]
fn zrpcs_ring_gives_go_zeros_server_for_every_key() {
    let p = gozero_or_skip!();
    let sets: [&[&str]; 3] = [
        &["127.0.0.1:41001", "127.0.0.1:41002", "127.0.0.1:41003"],
        // :80 and :801 share ten points, :8080 and :80801 ten more
        &[
            "10.0.0.1:80",
            "10.0.0.1:801",
            "10.0.0.1:8080",
            "10.0.0.1:80801",
        ],
        &[
            "10.1.0.1:9000",
            "10.1.0.2:9000",
            "10.1.0.3:9000",
            "10.1.0.4:9000",
            "10.1.0.5:9000",
            "10.1.0.6:9000",
            "10.1.0.7:9000",
            "10.1.0.8:9000",
            "10.1.0.9:9000",
            "10.1.0.10:9000",
        ],
    ];
    let keys = keys(5000);
    for set in sets {
        let addrs: Vec<String> = set.iter().map(|s| (*s).to_owned()).collect();
        let go = go_zero_owners(p, &addrs, &keys);
        assert_eq!(go.len(), keys.len());
        let ring = HashRing::new(&addrs);
        let same = go
            .iter()
            .filter(|(key, addr)| addrs[ring.get(key).unwrap()] == *addr)
            .count();
        println!(
            "ring check, {} addresses: {same} of {} keys on the same server in go-zero and zrpc",
            addrs.len(),
            keys.len()
        );
        assert_eq!(same, keys.len(), "{addrs:?}");
    }
}

/// key -> server (`x-server`) for the zrpc client, one call per key.
async fn zrpc_routes(client: &zrpc::Client, keys: &[String]) -> BTreeMap<String, String> {
    let mut greeter = GreeterClient::new(client.clone());
    let mut out = BTreeMap::new();
    for key in keys {
        let mut req = tonic::Request::new(HelloRequest {
            name: "world".into(),
        });
        zrpc::hash_key(&mut req, key.as_str());
        let resp = greeter
            .say_hello(req)
            .await
            .unwrap_or_else(|e| panic!("zrpc client, {key}: {e:?}"));
        let server = resp
            .metadata()
            .get(SERVER_HEADER)
            .unwrap()
            .to_str()
            .unwrap();
        out.insert(key.clone(), server.to_owned());
    }
    out
}

/// key -> server (`x-server`) for a fresh go-zero client, one call per key, once `peers`
/// servers answered its warm-up calls.
async fn go_zero_routes(
    p: &zrpc_tests::gozero::Programs,
    discovery: &Discovery,
    peers: u64,
) -> BTreeMap<String, String> {
    let mut yaml = ClientYaml::new(discovery.clone());
    yaml.extra = "  BalancerName: consistent_hash\n".to_owned();
    let run = GzClient::new(p, &yaml)
        .hash_keys(KEYS as u64, peers)
        .wait(Duration::from_secs(20))
        .verbose()
        .run()
        .await;
    run.assert_all_ok("go-zero client, consistent_hash", Some(KEYS as u64));
    run.calls.into_iter().map(|c| (c.key, c.server)).collect()
}

fn same(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> usize {
    a.iter().filter(|(k, v)| b.get(*k) == Some(*v)).count()
}

fn moved(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect()
}

fn shares(routes: &BTreeMap<String, String>) -> BTreeMap<&str, usize> {
    let mut out = BTreeMap::new();
    for s in routes.values() {
        *out.entry(s.as_str()).or_default() += 1;
    }
    out
}

#[tokio::test]
async fn a_go_zero_and_a_zrpc_client_send_every_key_to_the_same_server() {
    let p = gozero_or_skip!();
    let cluster = EtcdCluster::start(1).await;
    let key = unique_key("consistent-hash");
    let hosts = cluster.endpoints();
    let mut fleet: Vec<ZrpcServer> = Vec::new();
    for i in 0..3 {
        let conf = zrpc_conf(&format!("ch-{i}.rpc"), Some(cluster.etcd_conf(&key)));
        fleet.push(start_zrpc(conf).await);
    }
    let etcd = cluster.client().await;
    for s in &fleet {
        assert!(wait_registered(&etcd, &key, &s.listen_on(), REGISTER_WAIT).await);
    }
    let discovery = Discovery::Etcd(hosts.clone(), key.clone());
    let client = zrpc::client(
        discovery
            .zrpc_conf()
            .with_balancer(BalancerName::ConsistentHash),
    )
    .await
    .expect("zrpc client");
    let keys = keys(KEYS);

    let zrpc_before = zrpc_routes(&client, &keys).await;
    let go_before = go_zero_routes(p, &discovery, 3).await;
    let same_before = same(&go_before, &zrpc_before);
    println!(
        "consistent_hash, 3 zrpc servers, {KEYS} keys: {same_before} of {KEYS} on the same server \
         from the go-zero and the zrpc client; shares go-zero {:?}, zrpc {:?}",
        shares(&go_before),
        shares(&zrpc_before)
    );
    assert_eq!(same_before, KEYS);
    assert_eq!(shares(&zrpc_before).len(), 3);

    // one server leaves (SIGTERM-like graceful stop: deregistered from etcd, then drained)
    let gone = fleet.remove(1);
    let gone_addr = gone.listen_on();
    gone.shutdown().await.unwrap();
    assert!(wait_deregistered(&etcd, &key, &gone_addr, REGISTER_WAIT).await);
    assert!(
        eventually(Duration::from_secs(10), || async {
            client.endpoints().iter().all(|e| e.addr != gone_addr)
        })
        .await,
        "the zrpc client still lists {gone_addr}"
    );

    let zrpc_after = zrpc_routes(&client, &keys).await;
    let go_after = go_zero_routes(p, &discovery, 2).await;
    let same_after = same(&go_after, &zrpc_after);
    let owned: Vec<String> = zrpc_before
        .iter()
        .filter(|(_, s)| **s == gone_addr)
        .map(|(k, _)| k.clone())
        .collect();
    let (zrpc_moved, go_moved) = (
        moved(&zrpc_before, &zrpc_after),
        moved(&go_before, &go_after),
    );
    println!(
        "after {gone_addr} left: {same_after} of {KEYS} on the same server from both; keys moved: \
         zrpc {}, go-zero {}, of the {} it owned; shares go-zero {:?}, zrpc {:?}",
        zrpc_moved.len(),
        go_moved.len(),
        owned.len(),
        shares(&go_after),
        shares(&zrpc_after)
    );
    assert_eq!(same_after, KEYS);
    assert_eq!(zrpc_moved, owned, "the zrpc client moved other keys");
    assert_eq!(go_moved, owned, "the go-zero client moved other keys");
}
