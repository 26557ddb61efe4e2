//! zrpc's HTTP/2 serve loop, in place of tonic's `Server::serve_with_incoming_shutdown`.
//!
//! tonic serves each connection through hyper-util's `TowerToHyperService` (a boxed clone of
//! the whole chain and a `Oneshot` per request), boxes each request's body, puts the
//! connection's info in its extensions, and wraps the chain in `RecoverError` and
//! `GrpcTimeout`, each one more wrapper per response. zrpc's chain reads the caller's deadline
//! itself, so here one future per request does what those wrappers did, and the body is boxed
//! once. What they did is kept:
//! - **the caller's deadline** (`grpc-timeout`) bounds every call until its response head
//!   (streams, health and reflection included), as `GrpcTimeout` did; the timer is armed only
//!   when the chain is still pending after a poll, so a unary call answered at its first poll
//!   registers none. An expired call is answered `DeadlineExceeded` (tonic answered
//!   `Cancelled "Timeout expired"`; grpc-go and zrpc's own timeout stage answer
//!   `DeadlineExceeded`);
//! - **an error of the chain that is a `Status`** becomes that status's response; any other
//!   error resets the stream, as `RecoverError` did;
//! - HTTP/1 is refused; every HTTP/2 limit is set in [`builder`]; a connection past
//!   `MaxConnectionAge` gets a GOAWAY, and on shutdown every connection gets a GOAWAY and the
//!   loop returns when all are closed.
//!
//! The chain is called at the first poll of the stream's task, as tonic did: calling it when
//! hyper accepts the stream (in the connection's task) keeps more calls' allocations alive at
//! once, which measured slower.

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
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tonic::Status;
use tonic::body::Body;
use tonic::transport::server::Connected;
use tower_service::Service;

use super::front::{Front, Inner};
use super::io::ConnInfo;
use crate::layers::timeout::{Timer, caller_deadline};

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
    /// A graceful GOAWAY at this age (the hard close after the grace is `Guarded`'s).
    pub(crate) max_connection_age: Option<Duration>,
}

/// Serves `incoming` with `svc` until `signal`, then sends every connection a GOAWAY and
/// returns when all are closed. It does not fail (the result has the type the server's
/// shutdown expects of a tonic server): zrpc's accept loop retries accept errors itself.
pub(crate) async fn serve<S, B, I, IO, IE, F>(
    svc: S,
    incoming: I,
    http2: Http2,
    signal: F,
) -> Result<(), tonic::transport::Error>
where
    S: ConnCall<Response = Response<B>> + Clone + Send + 'static,
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
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
    {
        // Dropped when the loop ends: the listening socket closes at once.
        let mut incoming = pin!(incoming);
        let mut signal = pin!(signal);
        loop {
            let io = tokio::select! {
                () = &mut signal => break,
                io = incoming.next() => io,
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
            let svc = ConnService {
                inner: svc.clone(),
                info: Arc::new(io.connect_info()),
            };
            // Made here and boxed, so that the task holds one copy of the connection: an async
            // fn keeps its arguments apart from its locals, and the connection (the IO
            // wrappers, h2's state, the service) pinned inside it would be stored twice.
            let conn = Box::pin(builder.serve_connection(TokioIo::new(io), svc));
            tokio::spawn(serve_connection(
                conn,
                stop_rx.clone(),
                http2.max_connection_age,
            ));
        }
    }
    let _ = stop_tx.send(());
    drop(stop_rx);
    stop_tx.closed().await;
    Ok(())
}

/// hyper's HTTP/2 connection builder (HTTP/1 is refused: its request is not a preface),
/// every limit set here on purpose. In hyper's and
/// h2's builders `None` often means *no limit* rather than "the default" (tonic 0.14 passes
/// `None` for the local-error resets, which turns off h2's MadeYouReset guard), so each is
/// given a value, and `docs/security.md` tables them beside tonic's and grpc-go's.
fn builder(http2: &Http2) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
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
type Conn<IO, S> = Connection<TokioIo<IO>, ConnService<S>, TokioExecutor>;

