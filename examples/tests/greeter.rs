//! The example greeter through `zrpc::server` and `zrpc::client` in one process: unary and
//! server-streaming calls, and the `x-server` metadata the example clients count by.

#![allow(missing_docs)]

use std::time::Duration;

use tokio_stream::StreamExt as _;
use zrpc_examples::greeter::{Greeter, SERVER_HEADER};
use zrpc_examples::pb::greeter_client::GreeterClient;
use zrpc_examples::pb::{self, HelloRequest, HelloStreamRequest};

/// Calls of `method` in the client's histogram family `name`, as `/metrics` renders them.
fn client_calls(name: &str, method: &str) -> u64 {
    let prefix = format!("{name}_count{{method=\"{method}\"}} ");
    zrpc::metrics::server::render()
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum()
}

fn zrpc_client_streams(method: &str) -> u64 {
    client_calls("rpc_client_streams_duration_ms", method)
}

fn zrpc_client_unary(method: &str) -> u64 {
    client_calls("rpc_client_requests_duration_ms", method)
}

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

    // the facade's client knows the linked protos' streaming methods: the stream is in the
    // client's stream families, the unary call in go-zero's
    let method = "/greeter.Greeter/SayHelloStream";
    let rendered = zrpc::metrics::server::render();
    let lines: Vec<&str> = rendered
        .lines()
        .filter(|l| l.contains("SayHello") && l.contains("_count"))
        .collect();
    assert!(
        zrpc_client_streams(method) >= 1,
        "the stream was not recorded as one: {lines:?}"
    );
    assert_eq!(zrpc_client_unary(method), 0);
    assert!(zrpc_client_unary("/greeter.Greeter/SayHello") >= 1);

    handle.shutdown();
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
