//! The example greeter service: `SayHello` replies `hello <name>`, `SayHelloStream` replies
//! `count` messages `hello <name> <i>`.
//!
//! Every response carries an `x-server` metadata entry naming the server that answered, so a client
//! can count calls per server (`greeter-client`, `demo`). A fixed delay makes a server "slow".

use std::pin::Pin;
use std::time::Duration;

use tokio_stream::Stream;
use zrpc::tonic::metadata::MetadataValue;
use zrpc::tonic::{Request, Response, Status};

use crate::pb::greeter_server::{Greeter as GreeterApi, GreeterServer};
use crate::pb::{HelloReply, HelloRequest, HelloStreamRequest};

/// The response metadata key that names the answering server.
pub const SERVER_HEADER: &str = "x-server";

/// The greeter service of the examples.
#[derive(Debug, Clone)]
pub struct Greeter {
    server: MetadataValue<zrpc::tonic::metadata::Ascii>,
    delay: Duration,
}

impl Greeter {
    /// A greeter that names itself `server` in the `x-server` response metadata and answers
    /// each `SayHello` after `delay` (zero: at once).
    ///
    /// A `server` name that is not valid ASCII metadata is replaced by `"unknown"`.
    pub fn new(server: &str, delay: Duration) -> Self {
        let server = server
            .parse()
            .unwrap_or_else(|_| MetadataValue::from_static("unknown"));
        Self { server, delay }
    }

    /// The tonic service to hand to `zrpc::Server::add_service`.
    pub fn into_service(self) -> GreeterServer<Self> {
        GreeterServer::new(self)
    }

    fn reply<T>(&self, message: T) -> Response<T> {
        let mut response = Response::new(message);
        response
            .metadata_mut()
            .insert(SERVER_HEADER, self.server.clone());
        response
    }
}

type HelloStream = Pin<Box<dyn Stream<Item = Result<HelloReply, Status>> + Send + 'static>>;

#[zrpc::tonic::async_trait]
impl GreeterApi for Greeter {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let name = request.into_inner().name;
        Ok(self.reply(HelloReply {
            message: format!("hello {name}"),
        }))
    }

    type SayHelloStreamStream = HelloStream;

    async fn say_hello_stream(
        &self,
        request: Request<HelloStreamRequest>,
    ) -> Result<Response<Self::SayHelloStreamStream>, Status> {
        let HelloStreamRequest {
            name,
            count,
            interval_ms,
        } = request.into_inner();
        let interval = Duration::from_millis(u64::from(interval_ms));
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            for i in 0..count {
                if i > 0 && !interval.is_zero() {
                    tokio::time::sleep(interval).await;
                }
                let reply = HelloReply {
                    message: format!("hello {name} {i}"),
                };
                if tx.send(Ok(reply)).await.is_err() {
                    break; // the caller went away
                }
            }
        });
        let stream: HelloStream = Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx));
        Ok(self.reply(stream))
    }
}
