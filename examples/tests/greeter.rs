//! The example greeter through `zrpc::server` and `zrpc::client` in one process: unary and
//! server-streaming calls, and the `x-server` metadata the example clients count by.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use tokio_stream::StreamExt as _;
use zrpc_examples::greeter::{Greeter, SERVER_HEADER};
use zrpc_examples::pb::greeter_client::GreeterClient;
use zrpc_examples::pb::{self, HelloRequest, HelloStreamRequest};

#[tokio::test]
async fn unary_and_stream_through_zrpc() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let conf = zrpc::RpcServerConf::new("greeter.test", addr.clone()).with_shutdown(
        zrpc::ShutdownConf::new(Duration::ZERO, Duration::from_secs(5)),
    );
    let server = zrpc::server(conf)
        .unwrap()
        .add_service(Greeter::new(&addr, Duration::ZERO).into_service())
        .reflection_descriptor(pb::FILE_DESCRIPTOR_SET);
    let handle = server.handle();
    let serving = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));

    let client = zrpc::client(zrpc::RpcClientConf::direct([addr.clone()]))
        .await
        .unwrap();
    let mut greeter = GreeterClient::new(client);

    let reply = greeter
        .say_hello(HelloRequest {
            name: "zrpc".into(),
        })
        .await
        .unwrap();
    assert_eq!(reply.metadata().get(SERVER_HEADER).unwrap(), addr.as_str());
    assert_eq!(reply.into_inner().message, "hello zrpc");

    let stream = greeter
        .say_hello_stream(HelloStreamRequest {
            name: "zrpc".into(),
            count: 3,
            interval_ms: 1,
        })
        .await
        .unwrap();
    assert_eq!(stream.metadata().get(SERVER_HEADER).unwrap(), addr.as_str());
    let messages: Vec<String> = stream
        .into_inner()
        .map(|r| r.unwrap().message)
        .collect()
        .await;
    assert_eq!(messages, ["hello zrpc 0", "hello zrpc 1", "hello zrpc 2"]);

    handle.shutdown();
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
