//! TLS and mTLS: certificates made by `openssl` in the test (`zrpc_tests::certs`).
//! Each failure case prints its error text (`--nocapture`) for the docs' test matrix.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::Stream;
use tokio::net::TcpListener;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Request, Response, Status};
use zrpc::conf::{ClientAuth, ClientTlsConf, RpcClientConf, ServerTlsConf};
use zrpc::{Client, PeerIdentity, Server, ServerHandle};
use zrpc_tests::certs::{CertFiles, TestCa};
use zrpc_tests::greeter::test_conf;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::pb::greeter_server::{Greeter, GreeterServer};
use zrpc_tests::pb::{HelloReply, HelloRequest, HelloStreamRequest};
use zrpc_tests::wait;

const LOCAL_SANS: &[&str] = &["DNS:localhost", "IP:127.0.0.1"];

/// Answers with what the server knows of the caller: its identity and address.
#[derive(Debug, Clone, Default)]
struct WhoGreeter;

#[tonic::async_trait]
impl Greeter for WhoGreeter {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let who = req
            .extensions()
            .get::<PeerIdentity>()
            .map_or_else(|| "anonymous".to_owned(), PeerIdentity::describe);
        let addr = req
            .remote_addr()
            .map_or_else(|| "no addr".to_owned(), |a| a.ip().to_string());
        Ok(Response::new(HelloReply {
            message: format!("{who} from {addr}"),
        }))
    }

    type SayHelloStreamStream = Pin<Box<dyn Stream<Item = Result<HelloReply, Status>> + Send>>;

    async fn say_hello_stream(
        &self,
        _req: Request<HelloStreamRequest>,
    ) -> Result<Response<Self::SayHelloStreamStream>, Status> {
        Err(Status::unimplemented("not here"))
    }
}

struct TlsServer {
    addr: std::net::SocketAddr,
    handle: ServerHandle,
    join: tokio::task::JoinHandle<Result<(), zrpc_server::Error>>,
}

impl TlsServer {
    /// A TLS server whose certificate a new test CA issued (no client CA); the CA (kept for
    /// its files) and the server.
    async fn with_test_ca() -> (TestCa, TlsServer) {
        let ca = TestCa::new("zrpc test CA");
        let server = ca.issue("server", LOCAL_SANS);
        let srv = TlsServer::start(Some(ServerTlsConf::new(
            server.cert_str(),
            server.key_str(),
        )))
        .await;
        (ca, srv)
    }

    async fn start(tls: Option<ServerTlsConf>) -> TlsServer {
        Self::start_with(tls, |_| {}).await
    }

    /// [`TlsServer::start`] with `edit` applied to its config.
    async fn start_with(
        tls: Option<ServerTlsConf>,
        edit: impl FnOnce(&mut zrpc::conf::RpcServerConf),
    ) -> TlsServer {
        let mut conf = test_conf("tls.rpc").with_cpu_threshold(0);
        if let Some(tls) = tls {
            conf = conf.with_tls(tls);
        }
        edit(&mut conf);
        let server = Server::new(conf)
            .unwrap()
            .add_service(GreeterServer::new(WhoGreeter));
        let handle = server.handle();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let join = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));
        let addr = handle.serving().await.expect("server serves");
        TlsServer { addr, handle, join }
    }

    async fn stop(self) {
        self.handle.shutdown();
        self.join.await.unwrap().unwrap();
    }
}

/// The error and its sources, joined.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push(s.to_string());
        cur = s.source();
    }
    out.join(": ")
}

fn tls_config(ca: &CertFiles, identity: Option<&CertFiles>) -> ClientTlsConfig {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(&ca.cert).unwrap()));
    if let Some(id) = identity {
        tls = tls.identity(Identity::from_pem(
            std::fs::read(&id.cert).unwrap(),
            std::fs::read(&id.key).unwrap(),
        ));
    }
    tls
}

/// One call on a fresh tonic connection; the reply, or the error text (connect or call).
async fn call_once(url: String, tls: Option<ClientTlsConfig>) -> Result<String, String> {
    let mut ep = Endpoint::from_shared(url).unwrap();
    if let Some(tls) = tls {
        ep = ep.tls_config(tls).unwrap();
    }
    let channel: Channel = ep.connect().await.map_err(|e| chain(&e))?;
    let mut c = GreeterClient::new(channel);
    c.say_hello(HelloRequest { name: "x".into() })
        .await
        .map(|r| r.into_inner().message)
        .map_err(|s| format!("{:?}: {}", s.code(), chain(&s)))
}

fn zrpc_client_conf(addr: std::net::SocketAddr, tls: ClientTlsConf) -> RpcClientConf {
    RpcClientConf::direct([addr.to_string()]).with_tls(tls)
}

