//! Harness of the client tests: plain tonic greeter servers on `127.0.0.1:0`, each in its own
//! runtime so that [`Backend::kill`] can make it vanish at once (every connection closed, port
//! refused), with a switchable failure code and a hit counter.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_stream::Stream;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Code, Request, Response, Status};
use zrpc_tests::pb::greeter_server::{Greeter, GreeterServer};
use zrpc_tests::pb::{HelloReply, HelloRequest, HelloStreamRequest};

#[derive(Debug, Default)]
struct State {
    id: String,
    delay_us: AtomicU64,
    fail: AtomicI32,
    /// With `fail` set: fail this many calls per thousand, spread as at random (0 = all).
    fail_per_mille: AtomicU64,
    /// Stall one call in this many (0 = none) for `stall_ms`.
    stall_every: AtomicU64,
    stall_ms: AtomicU64,
    /// `grpc-retry-pushback-ms` sent with failures (empty = none).
    pushback: Mutex<String>,
    hits: AtomicU64,
    /// Connections accepted.
    connections: AtomicU64,
    last_metadata: Mutex<Option<(String, String)>>,
    /// `grpc-previous-rpc-attempts` of the calls, by value (index 0 = absent).
    previous_attempts: [AtomicU64; 6],
}

#[derive(Debug, Clone)]
struct Svc(Arc<State>);

