//! `zrpcctl inspect` against a real process (this test's): a zrpc server with a DevServer whose
//! concurrency limit refuses calls, and a zrpc client of three greeter servers, one of them
//! slow (the demo's scenario), both under load while the view is read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{text, zrpcctl};
use serde_json::Value;
use zrpc::conf::{ConcurrencyLimitConf, DevServerConf, RpcClientConf};
use zrpc_tests::greeter::{TestGreeter, TestServer, start_server, test_conf};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

/// A greeter server answering after `delay`.
async fn greeter(name: &str, delay: Duration) -> TestServer {
    start_server(test_conf(name), TestGreeter::new().with_delay(delay)).await
}

/// `zrpcctl inspect <args>`, run off the runtime's threads; its stdout.
async fn inspect(args: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = zrpcctl(&args, &std::env::temp_dir());
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_a_client_with_a_slow_endpoint_and_a_server_whose_limit_refuses_calls() {
    // The front server: a fixed concurrency limit of 4 (the default tier may use 3), calls of
    // 50 ms, a DevServer on a free port.
    let mut limit = ConcurrencyLimitConf::default();
    limit.min_limit = 4;
    limit.max_limit = 4;
    limit.min_rtt_samples = 1;
    let mut conf = test_conf("inspect.rpc")
        .with_dev_server(DevServerConf::new("127.0.0.1", 0))
        .with_concurrency_limit(limit);
    conf.cpu_threshold = 0;
    let front = start_server(
        conf,
        TestGreeter::new().with_delay(Duration::from_millis(50)),
    )
    .await;
    let dev = front
        .handle
        .dev_server_addr()
        .expect("a DevServer")
        .to_string();
    // The demo's three servers: two fast, one slow.
    let fast1 = greeter("fast-1.rpc", Duration::from_millis(2)).await;
    let fast2 = greeter("fast-2.rpc", Duration::from_millis(2)).await;
    let slow = greeter("slow.rpc", Duration::from_millis(200)).await;
    let addrs: Vec<String> = [&fast1, &fast2, &slow]
        .iter()
        .map(|s| s.addr.to_string())
        .collect();
    let client = zrpc::client(RpcClientConf::direct(addrs.clone()))
        .await
        .unwrap();
    let target = client.target().to_owned();

    // Load: 12 callers through the client, 8 on the front server (over its limit).
    let running = Arc::new(AtomicBool::new(true));
    let mut load = Vec::new();
    for _ in 0..12 {
        let mut c = GreeterClient::new(client.clone());
        let running = running.clone();
        load.push(tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                let _ = c.say_hello(HelloRequest { name: "x".into() }).await;
            }
        }));
    }
    let front_client = front.client().await;
    for _ in 0..8 {
        let mut c = front_client.clone();
        let running = running.clone();
        load.push(tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                let _ = c.say_hello(HelloRequest { name: "x".into() }).await;
            }
        }));
    }
    // Until the view shows what the load builds: calls refused by the limit, and the slow
    // endpoint's latency score past its 200 ms (bounded; the assertions below say what failed).
    let settled = |json: &str| {
        let Ok(v) = serde_json::from_str::<Value>(json) else {
            return false;
        };
        let drops = &v["server"]["drops"]["total"];
        let refused = drops["tier"].as_u64().unwrap_or(0) + drops["limit"].as_u64().unwrap_or(0);
        let slow = v["clients"].as_array().into_iter().flatten().any(|c| {
            c["target"] == target.as_str()
                && c["endpoints"].as_array().into_iter().flatten().any(|e| {
                    e["addr"] == addrs[2].as_str() && e["ewma_ms"].as_f64().unwrap_or(0.0) >= 200.0
                })
        });
        refused > 0 && slow
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut json = inspect(vec!["inspect".into(), dev.clone(), "--json".into()]).await;
    while !settled(&json) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await; // poll interval of a bounded wait
        json = inspect(vec!["inspect".into(), dev.clone(), "--json".into()]).await;
    }
    let shown = inspect(vec!["inspect".into(), dev.clone()]).await;
    let watched = inspect(vec![
        "inspect".into(),
        dev.clone(),
        "--watch".into(),
        "--times".into(),
        "2".into(),
    ])
    .await;
    running.store(false, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    println!("$ zrpcctl inspect {dev}\n{shown}");

    let v: Value = serde_json::from_str(&json).unwrap();
    // The server: its limit full, the calls over it refused and counted.
    let server = &v["server"];
    assert_eq!(server["name"], "inspect.rpc");
    let l = &server["limit"][0];
    assert_eq!(
        (l["method"].as_str(), l["limit"].as_u64()),
        (Some("*"), Some(4)),
        "{l}"
    );
    assert!(l["inflight"].as_u64().is_some_and(|n| n >= 3), "{l}");
    let refused = server["drops"]["total"]["tier"].as_u64().unwrap_or(0)
        + server["drops"]["total"]["limit"].as_u64().unwrap_or(0);
    assert!(refused > 0, "{}", server["drops"]);
    assert!(
        server["connections"]["open"]
            .as_u64()
            .is_some_and(|n| n >= 1)
    );
    let peer = &server["connections"]["peers"][0];
    assert_eq!(peer["addr"], "127.0.0.1", "{}", server["connections"]);
    assert!(peer["connections"].as_u64().is_some_and(|n| n >= 1));
    assert!(server["shedder"].is_null(), "CpuThreshold: 0");
    // The client: three endpoints, the slow one slower and sent fewer calls.
    let c = v["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["target"] == target.as_str())
        .unwrap_or_else(|| panic!("client {target} not shown: {v}"));
    let endpoints = c["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 3, "{c}");
    let of = |addr: &str| endpoints.iter().find(|e| e["addr"] == addr).unwrap();
    let (f, s) = (of(&addrs[0]), of(&addrs[2]));
    let ewma = |e: &Value| e["ewma_ms"].as_f64().unwrap_or(0.0);
    // the slow one at least its 200 ms; the fast one (2 ms, more on a busy machine) far below
    assert!(
        ewma(s) >= 200.0 && ewma(s) > 3.0 * ewma(f),
        "slow {s} fast {f}"
    );
    assert!(
        s["requests"].as_u64() < f["requests"].as_u64(),
        "slow {s} fast {f}"
    );
    // The same as text: a table row per limit and per endpoint.
    assert!(shown.contains("server inspect.rpc on "), "{shown}");
    assert!(shown.contains("  *       4"), "{shown}");
    assert!(
        shown.contains(&format!("  {target} (p2c_ewma), resolver: 3 endpoints")),
        "{shown}"
    );
    for a in &addrs {
        assert!(shown.contains(&format!("    {a}")), "{shown}");
    }
    // --watch clears the screen before each view.
    assert_eq!(watched.matches("\x1b[2J\x1b[H").count(), 2, "{watched}");
    assert_eq!(watched.matches("server inspect.rpc on ").count(), 2);
}

/// With `DevServer.AdminToken` the view needs it: refused without (exit status and the
/// server's reason), shown with `--token` or `ZRPC_ADMIN_TOKEN`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_takes_the_admin_token() {
    let mut dev = DevServerConf::new("127.0.0.1", 0);
    dev.admin_token = "s3cret".to_owned();
    let conf = test_conf("inspect-token.rpc").with_dev_server(dev);
    let server = start_server(conf, TestGreeter::new()).await;
    let dev = server.handle.dev_server_addr().unwrap().to_string();
    let out = tokio::task::spawn_blocking({
        let dev = dev.clone();
        move || zrpcctl(&["inspect", &dev], &std::env::temp_dir())
    })
    .await
    .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("HTTP 401"), "{}", text(&out));
    assert!(stderr.contains("DevServer.AdminToken"), "{}", text(&out));
    let shown = inspect(vec![
        "inspect".into(),
        dev,
        "--token".into(),
        "s3cret".into(),
    ])
    .await;
    assert!(shown.contains("server inspect-token.rpc on "), "{shown}");
    assert!(!shown.contains("s3cret"), "{shown}");
}