#[tokio::test]
async fn tls_right_certificates_work_and_the_handler_sees_the_peer_identity() {
    let ca = TestCa::new("zrpc test CA");
    let server = ca.issue("server", LOCAL_SANS);
    let client = ca.issue(
        "billing",
        &["URI:spiffe://zrpc.test/billing", "DNS:billing.local"],
    );
    let srv = TlsServer::start(Some(
        ServerTlsConf::new(server.cert_str(), server.key_str())
            .with_client_ca_file(ca.files.cert_str()),
    ))
    .await;

    // tonic channel, mTLS
    let reply = call_once(
        format!("https://127.0.0.1:{}", srv.addr.port()),
        Some(tls_config(&ca.files, Some(&client))),
    )
    .await
    .unwrap();
    assert_eq!(
        reply,
        "CN=billing, DNS=billing.local, URI=spiffe://zrpc.test/billing from 127.0.0.1"
    );

    // zrpc client, mTLS (server name: the endpoint's IP)
    let conf = zrpc_client_conf(
        srv.addr,
        ClientTlsConf::new(ca.files.cert_str()).with_identity(client.cert_str(), client.key_str()),
    );
    let mut c = GreeterClient::new(Client::new(conf).await.unwrap());
    for _ in 0..3 {
        let r = c
            .say_hello(HelloRequest { name: "x".into() })
            .await
            .unwrap();
        assert!(r.into_inner().message.starts_with("CN=billing"));
    }
    // zrpc client with ServerName = localhost
    let conf = zrpc_client_conf(
        srv.addr,
        ClientTlsConf::new(ca.files.cert_str())
            .with_identity(client.cert_str(), client.key_str())
            .with_server_name("localhost"),
    );
    let mut c = GreeterClient::new(Client::new(conf).await.unwrap());
    c.say_hello(HelloRequest { name: "x".into() })
        .await
        .unwrap();
    srv.stop().await;
}

#[tokio::test]
async fn tls_without_client_ca_serves_anonymous_clients() {
    let (ca, srv) = TlsServer::with_test_ca().await;
    let reply = call_once(
        format!("https://127.0.0.1:{}", srv.addr.port()),
        Some(tls_config(&ca.files, None)),
    )
    .await
    .unwrap();
    assert_eq!(reply, "anonymous from 127.0.0.1");
    srv.stop().await;
}

#[tokio::test]
async fn tls_rejects_wrong_ca_expired_wrong_san_and_missing_client_cert() {
    let ca = TestCa::new("zrpc test CA");
    let other = TestCa::new("other CA");
    let server = ca.issue("server", LOCAL_SANS);
    let client = ca.issue("billing", &[]);
    let strange_client = other.issue("billing", &[]);
    let expired_client = ca.issue_expired("billing", &[]);
    let srv = TlsServer::start(Some(
        ServerTlsConf::new(server.cert_str(), server.key_str())
            .with_client_ca_file(ca.files.cert_str()),
    ))
    .await;
    // expired_client is past its end: its notAfter is its issuance, in whole seconds, so the
    // wait is on the clock itself
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let url = format!("https://127.0.0.1:{}", srv.addr.port());

    // the client does not trust the server's CA
    let e = call_once(url.clone(), Some(tls_config(&other.files, Some(&client))))
        .await
        .unwrap_err();
    println!("client trusts another CA: {e}");
    assert!(e.contains("UnknownIssuer"), "{e}");

    // the server does not trust the client's CA
    let e = call_once(
        url.clone(),
        Some(tls_config(&ca.files, Some(&strange_client))),
    )
    .await
    .unwrap_err();
    println!("client certificate from another CA: {e}");
    assert!(e.contains("UnknownCA") || e.contains("unknown"), "{e}");

    // expired client certificate
    let e = call_once(
        url.clone(),
        Some(tls_config(&ca.files, Some(&expired_client))),
    )
    .await
    .unwrap_err();
    println!("expired client certificate: {e}");
    assert!(
        e.contains("CertificateExpired") || e.contains("expired"),
        "{e}"
    );

    // no client certificate while required
    let e = call_once(url.clone(), Some(tls_config(&ca.files, None)))
        .await
        .unwrap_err();
    println!("no client certificate (ClientAuth required): {e}");
    assert!(e.contains("CertificateRequired"), "{e}");
    srv.stop().await;

    // expired server certificate
    let expired_server = ca.issue_expired("server", LOCAL_SANS);
    // past its end (notAfter = issuance, whole seconds): a wait on the clock itself
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let srv = TlsServer::start(Some(ServerTlsConf::new(
        expired_server.cert_str(),
        expired_server.key_str(),
    )))
    .await;
    let e = call_once(
        format!("https://127.0.0.1:{}", srv.addr.port()),
        Some(tls_config(&ca.files, None)),
    )
    .await
    .unwrap_err();
    println!("expired server certificate: {e}");
    assert!(
        e.contains("invalid peer certificate: certificate expired"),
        "{e}"
    );
    srv.stop().await;

    // server certificate for another name
    let wrong_san = ca.issue("server", &["DNS:elsewhere.example"]);
    let srv = TlsServer::start(Some(ServerTlsConf::new(
        wrong_san.cert_str(),
        wrong_san.key_str(),
    )))
    .await;
    let e = call_once(
        format!("https://127.0.0.1:{}", srv.addr.port()),
        Some(tls_config(&ca.files, None)),
    )
    .await
    .unwrap_err();
    println!("server certificate for another name: {e}");
    assert!(
        e.contains("certificate not valid for name \"127.0.0.1\""),
        "{e}"
    );
    // the zrpc client: the call fails (Unavailable), naming the cause
    let conf = zrpc_client_conf(srv.addr, ClientTlsConf::new(ca.files.cert_str()));
    let mut c = GreeterClient::new(Client::new(conf).await.unwrap());
    let s = c
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .unwrap_err();
    println!(
        "zrpc client, server certificate for another name: {:?}: {}",
        s.code(),
        chain(&s)
    );
    assert_eq!(s.code(), Code::Unavailable);
    srv.stop().await;
}

