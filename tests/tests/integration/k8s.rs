//! The `k8s://` resolver against the fake Kubernetes API of `zrpc_tests::k8s` (list + watch of
//! EndpointSlices over real HTTP on loopback), then end to end with real zrpc servers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use zrpc_client::Client;
use zrpc_client::conf::RpcClientConf;
use zrpc_client::resolver::k8s::{self, KubeApi};
use zrpc_client::resolver::{EndpointUpdates, K8sPort, Resolution, Target};
use zrpc_tests::greeter::{TestGreeter, start_server, test_conf};
use zrpc_tests::k8s::{Ep, FakeKubeApi};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

const NS: &str = "prod";
const SVC: &str = "user-rpc";
const WAIT: Duration = Duration::from_secs(5);

fn grpc(port: u16) -> [(&'static str, u16); 1] {
    [("grpc", port)]
}

/// Puts slice `name` of the test service with one port named `grpc`.
fn put(api: &FakeKubeApi, name: &str, eps: &[Ep], port: u16) {
    api.put_slice(NS, SVC, name, eps, &grpc(port));
}

fn resolve(api: &FakeKubeApi, token: Option<&str>, port: Option<K8sPort>) -> Resolution {
    let mut kube = KubeApi::new(&api.url()).unwrap();
    if let Some(t) = token {
        kube = kube.with_token(t);
    }
    k8s::resolve_with(kube, NS, SVC, port).unwrap()
}

/// Waits until the published set equals `want` (any order).
async fn wait_for(rx: &mut EndpointUpdates, want: &[&str]) {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if rx.borrow_and_update().as_deref() == Some(&want) {
            return;
        }
        if tokio::time::timeout_at(deadline, rx.changed())
            .await
            .is_err()
        {
            panic!(
                "resolver did not publish {want:?} within {WAIT:?}; last: {:?}",
                rx.borrow().as_deref()
            );
        }
    }
}

/// Waits until `cond` holds (polling every 10 ms), panicking with `what` after [`WAIT`].
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn k8s_merges_slices_and_follows_the_watch() {
    let api = FakeKubeApi::start(None).await;
    put(
        &api,
        "user-rpc-a",
        &[Ep::ready("10.0.0.1"), Ep::ready("10.0.0.2")],
        8080,
    );
    put(&api, "user-rpc-b", &[Ep::ready("10.0.1.1")], 8080);
    // another service in the namespace and the same service name in another namespace
    api.put_slice(
        NS,
        "order-rpc",
        "order-rpc-a",
        &[Ep::ready("10.9.9.9")],
        &grpc(8080),
    );
    api.put_slice(
        "staging",
        SVC,
        "user-rpc-x",
        &[Ep::ready("10.8.8.8")],
        &grpc(8080),
    );

    let r = resolve(&api, None, Some(K8sPort::Name("grpc".into())));
    let mut rx = r.updates();
    wait_for(
        &mut rx,
        &["10.0.0.1:8080", "10.0.0.2:8080", "10.0.1.1:8080"],
    )
    .await;
    assert_eq!(api.lists(), 1);
    let list = &api.requests()[0];
    assert_eq!(list.selector, "kubernetes.io/service-name=user-rpc");

    // an update of one slice leaves the other's endpoints (go-zero replaces the whole set)
    put(&api, "user-rpc-b", &[Ep::ready("10.0.1.2")], 8080);
    wait_for(
        &mut rx,
        &["10.0.0.1:8080", "10.0.0.2:8080", "10.0.1.2:8080"],
    )
    .await;
    // a new slice (the service grew past 100 endpoints per slice), with its own container port
    put(&api, "user-rpc-c", &[Ep::ready("10.0.2.1")], 9090);
    wait_for(
        &mut rx,
        &[
            "10.0.0.1:8080",
            "10.0.0.2:8080",
            "10.0.1.2:8080",
            "10.0.2.1:9090",
        ],
    )
    .await;
    // a deleted slice takes only its endpoints
    assert!(api.delete_slice(NS, "user-rpc-a"));
    wait_for(&mut rx, &["10.0.1.2:8080", "10.0.2.1:9090"]).await;
    // other services never leaked in, and it all came over one list and one watch
    api.put_slice(
        NS,
        "order-rpc",
        "order-rpc-a",
        &[Ep::ready("10.9.9.8")],
        &grpc(8080),
    );
    // a change of this service after it: once the resolver publishes it, it has read past the
    // other service's change (one watch, events in order)
    put(&api, "user-rpc-d", &[Ep::ready("10.0.3.1")], 8080);
    wait_for(
        &mut rx,
        &["10.0.1.2:8080", "10.0.2.1:9090", "10.0.3.1:8080"],
    )
    .await;
    assert_eq!((api.lists(), api.watches().len()), (1, 1));
    assert_eq!(r.status().problem(), None);
}

