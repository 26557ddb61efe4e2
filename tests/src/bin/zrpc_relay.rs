//! A zrpc service in the middle of a call chain, for the trace test across Go and Rust
//! (`tests/tests/interop/trace.rs`): its `SayHello` handler calls the downstream greeter with
//! zrpc's client, adding metadata of its own (`x-relay: zrpc`, baggage `hop=relay`), and
//! answers with the downstream's reply. It logs one line per relayed call.
//!
//! `zrpc_relay <server.yaml> <downstream-client.yaml>`: a zrpc `RpcServerConf` (served with
//! `Server::serve`: logging and `Telemetry` set up from it, SIGTERM drains and flushes spans)
//! and the `RpcClientConf` of the downstream.

use std::pin::Pin;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use zrpc::{RpcClientConf, RpcServerConf};
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::pb::greeter_server::{Greeter, GreeterServer};
use zrpc_tests::pb::{HelloReply, HelloRequest, HelloStreamRequest};

type ReplyStream = Pin<Box<dyn Stream<Item = Result<HelloReply, Status>> + Send>>;

struct Relay(zrpc::Client);

#[tonic::async_trait]
impl Greeter for Relay {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let name = req.into_inner().name;
        tracing::info!(name = %name, "relaying to the downstream greeter");
        let mut out = Request::new(HelloRequest { name });
        out.metadata_mut().insert(
            "x-relay",
            tonic::metadata::MetadataValue::from_static("zrpc"),
        );
        out.metadata_mut().insert(
            "baggage",
            tonic::metadata::MetadataValue::from_static("hop=relay"),
        );
        let reply = GreeterClient::new(self.0.clone()).say_hello(out).await?;
        Ok(Response::new(reply.into_inner()))
    }

    type SayHelloStreamStream = ReplyStream;

    async fn say_hello_stream(
        &self,
        _: Request<HelloStreamRequest>,
    ) -> Result<Response<ReplyStream>, Status> {
        Err(Status::unimplemented("the relay relays SayHello only"))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [server, downstream] = args.as_slice() else {
        return Err("usage: zrpc_relay <server.yaml> <downstream-client.yaml>".into());
    };
    let conf: RpcServerConf = zrpc::conf::load(server)?;
    let down: RpcClientConf = zrpc::conf::load(downstream)?;
    let client = zrpc::client(down).await?;
    zrpc::server(conf)?
        .add_service(GreeterServer::new(Relay(client)))
        .serve()
        .await?;
    Ok(())
}