#[tokio::test]
async fn tls_optional_client_auth_serves_both() {
    let ca = TestCa::new("zrpc test CA");
    let server = ca.issue("server", LOCAL_SANS);
    let client = ca.issue("billing", &[]);
    let srv = TlsServer::start(Some(
        ServerTlsConf::new(server.cert_str(), server.key_str())
            .with_client_ca_file(ca.files.cert_str())
            .with_client_auth(ClientAuth::Optional),
    ))
    .await;
    let url = format!("https://127.0.0.1:{}", srv.addr.port());
    let anon = call_once(url.clone(), Some(tls_config(&ca.files, None))).await;
    assert_eq!(anon.unwrap(), "anonymous from 127.0.0.1");
    let named = call_once(url, Some(tls_config(&ca.files, Some(&client)))).await;
    assert_eq!(named.unwrap(), "CN=billing from 127.0.0.1");
    srv.stop().await;
}

#[tokio::test]
async fn tls_plaintext_and_tls_do_not_mix() {
    let ca = TestCa::new("zrpc test CA");
    let server = ca.issue("server", LOCAL_SANS);
    let tls_srv = TlsServer::start(Some(ServerTlsConf::new(
        server.cert_str(),
        server.key_str(),
    )))
    .await;
    let e = call_once(format!("http://{}", tls_srv.addr), None)
        .await
        .unwrap_err();
    println!("plaintext client to TLS server: {e}");
    // the TLS server is still fine afterwards
    call_once(
        format!("https://127.0.0.1:{}", tls_srv.addr.port()),
        Some(tls_config(&ca.files, None)),
    )
    .await
    .unwrap();
    tls_srv.stop().await;

    let plain = TlsServer::start(None).await;
    let e = call_once(
        format!("https://127.0.0.1:{}", plain.addr.port()),
        Some(tls_config(&ca.files, None)),
    )
    .await
    .unwrap_err();
    println!("TLS client to plaintext server: {e}");
    let conf = zrpc_client_conf(plain.addr, ClientTlsConf::new(ca.files.cert_str()));
    let mut c = GreeterClient::new(Client::new(conf).await.unwrap());
    let s = c
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .unwrap_err();
    println!(
        "zrpc TLS client to plaintext server: {:?}: {}",
        s.code(),
        chain(&s)
    );
    assert_eq!(s.code(), Code::Unavailable);
    plain.stop().await;
}

#[tokio::test]
async fn tls_allow_list_admits_listed_identities_only() {
    let ca = TestCa::new("zrpc test CA");
    let server = ca.issue("server", LOCAL_SANS);
    let billing = ca.issue("billing", &[]);
    let spiffe = ca.issue("anything", &["URI:spiffe://zrpc.test/orders"]);
    let stranger = ca.issue("stranger", &["DNS:stranger.local"]);
    let srv = TlsServer::start(Some(
        ServerTlsConf::new(server.cert_str(), server.key_str())
            .with_client_ca_file(ca.files.cert_str())
            .with_allowed_clients(["billing", "spiffe://zrpc.test/orders"]),
    ))
    .await;
    let url = format!("https://127.0.0.1:{}", srv.addr.port());
    call_once(url.clone(), Some(tls_config(&ca.files, Some(&billing))))
        .await
        .unwrap();
    call_once(url.clone(), Some(tls_config(&ca.files, Some(&spiffe))))
        .await
        .unwrap();
    let e = call_once(url, Some(tls_config(&ca.files, Some(&stranger))))
        .await
        .unwrap_err();
    println!("client not in AllowedClients: {e}");
    assert!(e.starts_with("PermissionDenied: "), "{e}");
    assert!(
        e.contains(
            "message: \"client certificate (CN=stranger, DNS=stranger.local) is not in \
             Tls.AllowedClients\""
        ),
        "{e}"
    );
    srv.stop().await;
}

