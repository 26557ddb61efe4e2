//! The custom-layer example of `docs/middleware.md`, compiled and run: the same tower layer on
//! the server, inside the chain (`Server::layer`) and around it (`Server::outer_layer`), and
//! around the client.

#![allow(missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use zrpc::tonic;
use zrpc_examples::greeter::Greeter;
use zrpc_examples::pb::HelloRequest;
use zrpc_examples::pb::greeter_client::GreeterClient;

// --- from docs/middleware.md ---------------------------------------------------------------

/// Logs the method of every call and how long the inner service took to answer its headers.
#[derive(Clone, Debug, Default)]
struct LogLayer {
    calls: Arc<AtomicUsize>,
}

impl<S> tower::Layer<S> for LogLayer {
    type Service = Log<S>;
    fn layer(&self, inner: S) -> Log<S> {
        Log {
            inner,
            calls: self.calls.clone(),
        }
    }
}

#[derive(Clone, Debug)]
struct Log<S> {
    inner: S,
    calls: Arc<AtomicUsize>,
}

impl<S, B> tower::Service<http::Request<tonic::body::Body>> for Log<S>
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let method = req.uri().path().to_owned();
        let started = Instant::now();
        self.calls.fetch_add(1, Ordering::Relaxed);
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            eprintln!("{method} answered in {:?}", started.elapsed());
            res
        })
    }
}

// -------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_user_layer_on_both_sides() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let conf = zrpc::RpcServerConf::new("greeter.layer", addr.clone()).with_shutdown(
        zrpc::ShutdownConf::new(Duration::ZERO, Duration::from_secs(5)),
    );
    let (server_layer, outer_layer) = (LogLayer::default(), LogLayer::default());
    let server = zrpc::server(conf)
        .unwrap()
        .outer_layer(outer_layer.clone())
        .layer(server_layer.clone())
        .add_service(Greeter::new(&addr, Duration::ZERO).into_service());
    let handle = server.handle();
    let serving = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));

    let client = zrpc::client(zrpc::RpcClientConf::direct([addr]))
        .await
        .unwrap();
    let client_layer = LogLayer::default();
    let svc = tower::ServiceBuilder::new()
        .layer(client_layer.clone())
        .service(client.clone());
    let mut greeter = GreeterClient::new(svc);
    for _ in 0..3 {
        greeter
            .say_hello(HelloRequest {
                name: "layer".into(),
            })
            .await
            .unwrap();
    }
    assert_eq!(client_layer.calls.load(Ordering::Relaxed), 3);
    assert_eq!(server_layer.calls.load(Ordering::Relaxed), 3);
    assert_eq!(outer_layer.calls.load(Ordering::Relaxed), 3);

    handle.shutdown();
    serving.await.unwrap().unwrap();
}
