//! etcd registration: one key per server in go-zero's layout, healed after etcd outages,
//! external deletes and revokes; deregistered on stop. Every test starts its own etcd
//! (see `zrpc_tests::etcd`).

use std::time::{Duration, Instant};

use etcd_client::Client;
use zrpc_core::conf::EtcdConf;
use zrpc_server::registry::{Publisher, RegistrationState};

/// go-zero's lease time-to-live (`discov.TimeToLive`), which zrpc's registrations use.
const TIME_TO_LIVE: i64 = 10;
use zrpc_tests::etcd::{EtcdServer, TcpProxy, keys_under, unique_key};
use zrpc_tests::wait::within;

/// Waits until the publisher reports `Registered`; returns (key, lease, time taken).
async fn registered(p: &Publisher, limit: Duration) -> (String, i64, Duration) {
    let start = Instant::now();
    let mut state = p.state();
    let r = tokio::time::timeout(
        limit,
        state.wait_for(|s| matches!(s, RegistrationState::Registered { .. })),
    )
    .await;
    if let Ok(Ok(s)) = r
        && let RegistrationState::Registered { key, lease } = &*s
    {
        return (key.clone(), *lease, start.elapsed());
    }
    panic!("not registered within {limit:?}: {:?}", *p.state().borrow());
}

async fn not_registered(p: &Publisher, limit: Duration) {
    let mut state = p.state();
    tokio::time::timeout(
        limit,
        state.wait_for(|s| !matches!(s, RegistrationState::Registered { .. })),
    )
    .await
    .expect("publisher noticed the outage")
    .expect("state channel open");
}

/// Our keys (value == `value`) under `prefix/`.
async fn ours(c: &mut Client, prefix: &str, value: &str) -> Vec<String> {
    keys_under(c, prefix)
        .await
        .into_iter()
        .filter(|(_, v)| v == value)
        .map(|(k, _)| k)
        .collect()
}

fn conf(etcd: &EtcdServer, key: &str) -> EtcdConf {
    EtcdConf::new(etcd.endpoints(), key)
}

#[tokio::test]
async fn registers_one_key_named_by_lease_with_ttl_at_most_10s() {
    let etcd = EtcdServer::start().await;
    let key = unique_key("one-key");
    let value = "127.0.0.1:45001".to_owned();
    let p = Publisher::spawn(conf(&etcd, &key), value.clone());
    let (full, lease, _) = registered(&p, Duration::from_secs(5)).await;
    assert_eq!(
        full,
        format!("{key}/{lease}"),
        "go-zero layout Key/<lease decimal>"
    );
    let mut c = etcd.client().await;
    assert_eq!(keys_under(&mut c, &key).await, vec![(full.clone(), value)]);
    let ttl = c.lease_time_to_live(lease, None).await.expect("ttl");
    assert!(ttl.granted_ttl() <= 10 && ttl.ttl() > 0, "{ttl:?}");
    assert_eq!(ttl.granted_ttl(), TIME_TO_LIVE);
    p.stop().await;
    assert!(keys_under(&mut c, &key).await.is_empty(), "stop revokes");
}

#[tokio::test]
async fn id_replaces_the_lease_in_the_key() {
    let etcd = EtcdServer::start().await;
    let key = unique_key("with-id");
    let mut cf = conf(&etcd, &key);
    cf.id = 42;
    let p = Publisher::spawn(cf, "127.0.0.1:45002".to_owned());
    let (full, _, _) = registered(&p, Duration::from_secs(5)).await;
    assert_eq!(full, format!("{key}/42"));
    let mut c = etcd.client().await;
    assert_eq!(
        keys_under(&mut c, &key).await,
        vec![(full, "127.0.0.1:45002".to_owned())]
    );
    p.stop().await;
    assert!(keys_under(&mut c, &key).await.is_empty());
}

