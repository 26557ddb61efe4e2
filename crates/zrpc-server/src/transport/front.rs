//! [`Front`]: the outermost stage of the server's chain, for every call (health and reflection
//! included), in this order:
//!
//! 1. counts the call open on its connection, for `Transport.MaxConnectionIdle`
//!    ([`streams`](super::streams));
//! 2. answers HTTP 415 to a request that is not gRPC ([`content_type`](super::content_type));
//! 3. answers `PermissionDenied` to a client missing from `Tls.AllowedClients`;
//! 4. puts the request body (as hyper gave it: it is boxed once, here) under the
//!    request-bytes budget ([`budget`](super::budget));
//! 5. turns the connection's [`ConnInfo`] (the serve loop passes it to
//!    [`Front::call_conn`]) into the peer's extensions ([`into_extensions`](super::io::into_extensions)).
//!
//! Before all of these, when hyper accepts the call's stream (in the connection's task, before
//! the stream's task first runs), [`Front::queue`] counts the call in the shedder's flight, so
//! that calls waiting for a busy worker thread count (`docs/middleware.md`, "Calls waiting for
//! a worker thread").
//!
//! One service rather than a layer per step: tower clones the chain's service for every
//! call and each layer moves the response future of the ones inside it, so five layers (most
//! of them passing the call through on a default config) cost five clones and a copy of the
//! future each. Its settings sit behind one `Arc`; a rejection's response is boxed, so the
//! future stays the inner future plus a word or two.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response, header};
use pin_project_lite::pin_project;
use tonic::body::Body;
use tower_layer::Layer;
use tower_service::Service;

use super::budget::RequestBudgetLayer;
use super::content_type::{is_grpc, unsupported};
use super::io::ConnInfo;
use super::io::into_extensions;
use super::streams::{CallGuard, ConnTable, CountedBody};
use crate::layers::facts::CallFacts;
use crate::layers::shedding;
use crate::layers::timeout::caller_deadline;
use crate::tls::allow::AllowList;
use crate::tls::allow::denied;

use tower::BoxError;
use zrpc_core::shedder::Queued;

/// What [`Front`] does, shared by every clone.
#[derive(Debug)]
struct Settings {
    /// Where calls are counted per connection (only with `MaxConnectionIdle`).
    counted: Option<Arc<ConnTable>>,
    budget: RequestBudgetLayer,
    allowed: Option<Arc<AllowList>>,
    /// The chain's shedder, which counts calls from the moment their stream is accepted.
    shedding: Option<Arc<shedding::Shared>>,
}

/// Adds [`Front`].
#[derive(Debug, Clone)]
pub(crate) struct FrontLayer {
    settings: Arc<Settings>,
}

impl FrontLayer {
    /// Counts calls into `counted` (`None`: no count), budgets request bodies with `budget`,
    /// serves only the clients in `allowed` (`None`: any), and counts calls in `shedding`'s
    /// flight as their streams are accepted (see [`Front::queue`]).
    pub(crate) fn new(
        counted: Option<Arc<ConnTable>>,
        budget: RequestBudgetLayer,
        allowed: Option<Arc<AllowList>>,
        shedding: Option<Arc<shedding::Shared>>,
    ) -> Self {
        FrontLayer {
            settings: Arc::new(Settings {
                counted,
                budget,
                allowed,
                shedding,
            }),
        }
    }
}

impl<S> Layer<S> for FrontLayer {
    type Service = Front<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Front {
            inner,
            settings: self.settings.clone(),
        }
    }
}

/// See the [module docs](self).
#[derive(Debug, Clone)]
pub(crate) struct Front<S> {
    inner: S,
    settings: Arc<Settings>,
}

/// What the transport knows of a call as it enters the chain, handed to the stage inside
/// [`Front`] as it is: each was an extension or a header the governor looked up again (the
/// facts cost an allocation, a hash insert and two lookups per call).
#[derive(Debug, Default)]
pub(crate) struct Arrival {
    /// The call's facts, when the request budget's body records them.
    pub(crate) facts: Option<CallFacts>,
    /// The peer's address.
    pub(crate) peer: Option<SocketAddr>,
    /// The deadline the caller's `grpc-timeout` set when the request arrived.
    pub(crate) caller_deadline: Option<tokio::time::Instant>,
    /// The call's count in the shedder's flight since its stream was accepted (the serve
    /// loop's [`Front::queue`]).
    pub(crate) queued: Option<Queued>,
}

/// The stage inside [`Front`], called with the call's [`Arrival`].
pub(crate) trait Inner: Service<Request<Body>> {
    /// `call`, with what the transport knows of the call.
    fn call_front(&mut self, req: Request<Body>, arrival: Arrival) -> Self::Future;
}

