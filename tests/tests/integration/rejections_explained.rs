//! Every call zrpc refuses explains itself: a real server and a real client refuse calls for
//! five reasons, and each status message starts with go-zero's words where go-zero has them,
//! then names the stage and the figures that refused the call (checked to add up by
//! `zrpc_tests::explained`). The messages are printed (`--nocapture`).

use std::sync::Arc;
use std::time::Duration;

use tonic::Code;
use zrpc::conf::{ConcurrencyLimitConf, RpcClientConf};
use zrpc_core::cpu::FixedCpu;
use zrpc_tests::explained;
use zrpc_tests::greeter::{SAY_HELLO, TestGreeter, start_server, start_server_with, test_conf};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

fn hello(name: &str) -> HelloRequest {
    HelloRequest { name: name.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_kinds_of_rejection_each_name_the_stage_and_its_figures() {
    let mut seen = Vec::new();

    // 1. The concurrency limit: a fixed limit of 4 (the default tier may use 3), 3 calls held.
    let mut limit = ConcurrencyLimitConf::default();
    limit.min_limit = 4;
    limit.max_limit = 4;
    limit.min_rtt_samples = 1;
    let mut conf = test_conf("explained-limit.rpc").with_concurrency_limit(limit);
    conf.cpu_threshold = 0;
    let srv = start_server(conf, TestGreeter::new()).await;
    let c = srv.client().await;
    c.clone()
        .say_hello(hello("x"))
        .await
        .expect("ends the measurement");
    let held: Vec<_> = (0..3)
        .map(|_| {
            let mut c = c.clone();
            tokio::spawn(async move { c.say_hello(hello("sleep:1500")).await })
        })
        .collect();
    srv.greeter
        .wait_for("3 held calls", |g| g.started() >= 4)
        .await;
    let e = c.clone().say_hello(hello("x")).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert_eq!(
        e.message(),
        "service overloaded: the default tier's share of the concurrency limit is in use (3 in \
         flight, share 3 of limit 4)"
    );
    seen.push(("limit", e));
    for h in held {
        h.await.unwrap().expect("the held calls are served");
    }

    // 2. The CPU shedder: an injected hot CPU and ~100 calls in flight.
    let cpu = Arc::new(FixedCpu::new(990));
    let mut conf = test_conf("explained-shed.rpc").with_cpu_threshold(900);
    conf.middlewares.breaker = false;
    let srv = start_server_with(conf, TestGreeter::new(), move |s| s.cpu_usage(cpu)).await;
    let c = srv.client().await;
    let mut calls = Vec::new();
    for _ in 0..60 {
        for _ in 0..5 {
            let mut c = c.clone();
            calls.push(tokio::spawn(async move {
                c.say_hello(hello("sleep:100")).await
            }));
        }
        // load pacing: 5 new calls every 10 ms
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut shed = None;
    for call in calls {
        if let Err(e) = call.await.unwrap() {
            let (cpu, threshold, _) =
                explained::shed(e.message()).unwrap_or_else(|| panic!("not the shedder's: {e:?}"));
            assert_eq!(
                (e.code(), cpu, threshold),
                (Code::ResourceExhausted, 990, 900)
            );
            shed.get_or_insert(e);
        }
    }
    seen.push(("shedder", shed.expect("a hot, saturated server sheds")));

    // 3. The server's breaker: a method that keeps failing (a plain tonic caller, no client
    // breaker).
    let srv = start_server(test_conf("explained-breaker.rpc"), TestGreeter::new()).await;
    let mut c = srv.client().await;
    let mut open = None;
    for _ in 0..300 {
        let e = c.say_hello(hello("fail:13")).await.unwrap_err();
        if e.code() == Code::Unavailable {
            let f = explained::breaker_open(e.message(), SAY_HELLO).expect("explained");
            assert!(f.failed > 0 && f.succeeded == 0, "{e:?}");
            open.get_or_insert(e);
        }
    }
    seen.push(("server breaker", open.expect("the server's breaker opens")));

    // 4. The client's breaker: a zrpc client of a server answering Unavailable (the server's
    // own breaker off: it would open too).
    let mut conf = test_conf("explained-client.rpc");
    conf.middlewares.breaker = false;
    let srv = start_server(conf, TestGreeter::new().with_failure(Code::Unavailable)).await;
    let client = zrpc::client(RpcClientConf::direct([srv.addr.to_string()]))
        .await
        .unwrap();
    let name = format!("{SAY_HELLO} to {}", client.target());
    let mut g = GreeterClient::new(client);
    let mut local = None;
    for _ in 0..300 {
        let e = g.say_hello(hello("x")).await.unwrap_err();
        if explained::breaker_open(e.message(), &name).is_some() {
            local.get_or_insert(e);
        }
    }
    seen.push(("client breaker", local.expect("the client's breaker opens")));

    // 5. No endpoint: a client whose resolver found none.
    let resolution = zrpc::resolver::Resolution::fixed(Vec::new());
    let client =
        zrpc::Client::with_resolution(RpcClientConf::default(), "test:///none", resolution)
            .await
            .unwrap();
    let e = GreeterClient::new(client)
        .say_hello(hello("x"))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            Code::Unavailable,
            "no endpoint available for target test:///none: the resolver's last set has no \
             endpoints"
        )
    );
    seen.push(("no endpoint", e));

    for (kind, e) in &seen {
        println!("{kind:>14}: {:?} \"{}\"", e.code(), e.message());
    }
}