#[tokio::test]
async fn tls_start_errors_name_the_file() {
    let ca = TestCa::new("zrpc test CA");
    let server = ca.issue("server", LOCAL_SANS);
    let other = ca.issue("other", LOCAL_SANS);
    let bad = ca.dir().join("bad.pem");
    std::fs::write(&bad, "not a certificate\n").unwrap();
    let missing = ca.dir().join("missing.pem");
    let bad_s = bad.display().to_string();
    let missing_s = missing.display().to_string();

    async fn start_err(tls: ServerTlsConf) -> String {
        let server = Server::new(test_conf("tls.rpc").with_cpu_threshold(0).with_tls(tls)).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        server
            .serve_with_listener(listener, std::future::pending())
            .await
            .unwrap_err()
            .to_string()
    }
    let cases = [
        (
            "missing cert file",
            ServerTlsConf::new(missing_s.clone(), server.key_str()),
            format!(
                "Tls.CertFile {missing_s:?}: cannot read: No such file or directory (os error 2)"
            ),
        ),
        (
            "bad PEM cert",
            ServerTlsConf::new(bad_s.clone(), server.key_str()),
            format!("Tls.CertFile {bad_s:?}: no PEM CERTIFICATE block"),
        ),
        (
            "bad PEM key",
            ServerTlsConf::new(server.cert_str(), bad_s.clone()),
            format!(
                "Tls.KeyFile {bad_s:?}: no usable PEM private key (PKCS#8, PKCS#1 or SEC1): no items found"
            ),
        ),
        (
            "key of another certificate",
            ServerTlsConf::new(server.cert_str(), other.key_str()),
            format!(
                "Tls.KeyFile {:?} does not match the certificate in Tls.CertFile {:?}",
                other.key_str(),
                server.cert_str()
            ),
        ),
        (
            "bad client CA",
            ServerTlsConf::new(server.cert_str(), server.key_str())
                .with_client_ca_file(bad_s.clone()),
            format!("Tls.ClientCaFile {bad_s:?}: no PEM CERTIFICATE block"),
        ),
    ];
    for (what, tls, want) in cases {
        let got = start_err(tls).await;
        println!("{what}: {got}");
        assert_eq!(got, want, "{what}");
    }

    // the client names its files too
    let conf =
        RpcClientConf::direct(["127.0.0.1:1"]).with_tls(ClientTlsConf::new(missing_s.clone()));
    let e = Client::new(conf).await.unwrap_err().to_string();
    println!("client, missing CA file: {e}");
    assert_eq!(
        e,
        format!("Tls.CaFile {missing_s:?}: cannot read: No such file or directory (os error 2)")
    );
}

/// The DER of the certificate a fresh TLS connection to `addr` is served.
async fn served_cert(addr: std::net::SocketAddr, ca: &CertFiles) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&ca.cert).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn der_of(files: &CertFiles) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_file(&files.cert).unwrap().to_vec()
}

