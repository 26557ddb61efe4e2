//! Client breaker: a server that always answers Unavailable makes the client reject locally;
//! it recovers once the server heals.

use std::time::{Duration, Instant};

use tonic::Code;
use zrpc_client::Client;
use zrpc_client::conf::RpcClientConf;
use zrpc_tests::explained;
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

use crate::client_support::Backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_breaker_opens_on_unavailable_and_recovers() {
    let server = Backend::start("s", Duration::ZERO);
    server.set_failure(Code::Unavailable);
    let client = Client::new(RpcClientConf::direct([server.endpoint()]))
        .await
        .unwrap();
    // the local rejection names the breaker (method and target) and its window
    let breaker = format!("/greeter.Greeter/SayHello to {}", client.target());
    let mut greeter = GreeterClient::new(client);
    let mut local = 0;
    for i in 0..400 {
        let e = greeter
            .say_hello(HelloRequest {
                name: format!("{i}"),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unavailable);
        if explained::breaker_open(e.message(), &breaker).is_some() {
            local += 1;
        }
    }
    let reached = server.hits();
    println!(
        "breaker: 400 calls to a failing server, {local} rejected locally, {reached} reached it"
    );
    assert!(
        local > 100,
        "the breaker should reject most calls locally: {local}"
    );
    assert_eq!(local + reached, 400);

    server.set_failure(Code::Ok);
    let healed = Instant::now();
    let mut streak = 0;
    while streak < 50 {
        assert!(
            healed.elapsed() < Duration::from_secs(30),
            "no recovery within 30 s"
        );
        match greeter.say_hello(HelloRequest { name: "x".into() }).await {
            Ok(_) => streak += 1,
            Err(e) => {
                assert!(
                    explained::breaker_open(e.message(), &breaker).is_some(),
                    "{e:?}"
                );
                streak = 0;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    println!(
        "breaker: 50 consecutive successes {:?} after the server healed",
        healed.elapsed()
    );
}
