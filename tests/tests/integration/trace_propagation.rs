//! W3C trace context through a zrpc service: a caller's `traceparent` reaches the service its
//! handler calls with zrpc's client, so a go-zero trace goes on through Rust (go-zero services
//! propagate it on every call). A service with no OpenTelemetry exporter passes it unchanged.

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use zrpc::{RpcClientConf, RpcServerConf, ServerHandle};
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::pb::greeter_server::{Greeter, GreeterServer};
use zrpc_tests::pb::{HelloReply, HelloRequest, HelloStreamRequest};

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

type ReplyStream = Pin<Box<dyn Stream<Item = Result<HelloReply, Status>> + Send>>;

/// The callee: records the `traceparent` and `baggage` it receives.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(String, String)>>>);

#[tonic::async_trait]
impl Greeter for Recorder {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let get = |k: &str| {
            req.metadata()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        self.0
            .lock()
            .unwrap()
            .push((get("traceparent"), get("baggage")));
        Ok(Response::new(HelloReply {
            message: "recorded".into(),
        }))
    }

    type SayHelloStreamStream = ReplyStream;

    async fn say_hello_stream(
        &self,
        _: Request<HelloStreamRequest>,
    ) -> Result<Response<ReplyStream>, Status> {
        Err(Status::unimplemented("not used"))
    }
}

/// The service in the middle: its handler calls the callee with zrpc's client.
struct Relay(zrpc::Client);

#[tonic::async_trait]
impl Greeter for Relay {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        GreeterClient::new(self.0.clone())
            .say_hello(req.into_inner())
            .await
    }

    type SayHelloStreamStream = ReplyStream;

    async fn say_hello_stream(
        &self,
        _: Request<HelloStreamRequest>,
    ) -> Result<Response<ReplyStream>, Status> {
        Err(Status::unimplemented("not used"))
    }
}

async fn serve<G: Greeter>(name: &str, greeter: G) -> ServerHandle {
    let server = zrpc::server(RpcServerConf::new(name, "127.0.0.1:0"))
        .unwrap()
        .add_service(GreeterServer::new(greeter));
    let handle = server.handle();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    tokio::spawn(server.serve_with_listener(listener, std::future::pending()));
    handle.serving().await.unwrap();
    handle
}

#[tokio::test]
async fn a_callers_traceparent_reaches_the_service_its_handler_calls() {
    let seen = Recorder::default();
    let callee = serve("callee.rpc", seen.clone()).await;
    let client = zrpc::client(RpcClientConf::direct([callee
        .local_addr()
        .unwrap()
        .to_string()]))
    .await
    .unwrap();
    let relay = serve("relay.rpc", Relay(client)).await;

    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", relay.local_addr().unwrap()))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut caller = GreeterClient::new(channel);
    let mut req = Request::new(HelloRequest { name: "a".into() });
    req.metadata_mut()
        .insert("traceparent", TRACEPARENT.parse().unwrap());
    req.metadata_mut()
        .insert("baggage", "user=alice".parse().unwrap());
    caller.say_hello(req).await.unwrap();
    // without trace context: none is made up
    caller
        .say_hello(HelloRequest { name: "b".into() })
        .await
        .unwrap();

    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let (traceparent, baggage) = &seen[0];
    // The trace id goes on (the parent id is the caller's, or the relay's own span where an
    // OpenTelemetry layer is installed in this process).
    assert_eq!(traceparent.get(..35), TRACEPARENT.get(..35), "{seen:?}");
    assert_eq!(baggage, "user=alice", "{seen:?}");
    assert_eq!(seen[1], (String::new(), String::new()), "{seen:?}");
    relay.shutdown();
    callee.shutdown();
}