/// Waits until the server has tried `cert` and refused it: its count in
/// `rpc_server_tls_reloads_total{result="refused"}` (the file's path is this test's own).
async fn refused_reload_of(cert: &std::path::Path) {
    let series = format!(
        "rpc_server_tls_reloads_total{{file=\"{}\",result=\"refused\"}} ",
        cert.display()
    );
    let refused = || {
        zrpc_server::metrics::render()
            .lines()
            .any(|l| l.strip_prefix(&series).is_some_and(|v| v.trim() != "0"))
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        while !refused() {
            // the watcher reads the files every 100 ms
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the broken certificate was tried and refused within 10 s");
}

/// Replaces `dst` with `src` atomically (write aside, rename).
fn replace(src: &std::path::Path, dst: &std::path::Path) {
    let tmp = dst.with_extension("tmp");
    std::fs::copy(src, &tmp).unwrap();
    std::fs::rename(&tmp, dst).unwrap();
}

#[tokio::test]
async fn tls_certificate_rotation_under_load_fails_no_call() {
    let ca = TestCa::new("zrpc test CA");
    let v1 = ca.issue("server-v1", LOCAL_SANS);
    let v2 = ca.issue("server-v2", LOCAL_SANS);
    // the server reads copies that the test replaces
    let live = CertFiles {
        cert: ca.dir().join("live.pem"),
        key: ca.dir().join("live.key"),
    };
    std::fs::copy(&v1.cert, &live.cert).unwrap();
    std::fs::copy(&v1.key, &live.key).unwrap();
    let srv = TlsServer::start(Some(
        ServerTlsConf::new(live.cert_str(), live.key_str())
            .with_reload_interval(Duration::from_millis(100)),
    ))
    .await;
    assert_eq!(served_cert(srv.addr, &ca.files).await, der_of(&v1));

    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4 {
        let (ok, failed, stop) = (ok.clone(), failed.clone(), stop.clone());
        let addr = srv.addr;
        let ca_file = ca.files.cert_str();
        workers.push(tokio::spawn(async move {
            // half the workers keep one zrpc client, half make a new one (new connections) per 50 calls
            let mut n = 0u64;
            let mut c = None;
            while !stop.load(Ordering::Relaxed) {
                if c.is_none() || (w % 2 == 1 && n.is_multiple_of(50)) {
                    let conf = zrpc_client_conf(addr, ClientTlsConf::new(ca_file.clone()));
                    c = Some(GreeterClient::new(Client::new(conf).await.unwrap()));
                }
                let call = c
                    .as_mut()
                    .unwrap()
                    .say_hello(HelloRequest { name: "x".into() });
                match call.await {
                    Ok(_) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(s) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        println!("rotation: failed call: {s:?}");
                    }
                }
                n += 1;
            }
        }));
    }
    // the load runs: every worker's client made its calls
    wait::until("20 calls of the load", || ok.load(Ordering::Relaxed) >= 20).await;

    // a broken new certificate: refused, the old one stays
    std::fs::write(
        live.cert.with_extension("tmp"),
        "-----BEGIN CERTIFICATE-----\ngarbage\n",
    )
    .unwrap();
    std::fs::rename(live.cert.with_extension("tmp"), &live.cert).unwrap();
    refused_reload_of(&live.cert).await;
    assert_eq!(
        served_cert(srv.addr, &ca.files).await,
        der_of(&v1),
        "old cert kept"
    );

    // the new pair (key first, then the certificate)
    replace(&v2.key, &live.key);
    replace(&v2.cert, &live.cert);
    let mut rotated = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if served_cert(srv.addr, &ca.files).await == der_of(&v2) {
            rotated = true;
            break;
        }
    }
    assert!(rotated, "new connections get the new certificate");
    // calls go on after the rotation (the workers that open new connections meet v2)
    let after = ok.load(Ordering::Relaxed);
    wait::until("100 calls after the rotation", || {
        ok.load(Ordering::Relaxed) >= after + 100
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    println!("rotation under load: {ok} calls OK, {failed} failed");
    assert_eq!(failed, 0);
    assert!(ok > 100, "{ok} calls");
    srv.stop().await;
}

#[test]
fn tls_example_files_load() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/etc");
    let s: zrpc::RpcServerConf =
        zrpc::conf::load(format!("{dir}/greeter-server-tls.yaml")).unwrap();
    let t = s.tls.unwrap();
    assert_eq!(t.client_auth(), ClientAuth::Required);
    assert_eq!(t.allowed_clients, ["greeter-client"]);
    let c: RpcClientConf = zrpc::conf::load(format!("{dir}/greeter-client-tls.yaml")).unwrap();
    assert_eq!(c.tls.unwrap().cert_file, "examples/etc/certs/client.pem");
}

/// A rustls client that trusts `ca` and offers HTTP/2 (ALPN `h2`), for raw HTTP/2 over TLS.
fn h2_tls_connector(ca: &CertFiles) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_file(&ca.cert).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// An IPv4 client of a server listening on IPv6 and IPv4 (`[::]`, `ListenOn: ":port"`) is seen
/// at its IPv4 address, as Go shows it, not as `::ffff:127.0.0.1`.
#[tokio::test]
async fn an_ipv4_client_of_a_dual_stack_listener_is_seen_as_ipv4() {
    let Ok(listener) = TcpListener::bind("[::]:0").await else {
        println!("skipped: this host has no IPv6");
        return;
    };
    let conf = test_conf("dual.rpc").with_cpu_threshold(0);
    let server = Server::new(conf)
        .unwrap()
        .add_service(GreeterServer::new(WhoGreeter));
    let handle = server.handle();
    let join = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));
    let addr = handle.serving().await.expect("server serves");
    let reply = call_once(format!("http://127.0.0.1:{}", addr.port()), None).await;
    assert_eq!(reply.as_deref(), Ok("anonymous from 127.0.0.1"));
    handle.shutdown();
    join.await.unwrap().unwrap();
}

/// `HandshakeTimeout` bounds the TLS and the HTTP/2 handshakes together: a client that takes
/// most of it for TLS and then sends no HTTP/2 preface is closed at the timeout after its TCP
/// connect, not a second timeout after its TLS handshake.
#[tokio::test]
async fn tls_one_handshake_timeout_covers_tls_and_http2() {
    use rustls::pki_types::ServerName;
    use tokio::io::AsyncReadExt;

    let ca = TestCa::new("zrpc test CA");
    let server = ca.issue("server", LOCAL_SANS);
    let timeout = Duration::from_secs(1);
    let srv = TlsServer::start_with(
        Some(ServerTlsConf::new(server.cert_str(), server.key_str())),
        |c| c.transport.handshake_timeout = timeout,
    )
    .await;
    let addr = srv.addr;

    let started = std::time::Instant::now();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    let mut tls = h2_tls_connector(&ca.files)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("the TLS handshake within the timeout");
    let tls_done = started.elapsed();
    // No preface: the server closes the connection (EOF or a reset) at its deadline.
    let mut buf = [0u8; 256];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("closed within 5 s");
    println!("HandshakeTimeout {timeout:?}: TLS done after {tls_done:?}, closed after {closed:?}");
    assert!(tls_done < timeout, "{tls_done:?}");
    assert!(
        closed >= timeout - Duration::from_millis(50) && closed < Duration::from_millis(1700),
        "closed after {closed:?}: one HandshakeTimeout from the TCP connect, not {:?}",
        tls_done + timeout
    );
    srv.stop().await;
}