#[tokio::test]
async fn k8s_uses_only_ready_endpoints_as_readiness_flips() {
    let api = FakeKubeApi::start(None).await;
    put(
        &api,
        "s1",
        &[
            Ep::ready("10.0.0.1"),
            Ep::not_ready("10.0.0.2"),
            Ep::terminating("10.0.0.3"),
        ],
        8080,
    );
    // the split of each event line over two chunks must not matter
    api.set_split_chunks(true);
    let r = resolve(&api, None, Some(K8sPort::Number(8080)));
    let mut rx = r.updates();
    wait_for(&mut rx, &["10.0.0.1:8080"]).await;
    // 10.0.0.2 passes its readiness probe
    put(
        &api,
        "s1",
        &[
            Ep::ready("10.0.0.1"),
            Ep::ready("10.0.0.2"),
            Ep::terminating("10.0.0.3"),
        ],
        8080,
    );
    wait_for(&mut rx, &["10.0.0.1:8080", "10.0.0.2:8080"]).await;
    // 10.0.0.1 starts terminating (rolling update), 10.0.0.3 is gone
    put(
        &api,
        "s1",
        &[Ep::terminating("10.0.0.1"), Ep::ready("10.0.0.2")],
        8080,
    );
    wait_for(&mut rx, &["10.0.0.2:8080"]).await;
    // nothing ready: an empty set is published (the truth, read successfully) and the status says why
    put(&api, "s1", &[Ep::not_ready("10.0.0.2")], 8080);
    wait_for(&mut rx, &[]).await;
    let problem = r.status().problem().unwrap();
    assert!(
        problem.contains("k8s://prod/user-rpc:8080 has no ready endpoint"),
        "{problem}"
    );
    put(&api, "s1", &[Ep::ready("10.0.0.2")], 8080);
    wait_for(&mut rx, &["10.0.0.2:8080"]).await;
    assert_eq!(r.status().problem(), None);
    assert_eq!(api.lists(), 1);
}

#[tokio::test]
async fn k8s_resumes_the_watch_from_the_last_version_and_bookmark() {
    let api = FakeKubeApi::start(None).await;
    put(&api, "s1", &[Ep::ready("10.0.0.1")], 8080);
    let r = resolve(&api, None, None);
    let mut rx = r.updates();
    wait_for(&mut rx, &["10.0.0.1:8080"]).await;
    eventually("the first watch", || api.watches().len() == 1).await;
    let first = api.watches()[0].resource_version.clone().unwrap();
    assert_eq!(
        first,
        api.resource_version().to_string(),
        "the watch starts at the list's version"
    );

    // other objects changed (the version moved on) and the server sent a bookmark
    let bookmark = api.bookmark(50);
    put(
        &api,
        "s1",
        &[Ep::ready("10.0.0.1"), Ep::ready("10.0.0.2")],
        8080,
    );
    wait_for(&mut rx, &["10.0.0.1:8080", "10.0.0.2:8080"]).await;
    let after_event = api.resource_version();
    assert!(after_event > bookmark);
    // the server ends the watch (its timeoutSeconds): resumed from the last event's version, no list
    api.close_watches();
    eventually("the second watch", || api.watches().len() == 2).await;
    assert_eq!(
        api.watches()[1].resource_version,
        Some(after_event.to_string())
    );
    // a bookmark alone moves the resume point: the watch seen above gets it live, before the
    // close that follows it in the server's log (the fake API writes its events in order)
    let bookmark = api.bookmark(7);
    api.close_watches();
    eventually("the third watch", || api.watches().len() == 3).await;
    assert_eq!(
        api.watches()[2].resource_version,
        Some(bookmark.to_string())
    );
    // and events made while no watch ran are not lost
    api.close_watches();
    put(&api, "s2", &[Ep::ready("10.0.1.1")], 8080);
    wait_for(
        &mut rx,
        &["10.0.0.1:8080", "10.0.0.2:8080", "10.0.1.1:8080"],
    )
    .await;
    assert_eq!(
        api.lists(),
        1,
        "no list after the first: {:?}",
        api.requests()
    );
}

