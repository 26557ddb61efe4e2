//! [`ObserveFuture`]: the response future shared by the layers that need the final status
//! (stat, metrics, breaker, shedding, tracing).
//!
//! It holds the layer's record (an [`OnStatus`]) in a [`StatusGuard`] while the handler
//! runs, then moves it into a [`StatusBody`] around the response body, so the record sees
//! the final code exactly once: from a trailers-only response's headers, from the trailers,
//! or `Cancelled` when the future or the body is dropped first.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;
use zrpc_core::grpc::{OnStatus, StatusBody, StatusGuard, code};

pin_project! {
    /// Wraps a response future; see the module docs.
    #[derive(Debug)]
    pub struct ObserveFuture<F, R: OnStatus> {
        #[pin]
        fut: F,
        guard: StatusGuard<R>,
    }
}

impl<F, R: OnStatus> ObserveFuture<F, R> {
    /// Observes `fut` with `record`.
    pub(crate) fn new(fut: F, record: R) -> Self {
        Self {
            fut,
            guard: StatusGuard::new(record),
        }
    }

    /// Passes `fut` through with nothing to report (layer disabled or method exempt).
    pub(crate) fn passthrough(fut: F) -> Self {
        Self {
            fut,
            guard: StatusGuard::disarmed(),
        }
    }
}

impl<F, R, B, E> Future for ObserveFuture<F, R>
where
    F: Future<Output = Result<Response<B>, E>>,
    R: OnStatus,
{
    type Output = Result<Response<StatusBody<B, R>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = ready!(this.fut.poll(cx));
        Poll::Ready(match out {
            Ok(resp) => Ok(match this.guard.take() {
                Some(record) => StatusBody::wrap_response(resp, record),
                None => resp.map(StatusBody::reported),
            }),
            Err(e) => {
                this.guard.fire(code::UNKNOWN);
                Err(e)
            }
        })
    }
}

pin_project! {
    /// An [`ObserveFuture`], or a call rejected locally (breaker open, overloaded) whose
    /// trailers-only response already carries the layer's record in its [`StatusBody`].
    #[derive(Debug)]
    pub struct ObserveOrReject<F, B, R: OnStatus> {
        #[pin]
        state: State<F, B, R>,
    }
}

pin_project! {
    #[project = StateProj]
    #[derive(Debug)]
    enum State<F, B, R: OnStatus> {
        Observe { #[pin] fut: ObserveFuture<F, R> },
        Rejected { resp: Option<Response<StatusBody<B, R>>> },
    }
}

impl<F, B, R: OnStatus> ObserveOrReject<F, B, R> {
    pub(crate) fn observe(fut: ObserveFuture<F, R>) -> Self {
        Self {
            state: State::Observe { fut },
        }
    }

    pub(crate) fn rejected(resp: Response<StatusBody<B, R>>) -> Self {
        Self {
            state: State::Rejected { resp: Some(resp) },
        }
    }
}

impl<F, B, R, E> Future for ObserveOrReject<F, B, R>
where
    F: Future<Output = Result<Response<B>, E>>,
    R: OnStatus,
{
    type Output = Result<Response<StatusBody<B, R>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Observe { fut } => fut.poll(cx),
            StateProj::Rejected { resp } => match resp.take() {
                Some(r) => Poll::Ready(Ok(r)),
                None => Poll::Pending,
            },
        }
    }
}
