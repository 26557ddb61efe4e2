//! A configurable Greeter for server tests, and a helper that runs it behind a zrpc
//! [`Server`] on `127.0.0.1:0`.
//!
//! Per-request behaviour comes from the request name, a comma-separated list of
//! directives (anything else is just a name):
//! - `sleep:<ms>`: wait before answering;
//! - `block:<ms>`: hold the worker thread before answering (a blocking sleep, as a handler
//!   doing CPU work that never awaits would);
//! - `fail:<code>`: answer with that numeric gRPC code (message `"failed on purpose"`);
//! - `panic` / `panic:<msg>`: panic in the handler;
//! - `compression`: end the reply with how the request arrived (` [compressed: true]`, `false`,
//!   or `none` without a `zrpc::compression::CallCompression`);
//! - `send:<encoding>` (`gzip`, `identity`, ...): the call's response compression, chosen by
//!   the handler through its `CallCompression`.
//!
//! Builder fields apply to every call: [`TestGreeter::with_delay`],
//! [`TestGreeter::with_failure`], [`TestGreeter::with_panic`]. [`TestGreeter::with_names`]
//! records every call's name, so that a test can tell which server a call reached.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tonic::{Code, Request, Response, Status};
use zrpc_core::breaker::BreakerRegistry;
use zrpc_core::grpc::compression::{CallCompression, Encoding};
use zrpc_server::conf::ShutdownConf;
use zrpc_server::{RpcServerConf, Server, ServerHandle};

use crate::pb::greeter_client::GreeterClient;
use crate::pb::greeter_server::{Greeter, GreeterServer};
use crate::pb::{HelloReply, HelloRequest, HelloStreamRequest};

/// The encoded descriptor set of `proto/greeter.proto` (for reflection and streaming detection).
pub const GREETER_DESCRIPTOR: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/greeter_descriptor.bin"));

/// Full method names of the Greeter.
pub const SAY_HELLO: &str = "/greeter.Greeter/SayHello";
/// The server-streaming method.
pub const SAY_HELLO_STREAM: &str = "/greeter.Greeter/SayHelloStream";

#[derive(Debug, Default)]
struct Counters {
    started: AtomicU64,
    finished: AtomicU64,
    /// Unary calls whose handler was dropped before it finished.
    dropped: AtomicU64,
    /// Notified at every change of the counts, for [`TestGreeter::wait_for`].
    changed: tokio::sync::Notify,
    /// With [`TestGreeter::with_names`]: the names of the unary calls that entered the handler,
    /// and of those whose handler finished.
    names: Option<std::sync::Mutex<Names>>,
}

#[derive(Debug, Default)]
struct Names {
    started: std::collections::HashSet<String>,
    finished: std::collections::HashSet<String>,
}

impl Counters {
    fn add(&self, count: &AtomicU64) {
        count.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }
}

/// Counts its handler as dropped unless it finished.
struct Running(Arc<Counters>, bool);

impl Drop for Running {
    fn drop(&mut self) {
        if !self.1 {
            self.0.add(&self.0.dropped);
        }
    }
}

/// The test Greeter. Cheap to clone; clones share their counters.
#[derive(Debug, Clone, Default)]
pub struct TestGreeter {
    delay: Duration,
    failure: Option<Code>,
    panic: bool,
    counters: Arc<Counters>,
}

/// What a name asks the handler to do.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Directives {
    /// `sleep:<ms>`.
    pub sleep: Option<Duration>,
    /// `block:<ms>`.
    pub block: Option<Duration>,
    /// `fail:<code>`.
    pub fail: Option<Code>,
    /// `panic[:<msg>]`.
    pub panic: Option<String>,
    /// `compression`.
    pub report_compression: bool,
    /// `send:<encoding>`: `Some(None)` for `identity`.
    pub send: Option<Option<Encoding>>,
}

/// Parses the directives of a request name.
pub fn directives(name: &str) -> Directives {
    let mut d = Directives::default();
    for part in name.split(',').map(str::trim) {
        if let Some(ms) = part.strip_prefix("sleep:") {
            d.sleep = ms.parse().ok().map(Duration::from_millis);
        } else if let Some(ms) = part.strip_prefix("block:") {
            d.block = ms.parse().ok().map(Duration::from_millis);
        } else if let Some(code) = part.strip_prefix("fail:") {
            d.fail = code.parse::<i32>().ok().map(Code::from_i32);
        } else if part == "panic" {
            d.panic = Some("test panic".to_owned());
        } else if let Some(msg) = part.strip_prefix("panic:") {
            d.panic = Some(msg.to_owned());
        } else if part == "compression" {
            d.report_compression = true;
        } else if let Some(name) = part.strip_prefix("send:") {
            d.send = zrpc_core::grpc::compression::parse_setting(name).ok();
        }
    }
    d
}

