//! [`StatusBody`]: a response body that reports the final gRPC status once.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::guard::{OnStatus, StatusGuard};
use super::status_from_headers;

pin_project! {
    /// Wraps a gRPC response body and calls `on_status(code)` exactly once with the
    /// final status:
    ///
    /// - from the `grpc-status` **header** when the response is trailers-only
    ///   (use [`StatusBody::wrap_response`], which looks at the headers first);
    /// - from the `grpc-status` **trailer** when the body yields its trailers;
    /// - [`code::UNKNOWN`] when the body ends or fails without a status;
    /// - [`code::CANCELLED`] when the body is dropped before any of the above
    ///   (the peer reset the stream, the connection died).
    ///
    /// Frames pass through unchanged; there is no allocation or copy.
    ///
    /// # Examples
    ///
    /// ```
    /// use zrpc_core::grpc::{StatusBody, code};
    ///
    /// let resp: http::Response<String> = zrpc_core::grpc::status_response(code::INTERNAL, "boom");
    /// let seen = std::cell::Cell::new(None);
    /// let _resp = StatusBody::wrap_response(resp, |c| seen.set(Some(c)));
    /// assert_eq!(seen.get(), Some(code::INTERNAL));
    /// ```
    pub struct StatusBody<B, F: OnStatus> {
        #[pin]
        inner: B,
        guard: StatusGuard<F>,
    }
}

impl<B, F: OnStatus> StatusBody<B, F> {
    /// Wraps `body`; the status will come from its trailers (or Cancelled on drop).
    pub fn new(body: B, on_status: F) -> Self {
        Self {
            inner: body,
            guard: StatusGuard::new(on_status),
        }
    }

    /// Wraps a body whose status is already known (nothing will be reported).
    pub fn reported(body: B) -> Self {
        Self {
            inner: body,
            guard: StatusGuard::disarmed(),
        }
    }

    /// Wraps a response's body. A trailers-only response (`grpc-status` in the headers)
    /// reports its code at once; otherwise the code comes from the trailers.
    #[inline(always)]
    pub fn wrap_response(resp: Response<B>, on_status: F) -> Response<Self> {
        let (parts, body) = resp.into_parts();
        let body = match status_from_headers(&parts.headers) {
            Some(c) => {
                on_status.on_status(c);
                Self::reported(body)
            }
            None => Self::new(body, on_status),
        };
        Response::from_parts(parts, body)
    }

    /// The wrapped body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }
}

impl<B: Default, F: OnStatus> Default for StatusBody<B, F> {
    fn default() -> Self {
        Self::reported(B::default())
    }
}

impl<B: Body, F: OnStatus> Body for StatusBody<B, F> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let item = ready!(this.inner.poll_frame(cx));
        this.guard.observe(&item);
        Poll::Ready(item)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: fmt::Debug, F: OnStatus> fmt::Debug for StatusBody<B, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatusBody")
            .field("inner", &self.inner)
            .field("guard", &self.guard)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use http::HeaderMap;

    use super::super::code;
    use super::*;

    /// A body replaying scripted frames.
    #[derive(Default)]
    struct Scripted(VecDeque<Result<Frame<Bytes>, &'static str>>);

    impl Body for Scripted {
        type Data = Bytes;
        type Error = &'static str;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
            Poll::Ready(self.0.pop_front())
        }
    }

    fn recorder() -> (Arc<Mutex<Vec<i32>>>, impl FnOnce(i32) + Clone) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        (seen, move |c| s.lock().unwrap().push(c))
    }

    fn drain<B: Body + Unpin>(mut b: B) {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        while let Poll::Ready(Some(_)) = Pin::new(&mut b).poll_frame(&mut cx) {}
    }

    fn trailers(code: &'static str) -> Frame<Bytes> {
        let mut t = HeaderMap::new();
        t.insert("grpc-status", code.parse().unwrap());
        Frame::trailers(t)
    }

    #[test]
    fn reports_status_from_trailers() {
        let (seen, f) = recorder();
        let body = Scripted(
            [Ok(Frame::data(Bytes::from_static(b"x"))), Ok(trailers("4"))]
                .into_iter()
                .collect(),
        );
        drain(StatusBody::new(body, f));
        assert_eq!(*seen.lock().unwrap(), vec![code::DEADLINE_EXCEEDED]);
    }

    #[test]
    fn reports_trailers_only_at_once() {
        let (seen, f) = recorder();
        let resp: Response<Scripted> = super::super::status_response(code::UNAVAILABLE, "open");
        let resp = StatusBody::wrap_response(resp, f);
        assert_eq!(*seen.lock().unwrap(), vec![code::UNAVAILABLE]);
        drain(resp.into_body());
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[test]
    fn reports_cancelled_when_dropped_early() {
        let (seen, f) = recorder();
        let body = Scripted([Ok(trailers("0"))].into_iter().collect());
        drop(StatusBody::new(body, f));
        assert_eq!(*seen.lock().unwrap(), vec![code::CANCELLED]);
    }

    #[test]
    fn reports_unknown_on_error_or_missing_status() {
        let (seen, f) = recorder();
        drain(StatusBody::new(
            Scripted([Err("boom")].into_iter().collect()),
            f.clone(),
        ));
        drain(StatusBody::new(Scripted::default(), f));
        assert_eq!(*seen.lock().unwrap(), vec![code::UNKNOWN, code::UNKNOWN]);
    }
}
