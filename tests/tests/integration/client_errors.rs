//! Client errors name their cause: etcd unreachable, wrong etcd password, TLS against
//! a plain etcd, an unresolvable `dns:///` host, an empty key, and a blocking dial that names the
//! resolver's state instead of blaming the service.

use std::time::Duration;

use tonic::Code;
use zrpc_client::conf::RpcClientConf;
use zrpc_client::{Client, Error};
use zrpc_tests::etcd::{EtcdServer, unique_key};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::ports::closed_port;

/// One call through a non-blocking client of `conf`; its error.
async fn call_error(conf: RpcClientConf) -> tonic::Status {
    let client = Client::new(conf.with_timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    GreeterClient::new(client)
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .unwrap_err()
}

fn assert_names(s: &tonic::Status, code: Code, parts: &[&str]) {
    println!("{:?}: {}", s.code(), s.message());
    assert_eq!(s.code(), code, "{s:?}");
    for p in parts {
        assert!(s.message().contains(p), "{p:?} not in {:?}", s.message());
    }
}

#[tokio::test]
async fn unreachable_etcd_is_named_with_its_hosts() {
    let host = format!("127.0.0.1:{}", closed_port());
    let s = call_error(RpcClientConf::etcd([host.clone()], "errors.rpc")).await;
    assert_names(
        &s,
        Code::Unavailable,
        &[&format!("etcd unreachable at {host}"), "refused"],
    );
    // Blocking mode: the dial error names the resolver's state, not the service.
    let e = Client::new(RpcClientConf::etcd([host.clone()], "errors.rpc").with_non_block(false))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Dial { .. }), "{e:?}");
    let m = e.to_string();
    println!("{m}");
    assert!(m.contains(&format!("etcd unreachable at {host}")), "{m}");
    assert!(!m.contains("make sure rpc service"), "{m}");
}

#[tokio::test]
async fn wrong_etcd_password_is_an_authentication_failure() {
    let Some(etcd) = EtcdServer::start_exclusive(
        "wrong_etcd_password_is_an_authentication_failure",
        "turns auth on in the cluster",
    )
    .await
    else {
        return;
    };
    let mut admin = etcd.client().await;
    admin.user_add("root", "rootpw", None).await.unwrap();
    admin.user_grant_role("root", "root").await.unwrap();
    admin.auth_enable().await.unwrap();

    let mut conf = RpcClientConf::etcd(etcd.endpoints(), unique_key("auth"));
    conf.etcd.user = "root".into();
    conf.etcd.pass = "wrong".into();
    let s = call_error(conf).await;
    assert_names(
        &s,
        Code::Unavailable,
        &["etcd authentication failed", "\"root\"", &etcd.endpoint()],
    );
    // No account at all against an etcd that requires one.
    let s = call_error(RpcClientConf::etcd(etcd.endpoints(), unique_key("auth"))).await;
    assert_names(&s, Code::Unavailable, &["requires authentication"]);
}

#[tokio::test]
async fn tls_against_a_plain_etcd_is_a_tls_failure() {
    let Some(tls) = EtcdServer::start_tls().await else {
        eprintln!("skipped: no TLS etcd (openssl missing)");
        return;
    };
    let files = tls.tls_files().unwrap().clone();
    let plain = EtcdServer::start().await;
    let mut conf = RpcClientConf::etcd(plain.endpoints(), unique_key("tls"));
    conf.etcd.cert_file = files.cert.display().to_string();
    conf.etcd.cert_key_file = files.key.display().to_string();
    conf.etcd.ca_cert_file = files.ca.display().to_string();
    let s = call_error(conf).await;
    assert_names(
        &s,
        Code::Unavailable,
        &["etcd TLS handshake with", &plain.endpoint()],
    );
}

#[tokio::test]
async fn an_unresolvable_dns_host_is_a_dns_failure() {
    let s = call_error(RpcClientConf::target("dns:///zrpc-nosuch.invalid:8080")).await;
    assert_names(
        &s,
        Code::Unavailable,
        &["DNS lookup of zrpc-nosuch.invalid:8080 failed"],
    );
}

#[tokio::test]
async fn an_empty_key_says_no_endpoints_are_registered() {
    let etcd = EtcdServer::start().await;
    let key = unique_key("empty");
    let s = call_error(RpcClientConf::etcd(etcd.endpoints(), key.clone())).await;
    assert_names(
        &s,
        Code::Unavailable,
        &[&format!("no endpoints registered under key {key:?}")],
    );
}
