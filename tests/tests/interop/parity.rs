//! Parity of what crosses the wire: a go-zero server and a zrpc server side by side, called the
//! same way, must answer with the same status codes and messages (timeout, auth, forced codes,
//! panics, breaker, shedding), see the same deadline and the same metadata.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tonic::Code;
use zrpc_core::cpu::FixedCpu;
use zrpc_tests::etcd::{EtcdCluster, unique_key};
use zrpc_tests::explained;
use zrpc_tests::gozero::{
    CallLine, ClientYaml, Discovery, GzClient, GzServer, Programs, ServerYaml, ZrpcServer,
    say_hello, start_zrpc, start_zrpc_with, wait_registered, zrpc_conf,
};
use zrpc_tests::gozero_or_skip;
use zrpc_tests::pb::greeter_client::GreeterClient;

use crate::support::REGISTER_WAIT;

/// One go-zero and one zrpc server, each under its own key in one etcd.
struct Pair {
    cluster: EtcdCluster,
    gz: GzServer,
    gz_key: String,
    zr: ZrpcServer,
    zr_key: String,
}

impl Pair {
    async fn start(
        p: &Programs,
        case: &str,
        gz_yaml: impl FnOnce(&mut ServerYaml),
        zr_conf: impl FnOnce(&mut zrpc::RpcServerConf),
    ) -> Pair {
        let cluster = EtcdCluster::start(1).await;
        let (gz_key, zr_key) = (
            unique_key(&format!("{case}-gz")),
            unique_key(&format!("{case}-zrpc")),
        );
        let mut y = ServerYaml::new("gz.rpc", &cluster.endpoints(), &gz_key);
        gz_yaml(&mut y);
        let gz = GzServer::start(p, &y, &[]).await;
        let mut conf = zrpc_conf("zrpc.rpc", Some(cluster.etcd_conf(&zr_key)));
        zr_conf(&mut conf);
        let zr = start_zrpc(conf).await;
        let etcd = cluster.client().await;
        assert!(wait_registered(&etcd, &gz_key, &gz.addr, REGISTER_WAIT).await);
        assert!(wait_registered(&etcd, &zr_key, &zr.listen_on(), REGISTER_WAIT).await);
        Pair {
            cluster,
            gz,
            gz_key,
            zr,
            zr_key,
        }
    }

