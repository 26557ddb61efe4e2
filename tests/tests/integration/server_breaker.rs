//! Server breaker: a method that keeps failing opens its breaker.

use tonic::Code;
use zrpc_tests::explained;
use zrpc_tests::greeter::{TestGreeter, start_server, test_conf};
use zrpc_tests::pb::HelloRequest;

#[tokio::test]
async fn server_breaker_opens_after_repeated_failures() {
    let srv = start_server(test_conf("breaker.rpc"), TestGreeter::new()).await;
    let mut c = srv.client().await;
    let mut open = 0;
    let mut internal = 0;
    for _ in 0..300 {
        let e = c
            .say_hello(HelloRequest {
                name: "fail:13".into(),
            })
            .await
            .unwrap_err();
        match e.code() {
            Code::Unavailable => {
                // go-zero's words, then the method and its breaker's window
                let figures = explained::breaker_open(e.message(), "/greeter.Greeter/SayHello")
                    .unwrap_or_else(|| panic!("{e:?}"));
                assert_eq!(figures.succeeded, 0, "{e:?}");
                open += 1;
            }
            Code::Internal => internal += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        open > 150,
        "breaker rejected only {open} of 300 ({internal} reached the handler)"
    );
    assert_eq!(srv.greeter.started(), internal);
    srv.shutdown().await.expect("clean shutdown");
}
