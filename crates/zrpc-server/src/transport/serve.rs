//! zrpc's HTTP/2 serve loop, in place of tonic's `Server::serve_with_incoming_shutdown`.
//!
//! Each connection is served by hyper with every HTTP/2 limit set in [`builder`] (HTTP/1 is
//! refused); a connection past `MaxConnectionAge` gets a GOAWAY, and on shutdown every
//! connection gets one and the loop returns when all are closed. Each request is given to the
//! chain, an ordinary `tower::Service<Request<Body>>`, by one future ([`Dispatch`]) that does
//! what tonic's serve loop and its `RecoverError` wrapper did:
//!
//! - the body boxed once (under the request-bytes budget, recording the call's facts) and
//!   what the transport knows of the call put in the request's extensions ([`Intake`]: the
//!   call's [`Arrival`], with its kind looked up once from its path as its stream is accepted
//!   and the caller's deadline read as the request arrived; the governor's timeout stage
//!   enforces it over the whole call);
//! - **an error of the chain that is a `Status`** becomes that status's response; any other
//!   error resets the stream.
//!
//! The chain is called at the first poll of the stream's task, as tonic does: calling it when
//! hyper accepts the stream (in the connection's task) keeps more calls' allocations alive at
//! once.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http2::{Builder, Connection};
use hyper_util::rt::{TokioIo, TokioTimer};
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tonic::Status;
use tonic::body::Body;
use tonic::transport::server::Connected;
use tower_service::Service;

use super::budget::RequestBudget;
use crate::call::{
    Arrival, CallKind, CallerDeadline, ConnInfo, ConnState, InFlight, StreamingMethods,
};

use tower::BoxError;
use zrpc_core::shedder::Queued;

/// The HTTP/2 settings of a server that `Transport` chooses (the rest are fixed in
/// [`builder`]).
#[derive(Debug, Clone)]
pub(crate) struct Http2 {
    pub(crate) max_concurrent_streams: u32,
    pub(crate) max_header_list_size: u32,
    pub(crate) max_local_error_reset_streams: usize,
    pub(crate) max_pending_accept_reset_streams: usize,
    pub(crate) keepalive_interval: Option<Duration>,
    pub(crate) keepalive_timeout: Duration,
    /// A graceful GOAWAY once no call has been open for this long.
    pub(crate) max_connection_idle: Option<Duration>,
}

/// What the serve loop does to every request before the chain sees it: the call's kind looked
/// up, the body under the request-bytes budget (boxed once, as tonic's `Body`), the call
/// counted in flight from the moment its stream is accepted, and what the transport knows of
/// the call in the request's extensions (see [`Intake::prepare`]).
#[derive(Debug)]
pub(crate) struct Intake {
    pub(crate) budget: RequestBudget,
    /// The server's streaming methods: each call's kind is looked up here, once.
    pub(crate) streaming: StreamingMethods,
    /// The stage that counts calls in flight from the moment their stream is accepted.
    pub(crate) in_flight: Option<Arc<dyn InFlight>>,
    /// The connections open now (the admin view): counted per connection, never per call.
    pub(crate) connections: Arc<super::connections::Connections>,
}

impl Intake {
    /// The kind of the call `req` opens: looked up here once, read by every stage.
    fn kind<RB>(&self, req: &Request<RB>) -> CallKind {
        self.streaming.kind(req.uri().path())
    }

    /// Counts a call of `kind` in flight as hyper accepts its stream (in the connection's
    /// task), so that calls waiting for a worker thread count too: with handlers that keep
    /// their thread busy, they are most of the calls in the server (see
    /// [`AdaptiveShedder::queue`](zrpc_core::shedder::AdaptiveShedder::queue)).
    fn queue(&self, kind: CallKind) -> Option<Queued> {
        self.in_flight.as_ref().and_then(|c| c.accepted(kind))
    }