    /// A go-zero client config for each server (etcd discovery, one host).
    fn clients(&self, with: impl Fn(ClientYaml) -> ClientYaml) -> [(&'static str, ClientYaml); 2] {
        let hosts = self.cluster.endpoints();
        [
            (
                "go-zero",
                with(ClientYaml::new(Discovery::Etcd(
                    hosts.clone(),
                    self.gz_key.clone(),
                ))),
            ),
            (
                "zrpc",
                with(ClientYaml::new(Discovery::Etcd(hosts, self.zr_key.clone()))),
            ),
        ]
    }

    /// One gz-client call named `name` against each server: `[go-zero, zrpc]`.
    async fn call_both(
        &self,
        p: &Programs,
        name: &str,
        with: impl Fn(ClientYaml) -> ClientYaml,
    ) -> [CallLine; 2] {
        let [(_, g), (_, z)] = self.clients(with);
        let (g, z) = tokio::join!(one_call(p, &g, name), one_call(p, &z, name));
        [g, z]
    }
}

async fn one_call(p: &Programs, yaml: &ClientYaml, name: &str) -> CallLine {
    let run = GzClient::new(p, yaml).n(1).name(name).verbose().run().await;
    assert_eq!(run.calls.len(), 1, "{}", run.explain());
    run.calls[0].clone()
}

fn show(what: &str, [g, z]: &[CallLine; 2]) {
    println!(
        "parity {what}: go-zero server -> {} {:?} (x-server {}); zrpc server -> {} {:?} (x-server {})",
        g.code, g.message, g.server, z.code, z.message, z.server
    );
}

/// Same code and message on both; returns them. `from_handler`: the handler produced the reply,
/// so the `x-server` header it set must arrive on both sides. (When a middleware answers instead,
/// e.g. the timeout, grpc-go still sends the header the handler set before; zrpc's handler
/// future is dropped with what it set, so zrpc's reply has no `x-server`.)
fn same(what: &str, calls: &[CallLine; 2], from_handler: bool) -> (String, String) {
    show(what, calls);
    let [g, z] = calls;
    assert_eq!(
        (&g.code, &g.message),
        (&z.code, &z.message),
        "{what}: go-zero vs zrpc"
    );
    if from_handler {
        assert!(
            !g.server.is_empty() && !z.server.is_empty(),
            "{what}: x-server on both: {calls:?}"
        );
    }
    (g.code.clone(), g.message.clone())
}

#[tokio::test]
async fn parity_handler_timeout_is_deadline_exceeded() {
    let p = gozero_or_skip!();
    let pair = Pair::start(
        p,
        "parity-timeout",
        |y| y.timeout = Some(2000),
        |c| c.timeout = 2000,
    )
    .await;
    // The client allows 5 s; the servers' own 2 s Timeout cuts the 3 s handler.
    let calls = pair
        .call_both(p, "sleep:3000", |c| c.timeout_ms(5000))
        .await;
    let (code, message) = same(
        "handler timeout (sleep:3000, server Timeout 2000)",
        &calls,
        false,
    );
    assert_eq!(code, "DeadlineExceeded");
    assert_eq!(message, "context deadline exceeded");
}

#[tokio::test]
async fn parity_forced_codes_and_panic() {
    let p = gozero_or_skip!();
    let pair = Pair::start(p, "parity-codes", |_| {}, |_| {}).await;
    let (code, message) = same("code:14", &pair.call_both(p, "code:14", |c| c).await, true);
    assert_eq!(
        (code.as_str(), message.as_str()),
        ("Unavailable", "forced 14")
    );
    let (code, message) = same("code:5", &pair.call_both(p, "code:5", |c| c).await, true);
    assert_eq!((code.as_str(), message.as_str()), ("NotFound", "forced 5"));
    // Panics: Internal "panic: <value>" on both (the panic values differ by program). go-zero
    // v1.10.3 appends the handler goroutine's stack trace to the value when its timeout
    // interceptor is on (the default): the client receives it; zrpc sends the value only.
    let calls = pair.call_both(p, "panic", |c| c).await;
    let first_lines = calls.clone().map(|mut c| {
        c.message = c.message.lines().next().unwrap_or("").to_owned();
        c
    });
    show("panic (first line of the message)", &first_lines);
    for c in &first_lines {
        assert_eq!(c.code, "Internal", "{c:?}");
        assert!(
            c.message.starts_with("panic: ") && c.message.ends_with("panic requested"),
            "{c:?}"
        );
    }
    println!(
        "parity panic: go-zero's message is {} lines (stack trace included), zrpc's {}",
        calls[0].message.lines().count(),
        calls[1].message.lines().count()
    );
    assert_eq!(
        calls[1].message.lines().count(),
        1,
        "zrpc sends no stack trace"
    );
    // The servers are still up.
    let (code, message) = same(
        "after the panic",
        &pair.call_both(p, "again", |c| c).await,
        true,
    );
    assert_eq!((code.as_str(), message.as_str()), ("OK", "hello again"));
}

#[tokio::test]
async fn parity_deadline_propagation_and_metadata() {
    let p = gozero_or_skip!();
    // Server Timeout 2000, client Timeout 1500: the handler's deadline is the client's.
    let pair = Pair::start(p, "parity-deadline", |_| {}, |_| {}).await;
    let calls = pair
        .call_both(p, "meta", |c| {
            c.timeout_ms(1500).credential("demo", "s3cret")
        })
        .await;
    show(
        "meta (client Timeout 1500, server Timeout 2000, App/Token set)",
        &calls,
    );
    for (side, c) in ["go-zero", "zrpc"].iter().zip(&calls) {
        assert_eq!(c.code, "OK", "{side}: {c:?}");
        let meta = parse_meta(&c.message);
        let dl: i64 = meta["deadline"].parse().unwrap_or(-1);
        assert!(
            (1000..=1500).contains(&dl),
            "{side}: deadline {dl} ms: {c:?}"
        );
        assert_eq!(
            meta.get("app").map(String::as_str),
            Some("demo"),
            "{side}: {c:?}"
        );
        assert_eq!(
            meta.get("token").map(String::as_str),
            Some("s3cret"),
            "{side}: {c:?}"
        );
    }
    // No App/Token: neither appears.
    let calls = pair.call_both(p, "meta", |c| c).await;
    show("meta (no App/Token)", &calls);
    for c in &calls {
        let meta = parse_meta(&c.message);
        assert!(
            !meta.contains_key("app") && !meta.contains_key("token"),
            "{c:?}"
        );
    }

    // Server Timeout 1000, client Timeout 5000: the handler's deadline is the server's.
    let pair = Pair::start(
        p,
        "parity-deadline-srv",
        |y| y.timeout = Some(1000),
        |c| c.timeout = 1000,
    )
    .await;
    let calls = pair.call_both(p, "meta", |c| c.timeout_ms(5000)).await;
    show("meta (client Timeout 5000, server Timeout 1000)", &calls);
    for c in &calls {
        let dl: i64 = parse_meta(&c.message)["deadline"].parse().unwrap_or(-1);
        assert!((500..=1000).contains(&dl), "deadline {dl} ms: {c:?}");
    }
}

fn parse_meta(s: &str) -> BTreeMap<String, String> {
    s.split(';')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// (what, App/Token, expected code, expected message).
type AuthCase<'a> = (&'a str, Option<(&'a str, &'a str)>, &'a str, &'a str);

#[tokio::test]
async fn parity_auth_statuses() {
    let p = gozero_or_skip!();
    // go-zero's auth reads tokens from Redis (HGET Key app); zrpc's from AuthTokens.
    let redis = zrpc_tests::redis::RedisServer::start().await;
    let redis_yaml = redis.as_ref().map(|r| {
        format!(
            "Auth: true\nStrictControl: true\nRedis:\n  Host: {}\n  Type: node\n  Key: interop:apps\n",
            r.addr
        )
    });
    if let Some(r) = &redis {
        r.hset("interop:apps", "demo", "s3cret").await;
    } else {
        println!(
            "note: redis-server not installed: the go-zero side of the auth parity is not run"
        );
    }
    let pair = Pair::start(
        p,
        "parity-auth",
        |y| y.extra = redis_yaml.clone().unwrap_or_default(),
        |c| {
            c.auth = true;
            c.auth_tokens = vec![zrpc_server::conf::AuthTokenConf::new("demo", "s3cret")];
        },
    )
    .await;
    let cases: [AuthCase<'_>; 3] = [
        ("right token", Some(("demo", "s3cret")), "OK", "hello world"),
        (
            "wrong token",
            Some(("demo", "nope")),
            "Unauthenticated",
            "access denied",
        ),
        (
            "no app/token",
            None,
            "Unauthenticated",
            "app/token required",
        ),
    ];
    for (what, cred, code, message) in cases {
        let with = |c: ClientYaml| match cred {
            Some((a, t)) => c.credential(a, t),
            None => c,
        };
        let calls = pair.call_both(p, "world", with).await;
        show(&format!("auth, {what}"), &calls);
        let sides: &[usize] = if redis.is_some() { &[0, 1] } else { &[1] };
        for &i in sides {
            let c = &calls[i];
            assert_eq!(
                (c.code.as_str(), c.message.as_str()),
                (code, message),
                "auth {what}: {c:?}"
            );
        }
    }
}

/// Breaker: a plain tonic client (no client breaker) sends failing calls (`code:13`, Internal,
/// a failure for the breaker) straight to each server until the server's breaker opens.
#[tokio::test]
async fn parity_server_breaker_opens_with_unavailable() {
    let p = gozero_or_skip!();
    let pair = Pair::start(p, "parity-breaker", |_| {}, |_| {}).await;
    let mut tallies = Vec::new();
    for (side, addr) in [
        ("go-zero", pair.gz.addr.clone()),
        ("zrpc", pair.zr.listen_on()),
    ] {
        let mut c = GreeterClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        let mut tally: BTreeMap<(String, String), u64> = BTreeMap::new();
        for _ in 0..100 {
            let r = say_hello(&mut c, "code:13").await;
            // go-zero's message is its words alone; zrpc's starts with them, then names the
            // method and its breaker's window, checked here to add up and tallied as
            // `<words>: <method> ...`
            let message = match side {
                "zrpc" if r.code == Code::Unavailable => {
                    match explained::breaker_open(&r.message, "/greeter.Greeter/SayHello") {
                        Some(_) => "circuit breaker is open: /greeter.Greeter/SayHello ...".into(),
                        None => r.message,
                    }
                }
                _ => r.message,
            };
            *tally.entry((format!("{:?}", r.code), message)).or_default() += 1;
        }
        println!("parity breaker: 100 failing calls to the {side} server: {tally:?}");
        tallies.push((side, tally));
    }
    for (side, tally) in &tallies {
        let words = match *side {
            "go-zero" => "circuit breaker is open",
            _ => "circuit breaker is open: /greeter.Greeter/SayHello ...",
        };
        let open = tally
            .get(&("Unavailable".to_owned(), words.to_owned()))
            .copied()
            .unwrap_or(0);
        assert!(open > 0, "{side}: the breaker never opened: {tally:?}");
        for (code, message) in tally.keys() {
            assert!(
                (code == "Internal" && message == "forced 13")
                    || (code == "Unavailable" && message == words),
                "{side}: unexpected {code} {message}"
            );
        }
    }
}

/// Shedding: go-zero's shedder reads the real CPU of the cgroup; it cannot be made hot on
/// demand, so the zrpc server is made to shed with an injected hot CPU and its status compared
/// with go-zero's (`status.Error(codes.ResourceExhausted, load.ErrServiceOverloaded.Error())`,
/// `ErrServiceOverloaded = errors.New("service overloaded")` in go-zero v1.10.3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parity_shedding_status_is_resource_exhausted_service_overloaded() {
    gozero_or_skip!();
    let mut conf = zrpc_conf("shed.rpc", None).with_cpu_threshold(900);
    // Sheds count as breaker failures (go-zero order); keep the breaker out of this test.
    conf.middlewares.breaker = false;
    let cpu = Arc::new(FixedCpu::new(990));
    let injected = cpu.clone();
    let zr = start_zrpc_with(conf, move |s| s.cpu_usage(injected)).await;
    let client = GreeterClient::connect(format!("http://{}", zr.listen_on()))
        .await
        .expect("connect");
    let mut calls = Vec::new();
    for _ in 0..100 {
        for _ in 0..10 {
            let mut c = client.clone();
            calls.push(tokio::spawn(
                async move { say_hello(&mut c, "sleep:100").await },
            ));
        }
        // load pacing: 10 new calls every 10 ms
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut tally: BTreeMap<(String, String), u64> = BTreeMap::new();
    for c in calls {
        let r = c.await.expect("call task");
        // go-zero's words first, then the injected CPU and the flight that shed the call:
        // checked here, tallied as `<words>: CPU <cpu> millicpu over threshold <t>, ...`
        let message = match explained::shed(&r.message) {
            _ if r.code == Code::Ok => "hello".to_owned(),
            Some((cpu, threshold, _)) => {
                format!("service overloaded: CPU {cpu} millicpu over threshold {threshold}, ...")
            }
            None => r.message,
        };
        *tally.entry((format!("{:?}", r.code), message)).or_default() += 1;
    }
    println!(
        "parity shedding (zrpc server, CPU 99%, ~100 in flight): {tally:?}; go-zero's string: ResourceExhausted \"service overloaded\""
    );
    let words = "service overloaded: CPU 990 millicpu over threshold 900, ...";
    let shed = tally
        .get(&("ResourceExhausted".to_owned(), words.to_owned()))
        .copied()
        .unwrap_or(0);
    assert!(shed > 0, "nothing shed: {tally:?}");
    assert!(
        tally
            .keys()
            .all(|(c, m)| (c == "Ok") || (c == "ResourceExhausted" && m == words)),
        "{tally:?}"
    );
}
