//! TLS and mutual TLS between zrpc and go-zero v1.10.3 (grpc-go v1.80.0 `credentials.NewTLS`):
//! a go-zero client (`gz-client -tls-*`, go-zero's `zrpc.WithTransportCredentials`) calling zrpc
//! TLS servers over direct endpoints and etcd, and a zrpc client calling a go-zero TLS server
//! (`gz-server -tls-*`, `s.AddOptions(grpc.Creds(...))`). Certificates come from a CA made by
//! `openssl` in each test. The outcomes and error texts are listed in `docs/security.md`.

use std::time::Duration;

use tonic::Code;
use zrpc::conf::{ClientTlsConf, RpcClientConf, ServerTlsConf};
use zrpc_tests::certs::{CertFiles, TestCa};
use zrpc_tests::etcd::{EtcdCluster, unique_key};
use zrpc_tests::gozero::{
    ClientYaml, Discovery, GzClient, GzRun, GzServer, Programs, ServerYaml, ZrpcServer, say_hello,
    start_zrpc, wait_registered, zrpc_conf,
};
use zrpc_tests::gozero_or_skip;
use zrpc_tests::pb::greeter_client::GreeterClient;

use crate::support::REGISTER_WAIT;

/// The server certificate's names: the loopback IP and a DNS name no host resolves to.
const SERVER_SANS: &[&str] = &["IP:127.0.0.1", "DNS:zrpc.test"];

/// `-tls-ca` (and `-tls-cert`/`-tls-key` with an identity) for gz-client.
fn gz_tls(c: GzClient, ca: &CertFiles, identity: Option<&CertFiles>) -> GzClient {
    let c = c.arg("-tls-ca", ca.cert_str());
    match identity {
        Some(id) => c
            .arg("-tls-cert", id.cert_str())
            .arg("-tls-key", id.key_str()),
        None => c,
    }
}

/// A zrpc server with `tls`, registered under `etcd` when given.
async fn zrpc_tls_server(
    name: &str,
    tls: ServerTlsConf,
    etcd: Option<zrpc::conf::EtcdConf>,
) -> ZrpcServer {
    start_zrpc(zrpc_conf(name, etcd).with_tls(tls)).await
}

fn errors_text(run: &GzRun) -> String {
    run.summary.first_errors.join(" | ")
}

/// Every call failed, none reached a handler, and the errors carry `needle`.
fn assert_refused(what: &str, run: &GzRun, needle: &str) {
    assert_eq!(run.summary.ok, 0, "{what}: calls served\n{}", run.explain());
    assert!(
        run.summary.failed > 0,
        "{what}: no failed call\n{}",
        run.explain()
    );
    assert_eq!(run.exit_code, Some(1), "{what}: exit\n{}", run.explain());
    let errors = errors_text(run);
    assert!(
        errors.contains(needle),
        "{what}: want {needle:?} in {errors}"
    );
}

#[tokio::test]
async fn gz_client_tls_to_zrpc_server_by_endpoint() {
    let p = gozero_or_skip!();
    let ca = TestCa::new("interop CA");
    let cert = ca.issue("zrpc-server", SERVER_SANS);
    let srv = zrpc_tls_server(
        "zrpc-tls.rpc",
        ServerTlsConf::new(cert.cert_str(), cert.key_str()),
        None,
    )
    .await;
    // grpc-go checks the certificate against the endpoint's host, 127.0.0.1 (an IP SAN).
    let yaml = ClientYaml::new(Discovery::Endpoints(vec![srv.listen_on()]));
    let run = gz_tls(GzClient::new(p, &yaml), &ca.files, None)
        .n(40)
        .c(4)
        .run()
        .await;
    println!(
        "go-zero client -> zrpc TLS server (endpoint): {} calls, {} failed, p50 {:.2} ms",
        run.summary.calls, run.summary.failed, run.summary.p50_ms
    );
    run.assert_all_ok("gz TLS endpoint", Some(40));
    assert_eq!(srv.greeter.calls(), 40, "calls seen by the zrpc server");
}

