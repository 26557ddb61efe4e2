//! Glue shared by the interop tests: config shapes and server pairs.

use std::time::Duration;

use zrpc_tests::etcd::EtcdCluster;
use zrpc_tests::gozero::{
    Discovery, GzServer, Programs, ServerYaml, ZrpcServer, etcd_target, start_zrpc,
    wait_registered, zrpc_conf,
};

/// The least share of the calls each backend must get when calls are spread.
pub(crate) const MIN_SHARE: f64 = 0.2;

/// How long a server may take to show up in etcd.
pub(crate) const REGISTER_WAIT: Duration = Duration::from_secs(10);

/// A client configuration shape, as go-zero fleets write them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    /// `Etcd.Hosts` = the first n members (a 3-member cluster when n > 1).
    EtcdHosts(usize),
    /// `Etcd.Hosts` = `127.0.0.1:E` and `localhost:E` of one etcd.
    EtcdTwoSpellings,
    /// `Endpoints` = the first n servers.
    Endpoints(usize),
    /// `Target: etcd:///h1,..?key=k` with the first n members.
    TargetEtcd(usize),
    /// `Target: etcd://h/key` (legacy, one host).
    LegacyEtcd,
    /// `Target: discov://h1,h2/key` (legacy) with the first n members.
    LegacyDiscov(usize),
}

impl Shape {
    /// The etcd cluster size this shape needs.
    pub(crate) fn members(self) -> usize {
        match self {
            Shape::EtcdHosts(n) | Shape::TargetEtcd(n) | Shape::LegacyDiscov(n) if n > 1 => 3,
            _ => 1,
        }
    }

    /// The client discovery for this shape.
    pub(crate) fn discovery(
        self,
        cluster: &EtcdCluster,
        key: &str,
        servers: &[String],
    ) -> Discovery {
        match self {
            Shape::EtcdHosts(n) => Discovery::Etcd(cluster.hosts(n), key.to_owned()),
            Shape::EtcdTwoSpellings => {
                let e = cluster.hosts(1).remove(0);
                Discovery::Etcd(
                    vec![e.clone(), e.replace("127.0.0.1", "localhost")],
                    key.to_owned(),
                )
            }
            Shape::Endpoints(n) => Discovery::Endpoints(servers.iter().take(n).cloned().collect()),
            Shape::TargetEtcd(n) => Discovery::Target(etcd_target(&cluster.hosts(n), key)),
            Shape::LegacyEtcd => Discovery::Target(format!("etcd://{}/{key}", cluster.hosts(1)[0])),
            Shape::LegacyDiscov(n) => {
                Discovery::Target(format!("discov://{}/{key}", cluster.hosts(n).join(",")))
            }
        }
    }

    /// The servers that should get calls.
    pub(crate) fn expected(self, servers: &[String]) -> Vec<String> {
        match self {
            Shape::Endpoints(n) => servers.iter().take(n).cloned().collect(),
            _ => servers.to_vec(),
        }
    }
}

/// Two zrpc servers registered under `key` (all the cluster's hosts), seen in etcd.
pub(crate) async fn zrpc_pair(cluster: &EtcdCluster, key: &str) -> Vec<ZrpcServer> {
    let mut servers = Vec::new();
    for i in 0..2 {
        let conf = zrpc_conf(&format!("zrpc-{i}.rpc"), Some(cluster.etcd_conf(key)));
        servers.push(start_zrpc(conf).await);
    }
    let client = cluster.client().await;
    for s in &servers {
        assert!(
            wait_registered(&client, key, &s.listen_on(), REGISTER_WAIT).await,
            "zrpc server {} not registered under {key}",
            s.listen_on()
        );
    }
    servers
}

/// Two gz-servers registered under `key` (all the cluster's hosts), seen in etcd.
pub(crate) async fn gz_pair(p: &Programs, cluster: &EtcdCluster, key: &str) -> Vec<GzServer> {
    let hosts = cluster.endpoints();
    let (ya, yb) = (
        ServerYaml::new("gz-0.rpc", &hosts, key),
        ServerYaml::new("gz-1.rpc", &hosts, key),
    );
    let (a, b) = tokio::join!(GzServer::start(p, &ya, &[]), GzServer::start(p, &yb, &[]));
    let client = cluster.client().await;
    for s in [&a, &b] {
        assert!(
            wait_registered(&client, key, &s.addr, REGISTER_WAIT).await,
            "gz-server {} not registered under {key}\n{}",
            s.addr,
            s.stderr()
        );
    }
    vec![a, b]
}