#[tokio::test]
async fn deleted_key_is_back_within_1s_and_foreign_key_untouched() {
    let etcd = EtcdServer::start().await;
    let key = unique_key("delete");
    let value = "127.0.0.1:45003".to_owned();
    let mut c = etcd.client().await;
    // Another process's registration in go-zero's layout.
    let foreign = (
        format!("{key}/7587880491712123456"),
        "127.0.0.1:9".to_owned(),
    );
    c.put(foreign.0.as_str(), foreign.1.as_str(), None)
        .await
        .expect("put foreign");
    let p = Publisher::spawn(conf(&etcd, &key), value.clone());
    let (full, lease, _) = registered(&p, Duration::from_secs(5)).await;
    for _ in 0..3 {
        c.delete(full.as_str(), None).await.expect("delete");
        let took = within(Duration::from_secs(1), || {
            let mut c = c.clone();
            let full = full.clone();
            let value = value.clone();
            async move { ours(&mut c, &key_prefix(&full), &value).await == vec![full] }
        })
        .await
        .expect("key back within 1 s");
        println!("deleted key restored after {took:?}");
    }
    assert_eq!(p.current_lease(), Some(lease), "same lease after a delete");
    assert!(keys_under(&mut c, &key).await.contains(&foreign));
    p.stop().await;
    assert_eq!(
        keys_under(&mut c, &key).await,
        vec![foreign],
        "foreign key untouched"
    );
}