#[tokio::test]
async fn gz_client_mtls_to_zrpc_servers_via_etcd() {
    let p = gozero_or_skip!();
    let ca = TestCa::new("interop CA");
    let cert = ca.issue("zrpc-server", SERVER_SANS);
    let listed = ca.issue("gz-billing", &["DNS:billing.local"]);
    let stranger = ca.issue("gz-stranger", &["DNS:stranger.local"]);
    let cluster = EtcdCluster::start(1).await;
    let key = unique_key("gz-mtls");
    let tls = ServerTlsConf::new(cert.cert_str(), cert.key_str())
        .with_client_ca_file(ca.files.cert_str())
        .with_allowed_clients(["billing.local"]);
    let mut servers = Vec::new();
    for i in 0..2 {
        let conf = cluster.etcd_conf(&key);
        servers.push(zrpc_tls_server(&format!("zrpc-mtls-{i}.rpc"), tls.clone(), Some(conf)).await);
    }
    let etcd = cluster.client().await;
    for s in &servers {
        assert!(
            wait_registered(&etcd, &key, &s.listen_on(), REGISTER_WAIT).await,
            "{} not registered",
            s.listen_on()
        );
    }
    let addrs: Vec<String> = servers.iter().map(ZrpcServer::listen_on).collect();
    let yaml = ClientYaml::new(Discovery::Etcd(cluster.hosts(1), key.clone()));

    // With etcd discovery grpc-go checks the certificate against the *etcd* host: give it the
    // server's name.
    let run = gz_tls(GzClient::new(p, &yaml), &ca.files, Some(&listed))
        .arg("-tls-server-name", "zrpc.test")
        .name("sleep:5")
        .n(60)
        .c(6)
        .run()
        .await;
    println!(
        "go-zero client -> zrpc mTLS servers (etcd, ServerName zrpc.test): {} calls, {} failed, shares {}",
        run.summary.calls,
        run.summary.failed,
        run.shares_text(&addrs)
    );
    run.assert_all_ok("gz mTLS etcd", Some(60));
    let served: u64 = servers.iter().map(|s| s.greeter.calls()).sum();
    assert_eq!(served, 60, "calls seen by the zrpc servers");

    // A certificate from the right CA whose names are not in AllowedClients: PermissionDenied.
    let run = gz_tls(GzClient::new(p, &yaml), &ca.files, Some(&stranger))
        .arg("-tls-server-name", "zrpc.test")
        .n(3)
        .run()
        .await;
    println!(
        "go-zero client not in AllowedClients: {}",
        errors_text(&run)
    );
    assert_refused(
        "stranger",
        &run,
        "code = PermissionDenied desc = client certificate (CN=gz-stranger, DNS=stranger.local) \
         is not in Tls.AllowedClients",
    );

    // Without ServerName, under etcd discovery spelled `localhost:port`, grpc-go verifies the
    // server certificate against `localhost`, the etcd host, not the server's 127.0.0.1.
    let etcd_host = cluster.hosts(1)[0].replace("127.0.0.1", "localhost");
    let yaml = ClientYaml::new(Discovery::Etcd(vec![etcd_host], key.clone()));
    let run = gz_tls(GzClient::new(p, &yaml), &ca.files, Some(&listed))
        .wait(Duration::from_secs(2))
        .n(2)
        .run()
        .await;
    println!(
        "go-zero client via etcd `localhost`, no ServerName: {}",
        errors_text(&run)
    );
    assert_refused(
        "no ServerName",
        &run,
        "x509: certificate is valid for zrpc.test, not localhost",
    );
    let served_after: u64 = servers.iter().map(|s| s.greeter.calls()).sum();
    assert_eq!(served_after, 60, "refused clients reached no handler");
}