/// grpc-go's multi-host `:authority` (`h1:port,h2:port`) is repaired over TLS too: the repair
/// reads the decrypted HTTP/2 octets (`TcpStream -> TlsStream -> Guarded`).
#[tokio::test]
async fn tls_multi_host_authority_is_repaired_under_tls() {
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    let (ca, srv) = TlsServer::with_test_ca().await;

    let tcp = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let mut tls = h2_tls_connector(&ca.files)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));

    let authority = format!("127.0.0.1:{0},127.0.0.1:{0}", srv.addr.port());
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    for (index, value) in [(4u8, "/greeter.Greeter/SayHello"), (1, authority.as_str())] {
        block.push(index);
        block.push(u8::try_from(value.len()).unwrap());
        block.extend_from_slice(value.as_bytes());
    }
    block.extend_from_slice(&[0x0f, 0x10, 16]);
    block.extend_from_slice(b"application/grpc");
    block.extend_from_slice(&[0x00, 2]);
    block.extend_from_slice(b"te");
    block.push(8);
    block.extend_from_slice(b"trailers");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(4, 0, 0, &[]));
    out.extend(frame(1, 0x4, 1, &block));
    out.extend(frame(0, 0x1, 1, b"\x00\x00\x00\x00\x03\x0a\x01x"));
    tls.write_all(&out).await.unwrap();

    let reply = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let mut h = [0u8; 9];
            tls.read_exact(&mut h).await.unwrap();
            let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
            let stream = u32::from_be_bytes([h[5] & 0x7f, h[6], h[7], h[8]]);
            let mut payload = vec![0u8; len];
            tls.read_exact(&mut payload).await.unwrap();
            match (h[3], stream) {
                (4, 0) if h[4] & 1 == 0 => tls.write_all(&frame(4, 1, 0, &[])).await.unwrap(),
                (3, 1) => panic!("RST_STREAM on the call: {payload:?}"),
                (7, _) => panic!("GOAWAY: {payload:?}"),
                (0, 1) => return payload,
                _ => {}
            }
        }
    })
    .await
    .expect("a reply within 5 s");
    let text = String::from_utf8_lossy(&reply);
    assert!(text.contains("anonymous from 127.0.0.1"), "{text:?}");
    drop(tls);
    srv.stop().await;
}

/// SIGHUP is process-wide: the tests that raise it take turns, or one's signal reloads the
/// other's server before its "no polling" check.
static SIGHUP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// With `ReloadInterval: 0` the files are re-read on SIGHUP only.
#[tokio::test]
async fn tls_certificate_reloads_on_sighup() {
    let _turn = SIGHUP.lock().await;
    let ca = TestCa::new("zrpc test CA");
    let v1 = ca.issue("server-v1", LOCAL_SANS);
    let v2 = ca.issue("server-v2", LOCAL_SANS);
    let live = CertFiles {
        cert: ca.dir().join("hup.pem"),
        key: ca.dir().join("hup.key"),
    };
    std::fs::copy(&v1.cert, &live.cert).unwrap();
    std::fs::copy(&v1.key, &live.key).unwrap();
    let srv = TlsServer::start(Some(
        ServerTlsConf::new(live.cert_str(), live.key_str()).with_reload_interval(Duration::ZERO),
    ))
    .await;
    replace(&v2.key, &live.key);
    replace(&v2.cert, &live.cert);
    // An absence check: with ReloadInterval 0 nothing polls the files, so the server must still
    // serve v1 after a bounded 300 ms (3 periods of the 100 ms interval other tests use).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        served_cert(srv.addr, &ca.files).await,
        der_of(&v1),
        "no polling"
    );
    // the server's watcher has its SIGHUP handler installed by now (it serves)
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).unwrap();
    let mut rotated = false;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if served_cert(srv.addr, &ca.files).await == der_of(&v2) {
            rotated = true;
            break;
        }
    }
    assert!(rotated, "SIGHUP reloads the certificate");
    srv.stop().await;
}