    /// `req` as the chain gets it: its body under the budget, and in its extensions tonic's
    /// `TcpConnectInfo` (for `Request::remote_addr`), the client's
    /// [`PeerIdentity`](crate::PeerIdentity) under mTLS, and the call's [`Arrival`].
    fn prepare<RB>(
        &self,
        req: Request<RB>,
        conn: Arc<ConnInfo>,
        kind: CallKind,
        queued: Option<Queued>,
        (caller, malformed_timeout): (Option<CallerDeadline>, bool),
    ) -> Request<Body>
    where
        RB: http_body::Body<Data = Bytes> + Send + 'static,
        RB::Error: Into<BoxError>,
    {
        let (mut req, facts) = self.budget.apply(req, conn.conn.as_ref());
        let ext = req.extensions_mut();
        ext.insert(conn.tcp.clone());
        if let Some(id) = &conn.peer {
            ext.insert(id.clone());
        }
        ext.insert(Arrival {
            conn,
            kind,
            facts,
            queued,
            caller,
            malformed_timeout,
        });
        req
    }
}

/// Serves `incoming` with `chain` until `signal`, then sends every connection a GOAWAY and
/// returns when all are closed. It does not fail (the result has the type the server's
/// shutdown expects of a tonic server): zrpc's accept loop retries accept errors itself.
/// Dropped before that (the server gives up at `Shutdown.WaitTime`), it closes every
/// connection still open: their tasks are its own.
pub(crate) async fn serve<S, B, I, IO, IE, F>(
    chain: S,
    intake: Intake,
    incoming: I,
    http2: Http2,
    signal: F,
) -> Result<(), tonic::transport::Error>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Default + Send + 'static,
    B::Error: Into<BoxError>,
    I: Stream<Item = Result<IO, IE>>,
    IO: AsyncRead + AsyncWrite + Connected<ConnectInfo = ConnInfo> + Unpin + Send + 'static,
    IE: std::fmt::Display,
    F: Future<Output = ()>,
{
    let builder = builder(&http2);
    let intake = Arc::new(intake);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
    // The connections' tasks: aborted with it if this future is dropped.
    let mut tasks = tokio::task::JoinSet::new();
    {
        // Dropped when the loop ends: the listening socket closes at once.
        let mut incoming = pin!(incoming);
        let mut signal = pin!(signal);
        loop {
            let io = tokio::select! {
                () = &mut signal => break,
                io = incoming.next() => io,
                Some(ended) = tasks.join_next() => {
                    reap(ended);
                    continue;
                }
            };
            let io = match io {
                Some(Ok(io)) => io,
                // zrpc's accept loop (`transport::accept`) logs and backs off on its own.
                Some(Err(e)) => {
                    tracing::debug!(target: "zrpc::server", "accept failed: {e}");
                    continue;
                }
                None => break,
            };
            let conn = Arc::new(io.connect_info());
            let goaway_at = conn.goaway_at;
            let open = intake
                .connections
                .opened(conn.tcp.remote_addr.map(|a| a.ip()), conn.conn.as_ref());
            let idle = http2
                .max_connection_idle
                .zip(conn.conn.clone())
                .map(|(timeout, state)| Idle { timeout, state });
            let svc = ConnService {
                chain: chain.clone(),
                conn,
                intake: Arc::clone(&intake),
            };
            // Made here and boxed, so that the task holds one copy of the connection: an async
            // fn keeps its arguments apart from its locals, and the connection (the IO
            // wrappers, h2's state, the service) pinned inside it would be stored twice.
            let conn = Box::pin(builder.serve_connection(TokioIo::new(io), svc));
            let served = serve_connection(
                conn,
                stop_rx.clone(),
                goaway_at,
                idle,
                http2.keepalive_timeout,
            );
            tasks.spawn(async move {
                served.await;
                drop(open);
            });
        }
    }
    let _ = stop_tx.send(());
    while let Some(ended) = tasks.join_next().await {
        reap(ended);
    }
    Ok(())
}

/// A connection's task that ended: one that panicked is logged (its connection is closed).
fn reap(ended: Result<(), tokio::task::JoinError>) {
    if let Err(e) = ended
        && e.is_panic()
    {
        tracing::error!(target: "zrpc::server", "a connection's task panicked: {e}");
    }
}

