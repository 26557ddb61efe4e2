//! Server shedding (issue 3): with a (fake) hot CPU and a saturated server, calls are shed
//! with `ResourceExhausted "service overloaded"`.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use tonic::Code;
use zrpc_core::cpu::FixedCpu;
use zrpc_tests::greeter::{TestGreeter, start_server_with, test_conf};
use zrpc_tests::pb::HelloRequest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_sheds_when_cpu_is_hot() {
    let cpu = Arc::new(FixedCpu::new(990));
    let injected = cpu.clone();
    let mut conf = test_conf("shed.rpc");
    // Isolate shedding: sheds count as breaker failures (go-zero order), which would open
    // the method's breaker during a long overload.
    conf.middlewares.breaker = false;
    let srv = start_server_with(conf, TestGreeter::new(), move |s| s.cpu_usage(injected)).await;
    let client = srv.client().await;

    // ~1 s of load: 10 new 100 ms calls every 10 ms, i.e. ~100 in flight.
    let mut calls = Vec::new();
    for _ in 0..100 {
        for _ in 0..10 {
            let mut c = client.clone();
            calls.push(tokio::spawn(async move {
                c.say_hello(HelloRequest {
                    name: "sleep:100".into(),
                })
                .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (mut ok, mut shed, mut breaker) = (0, 0, 0);
    for call in calls {
        match call.await.unwrap() {
            Ok(_) => ok += 1,
            // Shedding sits inside the breaker (go-zero order): sheds count as failures,
            // so a long overload can also open the method's breaker.
            Err(e) if e.code() == Code::Unavailable => {
                assert_eq!(e.message(), "circuit breaker is open");
                breaker += 1;
            }
            Err(e) => {
                assert_eq!(
                    (e.code(), e.message()),
                    (Code::ResourceExhausted, "service overloaded")
                );
                shed += 1;
            }
        }
    }
    eprintln!("shedding: {ok} ok, {shed} shed, {breaker} breaker-open");
    assert!(shed > 0, "nothing shed ({ok} ok)");
    assert!(ok > 0, "everything shed");

    // Cool CPU, nothing in flight: no shedding.
    cpu.set(0);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut c = client.clone();
    for _ in 0..20 {
        c.say_hello(HelloRequest { name: "x".into() })
            .await
            .expect("cool server serves");
    }
    srv.shutdown().await.expect("clean shutdown");
}
