//! [`Select`]: the governed chain or the lean one, chosen once from the config.
//!
//! A server whose middlewares are all off (no trace, recover, stat, metrics, auth, breaker,
//! shedding nor timeout) would otherwise still call every stage, each passing through and
//! moving its inner future and body (~1,800 instructions of calls and ~2,300 of memcpy per
//! request, callgrind). `Select` holds either the governed chain or the lean one (drain and
//! the user layers), both over the same services; the response bodies of the two are unified
//! by [`SelectBody`], an enum, so the chain has one type without boxing.
//!
//! It is tower's `util::Either` but for the response type: `Either` needs both services to
//! answer with the same `Response`, and the two chains wrap their bodies differently.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

/// The governed chain (`G`) or the lean one (`L`): as a layer, and as the service it builds.
#[derive(Debug, Clone)]
pub(crate) enum Select<G, L> {
    /// Every stage, switched by the config at run time.
    Governed(G),
    /// Only the stages that are on for every config (drain, user layers).
    Lean(L),
}

impl<S, G, L> Layer<S> for Select<G, L>
where
    G: Layer<S>,
    L: Layer<S>,
{
    type Service = Select<G::Service, L::Service>;

    fn layer(&self, inner: S) -> Self::Service {
        match self {
            Select::Governed(g) => Select::Governed(g.layer(inner)),
            Select::Lean(l) => Select::Lean(l.layer(inner)),
        }
    }
}

impl<R, G, L, GB, LB> Service<R> for Select<G, L>
where
    G: Service<R, Response = Response<GB>>,
    L: Service<R, Response = Response<LB>, Error = G::Error>,
{
    type Response = Response<SelectBody<GB, LB>>;
    type Error = G::Error;
    type Future = SelectFuture<G::Future, L::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self {
            Select::Governed(g) => g.poll_ready(cx),
            Select::Lean(l) => l.poll_ready(cx),
        }
    }

    fn call(&mut self, req: R) -> Self::Future {
        match self {
            Select::Governed(g) => SelectFuture::governed(g.call(req)),
            Select::Lean(l) => SelectFuture::lean(l.call(req)),
        }
    }
}

pin_project! {
    /// Response future of [`Select`].
    #[derive(Debug)]
    pub(crate) struct SelectFuture<G, L> {
        #[pin]
        inner: Either<G, L>,
    }
}

pin_project! {
    /// Response body of [`Select`]: the governed chain's body or the lean chain's.
    #[derive(Debug)]
    pub(crate) struct SelectBody<G, L> {
        #[pin]
        inner: Either<G, L>,
    }
}

pin_project! {
    /// The governed chain's future or body, or the lean chain's.
    #[project = EitherProj]
    #[derive(Debug)]
    enum Either<G, L> {
        Governed { #[pin] inner: G },
        Lean { #[pin] inner: L },
    }
}

impl<G, L> SelectFuture<G, L> {
    fn governed(inner: G) -> Self {
        Self {
            inner: Either::Governed { inner },
        }
    }

    fn lean(inner: L) -> Self {
        Self {
            inner: Either::Lean { inner },
        }
    }
}

impl<G, L, GB, LB, E> Future for SelectFuture<G, L>
where
    G: Future<Output = Result<Response<GB>, E>>,
    L: Future<Output = Result<Response<LB>, E>>,
{
    type Output = Result<Response<SelectBody<GB, LB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(match self.project().inner.project() {
            EitherProj::Governed { inner } => ready!(inner.poll(cx)).map(|r| {
                r.map(|inner| SelectBody {
                    inner: Either::Governed { inner },
                })
            }),
            EitherProj::Lean { inner } => ready!(inner.poll(cx)).map(|r| {
                r.map(|inner| SelectBody {
                    inner: Either::Lean { inner },
                })
            }),
        })
    }
}

/// An empty lean body: what the layers outside answer with when they reject a call.
impl<G, L: Default> Default for SelectBody<G, L> {
    fn default() -> Self {
        SelectBody {
            inner: Either::Lean {
                inner: L::default(),
            },
        }
    }
}

impl<G, L> Body for SelectBody<G, L>
where
    G: Body,
    L: Body<Data = G::Data, Error = G::Error>,
{
    type Data = G::Data;
    type Error = G::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().inner.project() {
            EitherProj::Governed { inner } => inner.poll_frame(cx),
            EitherProj::Lean { inner } => inner.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Either::Governed { inner } => inner.is_end_stream(),
            Either::Lean { inner } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Either::Governed { inner } => inner.size_hint(),
            Either::Lean { inner } => inner.size_hint(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http::Request;
    use http_body_util::{BodyExt, Full};
    use tower::ServiceExt;

    use super::*;

    #[tokio::test]
    async fn either_chain_answers_through_one_body_type() {
        let inner = tower::service_fn(|_req: Request<()>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hi"))))
        });
        let governed = tower::util::MapResponseLayer::new(|r: Response<Full<Bytes>>| {
            r.map(|b| b.map_frame(|f| f.map_data(|_| Bytes::from_static(b"governed"))))
        });
        let lean = tower_layer::Identity::new();
        for (select, want) in [
            (Select::Governed(governed.clone()), &b"governed"[..]),
            (Select::Lean(lean), &b"hi"[..]),
        ] {
            let resp = select.layer(inner).oneshot(Request::new(())).await.unwrap();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], want);
        }
    }
}