/// A tonic channel with mTLS as `id`, connected now (one connection, kept).
async fn mtls_channel(addr: std::net::SocketAddr, ca: &CertFiles, id: &CertFiles) -> Channel {
    Endpoint::from_shared(format!("https://127.0.0.1:{}", addr.port()))
        .unwrap()
        .tls_config(tls_config(ca, Some(id)))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// One call on `channel`: the reply or `Code: message`.
async fn call_on(channel: &Channel) -> Result<String, String> {
    GreeterClient::new(channel.clone())
        .say_hello(HelloRequest { name: "x".into() })
        .await
        .map(|r| r.into_inner().message)
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}

/// Polls `check` every 100 ms for up to 5 s; whether it came true.
async fn within_5s<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..50 {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// `ClientCaFile` is polled: a broken file keeps the old CA, a new CA admits its clients on new
/// connections and refuses the old CA's, while a connection verified before keeps working.
#[tokio::test]
async fn tls_client_ca_reloads_and_a_broken_file_keeps_the_old_ca() {
    let ca_a = TestCa::new("client CA A");
    let ca_b = TestCa::new("client CA B");
    let server = ca_a.issue("server", LOCAL_SANS);
    let client_a = ca_a.issue("client-a", &[]);
    let client_b = ca_b.issue("client-b", &[]);
    let live_ca = ca_a.dir().join("live-client-ca.pem");
    std::fs::copy(&ca_a.files.cert, &live_ca).unwrap();
    let srv = TlsServer::start(Some(
        ServerTlsConf::new(server.cert_str(), server.key_str())
            .with_client_ca_file(live_ca.display().to_string())
            .with_reload_interval(Duration::from_millis(100)),
    ))
    .await;
    let url = format!("https://127.0.0.1:{}", srv.addr.port());
    // The server's own certificate is from CA A: clients always trust A.
    let as_a = || call_once(url.clone(), Some(tls_config(&ca_a.files, Some(&client_a))));
    let as_b = || call_once(url.clone(), Some(tls_config(&ca_a.files, Some(&client_b))));
    as_a().await.unwrap();
    let e = as_b().await.unwrap_err();
    assert!(e.contains("UnknownCA"), "{e}");
    let open_a = mtls_channel(srv.addr, &ca_a.files, &client_a).await;
    call_on(&open_a).await.unwrap();

    // A half-written CA file is refused: A still admitted, B still refused.
    let pem = std::fs::read_to_string(&ca_b.files.cert).unwrap();
    std::fs::write(&live_ca, &pem[..pem.len() / 2]).unwrap();
    // An absence check: a refused CA file changes nothing the test can see (no metric counts
    // CA reloads), so it waits a bounded 500 ms, several reload intervals, before checking.
    tokio::time::sleep(Duration::from_millis(500)).await;
    as_a().await.unwrap();
    let e = as_b().await.unwrap_err();
    assert!(e.contains("UnknownCA"), "{e}");

    // CA B in place: B admitted on new connections, A refused on new ones.
    replace(&ca_b.files.cert, &live_ca);
    assert!(
        within_5s(|| async { as_b().await.is_ok() }).await,
        "CA B admitted after the reload"
    );
    let e = as_a().await.unwrap_err();
    println!("client of the replaced CA after the reload: {e}");
    assert!(e.contains("received fatal alert: UnknownCA"), "{e}");
    // The connection verified with CA A before the change keeps being served.
    let reply = call_on(&open_a).await.unwrap();
    assert_eq!(reply, "CN=client-a from 127.0.0.1");
    srv.stop().await;
}

/// `AllowedClientsFile` reloads on SIGHUP (ReloadInterval 0) and applies from each client's next
/// call, on open connections too; `AllowedClients` stays; a file with no name is refused.
#[tokio::test]
async fn tls_allowed_clients_file_reloads_on_sighup_for_open_connections() {
    let _turn = SIGHUP.lock().await;
    let ca = TestCa::new("zrpc test CA");
    let server = ca.issue("server", LOCAL_SANS);
    let (billing, orders, ops) = (
        ca.issue("billing", &[]),
        ca.issue("orders", &["URI:spiffe://zrpc.test/orders"]),
        ca.issue("ops", &[]),
    );
    let list = ca.dir().join("allowed.txt");
    std::fs::write(&list, "# who may call\nbilling\n").unwrap();
    let srv = TlsServer::start(Some(
        ServerTlsConf::new(server.cert_str(), server.key_str())
            .with_client_ca_file(ca.files.cert_str())
            .with_allowed_clients(["ops"])
            .with_allowed_clients_file(list.display().to_string())
            .with_reload_interval(Duration::ZERO),
    ))
    .await;
    let (c_billing, c_orders, c_ops) = (
        mtls_channel(srv.addr, &ca.files, &billing).await,
        mtls_channel(srv.addr, &ca.files, &orders).await,
        mtls_channel(srv.addr, &ca.files, &ops).await,
    );
    call_on(&c_billing).await.unwrap();
    call_on(&c_ops).await.unwrap();
    let e = call_on(&c_orders).await.unwrap_err();
    assert_eq!(
        e,
        "PermissionDenied: client certificate (CN=orders, URI=spiffe://zrpc.test/orders) is not \
         in Tls.AllowedClients"
    );

    let next = ca.dir().join("allowed.next");
    std::fs::write(&next, "spiffe://zrpc.test/orders  # the orders service\n").unwrap();
    replace(&next, &list);
    // An absence check: with ReloadInterval 0 the list changes only on SIGHUP; a bounded 300 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(call_on(&c_orders).await.is_err(), "no polling");
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).unwrap();
    assert!(
        within_5s(|| async { call_on(&c_orders).await.is_ok() }).await,
        "orders admitted on its open connection after SIGHUP"
    );
    let e = call_on(&c_billing).await.unwrap_err();
    assert!(e.starts_with("PermissionDenied: "), "{e}");
    call_on(&c_ops).await.unwrap();

    // A file with no name would admit every client: refused, the list stays.
    std::fs::write(&next, "# emptied by mistake\n").unwrap();
    replace(&next, &list);
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).unwrap();
    // An absence check: the refused list leaves no trace the test can see but a log line, so it
    // waits a bounded 500 ms for the SIGHUP to be handled before checking that nothing changed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    call_on(&c_orders).await.unwrap();
    let e = call_on(&c_billing).await.unwrap_err();
    assert!(e.starts_with("PermissionDenied: "), "{e}");
    srv.stop().await;
}