#[tonic::async_trait]
impl Greeter for Svc {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let s = &self.0;
        let index = s.hits.fetch_add(1, Ordering::SeqCst);
        let md = req.metadata();
        let previous = md
            .get("grpc-previous-rpc-attempts")
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
            .map_or(0, |n| (n + 1).min(5));
        s.previous_attempts[previous].fetch_add(1, Ordering::SeqCst);
        let get = |k: &str| {
            md.get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        *s.last_metadata.lock().unwrap() = Some((get("app"), get("token")));
        let mut delay = Duration::from_micros(s.delay_us.load(Ordering::SeqCst));
        let stall_every = s.stall_every.load(Ordering::SeqCst);
        if stall_every != 0 && index % stall_every == stall_every - 1 {
            delay += Duration::from_millis(s.stall_ms.load(Ordering::SeqCst));
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let fail = s.fail.load(Ordering::SeqCst);
        let per_mille = s.fail_per_mille.load(Ordering::SeqCst);
        // Knuth's multiplicative hash of the call's index: deterministic, spread like a coin
        let drawn = index.wrapping_mul(2_654_435_761) % 1000;
        if fail != 0 && (per_mille == 0 || drawn < per_mille) {
            let mut status = Status::new(Code::from_i32(fail), "failed on purpose");
            let pushback = s.pushback.lock().unwrap().clone();
            if !pushback.is_empty() {
                status
                    .metadata_mut()
                    .insert("grpc-retry-pushback-ms", pushback.parse().unwrap());
            }
            return Err(status);
        }
        Ok(Response::new(HelloReply {
            message: format!("{} {}", s.id, req.into_inner().name),
        }))
    }

    type SayHelloStreamStream = Pin<Box<dyn Stream<Item = Result<HelloReply, Status>> + Send>>;

    async fn say_hello_stream(
        &self,
        req: Request<HelloStreamRequest>,
    ) -> Result<Response<Self::SayHelloStreamStream>, Status> {
        let r = req.into_inner();
        let id = self.0.id.clone();
        let stream = async_stream(id, r.count, Duration::from_millis(u64::from(r.interval_ms)));
        Ok(Response::new(Box::pin(stream)))
    }
}

fn async_stream(
    id: String,
    count: u32,
    interval: Duration,
) -> impl Stream<Item = Result<HelloReply, Status>> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        for i in 0..count {
            if tx
                .send(Ok(HelloReply {
                    message: format!("{id} {i}"),
                }))
                .await
                .is_err()
            {
                return;
            }
            tokio::time::sleep(interval).await;
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// One greeter server in its own runtime.
#[derive(Debug)]
pub(crate) struct Backend {
    pub(crate) addr: SocketAddr,
    state: Arc<State>,
    runtime: Option<tokio::runtime::Runtime>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    stopped: Option<std::sync::mpsc::Receiver<()>>,
}

impl Backend {
    /// Starts a server answering after `delay`, replying `"<id> <name>"`.
    pub(crate) fn start(id: &str, delay: Duration) -> Backend {
        Backend::start_on("127.0.0.1:0", id, delay)
    }

    /// Starts a server on `addr` (e.g. the address of a killed one, to restart it).
    pub(crate) fn start_on(addr: &str, id: &str, delay: Duration) -> Backend {
        Backend::start_limited(addr, id, delay, None)
    }

    /// Starts a server on `addr` that accepts at most `streams` calls at once per connection.
    pub(crate) fn start_limited(
        addr: &str,
        id: &str,
        delay: Duration,
        streams: Option<u32>,
    ) -> Backend {
        let state = Arc::new(State {
            id: id.to_owned(),
            ..State::default()
        });
        state
            .delay_us
            .store(delay.as_micros() as u64, Ordering::SeqCst);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind(addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let svc = Svc(state.clone());
        let accepted = state.clone();
        let (shutdown, signal) = tokio::sync::oneshot::channel::<()>();
        let (stopped_tx, stopped) = std::sync::mpsc::channel();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let incoming =
                futures_util::StreamExt::inspect(TcpListenerStream::new(listener), move |conn| {
                    if conn.is_ok() {
                        accepted.connections.fetch_add(1, Ordering::SeqCst);
                    }
                });
            let r = tonic::transport::Server::builder()
                .max_concurrent_streams(streams)
                .add_service(GreeterServer::new(svc))
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = signal.await;
                })
                .await;
            let _ = stopped_tx.send(());
            r
        });
        Backend {
            addr,
            state,
            runtime: Some(runtime),
            shutdown: Some(shutdown),
            stopped: Some(stopped),
        }
    }

    /// `host:port`.
    pub(crate) fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// Calls that reached the handler.
    pub(crate) fn hits(&self) -> u64 {
        self.state.hits.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub(crate) fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Makes every call fail with `code` (0 = succeed again).
    pub(crate) fn set_failure(&self, code: Code) {
        self.state.fail.store(code as i32, Ordering::SeqCst);
    }

    /// Makes `per_mille` calls in a thousand fail with `code`, spread as at random (0 = all).
    pub(crate) fn set_failure_share(&self, code: Code, per_mille: u64) {
        self.state.fail_per_mille.store(per_mille, Ordering::SeqCst);
        self.set_failure(code);
    }

    /// Stalls one call in `every` for `stall` more.
    pub(crate) fn set_stall(&self, every: u64, stall: Duration) {
        self.state
            .stall_ms
            .store(stall.as_millis() as u64, Ordering::SeqCst);
        self.state.stall_every.store(every, Ordering::SeqCst);
    }

    /// Sends `grpc-retry-pushback-ms: <ms>` with each failure.
    pub(crate) fn set_pushback(&self, ms: &str) {
        *self.state.pushback.lock().unwrap() = ms.to_owned();
    }

    /// Calls that came with `grpc-previous-rpc-attempts: n` (`None`: without the header).
    pub(crate) fn calls_after(&self, n: Option<usize>) -> u64 {
        self.state.previous_attempts[n.map_or(0, |n| n + 1)].load(Ordering::SeqCst)
    }

    /// The `app`/`token` metadata of the last call.
    pub(crate) fn last_credentials(&self) -> Option<(String, String)> {
        self.state.last_metadata.lock().unwrap().clone()
    }

    /// Stops the server gracefully (GOAWAY, in-flight calls finish, listener closed) and waits
    /// until it has stopped.
    pub(crate) async fn stop_gracefully(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(rx) = self.stopped.take() {
            tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(10)))
                .await
                .unwrap()
                .unwrap();
        }
    }

    /// Kills the server: its runtime is shut down, every connection closed, the port refused.
    pub(crate) fn kill(&mut self) {
        if let Some(rt) = self.runtime.take() {
            // a runtime cannot be shut down (blocking) from inside another one's task
            std::thread::spawn(move || rt.shutdown_timeout(Duration::from_secs(1)))
                .join()
                .unwrap();
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A loopback address on which nothing listens.
pub(crate) fn dead_endpoint() -> String {
    format!("127.0.0.1:{}", zrpc_tests::ports::closed_port())
}
