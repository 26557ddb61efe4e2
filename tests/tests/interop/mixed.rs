//! A mixed fleet: one go-zero server and one zrpc server under one etcd key, called by a go-zero
//! client and by a zrpc client. Both clients reach both servers and no call fails.

use std::time::Duration;

use zrpc_tests::etcd::{EtcdCluster, unique_key};
use zrpc_tests::gozero::{
    ClientYaml, Discovery, GzClient, GzServer, Load, ServerYaml, start_zrpc, wait_registered,
    zrpc_conf, zrpc_load,
};
use zrpc_tests::gozero_or_skip;

use crate::gozero_client::{CALLS, spread_load};
use crate::support::{MIN_SHARE, REGISTER_WAIT};

#[tokio::test]
async fn mixed_fleet_under_one_key_serves_both_clients() {
    let p = gozero_or_skip!();
    let cluster = EtcdCluster::start(1).await;
    let key = unique_key("mixed");
    let hosts = cluster.endpoints();
    let gz = GzServer::start(p, &ServerYaml::new("gz.rpc", &hosts, &key), &[]).await;
    let zr = start_zrpc(zrpc_conf("zrpc.rpc", Some(cluster.etcd_conf(&key)))).await;
    let etcd = cluster.client().await;
    for addr in [gz.addr.clone(), zr.listen_on()] {
        assert!(
            wait_registered(&etcd, &key, &addr, REGISTER_WAIT).await,
            "{addr} not registered"
        );
    }
    let addrs = vec![gz.addr.clone(), zr.listen_on()];
    let discovery = Discovery::Etcd(hosts.clone(), key.clone());

    let (gz_run, zrpc_run) = tokio::join!(
        // go-zero's P2C sends nearly every call to the server with the lower latency (here the
        // Go server: the zrpc one is a debug build sharing the test process) unless in-flight
        // counts decide (see `spread_load`).
        spread_load(GzClient::new(p, &ClientYaml::new(discovery.clone()))).run(),
        async {
            let client = zrpc::client(discovery.zrpc_conf())
                .await
                .expect("zrpc client");
            zrpc_load(
                &client,
                Load {
                    calls_per_worker: 20,
                    workers: 4,
                    gap: Duration::from_millis(10),
                    duration: None,
                    name: "sleep:5",
                },
                Duration::from_secs(10),
            )
            .await
        }
    );
    println!(
        "mixed fleet (go-zero {} + zrpc {}): go-zero client {} calls, {} failed, shares {}; \
         zrpc client {} calls, {} failed, shares {}",
        gz.addr,
        zr.listen_on(),
        gz_run.summary.calls,
        gz_run.summary.failed,
        gz_run.shares_text(&addrs),
        zrpc_run.calls,
        zrpc_run.failed,
        zrpc_run.shares_text(&addrs)
    );
    gz_run.assert_all_ok("go-zero client, mixed fleet", Some(CALLS));
    gz_run.assert_shares("go-zero client, mixed fleet", &addrs, MIN_SHARE);
    zrpc_run.assert_ok_and_shares("zrpc client, mixed fleet", &addrs, MIN_SHARE);
}
