//! [`ObserveFuture`]: the response future shared by the stages that need the final status
//! (stat, metrics, breaker, shedding, tracing) when they run as tower layers of their own, in
//! tests (the server runs them in the governor, whose one body wrapper reports to them all).
//!
//! It holds the layer's record (an [`OnStatus`]) in a [`StatusGuard`] while the handler
//! runs, then moves it into an [`ObservedBody`] around the response body, so the record sees
//! the final code exactly once: from a trailers-only response's headers, from the trailers,
//! or `Cancelled` when the future or the body is dropped first.
//!
//! [`ObservedBody`] is `zrpc_core::grpc::StatusBody`: a body with nothing to report (its layer
//! is off, the method exempt, the status already known) does not read the trailers at all.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;
use zrpc_core::grpc::{OnStatus, StatusBody, StatusGuard, code};

/// The body the observing layers return: core's [`StatusBody`], which reads no trailers
/// when nobody listens and parses `grpc-status` on a fast path.
pub(crate) type ObservedBody<B, R> = StatusBody<B, R>;

pin_project! {
    /// Wraps a response future; see the module docs.
    #[derive(Debug)]
    pub(crate) struct ObserveFuture<F, R: OnStatus> {
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
    type Output = Result<Response<ObservedBody<B, R>>, E>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = ready!(this.fut.poll(cx));
        Poll::Ready(match out {
            Ok(resp) => Ok(match this.guard.take() {
                Some(record) => ObservedBody::wrap_response(resp, record),
                None => resp.map(ObservedBody::reported),
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
    /// trailers-only response already carries the layer's record in its [`ObservedBody`].
    #[derive(Debug)]
    pub(crate) struct ObserveOrReject<F, B, R: OnStatus> {
        #[pin]
        state: State<F, B, R>,
    }
}

pin_project! {
    #[project = StateProj]
    #[derive(Debug)]
    // A rejection's response is boxed (a rare path): inline it made every call's future
    // ~200 bytes larger, copied by each outer layer.
    enum State<F, B, R: OnStatus> {
        Observe { #[pin] fut: ObserveFuture<F, R> },
        Rejected { resp: Option<Box<Response<ObservedBody<B, R>>>> },
    }
}

impl<F, B, R: OnStatus> ObserveOrReject<F, B, R> {
    pub(crate) fn observe(fut: ObserveFuture<F, R>) -> Self {
        Self {
            state: State::Observe { fut },
        }
    }

    pub(crate) fn rejected(resp: Response<ObservedBody<B, R>>) -> Self {
        Self {
            state: State::Rejected {
                resp: Some(Box::new(resp)),
            },
        }
    }
}

impl<F, B, R, E> Future for ObserveOrReject<F, B, R>
where
    F: Future<Output = Result<Response<B>, E>>,
    R: OnStatus,
{
    type Output = Result<Response<ObservedBody<B, R>>, E>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Observe { fut } => fut.poll(cx),
            StateProj::Rejected { resp } => match resp.take() {
                Some(r) => Poll::Ready(Ok(*r)),
                None => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue};

    use super::*;

    #[tokio::test]
    async fn a_body_reports_its_trailers_once_and_a_disarmed_one_nothing() {
        use std::sync::{Arc, Mutex};

        use bytes::Bytes;
        use http_body_util::BodyExt;

        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = {
            let seen = seen.clone();
            move |c: i32| seen.lock().unwrap().push(c)
        };
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("13"));
        let body = || {
            http_body_util::Full::new(Bytes::from_static(b"x"))
                .with_trailers(std::future::ready(Some(Ok(trailers.clone()))))
        };
        let resp = ObservedBody::wrap_response(Response::new(body()), record);
        let _ = resp.into_body().collect().await.unwrap();
        let quiet: ObservedBody<_, fn(i32)> = ObservedBody::reported(body());
        let _ = quiet.collect().await.unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![code::INTERNAL]);
    }
}
