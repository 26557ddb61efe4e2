//! One YAML file, two implementations: a goctl-style server YAML starts `gz-server` and, loaded
//! by `zrpc::conf::load`, a zrpc server; both register under its key with its `ListenOn` and
//! answer a go-zero client. The go-zero v1.10.3 "all keys" fixtures (server and client) do the
//! same after their addresses are pointed at this test's etcd and free ports (and nothing is
//! left that would export, upload or need a Redis: see `rewrite_server`).

use std::path::Path;
use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};
use zrpc_tests::etcd::{EtcdCluster, unique_key};
use zrpc_tests::gozero::{
    ClientYaml, Discovery, GzClient, GzServer, Programs, start_zrpc, wait_deregistered,
    wait_registered,
};
use zrpc_tests::gozero_or_skip;
use zrpc_tests::ports::free_port;

use crate::support::REGISTER_WAIT;

/// goctl's `etc/greet.yaml` plus the keys people add.
fn goctl_yaml(port: u16, dev_port: u16, etcd: &str, key: &str) -> String {
    format!(
        "Name: greeter.rpc
ListenOn: 127.0.0.1:{port}
Etcd:
  Hosts:
  - {etcd}
  Key: {key}
Mode: pro
Timeout: 2000
CpuThreshold: 0
Log:
  Mode: console
  Level: error
  Encoding: plain
  Stat: false
Middlewares:
  Trace: true
  Recover: true
  Stat: true
  Prometheus: true
  Breaker: true
  StatConf:
    SlowThreshold: 500ms
    IgnoreContentMethods:
    - /greeter.Greeter/SayHello
DevServer:
  Enabled: true
  Host: 127.0.0.1
  Port: {dev_port}
Shutdown:
  WrapUpTime: 1s
  WaitTime: 5500ms
Health: true
"
    )
}

/// Starts gz-server with `path`, checks registration and a go-zero client's calls, stops it;
/// then loads `path` with zrpc and does the same with a zrpc server.
async fn both_serve(
    p: &Programs,
    cluster: &EtcdCluster,
    path: &Path,
    listen_on: &str,
    key: &str,
    client_yaml: &str,
) {
    let etcd = cluster.client().await;
    let gz = GzServer::start_file(p, path, listen_on, None, &[]).await;
    assert!(
        wait_registered(&etcd, key, listen_on, REGISTER_WAIT).await,
        "gz-server with {} not registered under {key}\n{}",
        path.display(),
        gz.stderr()
    );
    let run = GzClient::with_yaml(p, client_yaml.to_owned())
        .n(10)
        .run()
        .await;
    println!(
        "same YAML {}: gz-server registered {listen_on} under {key}; go-zero client {} calls, {} failed, servers {:?}",
        path.display(),
        run.summary.calls,
        run.summary.failed,
        run.summary.servers
    );
    run.assert_all_ok("go-zero client -> gz-server from the shared YAML", Some(10));
    let stopped = gz.stop().await;
    assert_eq!(stopped.exit_code, Some(0), "{stopped:?}");
    assert!(wait_deregistered(&etcd, key, listen_on, Duration::from_secs(2)).await);

    let conf: zrpc::RpcServerConf = zrpc::conf::load(path)
        .unwrap_or_else(|e| panic!("zrpc::conf::load({}): {e}", path.display()));
    assert_eq!(conf.listen_on, listen_on);
    let zr = start_zrpc(conf).await;
    assert!(
        wait_registered(&etcd, key, listen_on, REGISTER_WAIT).await,
        "zrpc server with {} not registered under {key}",
        path.display()
    );
    let run = GzClient::with_yaml(p, client_yaml.to_owned())
        .n(10)
        .run()
        .await;
    println!(
        "same YAML {}: zrpc server registered {listen_on} under {key}; go-zero client {} calls, {} failed, servers {:?}",
        path.display(),
        run.summary.calls,
        run.summary.failed,
        run.summary.servers
    );
    run.assert_all_ok(
        "go-zero client -> zrpc server from the shared YAML",
        Some(10),
    );
    assert_eq!(
        run.summary.servers.keys().collect::<Vec<_>>(),
        vec![listen_on]
    );
    zr.shutdown().await.expect("graceful shutdown");
}