impl TestGreeter {
    /// A greeter that answers `hello <name>` at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// Waits `delay` in every unary call.
    #[must_use]
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Fails every unary call with `code`.
    #[must_use]
    pub fn with_failure(mut self, code: Code) -> Self {
        self.failure = Some(code);
        self
    }

    /// Panics in every unary call.
    #[must_use]
    pub fn with_panic(mut self) -> Self {
        self.panic = true;
        self
    }

    /// Records the name of every unary call (started and finished), for [`TestGreeter::saw`]
    /// and [`TestGreeter::answered`]: tests that must tell which server a call reached. Must be
    /// called before the greeter is cloned (clones share the record).
    #[must_use]
    pub fn with_names(mut self) -> Self {
        let counters = Arc::get_mut(&mut self.counters).expect("with_names before cloning");
        counters.names = Some(std::sync::Mutex::new(Names::default()));
        self
    }

    /// Whether a unary call named `name` entered the handler (needs [`TestGreeter::with_names`]).
    pub fn saw(&self, name: &str) -> bool {
        self.names(|n| n.started.contains(name))
    }

    /// Whether the handler of a unary call named `name` finished, i.e. its answer was handed to
    /// the server (needs [`TestGreeter::with_names`]).
    pub fn answered(&self, name: &str) -> bool {
        self.names(|n| n.finished.contains(name))
    }

    fn names<T>(&self, f: impl FnOnce(&Names) -> T) -> T {
        let names = self
            .counters
            .names
            .as_ref()
            .expect("the greeter records names only after with_names()");
        f(&names.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn record(&self, name: &str, finished: bool) {
        if let Some(names) = &self.counters.names {
            let mut n = names.lock().unwrap_or_else(|e| e.into_inner());
            let set = if finished {
                &mut n.finished
            } else {
                &mut n.started
            };
            set.insert(name.to_owned());
        }
    }

    /// Unary calls that entered the handler.
    pub fn started(&self) -> u64 {
        self.counters.started.load(Ordering::SeqCst)
    }

    /// Unary calls whose handler ran to completion (not dropped).
    pub fn finished(&self) -> u64 {
        self.counters.finished.load(Ordering::SeqCst)
    }

    /// Unary calls whose handler was dropped before it finished (a timeout, the caller gone).
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::SeqCst)
    }

    /// Waits until `done` holds of this greeter's counts (checked at each change of them).
    ///
    /// # Panics
    ///
    /// When it does not hold within 10 s.
    pub async fn wait_for(&self, what: &str, done: impl Fn(&TestGreeter) -> bool) {
        let wait = async {
            loop {
                let changed = self.counters.changed.notified();
                if done(self) {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "greeter: {what} not seen in 10 s (started {}, finished {}, dropped {})",
                    self.started(),
                    self.finished(),
                    self.dropped()
                )
            });
    }

    /// The tonic service.
    pub fn into_service(self) -> GreeterServer<TestGreeter> {
        GreeterServer::new(self)
    }
}

#[tonic::async_trait]
impl Greeter for TestGreeter {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let call = req.extensions().get::<CallCompression>().cloned();
        let name = req.into_inner().name;
        self.record(&name, false);
        self.counters.add(&self.counters.started);
        let mut running = Running(Arc::clone(&self.counters), false);
        let d = directives(&name);
        if let (Some(send), Some(call)) = (d.send, &call) {
            call.set_send(send);
        }
        let delay = d.sleep.unwrap_or(self.delay);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if let Some(block) = d.block {
            std::thread::sleep(block);
        }
        if let Some(msg) = d
            .panic
            .or_else(|| self.panic.then(|| "test panic".to_owned()))
        {
            panic!("{msg}");
        }
        running.1 = true;
        self.record(&name, true);
        self.counters.add(&self.counters.finished);
        if let Some(code) = d.fail.or(self.failure) {
            return Err(Status::new(code, "failed on purpose"));
        }
        let mut message = format!("hello {name}");
        if d.report_compression {
            let how = call.and_then(|c| c.last_received_compressed());
            message += &match how {
                Some(c) => format!(" [compressed: {c}]"),
                None => " [compressed: none]".to_owned(),
            };
        }
        Ok(Response::new(HelloReply { message }))
    }

    type SayHelloStreamStream = Pin<Box<dyn Stream<Item = Result<HelloReply, Status>> + Send>>;

    async fn say_hello_stream(
        &self,
        req: Request<HelloStreamRequest>,
    ) -> Result<Response<Self::SayHelloStreamStream>, Status> {
        let r = req.into_inner();
        let interval = Duration::from_millis(u64::from(r.interval_ms));
        let stream = async_stream(r.name, r.count, interval);
        Ok(Response::new(Box::pin(stream)))
    }
}

