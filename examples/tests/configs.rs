//! The sample configs in `examples/etc/` (go-zero format) load through `zrpc::conf::load` and mean
//! what their comments say.

#![allow(missing_docs)]

use std::path::PathBuf;

fn etc(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("etc")
        .join(name)
}

#[test]
fn greeter_server_yaml_is_goctls_shape() {
    for file in ["greeter-server.yaml", "docker/greeter-server.yaml"] {
        let conf: zrpc::RpcServerConf = zrpc::conf::load(etc(file)).unwrap();
        assert_eq!(conf.name, "greeter.rpc", "{file}");
        assert_eq!(conf.listen_on, "0.0.0.0:8080", "{file}");
        assert_eq!(conf.etcd.key, "greeter.rpc", "{file}");
        assert_eq!(conf.etcd.hosts.len(), 1, "{file}");
        assert!(conf.has_etcd(), "{file}");
    }
}

#[test]
fn greeter_client_yamls_pick_their_source() {
    let etcd: zrpc::RpcClientConf = zrpc::conf::load(etc("greeter-client.yaml")).unwrap();
    assert_eq!(
        etcd.build_target().unwrap(),
        "etcd:///127.0.0.1:2379?key=greeter.rpc"
    );
    let docker: zrpc::RpcClientConf = zrpc::conf::load(etc("docker/greeter-client.yaml")).unwrap();
    assert_eq!(
        docker.build_target().unwrap(),
        "etcd:///etcd:2379?key=greeter.rpc"
    );
    let direct: zrpc::RpcClientConf = zrpc::conf::load(etc("greeter-client-direct.yaml")).unwrap();
    assert_eq!(direct.build_target().unwrap(), "direct:///127.0.0.1:8080");
    assert_eq!(direct.balancer_name, zrpc::BalancerName::P2cEwma);
}

#[test]
fn a_misspelt_key_names_the_file_and_the_closest_key() {
    let dir = std::env::temp_dir().join(format!("zrpc-examples-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("typo.yaml");
    std::fs::write(
        &path,
        "Name: greeter.rpc\nListenOn: 127.0.0.1:8080\nTimout: 100\n",
    )
    .unwrap();
    let err = zrpc::conf::load::<zrpc::RpcServerConf>(&path)
        .unwrap_err()
        .to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(err.contains("typo.yaml"), "{err}");
    assert!(err.contains("Timout") && err.contains("Timeout"), "{err}");
}