#[tokio::test]
async fn k8s_relists_once_on_410_gone() {
    let api = FakeKubeApi::start(None).await;
    put(&api, "s1", &[Ep::ready("10.0.0.1")], 8080);
    let r = resolve(&api, None, None);
    let mut rx = r.updates();
    wait_for(&mut rx, &["10.0.0.1:8080"]).await;
    eventually("the first watch", || api.watches().len() == 1).await;
    // changes while the watch is cut, then the history is compacted: the watch gets an ERROR
    // 410, and only a fresh list can see the changes
    // (set_down ends the live watch with an entry of the fake's log that comes before the puts
    // below, so the watch never sees them)
    api.set_down(true);
    put(&api, "s1", &[Ep::ready("10.0.0.2")], 8080);
    put(&api, "s2", &[Ep::ready("10.0.0.3")], 8080);
    api.compact_and_expire();
    api.set_down(false);
    wait_for(&mut rx, &["10.0.0.2:8080", "10.0.0.3:8080"]).await;
    eventually("the watch after the relist", || {
        api.watches()
            .last()
            .and_then(|w| w.resource_version.clone())
            == Some(api.resource_version().to_string())
    })
    .await;
    assert_eq!(api.lists(), 2, "exactly one relist: {:?}", api.requests());
    // a live watch expired with 410 also relists once
    api.compact_and_expire();
    eventually("the second relist", || api.lists() == 3).await;
    // the resolver watches again from the relist's version, and lists no more
    eventually("the watch after the second relist", || {
        api.watches()
            .last()
            .and_then(|w| w.resource_version.clone())
            == Some(api.resource_version().to_string())
            && api.watches().len() >= 3
    })
    .await;
    assert_eq!(api.lists(), 3, "{:?}", api.requests());
    assert_eq!(
        rx.borrow().as_deref().unwrap(),
        &["10.0.0.2:8080", "10.0.0.3:8080"]
    );
}

/// An API server that answers every watch 410 at once, even from the version its list just
/// gave, is listed again at most about once a second, not in a hot loop (each list can be
/// megabytes), and the last set stays published.
#[tokio::test]
async fn k8s_backs_off_when_every_watch_ends_410_at_once() {
    let api = FakeKubeApi::start(None).await;
    put(&api, "s1", &[Ep::ready("10.0.0.1")], 8080);
    let r = resolve(&api, None, None);
    let mut rx = r.updates();
    wait_for(&mut rx, &["10.0.0.1:8080"]).await;
    api.set_always_expired(true);
    // the live watch ends; every one after it gets the 410
    api.close_watches();
    let before = api.lists();
    let watches_before = api.watches().len();
    let started = Instant::now();
    // three more lists: it still lists, and how long they took tells the pace
    zrpc_tests::wait::until("three lists after the watches turned 410", || {
        api.lists() >= before + 3
    })
    .await;
    let lists = api.lists() - before;
    let watches = api.watches().len() - watches_before;
    let took = started.elapsed().as_secs_f64();
    assert!(
        lists as f64 <= took + 2.0,
        "{lists} lists in {took:.1} s (at most one a second and the one in flight)"
    );
    assert!(watches <= lists + 1, "{watches} watches for {lists} lists");
    assert_eq!(rx.borrow().as_deref().unwrap(), &["10.0.0.1:8080"]);
}

