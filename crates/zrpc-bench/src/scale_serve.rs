//! `zrpc-bench scale-serve`: many endpoints from one process, each a bare tonic greeter on a
//! listener of its own on 127.0.0.1:0 (a real HTTP/2 gRPC listener per endpoint). Prints
//! `{"ports": [...]}` once every one listens, then serves until killed.

use std::pin::Pin;

use anyhow::Result;
use tonic::{Request, Response, Status};
use zrpc_tests::pb::greeter_server::{Greeter, GreeterServer};
use zrpc_tests::pb::{HelloReply, HelloRequest, HelloStreamRequest};

/// The `scale-serve` arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ScaleServeArgs {
    /// Listeners (endpoints).
    #[arg(long)]
    ports: usize,
}

#[derive(Debug, Clone, Copy)]
struct Hello;

#[tonic::async_trait]
impl Greeter for Hello {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        Ok(Response::new(HelloReply {
            message: format!("hello {}", req.into_inner().name),
        }))
    }

    type SayHelloStreamStream = Pin<
        Box<dyn tonic::codegen::tokio_stream::Stream<Item = Result<HelloReply, Status>> + Send>,
    >;

    async fn say_hello_stream(
        &self,
        _req: Request<HelloStreamRequest>,
    ) -> Result<Response<Self::SayHelloStreamStream>, Status> {
        Err(Status::unimplemented("not served here"))
    }
}

pub(crate) fn run(args: ScaleServeArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut ports = Vec::with_capacity(args.ports);
        for _ in 0..args.ports {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            ports.push(l.local_addr()?.port());
            let incoming = tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true));
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(GreeterServer::new(Hello))
                    .serve_with_incoming(incoming),
            );
        }
        println!("{}", serde_json::json!({ "ports": ports }));
        std::future::pending::<()>().await;
        Ok(())
    })
}