/// Spawns each stream's task boxed: hyper's stream task holds the call's whole future, and
/// tokio moves a task's future several times between spawning and finishing it; boxed, it
/// moves a pointer (`docs/benchmarks.md`, "Spawning boxed"). The client's connection has its
/// twin (zrpc-core, which both share, has no hyper to hold one).
#[derive(Clone, Copy, Debug)]
struct Boxing;

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for Boxing {
    fn execute(&self, fut: F) {
        tokio::spawn(Box::pin(fut));
    }
}

/// hyper's HTTP/2 connection builder (HTTP/1 is refused: its request is not a preface),
/// every limit set here on purpose. In hyper's and
/// h2's builders `None` often means *no limit* rather than "the default" (tonic 0.14 passes
/// `None` for the local-error resets, which turns off h2's MadeYouReset guard), so each is
/// given a value, and `docs/security.md` tables them beside tonic's and grpc-go's.
fn builder(http2: &Http2) -> Builder<Boxing> {
    let mut builder = Builder::new(Boxing);
    builder
        .timer(TokioTimer::new())
        // Streams open at once per connection; more are refused (REFUSED_STREAM).
        .max_concurrent_streams(http2.max_concurrent_streams)
        // The largest header list of a call; larger ones end the connection.
        .max_header_list_size(http2.max_header_list_size)
        // Streams reset for the client's protocol errors (MadeYouReset, CVE-2025-8671).
        .max_local_error_reset_streams(http2.max_local_error_reset_streams)
        // Streams the client resets before they are accepted (rapid reset, CVE-2023-44487).
        .max_pending_accept_reset_streams(http2.max_pending_accept_reset_streams)
        // (The HPACK table for the client's headers stays h2's 4 KiB, the RFC's: hyper-util's
        // builder has no setter for it.)
        // Frames the client may send: the RFC's minimum, what every gRPC client sends.
        .max_frame_size(16 << 10)
        // Flow-control windows: 1 MiB per stream and per connection (hyper's), so one
        // stream's unread request data is bounded and a 4 MiB message needs no BDP probing;
        // grpc-go starts at 64 KiB and grows them with BDP pings.
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(1 << 20)
        .adaptive_window(false)
        // Response octets buffered per stream before the handler's body is back-pressured.
        .max_send_buf_size(400 << 10)
        .keep_alive_interval(http2.keepalive_interval)
        .keep_alive_timeout(http2.keepalive_timeout);
    builder
}

/// hyper's HTTP/2 connection serving the chain on `IO`.
type Conn<IO, S> = Connection<TokioIo<IO>, ConnService<S>, Boxing>;

/// `Transport.MaxConnectionIdle` for one connection: its call count.
struct Idle {
    timeout: Duration,
    state: Arc<ConnState>,
}

impl Idle {
    /// Resolves once no call has been open on the connection for `timeout`.
    async fn passed(&self) {
        loop {
            let now = Instant::now();
            let wake = match self.state.idle_since() {
                Some(since) if now.saturating_duration_since(since) >= self.timeout => return,
                Some(since) => since + self.timeout,
                None => now + self.timeout,
            };
            tokio::time::sleep_until(wake).await;
        }
    }
}