#[tokio::test]
async fn goctl_server_yaml_starts_gz_server_and_zrpc_server() {
    let p = gozero_or_skip!();
    let cluster = EtcdCluster::start(1).await;
    let key = unique_key("same-yaml");
    let port = free_port();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("greet.yaml");
    std::fs::write(
        &path,
        goctl_yaml(port, free_port(), &cluster.endpoints()[0], &key),
    )
    .expect("write yaml");
    let client = ClientYaml::new(Discovery::Etcd(cluster.endpoints(), key.clone())).render();
    both_serve(
        p,
        &cluster,
        &path,
        &format!("127.0.0.1:{port}"),
        &key,
        &client,
    )
    .await;
}

// ---- the go-zero v1.10.3 "all keys" fixtures ----

fn fixture(name: &str) -> std::path::PathBuf {
    zrpc_tests::gozero::repo_root()
        .join("tests/fixtures/conf")
        .join(name)
}

/// The value of `key` in `m`, matched case-insensitively (go-zero's keys are).
fn get_mut<'a>(m: &'a mut Mapping, key: &str) -> Option<&'a mut Value> {
    let k = m
        .keys()
        .find(|k| k.as_str().is_some_and(|s| s.eq_ignore_ascii_case(key)))
        .cloned()?;
    m.get_mut(&k)
}

fn set(m: &mut Mapping, key: &str, v: Value) {
    match get_mut(m, key) {
        Some(slot) => *slot = v,
        None => {
            m.insert(Value::String(key.to_owned()), v);
        }
    }
}

fn remove(m: &mut Mapping, key: &str) {
    let k = m
        .keys()
        .find(|k| k.as_str().is_some_and(|s| s.eq_ignore_ascii_case(key)))
        .cloned();
    if let Some(k) = k {
        m.remove(&k);
    }
}

fn s(v: &str) -> Value {
    Value::String(v.to_owned())
}

/// Points `Etcd` at the test etcd and key; drops the account and TLS keys (the test etcd has
/// neither); keeps the others (`ID`, `InsecureSkipVerify`).
fn point_etcd(m: &mut Mapping, etcd: &[String], key: &str) {
    let hosts = Value::Sequence(etcd.iter().map(|h| s(h)).collect());
    match get_mut(m, "Etcd") {
        Some(Value::Mapping(e)) => {
            set(e, "Hosts", hosts);
            set(e, "Key", s(key));
            for k in ["User", "Pass", "CertFile", "CertKeyFile", "CACertFile"] {
                remove(e, k);
            }
        }
        _ => {
            let mut e = Mapping::new();
            e.insert(s("Hosts"), hosts);
            e.insert(s("Key"), s(key));
            set(m, "Etcd", Value::Mapping(e));
        }
    }
}