fn key_prefix(full: &str) -> String {
    full.rsplit_once('/')
        .map(|(p, _)| p.to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn revoked_lease_is_re_registered_within_2s() {
    let etcd = EtcdServer::start().await;
    let key = unique_key("revoke");
    let value = "127.0.0.1:45004".to_owned();
    let p = Publisher::spawn(conf(&etcd, &key), value.clone());
    let (_, lease, _) = registered(&p, Duration::from_secs(5)).await;
    let mut c = etcd.client().await;
    c.lease_revoke(lease).await.expect("revoke");
    let t0 = Instant::now();
    let (full, new_lease) = loop {
        if let Some(l) = p.current_lease().filter(|l| *l != lease) {
            break (p.current_key().unwrap_or_default(), l);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "not re-registered in 2 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    println!("re-registered under a new lease after {:?}", t0.elapsed());
    assert_eq!(full, format!("{key}/{new_lease}"));
    assert_eq!(ours(&mut c, &key, &value).await, vec![full]);
    p.stop().await;
}

#[tokio::test]
async fn ten_etcd_kill_restart_cycles_leave_exactly_one_key() {
    let Some(mut etcd) = EtcdServer::start_exclusive(
        "ten_etcd_kill_restart_cycles_leave_exactly_one_key",
        "kills and restarts etcd",
    )
    .await
    else {
        return;
    };
    let key = unique_key("kill-restart");
    let value = "127.0.0.1:45005".to_owned();
    let mut c = etcd.client().await;
    let foreign = (format!("{key}/1234567890"), "127.0.0.1:10".to_owned());
    c.put(foreign.0.as_str(), foreign.1.as_str(), None)
        .await
        .expect("put foreign");
    let p = Publisher::spawn(conf(&etcd, &key), value.clone());
    registered(&p, Duration::from_secs(5)).await;
    let mut figures = Vec::new();
    for cycle in 0..10 {
        etcd.kill();
        not_registered(&p, Duration::from_secs(5)).await;
        // etcd stays down a little after the publisher saw it go (an outage of some length)
        tokio::time::sleep(Duration::from_millis(200)).await;
        let ready = etcd.restart().await;
        let (full, _, _) = registered(&p, Duration::from_secs(2)).await;
        let took = ready.elapsed();
        figures.push(took);
        let mut c = etcd.client().await;
        assert_eq!(
            ours(&mut c, &key, &value).await,
            vec![full],
            "cycle {cycle}"
        );
        assert!(took <= Duration::from_secs(2), "cycle {cycle}: {took:?}");
    }
    figures.sort();
    println!(
        "etcd ready -> key restored over 10 kill/restart cycles: min {:?} median {:?} max {:?}",
        figures[0],
        (figures[4] + figures[5]) / 2,
        figures[9]
    );
    let mut c = etcd.client().await;
    assert!(keys_under(&mut c, &key).await.contains(&foreign));
    assert_eq!(ours(&mut c, &key, &value).await.len(), 1);
    p.stop().await;
    assert_eq!(keys_under(&mut c, &key).await, vec![foreign]);
}

#[tokio::test]
async fn etcd_down_longer_than_ttl_key_back_within_2s() {
    let Some(mut etcd) = EtcdServer::start_exclusive(
        "etcd_down_longer_than_ttl_key_back_within_2s",
        "kills and restarts etcd",
    )
    .await
    else {
        return;
    };
    let key = unique_key("long-outage");
    let value = "127.0.0.1:45006".to_owned();
    let p = Publisher::spawn(conf(&etcd, &key), value.clone());
    let (_, lease, _) = registered(&p, Duration::from_secs(5)).await;
    etcd.kill();
    // The clock itself: etcd stays down past the lease's TTL, so the lease has expired.
    tokio::time::sleep(Duration::from_secs(TIME_TO_LIVE as u64 + 1)).await;
    let ready = etcd.restart().await;
    let (full, new_lease, _) = registered(&p, Duration::from_secs(2)).await;
    println!(
        "after an 11 s etcd outage: key back {:?} after etcd ready (lease {}: etcd restores leases on restart)",
        ready.elapsed(),
        if new_lease == lease { "kept" } else { "new" }
    );
    let mut c = etcd.client().await;
    assert_eq!(ours(&mut c, &key, &value).await, vec![full]);
    p.stop().await;
}

#[tokio::test]
async fn partition_longer_than_ttl_gets_new_lease_never_two_keys() {
    let etcd = EtcdServer::start().await;
    let proxy = TcpProxy::start(etcd.endpoint()).await;
    let key = unique_key("partition");
    let value = "127.0.0.1:45007".to_owned();
    let p = Publisher::spawn(
        EtcdConf::new([proxy.endpoint()], key.as_str()),
        value.clone(),
    );
    let (_, lease, _) = registered(&p, Duration::from_secs(5)).await;
    let mut c = etcd.client().await;
    proxy.cut();
    // etcd keeps running: the lease expires there and takes the key with it.
    let gone = within(Duration::from_secs(TIME_TO_LIVE as u64 + 3), || {
        let mut c = c.clone();
        let key = key.clone();
        async move { keys_under(&mut c, &key).await.is_empty() }
    })
    .await
    .expect("key expired with its lease during the partition");
    println!("partition: key expired {gone:?} after the cut");
    proxy.heal();
    let healed = Instant::now();
    // Never two keys while the publisher re-registers.
    let (full, new_lease) = loop {
        let keys = ours(&mut c, &key, &value).await;
        assert!(keys.len() <= 1, "two keys alive: {keys:?}");
        if let Some(l) = p.current_lease().filter(|l| *l != lease) {
            break (p.current_key().unwrap_or_default(), l);
        }
        assert!(
            healed.elapsed() < Duration::from_secs(3),
            "not re-registered"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!(
        "partition healed: new lease registered after {:?}",
        healed.elapsed()
    );
    assert_eq!(full, format!("{key}/{new_lease}"));
    assert_eq!(ours(&mut c, &key, &value).await, vec![full]);
    p.stop().await;
    assert!(keys_under(&mut c, &key).await.is_empty());
}

#[tokio::test]
async fn etcd_down_at_start_registers_when_it_comes_up() {
    let Some(mut etcd) = EtcdServer::start_exclusive(
        "etcd_down_at_start_registers_when_it_comes_up",
        "kills and restarts etcd",
    )
    .await
    else {
        return;
    };
    etcd.kill();
    let key = unique_key("down-at-start");
    let value = "127.0.0.1:45008".to_owned();
    let p = Publisher::spawn(conf(&etcd, &key), value.clone());
    // An absence check: with etcd down it must not claim to be registered; a bounded 1.5 s
    // covers its first attempt and a retry (1 s).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(*p.state().borrow(), RegistrationState::NotRegistered);
    let ready = etcd.restart().await;
    let (full, _, _) = registered(&p, Duration::from_secs(2)).await;
    println!(
        "etcd down at start: registered {:?} after etcd ready",
        ready.elapsed()
    );
    let mut c = etcd.client().await;
    assert_eq!(ours(&mut c, &key, &value).await, vec![full]);
    p.stop().await;
    assert!(keys_under(&mut c, &key).await.is_empty());
}

#[tokio::test]
async fn stop_with_etcd_down_is_bounded() {
    let Some(mut etcd) =
        EtcdServer::start_exclusive("stop_with_etcd_down_is_bounded", "kills and restarts etcd")
            .await
    else {
        return;
    };
    let key = unique_key("stop-down");
    let p = Publisher::spawn(conf(&etcd, &key), "127.0.0.1:45009".to_owned());
    registered(&p, Duration::from_secs(5)).await;
    etcd.kill();
    let t0 = Instant::now();
    p.stop().await;
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}

// ---- server level: the lifecycle calls the publisher ----

mod server_level {
    use std::pin::Pin;
    use std::time::{Duration, Instant};

    use tokio::net::TcpListener;
    use tonic::{Request, Response, Status};
    use zrpc_server::conf::ShutdownConf;
    use zrpc_server::{Phase, RpcServerConf, Server, ServerHandle};
    use zrpc_tests::etcd::{EtcdServer, keys_under, unique_key};
    use zrpc_tests::pb::greeter_client::GreeterClient;
    use zrpc_tests::pb::greeter_server::{Greeter, GreeterServer};
    use zrpc_tests::pb::{HelloReply, HelloRequest, HelloStreamRequest};
    use zrpc_tests::wait;

    use super::within;

    /// Replies "hello <name>"; a name "sleep:<ms>" (or "sleep:<ms>/<tag>") waits that long
    /// first, and is listed in [`STARTED`] as it starts.
    #[derive(Debug, Clone, Default)]
    struct Hello;

    /// The names of the calls whose handler started, for a test to see its call arrive.
    static STARTED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

    fn started(name: &str) -> bool {
        STARTED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|n| n == name)
    }

    #[tonic::async_trait]
    impl Greeter for Hello {
        async fn say_hello(
            &self,
            req: Request<HelloRequest>,
        ) -> Result<Response<HelloReply>, Status> {
            let name = req.into_inner().name;
            STARTED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(name.clone());
            let ms = name
                .strip_prefix("sleep:")
                .and_then(|v| v.split('/').next()?.parse().ok());
            if let Some(ms) = ms {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Ok(Response::new(HelloReply {
                message: format!("hello {name}"),
            }))
        }

        type SayHelloStreamStream =
            Pin<Box<dyn futures_util::Stream<Item = Result<HelloReply, Status>> + Send>>;

        async fn say_hello_stream(
            &self,
            _req: Request<HelloStreamRequest>,
        ) -> Result<Response<Self::SayHelloStreamStream>, Status> {
            Err(Status::unimplemented("not used here"))
        }
    }

    /// Starts a server on 127.0.0.1:0 registered under `key`; returns its handle and address.
    async fn serve(etcd: &EtcdServer, key: &str, shutdown: ShutdownConf) -> (ServerHandle, String) {
        let conf = RpcServerConf::new("registration.rpc", "127.0.0.1:0")
            .with_etcd(zrpc_core::conf::EtcdConf::new(etcd.endpoints(), key))
            // calls may outlive a WrapUpTime of 2 s (the default timeout)
            .with_timeout(Duration::from_secs(10))
            .with_shutdown(shutdown);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let server = Server::new(conf)
            .expect("server")
            .add_service(GreeterServer::new(Hello));
        let handle = server.handle();
        tokio::spawn(server.serve_with_listener(listener, std::future::pending()));
        handle.serving().await.expect("serving");
        (handle, addr)
    }

    async fn greeter(addr: &str) -> Result<GreeterClient<tonic::transport::Channel>, String> {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(Duration::from_millis(500))
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        Ok(GreeterClient::new(ch))
    }

    async fn hello(addr: &str, name: &str) -> Result<String, String> {
        let mut g = greeter(addr).await?;
        g.say_hello(HelloRequest {
            name: name.to_owned(),
        })
        .await
        .map(|r| r.into_inner().message)
        .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn server_registers_one_reachable_key() {
        let etcd = EtcdServer::start().await;
        let key = unique_key("server");
        let (handle, addr) = serve(&etcd, &key, ShutdownConf::default()).await;
        let mut c = etcd.client().await;
        within(Duration::from_secs(3), || {
            let mut c = c.clone();
            let key = key.clone();
            async move { keys_under(&mut c, &key).await.len() == 1 }
        })
        .await
        .expect("registered");
        let kvs = keys_under(&mut c, &key).await;
        let (full, value) = &kvs[0];
        assert_eq!(value, &addr, "value is the bound host:port");
        let lease: i64 = full
            .rsplit('/')
            .next()
            .and_then(|s| s.parse().ok())
            .expect("Key/<lease decimal>");
        let ttl = c.lease_time_to_live(lease, None).await.expect("ttl");
        assert!(ttl.granted_ttl() <= 10 && ttl.ttl() > 0);
        // A gRPC client reaches the server at the registered value.
        assert_eq!(hello(value, "etcd").await.as_deref(), Ok("hello etcd"));
        handle.shutdown();
        handle.stopped().await;
        assert!(keys_under(&mut c, &key).await.is_empty());
    }

    #[tokio::test]
    async fn graceful_stop_deregisters_before_closing_and_drains() {
        let etcd = EtcdServer::start().await;
        let key = unique_key("graceful");
        // WrapUpTime 2 s: the key's removal (a revoke, committed), a new connection and a call
        // fit in it on a loaded machine
        let shutdown = ShutdownConf::new(Duration::from_secs(2), Duration::from_secs(5));
        let (handle, addr) = serve(&etcd, &key, shutdown).await;
        let c = etcd.client().await;
        within(Duration::from_secs(3), || {
            let mut c = c.clone();
            let key = key.clone();
            async move { keys_under(&mut c, &key).await.len() == 1 }
        })
        .await
        .expect("registered");
        // An in-flight call that outlives WrapUpTime.
        let a = addr.clone();
        let name = format!("sleep:3000/{key}");
        let n = name.clone();
        let inflight = tokio::spawn(async move { hello(&a, &n).await });
        wait::until("the in-flight call in its handler", || started(&name)).await;
        let t0 = Instant::now();
        handle.shutdown();
        let key_gone = within(Duration::from_secs(3), || {
            let mut c = c.clone();
            let key = key.clone();
            async move { keys_under(&mut c, &key).await.is_empty() }
        })
        .await
        .expect("key removed at shutdown");
        // The key is gone while the server still accepts new calls (WrapUpTime).
        let accepted = hello(&addr, "late").await;
        let accepted_at = t0.elapsed();
        handle.wait_for(Phase::Draining).await;
        let closed_at = t0.elapsed();
        println!(
            "graceful stop: key gone after {key_gone:?}, new call accepted at {accepted_at:?} ({accepted:?}), listener closed at {closed_at:?}"
        );
        assert_eq!(accepted.as_deref(), Ok("hello late"));
        assert!(key_gone < closed_at);
        let done = inflight.await.expect("join");
        assert_eq!(
            done.as_deref(),
            Ok(format!("hello {name}").as_str()),
            "in-flight call completes"
        );
        handle.stopped().await;
    }

    #[tokio::test]
    async fn etcd_down_at_start_serves_at_once_and_registers_later() {
        let Some(mut etcd) = EtcdServer::start_exclusive(
            "etcd_down_at_start_serves_at_once_and_registers_later",
            "kills and restarts etcd",
        )
        .await
        else {
            return;
        };
        etcd.kill();
        let key = unique_key("server-down-at-start");
        let t0 = Instant::now();
        let (handle, addr) = serve(&etcd, &key, ShutdownConf::default()).await;
        assert_eq!(hello(&addr, "early").await.as_deref(), Ok("hello early"));
        let answered = t0.elapsed();
        assert!(answered < Duration::from_secs(1), "{answered:?}");
        // etcd stays down past the publisher's first retry (1 s), so it registers from a retry
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let ready = etcd.restart().await;
        let mut c = etcd.client().await;
        let took = within(Duration::from_secs(2), || {
            let mut c = c.clone();
            let key = key.clone();
            async move { keys_under(&mut c, &key).await.len() == 1 }
        })
        .await
        .expect("registered within 2 s of etcd ready");
        println!(
            "server with etcd down: answered after {answered:?}; registered {:?} after etcd ready (poll {took:?})",
            ready.elapsed()
        );
        assert_eq!(keys_under(&mut c, &key).await[0].1, addr);
        handle.shutdown();
        handle.stopped().await;
    }
}

#[tokio::test]
async fn account_is_used_and_survives_etcd_restart() {
    // Enabling auth would break other tests sharing an external etcd.
    let Some(mut etcd) = EtcdServer::start_exclusive(
        "account_is_used_and_survives_etcd_restart",
        "turns auth on in the cluster and restarts etcd",
    )
    .await
    else {
        return;
    };
    let mut c = etcd.client().await;
    c.user_add("root", "rootpw", None).await.expect("user add");
    c.user_grant_role("root", "root").await.expect("grant");
    c.auth_enable().await.expect("auth enable");
    let key = unique_key("auth");
    let value = "127.0.0.1:45010".to_owned();
    let mut good = conf(&etcd, &key);
    good.user = "root".into();
    good.pass = "rootpw".into();
    let mut bad = good.clone();
    bad.pass = "wrong".into();
    let e = zrpc_core::etcd::connect(&bad)
        .await
        .err()
        .expect("wrong password refused")
        .to_string();
    assert!(e.contains(&etcd.endpoint()), "{e}");
    let rejected = Publisher::spawn(bad, "127.0.0.1:45011".to_owned());
    let p = Publisher::spawn(good.clone(), value.clone());
    let (full, _, _) = registered(&p, Duration::from_secs(5)).await;
    let mut admin = zrpc_core::etcd::connect(&good).await.expect("admin");
    assert_eq!(ours(&mut admin, &key, &value).await, vec![full]);
    // etcd's simple tokens do not survive a restart: the publisher logs in again.
    etcd.kill();
    not_registered(&p, Duration::from_secs(5)).await;
    let ready = etcd.restart().await;
    let (full, _, _) = registered(&p, Duration::from_secs(2)).await;
    println!(
        "with an account: re-registered {:?} after etcd ready",
        ready.elapsed()
    );
    let mut admin = zrpc_core::etcd::connect(&good).await.expect("admin");
    assert_eq!(ours(&mut admin, &key, &value).await, vec![full]);
    assert_eq!(
        *rejected.state().borrow(),
        RegistrationState::NotRegistered,
        "a wrong password never registers"
    );
    rejected.stop().await;
    p.stop().await;
    assert!(keys_under(&mut admin, &key).await.is_empty());
}

#[tokio::test]
async fn registers_over_tls_with_client_certificates() {
    let Some(mut etcd) = EtcdServer::start_tls().await else {
        return;
    };
    let key = unique_key("tls");
    let value = "127.0.0.1:45012".to_owned();
    let p = Publisher::spawn(etcd.etcd_conf(&key), value.clone());
    let (full, _, _) = registered(&p, Duration::from_secs(5)).await;
    let mut c = etcd.client().await;
    assert_eq!(ours(&mut c, &key, &value).await, vec![full]);
    etcd.kill();
    not_registered(&p, Duration::from_secs(5)).await;
    let ready = etcd.restart().await;
    let (full, _, _) = registered(&p, Duration::from_secs(2)).await;
    println!(
        "over TLS: re-registered {:?} after etcd ready",
        ready.elapsed()
    );
    let mut c = etcd.client().await;
    assert_eq!(ours(&mut c, &key, &value).await, vec![full]);
    p.stop().await;
    assert!(keys_under(&mut c, &key).await.is_empty());
}
