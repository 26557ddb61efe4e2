//! Drain: ends the streams still open when the graceful shutdown runs out of time with a
//! proper gRPC status, `Unavailable "server is shutting down"`, instead of cutting the
//! connection under them (clients would see a transport error, or nothing).
//!
//! Not a go-zero stage (go-zero kills the process at WaitTime). It sits innermost, just
//! outside the user layers, so metrics and the breaker see the `Unavailable`. It only
//! watches known streaming methods, as the call's kind says ([`CallKind`], resolved once as the
//! call arrived and read from its `Arrival`): unary calls pay nothing.
//! The health `Watch` and reflection streams are ended earlier, when draining starts, so
//! a watching client does not hold the shutdown until the deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tower_layer::Layer;
use tower_service::Service;
use zrpc_core::grpc::{GRPC_MESSAGE, GRPC_STATUS, code, status_response};

use crate::call::{CallKind, kind_of};

/// A watched stream's wait for the cut.
type Cut = Pin<Box<OwnedNotified>>;

/// The status message of a stream cut at the end of the shutdown.
pub(crate) const SHUTTING_DOWN_MESSAGE: &str = "server is shutting down";

/// Tells the open streams to end (once, at the shutdown deadline).
#[derive(Debug, Default)]
pub(crate) struct DrainSignal {
    cut: AtomicBool,
    notify: Arc<Notify>,
}

impl DrainSignal {
    /// A new signal.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Ends every watched stream and pending streaming call.
    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// A future resolving at the cut (registered at once: no wake-up is missed). Boxed: only
    /// watched streams hold one, and unboxed it would sit in every unary call's response
    /// future and body, which each outer layer moves.
    fn notified(&self) -> Cut {
        Box::pin(self.notify.clone().notified_owned())
    }

    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }
}

/// Adds [`Drain`].
#[derive(Debug, Clone)]
pub(crate) struct DrainLayer {
    shared: Arc<Shared>,
}

/// What every [`Drain`] reads, behind one `Arc`: tower clones the service for each call, and
/// a clone is then one refcount (it was three).
#[derive(Debug)]
struct Shared {
    signal: Arc<DrainSignal>,
    infra: Arc<DrainSignal>,
}

impl DrainLayer {
    /// A drain layer: streaming calls end at `signal`; the health `Watch` and reflection
    /// streams end at `infra` (when draining starts: they would otherwise hold their
    /// connection open until the deadline).
    pub(crate) fn new(signal: Arc<DrainSignal>, infra: Arc<DrainSignal>) -> Self {
        Self {
            shared: Arc::new(Shared { signal, infra }),
        }
    }
}