/// One connection until it ends. A GOAWAY at `goaway_at`, when `stop` changes, or when `idle`
/// passes; after an idle GOAWAY, a client that has not let the connection close within
/// `grace` (the time it has to answer the GOAWAY's PING: `KeepaliveTimeout`) is dropped, once
/// no call is open on it: a call the client sent as the GOAWAY went out is served whole (as
/// grpc-go's `MaxConnectionIdle` only drains), and the check comes again after it.
async fn serve_connection<S, B, IO>(
    mut conn: Pin<Box<Conn<IO, S>>>,
    mut stop: tokio::sync::watch::Receiver<()>,
    goaway_at: Option<Instant>,
    idle: Option<Idle>,
    grace: Duration,
) where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Default + Send + 'static,
    B::Error: Into<BoxError>,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Timers only where a limit is set, each boxed: an idle connection's task holds no timer
    // state it does not use (by default no age or idle limit is set; inline, their state took
    // room in every connection's task, set or not).
    let mut aged = goaway_at.map(|at| Box::pin(tokio::time::sleep_until(at)));
    let calls = idle.as_ref().map(|idle| Arc::clone(&idle.state));
    let mut idled = idle.map(|idle| Box::pin(async move { idle.passed().await }));
    // Set when a client that was sent an idle GOAWAY is to be dropped.
    let mut dropped: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut closing = false;
    loop {
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(target: "zrpc::server", "connection ended: {e}");
                }
                return;
            }
            () = armed(&mut aged), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            () = armed(&mut idled), if !closing => {
                tracing::debug!(
                    target: "zrpc::server",
                    "no call for Transport.MaxConnectionIdle: closing the connection (GOAWAY)"
                );
                closing = true;
                conn.as_mut().graceful_shutdown();
                dropped = Some(Box::pin(tokio::time::sleep(grace)));
            }
            () = armed(&mut dropped) => {
                if calls.as_ref().is_some_and(|c| c.idle_since().is_none()) {
                    // a call came as the GOAWAY went out: look again later (at least a
                    // second on: `KeepaliveTimeout` may be 0)
                    dropped = Some(Box::pin(tokio::time::sleep(grace.max(Duration::from_secs(1)))));
                    continue;
                }
                tracing::debug!(
                    target: "zrpc::server",
                    "the client did not close its idle connection after the GOAWAY: dropped"
                );
                return;
            }
            _ = stop.changed(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The end of `timer`, or never when there is none.
async fn armed<F: Future<Output = ()>>(timer: &mut Option<Pin<Box<F>>>) {
    match timer {
        Some(timer) => timer.as_mut().await,
        None => std::future::pending().await,
    }
}

/// One connection's view of the chain.
#[derive(Debug, Clone)]
struct ConnService<S> {
    chain: S,
    conn: Arc<ConnInfo>,
    intake: Arc<Intake>,
}

impl<S, B> hyper::service::Service<Request<Incoming>> for ConnService<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone,
    S::Error: Into<BoxError>,
    B: Default,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = Dispatch<S, Incoming>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let kind = self.intake.kind(&req);
        let queued = self.intake.queue(kind);
        let caller = CallerDeadline::read(req.headers());
        Dispatch {
            state: State::Start {
                start: Some(Start {
                    chain: self.chain.clone(),
                    req,
                    conn: Arc::clone(&self.conn),
                    intake: Arc::clone(&self.intake),
                    kind,
                    queued,
                    caller,
                }),
            },
        }
    }
}

/// What a call needs until the chain is called, at the first poll of its stream's task.
struct Start<S, RB> {
    chain: S,
    req: Request<RB>,
    conn: Arc<ConnInfo>,
    intake: Arc<Intake>,
    // Its kind, looked up as its stream was accepted.
    kind: CallKind,
    // Its count in flight until then.
    queued: Option<Queued>,
    // The deadline its caller set, and whether its `grpc-timeout` did not parse.
    caller: (Option<CallerDeadline>, bool),
}

pin_project! {
    /// The response future of [`ConnService`]: the chain's.
    pub(crate) struct Dispatch<S: Service<Request<Body>>, RB> {
        #[pin]
        state: State<S, RB>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S: Service<Request<Body>>, RB> {
        // The chain is called at the task's first poll (see the module docs).
        Start { start: Option<Start<S, RB>> },
        Called { #[pin] fut: S::Future },
    }
}

impl<S, B, RB> Future for Dispatch<S, RB>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: Default,
    RB: http_body::Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Output = Result<Response<B>, BoxError>;

    /// Calls the chain (at the first poll) and polls its future.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Start { start } => {
                    let Some(Start { chain, .. }) = start.as_mut() else {
                        return Poll::Pending;
                    };
                    if let Err(e) = ready!(chain.poll_ready(cx)) {
                        return Poll::Ready(recover(e));
                    }
                    let Some(Start {
                        mut chain,
                        req,
                        conn,
                        intake,
                        kind,
                        queued,
                        caller,
                    }) = start.take()
                    else {
                        return Poll::Pending;
                    };
                    let fut = chain.call(intake.prepare(req, conn, kind, queued, caller));
                    state.set(State::Called { fut });
                }
                StateProj::Called { fut } => {
                    return Poll::Ready(match ready!(fut.poll(cx)) {
                        Ok(resp) => Ok(resp),
                        Err(e) => recover(e),
                    });
                }
            }
        }
    }
}

