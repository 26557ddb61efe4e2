//! Server recover: a handler panic becomes `Internal "panic: <msg>"`, the server
//! and the connection live on.

use tonic::Code;
use zrpc_tests::greeter::{TestGreeter, start_server, test_conf};
use zrpc_tests::pb::HelloRequest;

fn hello(name: &str) -> HelloRequest {
    HelloRequest { name: name.into() }
}

#[tokio::test]
async fn server_panic_becomes_internal_and_the_next_call_succeeds() {
    // Panics are server failures: with the breaker on, 20 in a row open it (as in go-zero, whose
    // breaker rejects the promise of a panicking call; see server_breaker_poisoning.rs). This test
    // is about recover alone.
    let mut conf = test_conf("recover.rpc");
    conf.middlewares.breaker = false;
    let srv = start_server(conf, TestGreeter::new()).await;
    let mut client = srv.client().await;

    let err = client
        .say_hello(hello("panic:kaboom"))
        .await
        .expect_err("a panicking handler fails");
    assert_eq!(err.code(), Code::Internal);
    assert_eq!(err.message(), "panic: kaboom");

    // Same client, same connection: the server lives on.
    let reply = client
        .say_hello(hello("alice"))
        .await
        .expect("next call works");
    assert_eq!(reply.into_inner().message, "hello alice");

    // Many panics in a row do not wear anything out.
    for _ in 0..20 {
        let err = client.say_hello(hello("panic")).await.unwrap_err();
        assert_eq!(err.code(), Code::Internal);
    }
    assert!(client.say_hello(hello("bob")).await.is_ok());
    srv.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn server_recover_off_lets_the_panic_reset_the_stream() {
    let mut conf = test_conf("norecover.rpc");
    conf.middlewares.recover = false;
    let srv = start_server(conf, TestGreeter::new()).await;
    let mut client = srv.client().await;
    let err = client.say_hello(hello("panic")).await.unwrap_err();
    assert_ne!(err.message(), "panic: test panic");
    srv.shutdown().await.expect("clean shutdown");
}