#[tokio::test]
async fn gz_client_with_the_wrong_ca_or_no_client_cert_is_refused() {
    let p = gozero_or_skip!();
    let ca = TestCa::new("interop CA");
    let other = TestCa::new("another CA");
    let cert = ca.issue("zrpc-server", SERVER_SANS);
    let srv = zrpc_tls_server(
        "zrpc-mtls.rpc",
        ServerTlsConf::new(cert.cert_str(), cert.key_str())
            .with_client_ca_file(ca.files.cert_str()),
        None,
    )
    .await;
    let yaml = ClientYaml::new(Discovery::Endpoints(vec![srv.listen_on()]));
    let quick = |c: GzClient| c.wait(Duration::from_secs(2)).n(3);

    // The client does not trust the server's CA.
    let own = ca.issue("gz-client", &["DNS:gz.local"]);
    let run = quick(gz_tls(GzClient::new(p, &yaml), &other.files, Some(&own)))
        .run()
        .await;
    println!("go-zero client, wrong CA: {}", errors_text(&run));
    assert_refused(
        "wrong CA",
        &run,
        "authentication handshake failed: tls: failed to verify certificate: x509: certificate \
         signed by unknown authority",
    );
    assert!(
        run.calls.is_empty() && run.summary.codes.get("Unavailable") == Some(&run.summary.calls),
        "wrong CA: {:?}",
        run.summary.codes
    );

    // No client certificate against ClientAuth: required.
    let run = quick(gz_tls(GzClient::new(p, &yaml), &ca.files, None))
        .run()
        .await;
    println!(
        "go-zero client, no client certificate: {}",
        errors_text(&run)
    );
    assert_refused("no client cert", &run, "tls: certificate required");

    // A client certificate from another CA.
    let foreign = other.issue("gz-foreign", &["DNS:foreign.local"]);
    let run = quick(gz_tls(GzClient::new(p, &yaml), &ca.files, Some(&foreign)))
        .run()
        .await;
    println!(
        "go-zero client, client certificate from another CA: {}",
        errors_text(&run)
    );
    // The server's CertificateRequest names the CAs it accepts; grpc-go (crypto/tls) sends no
    // certificate when its own is not from one of them, so the server asks for one. The server
    // half-closes after its alert and drains the client's early HTTP/2 bytes, so grpc-go reads
    // the alert (closed at once, the socket's RST made it say `write: broken pipe`).
    assert_refused(
        "foreign client cert",
        &run,
        "error reading server preface: remote error: tls: certificate required",
    );

    // A plaintext go-zero client.
    let run = quick(GzClient::new(p, &yaml)).run().await;
    println!(
        "plaintext go-zero client to a TLS server: {}",
        errors_text(&run)
    );
    assert_refused("plaintext", &run, "code = Unavailable");

    assert_eq!(
        srv.greeter.calls(),
        0,
        "no refused call reached the handler"
    );
}

/// A gz-server serving mutual TLS (`-tls-cert`, `-tls-key`, `-tls-client-ca`).
async fn gz_tls_server(p: &Programs, cert: &CertFiles, client_ca: &CertFiles) -> GzServer {
    let mut yaml = ServerYaml::new("gz-tls.rpc", &[], "");
    yaml.etcd = None;
    let (c, k, ca) = (cert.cert_str(), cert.key_str(), client_ca.cert_str());
    let args = ["-tls-cert", &c, "-tls-key", &k, "-tls-client-ca", &ca];
    GzServer::start(p, &yaml, &args).await
}