/// A chain's error that is a [`Status`] becomes its response (what tonic's `RecoverError`
/// did); any other error resets the stream.
#[cold]
#[inline(never)]
fn recover<B: Default>(e: impl Into<BoxError>) -> Result<Response<B>, BoxError> {
    Status::try_from_error(e.into()).map(Status::into_http)
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tonic::transport::server::TcpConnectInfo;

    use super::*;

    /// `Dispatch` of `req` for `svc` on a connection the tests know nothing about, with no
    /// request budget and no shedder.
    fn dispatch<S: Service<Request<Body>>>(svc: S, req: Request<Body>) -> Dispatch<S, Body> {
        let conn = ConnInfo {
            tcp: TcpConnectInfo {
                local_addr: None,
                remote_addr: None,
            },
            peer: None,
            conn: None,
            authority: None,
            goaway_at: None,
        };
        let intake = Intake {
            budget: RequestBudget::new(None, None),
            streaming: StreamingMethods::default(),
            in_flight: None,
            connections: Arc::default(),
        };
        let caller = CallerDeadline::read(req.headers());
        Dispatch {
            state: State::Start {
                start: Some(Start {
                    chain: svc,
                    req,
                    conn: Arc::new(conn),
                    caller,
                    intake: Arc::new(intake),
                    kind: CallKind::UNARY,
                    queued: None,
                }),
            },
        }
    }

    fn request(timeout: Option<&'static str>) -> Request<Body> {
        let mut req = Request::new(Body::empty());
        if let Some(t) = timeout {
            req.headers_mut()
                .insert("grpc-timeout", http::HeaderValue::from_static(t));
        }
        req
    }

    fn status(resp: &Response<Body>) -> Option<&str> {
        resp.headers()
            .get("grpc-status")
            .map(|v| v.to_str().unwrap())
    }

    #[tokio::test]
    async fn the_chain_gets_the_calls_arrival() {
        let svc = tower::service_fn(|req: Request<Body>| async move {
            let arrival = req.extensions().get::<Arrival>().cloned().unwrap();
            Ok::<_, Infallible>(Response::new(format!(
                "{:?} {}",
                arrival.caller.map(|c| c.timeout),
                arrival.malformed_timeout
            )))
        });
        let resp = dispatch(svc, request(Some("200m"))).await.unwrap();
        assert_eq!(resp.body(), "Some(200ms) false");
        let resp = dispatch(svc, request(Some("1x"))).await.unwrap();
        assert_eq!(
            resp.body(),
            "None true",
            "a grpc-timeout that does not parse"
        );
        let resp = dispatch(svc, request(None)).await.unwrap();
        assert_eq!(resp.body(), "None false");
    }

    #[tokio::test]
    async fn a_status_error_becomes_its_response_and_other_errors_stay_errors() {
        let svc = tower::service_fn(|_req: Request<Body>| async {
            Err::<Response<Body>, _>(Status::unavailable("draining"))
        });
        let resp = dispatch(svc, request(None)).await.unwrap();
        assert_eq!(status(&resp), Some("14"));
        let svc = tower::service_fn(|_req: Request<Body>| async {
            Err::<Response<Body>, _>(std::io::Error::other("boom"))
        });
        let err = dispatch(svc, request(None)).await.unwrap_err();
        assert_eq!(err.to_string(), "boom");
    }
}