fn async_stream(
    name: String,
    count: u32,
    interval: Duration,
) -> impl Stream<Item = Result<HelloReply, Status>> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        for i in 0..count {
            if i > 0 && !interval.is_zero() {
                tokio::time::sleep(interval).await;
            }
            let reply = HelloReply {
                message: format!("hello {name} {i}"),
            };
            if tx.send(Ok(reply)).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// A bare tonic server (no zrpc layer, `TCP_NODELAY` on) with a [`TestGreeter`] on
/// `127.0.0.1:0`: the benches' anchor. Returns its address; the server runs until the runtime
/// stops.
///
/// # Panics
///
/// When no loopback port can be bound.
pub async fn spawn_bare_tonic() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TestGreeter::new().into_service())
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            ),
    );
    addr
}

/// A config for tests: `127.0.0.1:0`, short WrapUpTime (100 ms), WaitTime 10 s.
pub fn test_conf(name: &str) -> RpcServerConf {
    RpcServerConf::new(name, "127.0.0.1:0").with_shutdown(ShutdownConf::new(
        Duration::from_millis(100),
        Duration::from_secs(10),
    ))
}

/// A running test server.
#[derive(Debug)]
pub struct TestServer {
    /// Its gRPC address.
    pub addr: SocketAddr,
    /// Its handle.
    pub handle: ServerHandle,
    /// The greeter it serves (counters).
    pub greeter: TestGreeter,
    join: JoinHandle<Result<(), zrpc_server::Error>>,
}

impl TestServer {
    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A fresh tonic client (its own connection).
    pub async fn client(&self) -> GreeterClient<tonic::transport::Channel> {
        GreeterClient::connect(self.url())
            .await
            .expect("connect to the test server")
    }

    /// A fresh channel (its own connection), e.g. for a health client.
    pub async fn channel(&self) -> tonic::transport::Channel {
        tonic::transport::Endpoint::from_shared(self.url())
            .expect("valid url")
            .connect()
            .await
            .expect("connect to the test server")
    }

    /// Starts the graceful shutdown without waiting.
    pub fn begin_shutdown(&self) {
        self.handle.shutdown();
    }

    /// Shuts down and waits for `serve` to return.
    pub async fn shutdown(self) -> Result<(), zrpc_server::Error> {
        self.handle.shutdown();
        self.join.await.expect("server task panicked")
    }

    /// Waits for `serve` to return (after a shutdown was started).
    pub async fn join(self) -> Result<(), zrpc_server::Error> {
        self.join.await.expect("server task panicked")
    }
}

/// Starts `greeter` behind a zrpc server built from `conf` (with the greeter descriptor set
/// registered), after `customize` (token store, CPU source, ...).
pub async fn start_server_with(
    conf: RpcServerConf,
    greeter: TestGreeter,
    customize: impl FnOnce(Server) -> Server,
) -> TestServer {
    let server = Server::new(conf)
        .expect("valid test config")
        .add_service(greeter.clone().into_service())
        .reflection_descriptor(GREETER_DESCRIPTOR)
        // Each test server has its own breakers: tests run in parallel in one process.
        .breaker_registry(std::sync::Arc::new(BreakerRegistry::default()));
    let server = customize(server);
    let handle = server.handle();
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let join = tokio::spawn(server.serve_with_listener(listener, std::future::pending()));
    let addr = handle.serving().await.expect("server serves");
    TestServer {
        addr,
        handle,
        greeter,
        join,
    }
}

/// Starts `greeter` behind a zrpc server built from `conf`.
pub async fn start_server(conf: RpcServerConf, greeter: TestGreeter) -> TestServer {
    start_server_with(conf, greeter, |s| s).await
}

/// A minimal HTTP/1.1 GET (for the DevServer): returns the status code and the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await?;
    Ok(parse_http_response(&raw))
}

/// The status code and the body of a raw HTTP/1.x response (0 when there is no status line).
pub fn parse_http_response(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_directives() {
        assert_eq!(
            directives("bob,sleep:20,fail:14"),
            Directives {
                sleep: Some(Duration::from_millis(20)),
                fail: Some(Code::Unavailable),
                ..Directives::default()
            }
        );
        assert_eq!(directives("block:5").block, Some(Duration::from_millis(5)));
        assert_eq!(directives("panic:oops").panic.as_deref(), Some("oops"));
        assert_eq!(directives("alice"), Directives::default());
    }
}