#[tokio::test]
async fn tls_allowed_clients_file_start_errors_name_the_file() {
    let ca = TestCa::new("zrpc test CA");
    let server = ca.issue("server", LOCAL_SANS);
    let start = |file: String| {
        let tls = ServerTlsConf::new(server.cert_str(), server.key_str())
            .with_client_ca_file(ca.files.cert_str())
            .with_allowed_clients_file(file);
        async move {
            let server =
                Server::new(test_conf("tls.rpc").with_cpu_threshold(0).with_tls(tls)).unwrap();
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            server
                .serve_with_listener(listener, std::future::pending())
                .await
                .unwrap_err()
                .to_string()
        }
    };
    let missing = ca.dir().join("missing.txt").display().to_string();
    let e = start(missing.clone()).await;
    println!("missing AllowedClientsFile: {e}");
    assert!(
        e.contains(&format!("Tls.AllowedClientsFile {missing:?}: cannot read")),
        "{e}"
    );
    let empty = ca.dir().join("empty.txt");
    std::fs::write(&empty, "\n# nobody yet\n").unwrap();
    let e = start(empty.display().to_string()).await;
    println!("AllowedClientsFile without a name: {e}");
    assert!(e.contains("no name in the file"), "{e}");
}

/// A plaintext client's first call to a TLS server: the TLS alert the server answers with is
/// read by h2 as a bad frame, which fails the call in one of two ways (h2's connection error,
/// or hyper's "operation was canceled" when the request had not reached h2 yet); both say
/// why. Each call is the first of a new client, as when a service starts with the wrong config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_every_first_call_of_a_plaintext_client_is_told_to_set_tls() {
    let (_ca, srv) = TlsServer::with_test_ca().await;
    let mut without_hint = Vec::new();
    const CALLS: usize = 50;
    for _ in 0..CALLS {
        // the breaker is shared by the clients of a process (per target and method): off, so
        // that each call is a first call as in a new process
        let mut conf = RpcClientConf::direct([srv.addr.to_string()]);
        conf.middlewares.breaker = false;
        let mut c = GreeterClient::new(Client::new(conf).await.unwrap());
        let s = c
            .say_hello(HelloRequest { name: "x".into() })
            .await
            .unwrap_err();
        assert_eq!(s.code(), Code::Unavailable, "{}", chain(&s));
        if !s
            .message()
            .contains("the server may require TLS (set Tls in the client config)")
        {
            without_hint.push(chain(&s));
        }
    }
    println!(
        "plaintext zrpc client to TLS server: {} of {CALLS} first calls without the hint: {without_hint:#?}",
        without_hint.len()
    );
    assert!(without_hint.is_empty(), "{without_hint:#?}");
    srv.stop().await;
}

/// What a scoped subscriber writes, for a test on a current-thread runtime (the server's
/// tasks then log on the test's thread).
#[derive(Debug, Clone, Default)]
struct LogBuf(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends `bytes` on a new connection to `addr` and reads until the server closes it: the
/// server logs a failed handshake before it closes.
async fn send_and_read_to_eof(addr: std::net::SocketAddr, bytes: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let _ = sock.read_to_end(&mut answer).await;
    answer
}

/// A plaintext gRPC client's bytes (the HTTP/2 preface and a SETTINGS frame) on a TLS server:
/// its log names the client's address as a likely plaintext client, once however often the
/// client retries; a handshake that fails for another reason keeps its own message.
#[tokio::test]
async fn tls_the_server_log_names_a_plaintext_client_once_per_address() {
    // a global subscriber interested in everything, so that a callsite first hit on another
    // test's thread is not cached as never interesting
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
    let logs = LogBuf::default();
    let writer = logs.clone();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish(),
    );
    let (_ca, srv) = TlsServer::with_test_ca().await;
    let mut plaintext = zrpc_tests::h2raw::PREFACE.to_vec();
    zrpc_tests::h2raw::push_frame(&mut plaintext, zrpc_tests::h2raw::kind::SETTINGS, 0, 0, &[]);
    for _ in 0..3 {
        let answer = send_and_read_to_eof(srv.addr, &plaintext).await;
        // a TLS alert record
        assert_eq!(answer.first(), Some(&0x15), "{answer:02x?}");
    }
    // a TLS record, but application data before any handshake
    send_and_read_to_eof(srv.addr, &[0x17, 0x03, 0x03, 0x00, 0x01, 0x00]).await;
    srv.stop().await;

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    println!("{text}");
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("TLS handshake with"))
        .collect();
    assert_eq!(failed.len(), 2, "{text}");
    assert!(
        failed[0].contains(" WARN ")
            && failed[0].contains("TLS handshake with 127.0.0.1:")
            && failed[0].contains("likely a plaintext client")
            && failed[0].contains("it must connect with TLS"),
        "{}",
        failed[0]
    );
    assert!(!failed[1].contains("plaintext"), "{}", failed[1]);
}