/// One connection until it ends; a GOAWAY at `max_age` or when `stop` changes.
async fn serve_connection<S, B, IO>(
    mut conn: Pin<Box<Conn<IO, S>>>,
    mut stop: tokio::sync::watch::Receiver<()>,
    max_age: Option<Duration>,
) where
    S: ConnCall<Response = Response<B>> + Clone + Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Default + Send + 'static,
    B::Error: Into<BoxError>,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut aged = pin!(async {
        match max_age {
            Some(age) => tokio::time::sleep(age).await,
            None => std::future::pending().await,
        }
    });
    let mut closing = false;
    loop {
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(target: "zrpc::server", "connection ended: {e}");
                }
                return;
            }
            () = &mut aged, if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = stop.changed(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The chain as the serve loop calls it: with the connection's info passed along, where
/// tonic put a clone of it in every request's extensions (an allocation, a hash insert and,
/// in [`Front`], a removal per call).
pub(crate) trait ConnCall<RB = Incoming>: Service<Request<Body>> {
    /// Counts `req` in the shedder's flight as hyper accepts its stream, before its task
    /// first runs (see [`Front::queue`]).
    fn queue(&self, _req: &Request<RB>) -> Option<Queued> {
        None
    }

    /// `call` for a request that came on the connection described by `info`, under the
    /// deadline its caller set; `queued`: what [`queue`](Self::queue) gave.
    fn call_on(
        &mut self,
        req: Request<RB>,
        info: &ConnInfo,
        caller_deadline: Option<Instant>,
        queued: Option<Queued>,
    ) -> Self::Future;
}

impl<S, B, RB> ConnCall<RB> for Front<S>
where
    S: Inner<Response = Response<B>>,
    B: Default,
    RB: http_body::Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    #[inline]
    fn queue(&self, req: &Request<RB>) -> Option<Queued> {
        Front::queue(self, req)
    }

    #[inline(always)]
    fn call_on(
        &mut self,
        req: Request<RB>,
        info: &ConnInfo,
        caller_deadline: Option<Instant>,
        queued: Option<Queued>,
    ) -> Self::Future {
        self.call_conn(req, Some(info), caller_deadline, queued)
    }
}

/// One connection's view of the chain.
#[derive(Debug, Clone)]
struct ConnService<S> {
    inner: S,
    info: Arc<ConnInfo>,
}

impl<S, B> hyper::service::Service<Request<Incoming>> for ConnService<S>
where
    S: ConnCall<Response = Response<B>> + Clone,
    S::Error: Into<BoxError>,
    B: Default,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = Dispatch<S, Incoming>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        // The body is boxed (as tonic's `Body`) by `Front`, once.
        let queued = self.inner.queue(&req);
        Dispatch::new(self.inner.clone(), req, Arc::clone(&self.info), queued)
    }
}

impl<S: ConnCall<RB>, RB> Dispatch<S, RB> {
    /// `req` for `svc` on the connection `info` describes, under the caller's deadline if its
    /// `grpc-timeout` sets one; `queued`: its count in the shedder's flight.
    fn new(svc: S, req: Request<RB>, info: Arc<ConnInfo>, queued: Option<Queued>) -> Self {
        let deadline = caller_deadline(req.headers());
        Dispatch {
            state: State::Start {
                start: Some((svc, req, info, queued)),
            },
            deadline: Timer::new(deadline),
        }
    }
}

