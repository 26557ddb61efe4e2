//! An endpoint's HTTP/2 connection: hyper's client connection, made on demand and made again
//! once lost.
//!
//! zrpc holds hyper's `SendRequest` itself rather than a tonic `Channel`: a channel queues each
//! request to a worker task (`tower::buffer`) that then hands it to this same `SendRequest`, and
//! wraps it in layers whose work the client already does once per call (the deadline timer, the
//! origin). That hop was about 4,800 instructions of a call (`docs/benchmarks.md`, "What tonic's
//! channel itself costs a call"). What the channel did that a call needs is here: connect when
//! there is no live connection, TLS, and the request's `:scheme`, `:authority` and `user-agent`.
//! As in the channel, the connect is a task of its own: the requests that came while it ran are
//! sent as soon as it is done, whether or not their callers are polling, and a caller that
//! gives up does not stop it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::rt::TokioTimer;
use tokio::sync::oneshot;
use tonic::body::Body;

use super::wire::{Connector, within};
use crate::failure::ConnectFailed;

/// hyper's handle on a connection: sends requests to its connection task.
type Sender = http2::SendRequest<Body>;

/// A response on its way (boxed: hyper's future has no name).
pub(crate) type ResponseFuture =
    Pin<Box<dyn Future<Output = hyper::Result<http::Response<Incoming>>> + Send>>;

/// A request waiting for the connect: its response on its way once sent.
pub(crate) type Connecting = oneshot::Receiver<Result<ResponseFuture, ConnectFailed>>;

/// A request that came while the connect ran, and where its response goes.
struct Waiter {
    req: http::Request<Body>,
    tx: oneshot::Sender<Result<ResponseFuture, ConnectFailed>>,
}

/// The `user-agent` of every request (gRPC's structured form: name/version).
const USER_AGENT: &str = concat!("grpc-rust-zrpc/", env!("CARGO_PKG_VERSION"));

/// How a connection is made: the watched TCP connect, TLS, hyper's HTTP/2 settings.
struct Dial {
    connector: Connector,
    uri: http::Uri,
    tls: Option<crate::tls::TlsConnect>,
    settings: http2::Builder<Boxing>,
}

/// The connection of an endpoint, or the connect under way and the requests waiting for it.
enum Slot {
    Idle,
    Connecting(Vec<Waiter>),
    Ready(Sender),
}

/// One endpoint's connection (see the module docs).
pub(crate) struct Conn {
    slot: Arc<parking_lot::Mutex<Slot>>,
    dial: Arc<Dial>,
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("authority", &self.authority)
            .finish_non_exhaustive()
    }
}

/// Spawns hyper's tasks (the connection, each request's body) boxed, as tonic's channel does.
/// hyper's task is an enum as large as the whole HTTP/2 connection, so each request body's task
/// is too, and tokio moves a task's future several times between spawning and finishing it;
/// boxed, it moves a pointer (`docs/benchmarks.md`, "Spawning boxed"). The server has its
/// twin; zrpc-core, which both share, depends on neither hyper nor tokio to hold one.
#[derive(Clone, Copy, Debug)]
struct Boxing;

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for Boxing {
    fn execute(&self, fut: F) {
        tokio::spawn(Box::pin(fut));
    }
}

/// The HTTP/2 settings of a connection: each limit set on purpose (in hyper's builder `None`
/// often means no limit); docs/security.md tables them.
fn settings(keepalive: Option<Duration>) -> http2::Builder<Boxing> {
    let mut b = http2::Builder::new(Boxing);
    b.timer(TokioTimer::new())
        // the largest header list (and trailers) a server may send: hyper's 16 KiB
        .max_header_list_size(16 << 10)
        // streams reset for the server's protocol errors before the connection is ended (h2's
        // MadeYouReset guard, which `None` would turn off)
        .max_local_error_reset_streams(1024)
        // locally reset streams remembered to ignore their late frames: h2's 50, 1 s
        .max_concurrent_reset_streams(50)
        .reset_stream_duration(Duration::from_secs(1))
        // the RFC's minimum frame size; hyper's client windows (2 MiB per stream, 5 MiB per
        // connection), fixed: a response's unread data is bounded by them
        .max_frame_size(16 << 10)
        .initial_stream_window_size(2 << 20)
        .initial_connection_window_size(5 << 20)
        .adaptive_window(false);
    if let Some(k) = keepalive {
        b.keep_alive_interval(k)
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(false);
    }
    b
}