#[tokio::test]
async fn k8s_keeps_the_last_set_while_the_api_is_down() {
    let api = FakeKubeApi::start(None).await;
    put(
        &api,
        "s1",
        &[Ep::ready("10.0.0.1"), Ep::ready("10.0.0.2")],
        8080,
    );
    let r = resolve(&api, None, None);
    let mut rx = r.updates();
    wait_for(&mut rx, &["10.0.0.1:8080", "10.0.0.2:8080"]).await;
    eventually("the first watch", || api.watches().len() == 1).await;
    api.set_down(true);
    let problem = tokio::time::timeout(WAIT, r.status().failed())
        .await
        .unwrap();
    assert!(
        problem.contains(&format!("Kubernetes API {}", api.url()))
            && problem.contains("watch failed"),
        "{problem}"
    );
    // several retries fail; the set is never emptied. An absence check: while the API is down
    // the fake records no request, so the test waits a bounded 2.5 s (the resolver's back-off
    // retries a few times in it) and then checks that no update came.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        !rx.has_changed().unwrap(),
        "an update while the API was down: {:?}",
        rx.borrow().as_deref()
    );
    assert_eq!(
        rx.borrow().as_deref().unwrap(),
        &["10.0.0.1:8080", "10.0.0.2:8080"]
    );
    // back: resumed without a list, the problem cleared
    api.set_down(false);
    put(&api, "s1", &[Ep::ready("10.0.0.2")], 8080);
    wait_for(&mut rx, &["10.0.0.2:8080"]).await;
    assert_eq!(r.status().problem(), None);
    assert_eq!(api.lists(), 1, "{:?}", api.requests());
}

#[tokio::test]
async fn k8s_sends_the_token_and_names_401_and_403() {
    let api = FakeKubeApi::start(Some("good-token")).await;
    put(&api, "s1", &[Ep::ready("10.0.0.1")], 8080);
    // a wrong token: no endpoints, a status naming the API and the 401
    let bad = resolve(&api, Some("bad-token"), None);
    let problem = tokio::time::timeout(WAIT, bad.status().failed())
        .await
        .unwrap();
    assert!(
        problem.contains("HTTP 401") && problem.contains(&api.url()),
        "{problem}"
    );
    assert!(bad.updates().borrow().is_none());
    drop(bad);
    // the right one (read from a file, as a pod's projected token), then a rotation
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "good-token\n").unwrap();
    let kube = KubeApi::new(&api.url())
        .unwrap()
        .with_token_file(&token_file);
    let r = k8s::resolve_with(kube, NS, SVC, None).unwrap();
    let mut rx = r.updates();
    wait_for(&mut rx, &["10.0.0.1:8080"]).await;
    assert!(
        api.requests()
            .iter()
            .any(|q| q.authorization.as_deref() == Some("Bearer good-token") && q.status == 200)
    );
    std::fs::write(&token_file, "rotated-token\n").unwrap();
    api.set_token(Some("rotated-token"));
    api.close_watches();
    put(&api, "s1", &[Ep::ready("10.0.0.5")], 8080);
    wait_for(&mut rx, &["10.0.0.5:8080"]).await;
    // RBAC missing: 403 with a hint, the last set kept
    api.set_forbidden(true);
    api.close_watches();
    let problem = tokio::time::timeout(WAIT, r.status().failed())
        .await
        .unwrap();
    assert!(
        problem.contains("HTTP 403") && problem.contains("rbac-example.yaml"),
        "{problem}"
    );
    assert_eq!(rx.borrow().as_deref().unwrap(), &["10.0.0.5:8080"]);
}

