//! [`ObserveFuture`]: the response future shared by the layers that need the final status
//! (stat, metrics, breaker, shedding, tracing).
//!
//! It holds the layer's record (an [`OnStatus`]) in a [`StatusGuard`] while the handler
//! runs, then moves it into an [`ObservedBody`] around the response body, so the record sees
//! the final code exactly once: from a trailers-only response's headers, from the trailers,
//! or `Cancelled` when the future or the body is dropped first.
//!
//! [`ObservedBody`] is `zrpc_core::grpc::StatusBody` for the server's hot path: a body with
//! nothing to report (its layer is off, the method exempt, the status already known) does
//! not read the trailers at all, and the `grpc-status` lookup uses a prebuilt `HeaderName`
//! (`StatusBody` parsed the name and the code in every layer whether or not anyone listened:
//! ~800 instructions per call with every middleware off, callgrind).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{HeaderMap, Response};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use zrpc_core::grpc::{OnStatus, StatusGuard, code};

use super::util::{GRPC_STATUS, find};

/// The numeric `grpc-status` in `headers`, if present; a malformed value is `UNKNOWN`
/// (as `zrpc_core::grpc::status_from_headers`, without parsing the header name).
pub(crate) fn status_of(headers: &HeaderMap) -> Option<i32> {
    let v = find(headers, &GRPC_STATUS)?.as_bytes();
    Some(match *v {
        // The usual one- or two-digit codes, without UTF-8 checks and trimming.
        [d @ b'0'..=b'9'] => i32::from(d - b'0'),
        [a @ b'0'..=b'9', b @ b'0'..=b'9'] => i32::from(a - b'0') * 10 + i32::from(b - b'0'),
        _ => std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(code::UNKNOWN),
    })
}

pin_project! {
    /// A response body that reports the final gRPC status to its record once: from the
    /// trailers, `UNKNOWN` when the body ends or fails without them, `CANCELLED` when it is
    /// dropped first. Frames pass through unchanged.
    pub struct ObservedBody<B, R: OnStatus> {
        #[pin]
        inner: B,
        guard: StatusGuard<R>,
    }
}

impl<B, R: OnStatus> ObservedBody<B, R> {
    /// Wraps a body whose status is already known or that nobody listens to.
    pub(crate) fn reported(inner: B) -> Self {
        Self {
            inner,
            guard: StatusGuard::disarmed(),
        }
    }

    /// Wraps a response's body for `record`: a trailers-only response (`grpc-status` in the
    /// headers) reports at once, any other when its trailers come.
    pub(crate) fn wrap_response(resp: Response<B>, record: R) -> Response<Self> {
        let (parts, inner) = resp.into_parts();
        let guard = match status_of(&parts.headers) {
            Some(c) => {
                record.on_status(c);
                StatusGuard::disarmed()
            }
            None => StatusGuard::new(record),
        };
        Response::from_parts(parts, Self { inner, guard })
    }
}

impl<B: Default, R: OnStatus> Default for ObservedBody<B, R> {
    fn default() -> Self {
        Self::reported(B::default())
    }
}

impl<B: Body, R: OnStatus> Body for ObservedBody<B, R> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let item = ready!(this.inner.poll_frame(cx));
        if this.guard.is_armed() {
            match &item {
                Some(Ok(frame)) => {
                    if let Some(trailers) = frame.trailers_ref() {
                        this.guard
                            .fire(status_of(trailers).unwrap_or(code::UNKNOWN));
                    }
                }
                Some(Err(_)) | None => this.guard.fire(code::UNKNOWN),
            }
        }
        Poll::Ready(item)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: fmt::Debug, R: OnStatus> fmt::Debug for ObservedBody<B, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObservedBody")
            .field("inner", &self.inner)
            .field("guard", &self.guard)
            .finish()
    }
}

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
    type Output = Result<Response<ObservedBody<B, R>>, E>;

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
        Rejected { resp: Option<Response<ObservedBody<B, R>>> },
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
            state: State::Rejected { resp: Some(resp) },
        }
    }
}

impl<F, B, R, E> Future for ObserveOrReject<F, B, R>
where
    F: Future<Output = Result<Response<B>, E>>,
    R: OnStatus,
{
    type Output = Result<Response<ObservedBody<B, R>>, E>;

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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn status_of_reads_codes_as_status_from_headers_does() {
        let mut h = HeaderMap::new();
        assert_eq!(status_of(&h), None);
        for raw in [
            "0", "7", "14", "16", "99", " 3", "3 ", "+4", "-1", "123", "", "x", "1x",
        ] {
            h.insert("grpc-status", HeaderValue::from_str(raw).unwrap());
            assert_eq!(
                status_of(&h),
                zrpc_core::grpc::status_from_headers(&h),
                "{raw:?}"
            );
        }
        h.insert("grpc-status", HeaderValue::from_bytes(b"\xff").unwrap());
        assert_eq!(status_of(&h), Some(code::UNKNOWN));
    }

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