impl<S> Inner for crate::layers::drain::Drain<S>
where
    Self: Service<Request<Body>>,
{
    fn call_front(&mut self, mut req: Request<Body>, arrival: Arrival) -> Self::Future {
        // The lean chain keeps no facts; were it given some, a layer of the user's reads
        // them where `FactsLayer` puts them.
        if let Some(facts) = arrival.facts {
            req.extensions_mut().insert(facts);
        }
        self.call(req)
    }
}

impl<S, ResBody> Front<S>
where
    S: Inner<Response = Response<ResBody>>,
    ResBody: Default,
{
    /// Counts a call in the shedder's flight as hyper accepts its stream (in the
    /// connection's task), so that calls waiting for a worker thread count too: with handlers
    /// that keep their thread busy, they are most of the calls in the server (see
    /// [`AdaptiveShedder::queue`](zrpc_core::shedder::AdaptiveShedder::queue)). Handed to
    /// [`call_conn`](Self::call_conn) when the call's task first runs.
    #[inline]
    pub(crate) fn queue<RB>(&self, req: &Request<RB>) -> Option<Queued> {
        self.settings
            .shedding
            .as_ref()
            .and_then(|s| s.queue(req.uri().path()))
    }

    /// The call of a request on a connection described by `info`, under the deadline the
    /// caller set, counted by the shedder since its stream was accepted when `queued` (the
    /// serve loop passes these along, with the body as hyper gave it; a request served
    /// through [`Service::call`] carries the info in its extensions).
    #[inline(always)]
    pub(crate) fn call_conn<RB>(
        &mut self,
        req: Request<RB>,
        info: Option<&ConnInfo>,
        caller_deadline: Option<tokio::time::Instant>,
        queued: Option<Queued>,
    ) -> ResponseFuture<S::Future, ResBody>
    where
        RB: http_body::Body<Data = Bytes> + Send + 'static,
        RB::Error: Into<BoxError>,
    {
        let settings = &*self.settings;
        let conn = info.and_then(|i| i.conn.as_ref());
        let guard = settings
            .counted
            .as_ref()
            .and(conn)
            .map(|state| state.start());
        let content_type = crate::layers::util::find(req.headers(), &header::CONTENT_TYPE);
        if !is_grpc(content_type) {
            return ResponseFuture::rejected(unsupported(content_type), guard);
        }
        let peer = info.and_then(|i| i.peer.as_ref());
        if let Some(message) = denied(settings.allowed.as_deref(), peer) {
            return ResponseFuture::rejected(
                tonic::Status::permission_denied(message).into_http(),
                guard,
            );
        }
        let (mut req, facts) = settings.budget.apply_front(req, conn);
        if let Some(info) = info {
            into_extensions(&mut req, info);
        }
        let arrival = Arrival {
            facts,
            peer: info.and_then(|i| i.tcp.remote_addr),
            caller_deadline,
            queued,
        };
        ResponseFuture::called(self.inner.call_front(req, arrival), guard)
    }
}

impl<S, ResBody> Service<Request<Body>> for Front<S>
where
    S: Inner<Response = Response<ResBody>>,
    ResBody: Default,
{
    type Response = Response<CountedBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let info = req.extensions_mut().remove::<ConnInfo>();
        let caller_deadline = caller_deadline(req.headers());
        self.call_conn(req, info.as_ref(), caller_deadline, None)
    }
}

pin_project! {
    /// Response future of [`Front`].
    #[derive(Debug)]
    pub(crate) struct ResponseFuture<F, B> {
        #[pin]
        state: State<F, B>,
        guard: Option<CallGuard>,
    }
}

pin_project! {
    #[project = StateProj]
    #[derive(Debug)]
    enum State<F, B> {
        Called { #[pin] fut: F },
        // Boxed: rejections are rare, and inline the response would make every call's future
        // ~150 bytes larger.
        Rejected { resp: Option<Box<Response<B>>> },
    }
}

impl<F, B> ResponseFuture<F, B> {
    fn called(fut: F, guard: Option<CallGuard>) -> Self {
        ResponseFuture {
            state: State::Called { fut },
            guard,
        }
    }

    #[cold]
    #[inline(never)]
    fn rejected(resp: Response<B>, guard: Option<CallGuard>) -> Self {
        ResponseFuture {
            state: State::Rejected {
                resp: Some(Box::new(resp)),
            },
            guard,
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<CountedBody<B>>, E>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = match this.state.project() {
            StateProj::Called { fut } => ready!(fut.poll(cx)),
            StateProj::Rejected { resp } => match resp.take() {
                Some(resp) => Ok(*resp),
                None => return Poll::Pending,
            },
        };
        let guard = this.guard.take();
        Poll::Ready(res.map(|r| r.map(|inner| CountedBody::new(inner, guard))))
    }
}