#[tokio::test]
async fn k8s_port_problems_are_reported() {
    let api = FakeKubeApi::start(None).await;
    api.put_slice(
        NS,
        SVC,
        "s1",
        &[Ep::ready("10.0.0.1")],
        &[("grpc", 8080), ("metrics", 9101)],
    );
    let r = resolve(&api, None, None);
    let problem = tokio::time::timeout(WAIT, r.status().failed())
        .await
        .unwrap();
    assert!(
        problem.contains("several ports (grpc=8080, metrics=9101)"),
        "{problem}"
    );
    let r = resolve(&api, None, Some(K8sPort::Name("http".into())));
    let problem = tokio::time::timeout(WAIT, r.status().failed())
        .await
        .unwrap();
    assert!(problem.contains("no port named \"http\""), "{problem}");
    // names that would change the request path are refused before any request
    let kube = KubeApi::new(&api.url()).unwrap();
    let e = k8s::resolve_with(kube, NS, "svc&watch=1", None).unwrap_err();
    assert!(e.to_string().contains("must be Kubernetes names"), "{e}");
    // An absence check: resolve_with refused the name without starting anything; a bounded
    // 100 ms gives a request it would wrongly have sent the time to reach the fake.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        api.requests()
            .iter()
            .all(|q| q.selector.ends_with("=user-rpc")),
        "{:?}",
        api.requests()
    );
}

#[tokio::test]
async fn k8s_target_without_api_config_is_a_clear_error() {
    let t: Target = "k8s://prod/user-rpc:8080".parse().unwrap();
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        || std::env::var_os("KUBECONFIG").is_some()
    {
        eprintln!("skipped: a Kubernetes config is present");
        return;
    }
    let home_config =
        std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".kube/config"));
    if home_config.as_ref().is_some_and(|p| p.exists()) {
        eprintln!("skipped: ~/.kube/config exists");
        return;
    }
    let e = Client::new(RpcClientConf::target("k8s://prod/user-rpc:8080"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("k8s://prod/user-rpc:8080")
            && e.contains("no Kubernetes API config")
            && e.contains("KUBERNETES_SERVICE_HOST is not set"),
        "{e}"
    );
    assert_eq!(t.to_string(), "k8s://prod/user-rpc:8080");
}