/// Points a server fixture at this test, keeping every other key: `ListenOn`, `Etcd` (see
/// [`point_etcd`]), free loopback ports for `DevServer` and `Prometheus`, nothing exported or
/// uploaded (`MetricsUrl`, `Telemetry.Endpoint`, `Profiling.ServerAddr` emptied), `Auth: false`
/// (go-zero's tokens live in a Redis the test does not run; the `Redis` block stays),
/// `CpuThreshold: 0`, and a quiet console log.
fn rewrite_server(doc: &mut Value, listen_on: &str, etcd: &[String], key: &str) -> Vec<String> {
    let mut changed = Vec::new();
    let m = doc.as_mapping_mut().expect("a YAML mapping");
    set(m, "ListenOn", s(listen_on));
    changed.push("ListenOn".to_owned());
    point_etcd(m, etcd, key);
    changed.push("Etcd.Hosts/Key (User/Pass/TLS files dropped)".to_owned());
    for block in ["DevServer", "Prometheus"] {
        if let Some(Value::Mapping(b)) = get_mut(m, block) {
            set(b, "Host", s("127.0.0.1"));
            set(b, "Port", Value::Number(free_port().into()));
            changed.push(format!("{block}.Host/Port"));
        }
    }
    for (block, k) in [("Telemetry", "Endpoint"), ("Profiling", "ServerAddr")] {
        if let Some(Value::Mapping(b)) = get_mut(m, block) {
            set(b, k, s(""));
            changed.push(format!("{block}.{k}"));
        }
    }
    for (k, v) in [
        ("MetricsUrl", s("")),
        ("Auth", Value::Bool(false)),
        ("CpuThreshold", Value::Number(0.into())),
    ] {
        if get_mut(m, k).is_some() {
            set(m, k, v);
            changed.push(k.to_owned());
        }
    }
    if let Some(Value::Mapping(l)) = get_mut(m, "Log") {
        set(l, "Mode", s("console"));
        set(l, "Level", s("error"));
        changed.push("Log.Mode/Level".to_owned());
    }
    changed
}

/// Points a goctl-shaped client fixture (`{Name, Greeter: RpcClientConf}`) at this test's etcd
/// and key, keeping its other keys, and adds a quiet `Log` (gz-client's stdout is JSON).
fn rewrite_client(doc: &mut Value, etcd: &[String], key: &str) {
    let m = doc.as_mapping_mut().expect("a YAML mapping");
    if let Some(Value::Mapping(g)) = get_mut(m, "Greeter") {
        point_etcd(g, etcd, key);
        for k in ["Endpoints", "Target"] {
            remove(g, k);
        }
    }
    let mut log = Mapping::new();
    log.insert(s("Mode"), s("console"));
    log.insert(s("Level"), s("error"));
    set(m, "Log", Value::Mapping(log));
}

#[tokio::test]
async fn gozero_v1_10_3_all_keys_fixtures_run_in_both() {
    let p = gozero_or_skip!();
    let server_fixture = fixture("gozero-v1.10.3-server-all-keys.yaml");
    let client_fixture = fixture("gozero-v1.10.3-client-all-keys.yaml");
    assert!(
        server_fixture.is_file() && client_fixture.is_file(),
        "missing {} or {}",
        server_fixture.display(),
        client_fixture.display()
    );
    let cluster = EtcdCluster::start(1).await;
    let key = unique_key("all-keys");
    let port = free_port();
    let listen_on = format!("127.0.0.1:{port}");
    let text = std::fs::read_to_string(&server_fixture).expect("read server fixture");
    let mut doc: Value = serde_yaml_ng::from_str(&text).expect("server fixture is YAML");
    let changed = rewrite_server(&mut doc, &listen_on, &cluster.endpoints(), &key);
    println!("all-keys server fixture: rewrote {changed:?}");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("server-all-keys.yaml");
    std::fs::write(&path, serde_yaml_ng::to_string(&doc).expect("YAML")).expect("write");

    let text = std::fs::read_to_string(&client_fixture).expect("read client fixture");
    let mut client: Value = serde_yaml_ng::from_str(&text).expect("client fixture is YAML");
    // Two hosts, as in the fixture: the same etcd spelled twice (grpc-go then sends the
    // multi-host `:authority` that zrpc's server repairs).
    let e = cluster.endpoints()[0].clone();
    rewrite_client(
        &mut client,
        &[e.clone(), e.replace("127.0.0.1", "localhost")],
        &key,
    );
    // The fixture's other keys (App/Token, NonBlock, Timeout, KeepaliveTime, Middlewares,
    // BalancerName) are kept as they are.
    println!(
        "all-keys client fixture: Greeter.Etcd.Hosts = the test etcd as 127.0.0.1 and localhost, \
         account/TLS dropped, empty Endpoints/Target dropped, Log added"
    );
    let client = serde_yaml_ng::to_string(&client).expect("YAML");
    both_serve(p, &cluster, &path, &listen_on, &key, &client).await;
}