pin_project! {
    /// The response future of [`ConnService`]: the chain's, under the caller's deadline.
    pub(crate) struct Dispatch<S: ConnCall<RB>, RB> {
        #[pin]
        state: State<S, RB>,
        // The caller's deadline. Its timer is armed (boxed) only when the chain is still
        // pending after a poll: a unary call answered at its first poll registers none.
        deadline: Timer,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S: ConnCall<RB>, RB> {
        // The chain is called at the task's first poll (see the module docs); until then the
        // call counts in the shedder's flight through its `Queued`.
        Start { start: Option<(S, Request<RB>, Arc<ConnInfo>, Option<Queued>)> },
        Called { #[pin] fut: S::Future },
    }
}

impl<S, B, RB> Future for Dispatch<S, RB>
where
    S: ConnCall<RB, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: Default,
{
    type Output = Result<Response<B>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        match poll_chain(this.state.as_mut(), this.deadline.deadline(), cx) {
            Poll::Ready(out) => Poll::Ready(out),
            Poll::Pending if this.deadline.expired(cx) => {
                this.state.set(State::Start { start: None });
                Poll::Ready(Ok(Status::deadline_exceeded("Timeout expired").into_http()))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Calls the chain (at the first poll) and polls its future.
#[inline(always)]
fn poll_chain<S, B, RB>(
    mut state: Pin<&mut State<S, RB>>,
    caller_deadline: Option<Instant>,
    cx: &mut Context<'_>,
) -> Poll<Result<Response<B>, BoxError>>
where
    S: ConnCall<RB, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: Default,
{
    loop {
        match state.as_mut().project() {
            StateProj::Start { start } => {
                let Some((svc, ..)) = start.as_mut() else {
                    return Poll::Pending;
                };
                if let Err(e) = ready!(svc.poll_ready(cx)) {
                    return Poll::Ready(recover(e));
                }
                let Some((mut svc, req, info, queued)) = start.take() else {
                    return Poll::Pending;
                };
                let fut = svc.call_on(req, &info, caller_deadline, queued);
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

/// A chain's error that is a [`Status`] becomes its response (what tonic's `RecoverError`
/// did); any other error resets the stream.
#[cold]
#[inline(never)]
fn recover<B: Default>(e: impl Into<BoxError>) -> Result<Response<B>, BoxError> {
    Status::try_from_error(e.into()).map(Status::into_http)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicBool, Ordering};

    use tonic::transport::server::TcpConnectInfo;

    use super::*;

    /// A service as the serve loop calls it, ignoring the connection's info.
    #[derive(Clone)]
    struct Plain<S>(S);

    impl<S: Service<Request<Body>>> Service<Request<Body>> for Plain<S> {
        type Response = S::Response;
        type Error = S::Error;
        type Future = S::Future;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            self.0.poll_ready(cx)
        }

        fn call(&mut self, req: Request<Body>) -> Self::Future {
            self.0.call(req)
        }
    }

    impl<S: Service<Request<Body>>> ConnCall<Body> for Plain<S> {
        fn call_on(
            &mut self,
            req: Request<Body>,
            _info: &ConnInfo,
            _caller_deadline: Option<Instant>,
            _queued: Option<Queued>,
        ) -> Self::Future {
            self.0.call(req)
        }
    }

    /// `Dispatch` of `req` for `svc` on a connection the tests know nothing about.
    fn dispatch<S: Service<Request<Body>>>(svc: S, req: Request<Body>) -> Dispatch<Plain<S>, Body> {
        let info = ConnInfo {
            tcp: TcpConnectInfo {
                local_addr: None,
                remote_addr: None,
            },
            peer: None,
            conn: None,
        };
        Dispatch::new(Plain(svc), req, Arc::new(info), None)
    }

    /// Sets its flag when dropped.
    struct DropFlag(Arc<AtomicBool>);

    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
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

    #[tokio::test(start_paused = true)]
    async fn a_call_past_the_callers_deadline_is_answered_deadline_exceeded_and_dropped() {
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = dropped.clone();
        let svc = tower::service_fn(move |_req: Request<Body>| {
            let guard = DropFlag(flag.clone());
            async move {
                let _guard = guard;
                std::future::pending::<Result<Response<Body>, Infallible>>().await
            }
        });
        let start = tokio::time::Instant::now();
        let resp = dispatch(svc, request(Some("200m"))).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(200));
        assert_eq!(status(&resp), Some("4"));
        assert!(
            dropped.load(Ordering::SeqCst),
            "the handler's future is dropped"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_deadline_the_chain_answers() {
        let svc = tower::service_fn(|_req: Request<Body>| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, Infallible>(Response::new(Body::empty()))
        });
        let fut = dispatch(svc, request(None));
        assert!(
            fut.deadline.deadline().is_none(),
            "no deadline without grpc-timeout"
        );
        let resp = fut.await.unwrap();
        assert_eq!(status(&resp), None);
        // A deadline later than the answer changes nothing.
        let svc = tower::service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(Response::new(Body::empty()))
        });
        let resp = dispatch(svc, request(Some("1S"))).await.unwrap();
        assert_eq!(status(&resp), None);
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