#[tokio::test]
async fn zrpc_client_mtls_to_gz_server() {
    let p = gozero_or_skip!();
    let ca = TestCa::new("interop CA");
    let cert = ca.issue("gz-server", SERVER_SANS);
    let id = ca.issue("zrpc-client", &["DNS:zrpc-client.local"]);
    let gz = gz_tls_server(p, &cert, &ca.files).await;

    let conf = RpcClientConf::direct([gz.addr.clone()]).with_tls(
        ClientTlsConf::new(ca.files.cert_str()).with_identity(id.cert_str(), id.key_str()),
    );
    let mut c = GreeterClient::new(zrpc::client(conf).await.expect("zrpc client"));
    for i in 0..20 {
        let r = say_hello(&mut c, "tls").await;
        assert_eq!(
            (r.code, r.message.as_str(), r.server.as_str()),
            (Code::Ok, "hello tls", gz.addr.as_str()),
            "call {i}"
        );
    }

    // Without a client certificate the go-zero server refuses the handshake.
    let conf =
        RpcClientConf::direct([gz.addr.clone()]).with_tls(ClientTlsConf::new(ca.files.cert_str()));
    let mut anon = GreeterClient::new(zrpc::client(conf).await.expect("zrpc client"));
    let r = say_hello(&mut anon, "anon").await;
    println!(
        "zrpc client without a certificate -> go-zero mTLS server: {:?} {}",
        r.code, r.message
    );
    // TLS 1.3: the handshake ends on the client's side before the server has checked for a
    // certificate; its alert then ends the connection, and the zrpc client's status says only
    // `endpoint <addr>: transport error` or `... operation was canceled`, not the alert.
    assert_eq!(r.code, Code::Unavailable, "{r:?}");
    assert!(
        r.server.is_empty() && r.message.contains(&format!("endpoint {}: ", gz.addr)),
        "{r:?}"
    );

    // Trusting another CA: the zrpc client refuses the go-zero server's certificate.
    let other = TestCa::new("another CA");
    let conf = RpcClientConf::direct([gz.addr.clone()]).with_tls(
        ClientTlsConf::new(other.files.cert_str()).with_identity(id.cert_str(), id.key_str()),
    );
    let mut wrong = GreeterClient::new(zrpc::client(conf).await.expect("zrpc client"));
    let r = say_hello(&mut wrong, "wrong").await;
    println!(
        "zrpc client with the wrong CA -> go-zero TLS server: {:?} {}",
        r.code, r.message
    );
    assert_eq!(r.code, Code::Unavailable, "{r:?}");
    assert!(r.message.contains("UnknownIssuer"), "{r:?}");

    let stopped = gz.stop().await;
    assert_eq!(
        stopped.calls,
        Some(20),
        "calls counted by gz-server: {stopped:?}"
    );
}

/// Two `Endpoints`: grpc-go's authority is `h1:p1,h2:p2`, which it also uses as the TLS server
/// name, so a server name is needed; with one, every call succeeds on both servers (and the
/// multi-host `:authority` is repaired under TLS).
#[tokio::test]
async fn gz_client_tls_to_two_endpoints_needs_a_server_name() {
    let p = gozero_or_skip!();
    let ca = TestCa::new("interop CA");
    let cert = ca.issue("zrpc-server", SERVER_SANS);
    let tls = ServerTlsConf::new(cert.cert_str(), cert.key_str());
    let a = zrpc_tls_server("zrpc-tls-a.rpc", tls.clone(), None).await;
    let b = zrpc_tls_server("zrpc-tls-b.rpc", tls, None).await;
    let addrs = vec![a.listen_on(), b.listen_on()];
    let yaml = ClientYaml::new(Discovery::Endpoints(addrs.clone()));

    let run = gz_tls(GzClient::new(p, &yaml), &ca.files, None)
        .wait(Duration::from_secs(2))
        .n(2)
        .run()
        .await;
    println!(
        "go-zero client, two endpoints, no server name: {}",
        errors_text(&run)
    );
    // grpc-go sends the whole authority (`127.0.0.1:p1,127.0.0.1:p2`, no host:port) as SNI;
    // rustls refuses a ClientHello whose server name is not a DNS name.
    assert_refused(
        "two endpoints, no server name",
        &run,
        "transport: authentication handshake failed: remote error: tls: illegal parameter",
    );

    let run = gz_tls(GzClient::new(p, &yaml), &ca.files, None)
        .arg("-tls-server-name", "zrpc.test")
        .name("sleep:5")
        .n(60)
        .c(6)
        .run()
        .await;
    println!(
        "go-zero client, two endpoints, ServerName zrpc.test: {} calls, {} failed, shares {}",
        run.summary.calls,
        run.summary.failed,
        run.shares_text(&addrs)
    );
    run.assert_all_ok("two endpoints", Some(60));
    assert_eq!(a.greeter.calls() + b.greeter.calls(), 60);
    assert!(
        a.greeter.calls() > 0 && b.greeter.calls() > 0,
        "both servers served"
    );
}