impl Conn {
    /// The connection to `authority` (`host:port`), made through `connector` (over TLS with
    /// `tls`) when a call first needs it.
    pub(crate) fn new(
        authority: http::uri::Authority,
        connector: Connector,
        tls: Option<crate::tls::TlsConnect>,
        keepalive: Option<Duration>,
    ) -> Conn {
        let scheme = if tls.is_some() {
            http::uri::Scheme::HTTPS
        } else {
            http::uri::Scheme::HTTP
        };
        let uri = http::Uri::builder()
            .scheme(scheme.clone())
            .authority(authority.clone())
            .path_and_query("/")
            .build()
            .unwrap_or_default();
        Conn {
            slot: Arc::new(parking_lot::Mutex::new(Slot::Idle)),
            dial: Arc::new(Dial {
                connector,
                uri,
                tls,
                settings: settings(keepalive),
            }),
            scheme,
            authority,
        }
    }

    /// Sends `req` on the live connection; without one, queues it for the connect (started now
    /// unless one runs) and returns where its response will come from.
    pub(crate) fn send(&self, mut req: http::Request<Body>) -> Result<ResponseFuture, Connecting> {
        self.origin(&mut req);
        let mut slot = self.slot.lock();
        if let Slot::Ready(sender) = &mut *slot
            && !sender.is_closed()
        {
            return Ok(Box::pin(sender.send_request(req)));
        }
        let (tx, rx) = oneshot::channel();
        let waiter = Waiter { req, tx };
        if let Slot::Connecting(waiters) = &mut *slot {
            // Before the queue grows, callers that gave up (their deadline passed, their
            // future was dropped) leave it: it holds live callers' requests only, not every
            // request of the connect's up to 3 s. Amortized: once per doubling.
            if waiters.len() == waiters.capacity() {
                waiters.retain(|w| !w.tx.is_closed());
            }
            waiters.push(waiter);
            return Err(rx);
        }
        *slot = Slot::Connecting(vec![waiter]);
        drop(slot);
        let (dial, slot) = (Arc::clone(&self.dial), Arc::clone(&self.slot));
        // made before the task: dropped with it, even unpolled
        let stopped = Stopped(Some(Arc::clone(&slot)));
        tokio::spawn(async move {
            let mut stopped = stopped;
            let connected = dial.connect_with(dial.connector.clone()).await;
            stopped.0 = None;
            let waiters = {
                let mut slot = slot.lock();
                let next = match &connected {
                    Ok(sender) => Slot::Ready(sender.clone()),
                    Err(_) => Slot::Idle,
                };
                match std::mem::replace(&mut *slot, next) {
                    Slot::Connecting(waiters) => waiters,
                    _ => Vec::new(),
                }
            };
            for Waiter { req, tx } in waiters {
                // a caller that gave up: its request is not sent
                if tx.is_closed() {
                    continue;
                }
                let _ = tx.send(match &connected {
                    Ok(sender) => Ok(Box::pin(sender.clone().send_request(req))),
                    Err(e) => Err(e.clone()),
                });
            }
        });
        Err(rx)
    }

    /// Lets the live connection go: the calls on it finish there (it closes after them), the
    /// next call connects anew.
    /// For a connection that carries nothing while the server answers on a new one (a path a
    /// middlebox dropped without a reset: the kernel would retransmit into it for ~15 minutes).
    pub(crate) fn recycle(&self) {
        let mut slot = self.slot.lock();
        if matches!(*slot, Slot::Ready(_)) {
            *slot = Slot::Idle;
        }
    }

    /// A connection of its own, not the calls' (the probes').
    pub(crate) async fn connect_apart(
        &self,
        connector: Connector,
    ) -> Result<Sender, ConnectFailed> {
        self.dial.connect_with(connector).await
    }

    /// Puts the endpoint's scheme and authority in the URI of `req`, and a `user-agent`.
    pub(crate) fn origin(&self, req: &mut http::Request<Body>) {
        let mut uri = http::uri::Parts::from(std::mem::take(req.uri_mut()));
        uri.scheme = Some(self.scheme.clone());
        uri.authority = Some(self.authority.clone());
        if uri.path_and_query.is_none() {
            uri.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
        }
        // a URI of valid parts with a path is valid
        *req.uri_mut() = http::Uri::from_parts(uri).unwrap_or_default();
        if let http::header::Entry::Vacant(e) = req.headers_mut().entry(http::header::USER_AGENT) {
            e.insert(http::HeaderValue::from_static(USER_AGENT));
        }
    }
}

/// The connect task, until it has the connect's result: dropped before (its runtime shut down
/// under it), it answers the waiting callers with an error and leaves the slot idle, so that
/// the next call connects anew. Otherwise the slot would stay `Connecting` and every later
/// call of the endpoint would queue until its deadline (a client shared by runtimes, one of
/// which ended).
struct Stopped(Option<Arc<parking_lot::Mutex<Slot>>>);

