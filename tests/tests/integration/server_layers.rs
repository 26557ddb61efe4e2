//! User layers on the server: `Server::outer_layer` wraps the whole chain and sees every call,
//! the ones zrpc's stages reject included; `Server::layer` sits next to the services and sees
//! only the calls the stages admitted.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tonic::{Code, Request};
use zrpc_tests::greeter::{SAY_HELLO, TestGreeter, test_conf};
use zrpc_tests::pb::HelloRequest;

/// What a layer saw of one call: its path, the HTTP status and the `grpc-status` of the
/// response head (`None` when the status comes in the trailers, as for an answered call).
type Seen = (String, u16, Option<String>);

/// Records every call that passes it and the head of its response.
#[derive(Clone, Default)]
struct Record {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Record {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl<S> tower::Layer<S> for Record {
    type Service = Recorded<S>;
    fn layer(&self, inner: S) -> Recorded<S> {
        Recorded {
            inner,
            seen: self.seen.clone(),
        }
    }
}

#[derive(Clone)]
struct Recorded<S> {
    inner: S,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl<S, B> tower::Service<http::Request<tonic::body::Body>> for Recorded<S>
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let path = req.uri().path().to_owned();
        let seen = self.seen.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await?;
            let status = res
                .headers()
                .get("grpc-status")
                .map(|v| v.to_str().unwrap().to_owned());
            seen.lock()
                .unwrap()
                .push((path, res.status().as_u16(), status));
            Ok(res)
        })
    }
}

fn hello(token: Option<&str>) -> Request<HelloRequest> {
    let mut r = Request::new(HelloRequest { name: "x".into() });
    r.metadata_mut().insert("app", "billing".parse().unwrap());
    if let Some(t) = token {
        r.metadata_mut().insert("token", t.parse().unwrap());
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outer_layer_sees_every_call_and_an_inner_layer_only_the_admitted_ones() {
    let (outer, inner) = (Record::default(), Record::default());
    let mut conf = test_conf("layers.rpc")
        .with_auth_tokens([("billing", "s3cret")])
        .with_cpu_threshold(0);
    conf.strict_control = true;
    let greeter = TestGreeter::new();
    let server = zrpc_server::Server::new(conf)
        .unwrap()
        .add_service(greeter.clone().into_service())
        .breaker_registry(Arc::new(zrpc_core::breaker::BreakerRegistry::default()))
        .outer_layer(outer.clone())
        .layer(inner.clone());
    let handle = server.handle();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let serving = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));
    let addr = handle.serving().await.unwrap();

    // Admitted and answered.
    let mut c = zrpc_tests::pb::greeter_client::GreeterClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    c.say_hello(hello(Some("s3cret"))).await.unwrap();
    // Rejected by auth, inside the chain.
    let e = c.say_hello(hello(None)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    // Rejected by the transport's first stage: not a gRPC request.
    let sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(sock).await.unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{SAY_HELLO}"))
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let (res, _) = send.ready().await.unwrap().send_request(req, true).unwrap();
    assert_eq!(res.await.unwrap().status(), 415);

    let unauthenticated = (Code::Unauthenticated as i32).to_string();
    let invalid = (Code::InvalidArgument as i32).to_string();
    assert_eq!(
        outer.seen(),
        vec![
            (SAY_HELLO.to_owned(), 200, None),
            (SAY_HELLO.to_owned(), 200, Some(unauthenticated)),
            (SAY_HELLO.to_owned(), 415, Some(invalid)),
        ],
        "the outer layer sees every call with the response the client got"
    );
    assert_eq!(
        inner.seen(),
        vec![(SAY_HELLO.to_owned(), 200, None)],
        "the inner layer sees only the call the stages admitted"
    );
    assert_eq!(greeter.started(), 1);
    handle.shutdown();
    serving.await.unwrap().unwrap();
}