impl<S> Layer<S> for DrainLayer {
    type Service = Drain<S>;
    fn layer(&self, inner: S) -> Drain<S> {
        Drain {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// Ends streams at the shutdown deadline.
#[derive(Debug, Clone)]
pub(crate) struct Drain<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl Shared {
    /// The signal that ends a call of `kind`, and its wait (registered now); none for the
    /// calls not watched (unary calls of the user's services).
    fn watch(&self, kind: CallKind) -> (Option<Cut>, Option<Arc<DrainSignal>>) {
        let signal = if kind.infra {
            Some(&self.infra)
        } else if kind.streaming {
            Some(&self.signal)
        } else {
            None
        };
        (signal.map(|s| s.notified()), signal.cloned())
    }
}

impl<S, ReqB, B> Service<Request<ReqB>> for Drain<S>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    B: Default,
{
    type Response = Response<DrainBody<B>>;
    type Error = S::Error;
    type Future = ResponseFuture<Pin<Box<S::Future>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline(always)]
    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The governor, outside, makes sure every call has its kind.
        let kind = kind_of(req.extensions()).unwrap_or_else(|| CallKind::by_path(req.uri().path()));
        let (cut, signal) = self.shared.watch(kind);
        ResponseFuture {
            cut,
            signal,
            fut: Box::pin(self.inner.call(req)),
        }
    }
}

pin_project! {
    /// Response future of [`Drain`] (`F` the boxed inner future).
    ///
    /// [`Drain`] boxes the inner future (user layers, router, handler): the layers outside
    /// move their futures through every `call` and `poll`, and a few hundred bytes of handler
    /// state moved a dozen times cost more than one allocation.
    #[derive(Debug)]
    pub(crate) struct ResponseFuture<F> {
        #[pin]
        fut: F,
        cut: Option<Cut>,
        signal: Option<Arc<DrainSignal>>,
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Default,
{
    type Output = Result<Response<DrainBody<B>>, E>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.fut.poll(cx) {
            let signal = this.signal.take();
            return Poll::Ready(out.map(|r| r.map(|b| DrainBody::new(b, signal))));
        }
        if let (Some(cut), Some(signal)) = (this.cut.as_mut(), this.signal.as_ref())
            && (cut.as_mut().poll(cx).is_ready() || signal.is_cut())
        {
            return Poll::Ready(Ok(status_response(
                code::UNAVAILABLE,
                SHUTTING_DOWN_MESSAGE,
            )));
        }
        Poll::Pending
    }
}

pin_project! {
    /// A body that ends with `Unavailable "server is shutting down"` when the drain is cut.
    #[derive(Debug)]
    pub(crate) struct DrainBody<B> {
        #[pin]
        inner: B,
        cut: Option<Cut>,
        signal: Option<Arc<DrainSignal>>,
        done: bool,
    }
}

impl<B> DrainBody<B> {
    fn new(inner: B, signal: Option<Arc<DrainSignal>>) -> Self {
        Self {
            inner,
            cut: signal.as_ref().map(|s| s.notified()),
            signal,
            done: false,
        }
    }
}

impl<B: Default> Default for DrainBody<B> {
    fn default() -> Self {
        Self::new(B::default(), None)
    }
}

impl<B: Body> Body for DrainBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        let Some(signal) = this.signal.as_ref() else {
            return this.inner.poll_frame(cx);
        };
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            return Poll::Ready(frame);
        }
        let fired = this
            .cut
            .as_mut()
            .is_some_and(|c| c.as_mut().poll(cx).is_ready());
        if !(fired || signal.is_cut()) {
            return Poll::Pending;
        }
        *this.done = true;
        let mut trailers = HeaderMap::new();
        trailers.insert(GRPC_STATUS, HeaderValue::from_static("14"));
        trailers.insert(
            GRPC_MESSAGE,
            HeaderValue::from_static(SHUTTING_DOWN_MESSAGE),
        );
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tower::ServiceExt;
    use zrpc_core::grpc::{status_from_headers, status_message_from_headers};

    use super::*;
    use crate::layers::test_util::{TestBody, arriving, final_code, ok_response};

    fn layer(signal: &Arc<DrainSignal>) -> DrainLayer {
        DrainLayer::new(signal.clone(), DrainSignal::new())
    }

    /// A call to `/d.T/Stream`, a streaming method.
    fn stream() -> Request<()> {
        let req = Request::builder().uri("/d.T/Stream").body(()).unwrap();
        arriving(req, CallKind::STREAMING)
    }

    #[tokio::test]
    async fn cut_ends_an_idle_stream_with_unavailable() {
        let signal = DrainSignal::new();
        let svc = layer(&signal).layer(tower::service_fn(|_req: Request<()>| async {
            Ok::<_, Infallible>(Response::new(TestBody::Pending))
        }));
        let req = stream();
        let resp = svc.oneshot(req).await.unwrap();
        let s = signal.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            s.cut();
        });
        assert_eq!(final_code(resp).await, Some(code::UNAVAILABLE));
    }

    #[tokio::test]
    async fn cut_ends_a_pending_streaming_call() {
        let signal = DrainSignal::new();
        let svc = layer(&signal).layer(tower::service_fn(|_req: Request<()>| async {
            std::future::pending::<()>().await;
            Ok::<_, Infallible>(ok_response())
        }));
        let req = stream();
        let call = tokio::spawn(svc.oneshot(req));
        tokio::task::yield_now().await;
        signal.cut();
        let resp = call.await.unwrap().unwrap();
        assert_eq!(status_from_headers(resp.headers()), Some(code::UNAVAILABLE));
        assert_eq!(
            status_message_from_headers(resp.headers()).as_deref(),
            Some(SHUTTING_DOWN_MESSAGE)
        );
    }

    #[tokio::test]
    async fn unary_calls_are_not_watched() {
        let signal = DrainSignal::new();
        signal.cut();
        let svc = layer(&signal).layer(tower::service_fn(|_req: Request<()>| async {
            Ok::<_, Infallible>(ok_response())
        }));
        let req = Request::builder().uri("/d.T/Unary").body(()).unwrap();
        assert_eq!(final_code(svc.oneshot(req).await.unwrap()).await, Some(0));
    }
}