impl Drop for Stopped {
    fn drop(&mut self) {
        let Some(slot) = self.0.take() else {
            return;
        };
        let waiters = {
            let mut slot = slot.lock();
            let Slot::Connecting(waiters) = &mut *slot else {
                return;
            };
            let waiters = std::mem::take(waiters);
            *slot = Slot::Idle;
            waiters
        };
        let stopped = ConnectFailed::new("the connect was stopped: its runtime shut down");
        for Waiter { tx, .. } in waiters {
            let _ = tx.send(Err(stopped.clone()));
        }
    }
}

impl Dial {
    /// Connects through `connector`, shakes hands (TLS, then HTTP/2) and spawns the
    /// connection's task. Any failure here is a request that never left the client.
    async fn connect_with(&self, mut connector: Connector) -> Result<Sender, ConnectFailed> {
        let timeout = connector.connect_timeout;
        let started = tokio::time::Instant::now();
        let io = tower::Service::call(&mut connector, self.uri.clone())
            .await
            .map_err(ConnectFailed::new)?;
        match &self.tls {
            None => self.handshake(io).await,
            Some(tls) => {
                // the handshake gets what the TCP connect left of the timeout: one budget
                let left = timeout.map(|t| t.saturating_sub(started.elapsed()));
                let io = within(left, tls.handshake(io.into_inner()))
                    .await
                    .map_err(ConnectFailed::new)?;
                self.handshake(hyper_util::rt::TokioIo::new(io)).await
            }
        }
    }

    async fn handshake<T>(&self, io: T) -> Result<Sender, ConnectFailed>
    where
        T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (sender, conn) = self
            .settings
            .handshake(io)
            .await
            .map_err(ConnectFailed::new)?;
        let authority = self.uri.authority().map(ToString::to_string);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(endpoint = ?authority, "connection ended: {}", crate::failure::describe(&e));
            }
        });
        Ok(sender)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balancer::wire::Wire;

    /// A connection to a listener that accepts nothing, but whose kernel completes the TCP
    /// connects (its backlog).
    fn unanswered() -> (std::net::TcpListener, Conn) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        let connector = Connector {
            wire: Arc::new(Wire::default()),
            connect_timeout: None,
            plaintext: true,
        };
        (listener, Conn::new(authority, connector, None, None))
    }

    /// Callers that gave up while the connect ran leave its queue; the live ones stay and are
    /// sent once connected.
    #[tokio::test]
    async fn callers_that_gave_up_leave_the_connect_queue() {
        let (listener, conn) = unanswered();
        let queue = || match conn.send(http::Request::new(Body::empty())) {
            Err(waiting) => waiting,
            Ok(_) => panic!("sent with no connection"),
        };
        // A current-thread runtime: the connect task does not run before this test awaits.
        let live: Vec<Connecting> = (0..10).map(|_| queue()).collect();
        for _ in 0..10_000 {
            drop(queue());
        }
        let queued = match &*conn.slot.lock() {
            Slot::Connecting(waiters) => waiters.len(),
            _ => panic!("the connect ended before the test awaited"),
        };
        assert!(queued <= 32, "{queued} requests queued for 10 live callers");
        for waiting in live {
            let sent = waiting
                .await
                .expect("the connect task answers every live caller");
            assert!(sent.is_ok(), "a live caller's request was not sent");
        }
        drop(listener);
    }

    /// A connect whose runtime shut down under it answers its callers with an error, and the
    /// next call connects anew: the endpoint is not left waiting for a connect no task runs.
    #[test]
    fn a_connect_stopped_with_its_runtime_leaves_the_endpoint_usable() {
        let (listener, conn) = unanswered();
        let queue = || match conn.send(http::Request::new(Body::empty())) {
            Err(waiting) => waiting,
            Ok(_) => panic!("sent with no connection"),
        };
        let first = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // the connect task is spawned there, and never runs: the runtime ends first
        let entered = first.enter();
        let waiting = queue();
        drop(entered);
        drop(first);
        let second = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        second.block_on(async {
            let answer = tokio::time::timeout(Duration::from_secs(1), waiting)
                .await
                .expect("the caller of a stopped connect is answered");
            let err = answer.expect("answered, not dropped").err();
            assert!(
                err.is_some_and(|e| e.to_string() == "cannot connect"),
                "a connect error"
            );
            let sent = tokio::time::timeout(Duration::from_secs(5), queue())
                .await
                .expect("a new connect ran")
                .expect("answered");
            assert!(sent.is_ok(), "sent on the new connection");
        });
        drop(listener);
    }
}
