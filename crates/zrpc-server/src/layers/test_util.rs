//! Test helpers for the layer unit tests.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use zrpc_core::grpc::status_from_headers;

use crate::call::{Arrival, CallKind, CallerDeadline};

/// `req` as the transport hands a call of `kind` to the chain: with its `Arrival` (on a
/// connection the tests know nothing about, the caller's deadline read from its headers).
pub(crate) fn arriving<B>(mut req: Request<B>, kind: CallKind) -> Request<B> {
    let caller = CallerDeadline::of(req.headers());
    req.extensions_mut().insert(Arrival {
        caller,
        ..Arrival::for_test_kind(kind)
    });
    req
}

/// A scripted response body.
#[derive(Debug, Default)]
pub(crate) enum TestBody {
    /// Ends at once.
    #[default]
    Empty,
    /// Yields these frames.
    Frames(VecDeque<Frame<Bytes>>),
    /// Panics when polled.
    Panics,
    /// Never yields (an idle stream).
    Pending,
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut *self {
            TestBody::Empty => Poll::Ready(None),
            TestBody::Frames(f) => Poll::Ready(f.pop_front().map(Ok)),
            TestBody::Panics => panic!("body exploded"),
            TestBody::Pending => Poll::Pending,
        }
    }
}

/// A response with one message and `grpc-status` `code` in the trailers.
pub(crate) fn response_with_code(code: i32) -> Response<TestBody> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from(code));
    let frames = [
        Frame::data(Bytes::from_static(b"\0\0\0\0\0")),
        Frame::trailers(trailers),
    ];
    let mut r = Response::new(TestBody::Frames(frames.into_iter().collect()));
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    r
}

/// A successful response (status OK in the trailers).
pub(crate) fn ok_response() -> Response<TestBody> {
    response_with_code(0)
}

/// The final gRPC code of a response: headers first, else collect the body's trailers.
pub(crate) async fn final_code<B>(resp: Response<B>) -> Option<i32>
where
    B: Body,
    B::Error: std::fmt::Debug,
{
    if let Some(c) = status_from_headers(resp.headers()) {
        return Some(c);
    }
    let collected = resp.into_body().collect().await.unwrap();
    collected.trailers().and_then(status_from_headers)
}

/// A log buffer capturing `tracing` output on the current thread.
#[derive(Clone, Default)]
pub(crate) struct LogBuf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogBuf {
    pub(crate) fn contents(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for LogBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures logs of the current thread (use with a current-thread runtime).
pub(crate) fn capture_logs() -> (tracing::subscriber::DefaultGuard, LogBuf) {
    // A global subscriber interested in everything, so that a callsite first hit on a
    // thread without a scoped subscriber (tests run in parallel) is not cached as
    // "never interesting" for the scoped subscribers of other threads.
    static GLOBAL: std::sync::Once = std::sync::Once::new();
    GLOBAL.call_once(|| {
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
    });
    let buf = LogBuf::default();
    let writer = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    (tracing::subscriber::set_default(sub), buf)
}