/// Real zrpc servers as the pods of a Service: calls go to ready pods only, and a pod turning
/// not-ready (then its slice going away) fails no call.
#[tokio::test]
async fn k8s_client_calls_only_ready_pods_with_no_failure() {
    let a = start_server(test_conf("k8s-a").with_cpu_threshold(0), TestGreeter::new()).await;
    let b = start_server(test_conf("k8s-b").with_cpu_threshold(0), TestGreeter::new()).await;
    let api = FakeKubeApi::start(Some("t")).await;
    // one slice per pod: same IP, its own container port named grpc
    put(&api, "s-a", &[Ep::ready("127.0.0.1")], a.addr.port());
    put(&api, "s-b", &[Ep::not_ready("127.0.0.1")], b.addr.port());
    let resolution = resolve(&api, Some("t"), Some(K8sPort::Name("grpc".into())));
    let client = Client::with_resolution(
        RpcClientConf::default().with_timeout(Duration::from_secs(5)),
        "k8s://prod/user-rpc:grpc",
        resolution,
    )
    .await
    .unwrap();
    let failures = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    // calls completed by each worker
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4 {
        let mut greeter = GreeterClient::new(client.clone());
        let (failures, calls, stop, done) =
            (failures.clone(), calls.clone(), stop.clone(), done.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r = greeter
                    .say_hello(HelloRequest {
                        name: format!("w{w}"),
                    })
                    .await;
                calls.fetch_add(1, Ordering::Relaxed);
                done[w].fetch_add(1, Ordering::Relaxed);
                if let Err(s) = r {
                    eprintln!("call failed: {s}");
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    eventually("calls to a", || a.greeter.finished() >= 50).await;
    assert_eq!(b.greeter.started(), 0, "a not-ready pod got calls");
    // b becomes ready: it gets calls
    put(&api, "s-b", &[Ep::ready("127.0.0.1")], b.addr.port());
    eventually("calls to b", || b.greeter.finished() >= 50).await;
    // a terminates: marked terminating, then its slice goes; no call fails and a gets no more
    put(&api, "s-a", &[Ep::terminating("127.0.0.1")], a.addr.port());
    let a_addr = a.addr.to_string();
    eventually("the client to drop the terminating pod", || {
        client.endpoints().iter().all(|e| e.addr != a_addr)
    })
    .await;
    // A call picked just before the client dropped a may still be on its way there: once every
    // worker has completed two more calls, each worker's current call was picked after the drop.
    let seen: Vec<u64> = done.iter().map(|d| d.load(Ordering::Relaxed)).collect();
    eventually("two more calls of every worker", || {
        done.iter()
            .zip(&seen)
            .all(|(d, s)| d.load(Ordering::Relaxed) >= s + 2)
    })
    .await;
    let a_after = a.greeter.started();
    api.delete_slice(NS, "s-a");
    let b_before = b.greeter.finished();
    eventually("more calls to b", || b.greeter.finished() >= b_before + 100).await;
    assert_eq!(
        a.greeter.started(),
        a_after,
        "a terminating pod kept getting calls"
    );
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    println!(
        "k8s end to end: {} calls, {} failed, a={} b={}",
        calls.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed),
        a.greeter.finished(),
        b.greeter.finished()
    );
    assert_eq!(failures.load(Ordering::Relaxed), 0);
}

/// Standard base64 (the kubeconfig's `*-data` fields); written here to keep a dependency out of
/// the test crate for ten lines.
fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The https path a pod uses: TLS with the cluster CA, here from a kubeconfig (inline CA data
/// and a token); a kubeconfig with another CA fails the handshake, named, with no endpoint.
#[tokio::test]
async fn k8s_https_with_the_ca_of_a_kubeconfig() {
    let ca = zrpc_tests::certs::TestCa::new("kube-ca");
    let cert = ca.issue("kube-apiserver", &["IP:127.0.0.1", "DNS:localhost"]);
    let api = FakeKubeApi::start_tls(Some("kc-token"), &cert).await;
    put(&api, "s1", &[Ep::ready("10.0.0.1")], 8080);
    let dir = tempfile::tempdir().unwrap();
    let ca_pem = std::fs::read(&ca.files.cert).unwrap();
    let kubeconfig = |ca_line: String| {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\n\
             contexts:\n- name: test\n  context: {{cluster: fake, user: dev, namespace: {NS}}}\n\
             clusters:\n- name: fake\n  cluster:\n    server: {}\n    {ca_line}\n\
             users:\n- name: dev\n  user: {{token: kc-token}}\n",
            api.url()
        )
    };
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        kubeconfig(format!("certificate-authority-data: {}", base64(&ca_pem))),
    )
    .unwrap();
    let kube = KubeApi::from_kubeconfig(Some(&good)).unwrap();
    assert!(kube.server().starts_with("https://127.0.0.1:"));
    let r = k8s::resolve_with(kube, NS, SVC, None).unwrap();
    let mut rx = r.updates();
    wait_for(&mut rx, &["10.0.0.1:8080"]).await;
    put(&api, "s1", &[Ep::ready("10.0.0.2")], 8080);
    wait_for(&mut rx, &["10.0.0.2:8080"]).await;

    let other = zrpc_tests::certs::TestCa::new("other-ca");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        kubeconfig(format!(
            "certificate-authority: {}",
            other.files.cert.display()
        )),
    )
    .unwrap();
    let r =
        k8s::resolve_with(KubeApi::from_kubeconfig(Some(&bad)).unwrap(), NS, SVC, None).unwrap();
    let problem = tokio::time::timeout(WAIT, r.status().failed())
        .await
        .unwrap();
    assert!(
        problem.contains("TLS handshake") && problem.contains(&api.url()),
        "{problem}"
    );
    assert!(r.updates().borrow().is_none());
    // a plain-HTTP client against the TLS server is refused too, never a panic or a hang
    let plain = KubeApi::new(&api.url().replace("https", "http")).unwrap();
    let r = k8s::resolve_with(plain, NS, SVC, None).unwrap();
    tokio::time::timeout(WAIT, r.status().failed())
        .await
        .unwrap();
}
