//! [`Front`]: the first stage of the server's chain, for every call (health and reflection
//! included), in this order:
//!
//! 1. counts the call open on its connection, for `Transport.MaxConnectionIdle`
//!    ([`streams`](super::streams));
//! 2. answers HTTP 415 to a request that is not gRPC, and HTTP 400 (`Internal`) to one whose
//!    `grpc-timeout` does not parse, as grpc-go does ([`content_type`](super::content_type));
//! 3. answers `PermissionDenied` to a client missing from `Tls.AllowedClients`.
//!
//! It reads the connection from the [`Arrival`] the serve loop puts in every request's
//! extensions. One service rather than one per step: each would pass nearly every call
//! through, and a layer costs every call a clone of its service and a move of its future.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::{Request, Response, header};
use pin_project_lite::pin_project;
use tonic::body::Body;
use tower_layer::Layer;
use tower_service::Service;

use super::content_type::{is_grpc, malformed_timeout, unsupported};
use super::streams::CountedBody;
use crate::call::{Arrival, CallGuard};
use crate::tls::allow::AllowList;
use crate::tls::allow::denied;
use zrpc_core::grpc::timeout::GRPC_TIMEOUT_HEADER as GRPC_TIMEOUT;

/// What [`Front`] does, shared by every clone.
#[derive(Debug)]
struct Settings {
    /// Whether calls are counted per connection (only with `MaxConnectionIdle`).
    counted: bool,
    allowed: Option<Arc<AllowList>>,
}

/// Adds [`Front`].
#[derive(Debug, Clone)]
pub(crate) struct FrontLayer {
    settings: Arc<Settings>,
}

impl FrontLayer {
    /// Counts calls per connection when `counted`, and serves only the clients in `allowed`
    /// (`None`: any).
    pub(crate) fn new(counted: bool, allowed: Option<Arc<AllowList>>) -> Self {
        FrontLayer {
            settings: Arc::new(Settings { counted, allowed }),
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

impl<S, ResBody> Service<Request<Body>> for Front<S>
where
    S: Service<Request<Body>, Response = Response<ResBody>>,
    ResBody: Default,
{
    type Response = Response<CountedBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let settings = &*self.settings;
        let conn = req.extensions().get::<Arrival>().map(|a| &*a.conn);
        let guard = conn
            .and_then(|c| c.conn.as_ref())
            .filter(|_| settings.counted)
            .map(|state| state.start());
        let content_type = zrpc_core::grpc::find_header(req.headers(), &header::CONTENT_TYPE);
        if !is_grpc(content_type) {
            return ResponseFuture::rejected(unsupported(content_type), guard);
        }
        // The serve loop read the `grpc-timeout` and noted one that does not parse; a request
        // without its facts (a unit test's) is read here.
        if req
            .extensions()
            .get::<Arrival>()
            .is_none_or(|a| a.malformed_timeout)
            && let Some(v) = zrpc_core::grpc::find_header(req.headers(), &GRPC_TIMEOUT)
            && zrpc_core::grpc::timeout::parse(v.as_bytes()).is_none()
        {
            return ResponseFuture::rejected(malformed_timeout(v), guard);
        }
        if let Some(message) = denied(
            settings.allowed.as_deref(),
            conn.and_then(|c| c.peer.as_ref()),
        ) {
            return ResponseFuture::rejected(
                tonic::Status::permission_denied(message).into_http(),
                guard,
            );
        }
        ResponseFuture::called(self.inner.call(req), guard)
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
