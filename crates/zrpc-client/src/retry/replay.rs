//! Keeping a copy of a request so that it can be sent again, and the deadline of a request
//! body still being streamed.
//!
//! A request can be replayed only if its whole body is available when it is sent and is small:
//! tonic's unary calls (and client streams whose messages are all ready) encode their body
//! synchronously, so polling it once without waiting yields every frame and the end. Such a body is
//! kept as one `Bytes` (reference-counted: sending it twice copies nothing). A body that is still
//! pending (a live client stream), larger than [`MAX_REPLAY_BYTES`], or that carries trailers, is
//! passed on (the frames read so far first) and the request is never sent again; at the call's
//! deadline it ends with an error that makes hyper reset the stream with `CANCEL`, as grpc-go's
//! client does, so that a client stream still sending does not keep the stream open past it.
//!
//! What is kept costs little: the body `Bytes` (a reference count) and the headers as one list of
//! (name, value) pairs (one allocation: the names and values are reference-counted or static; a
//! `HeaderMap` clone costs two, its index and its entries, and a re-send is rare enough to
//! rebuild the map then), and of the extensions only the call's [`HashKey`]: below the retry
//! stage only the picker reads the request's extensions, for the key (copying the whole extension
//! map cost four allocations per call).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, Version};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use tonic::body::Body;

use crate::balancer::HashKey;

/// Bodies larger than this are not kept for a re-send.
pub(crate) const MAX_REPLAY_BYTES: usize = 256 * 1024;

/// A re-sendable copy of a request.
#[derive(Debug)]
pub(crate) struct Replay {
    method: Method,
    uri: Uri,
    version: Version,
    headers: Vec<(HeaderName, HeaderValue)>,
    hash_key: Option<HashKey>,
    body: Bytes,
}

impl Replay {
    /// A copy to send while keeping this one.
    pub(crate) fn clone_request(&self) -> http::Request<Body> {
        let mut req = http::Request::new(Body::new(Once(Some(self.body.clone()))));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.version_mut() = self.version;
        let mut headers = HeaderMap::with_capacity(self.headers.len());
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        *req.headers_mut() = headers;
        if let Some(k) = &self.hash_key {
            req.extensions_mut().insert(k.clone());
        }
        req
    }

    /// The request's path (`/service/method`).
    pub(crate) fn path(&self) -> &str {
        self.uri.path()
    }
}

/// Returns the request to send now and, when its body was complete and small, a replay copy. A
/// body still pending is passed on, ended at `deadline` (see the module docs).
///
/// # Errors
///
/// The body failed while being read (e.g. a message tonic could not encode): that error.
pub(crate) fn prepare(
    req: http::Request<Body>,
    deadline: Option<Instant>,
) -> Result<(http::Request<Body>, Option<Replay>), tonic::Status> {
    let (parts, mut body) = req.into_parts();
    // the first frame apart: a unary body is one frame, read without allocating a queue
    let mut first: Option<Frame<Bytes>> = None;
    let mut more: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut size = 0usize;
    let complete = loop {
        match body.frame().now_or_never() {
            None => break false,
            Some(None) => break true,
            Some(Some(Err(e))) => return Err(e),
            Some(Some(Ok(frame))) => {
                let is_data = frame.is_data();
                if let Some(d) = frame.data_ref() {
                    size += d.len();
                }
                if first.is_none() {
                    first = Some(frame);
                } else {
                    more.push_back(frame);
                }
                if !is_data || size > MAX_REPLAY_BYTES {
                    break false;
                }
            }
        }
    };
    if !complete {
        let mut head = more;
        if let Some(f) = first {
            head.push_front(f);
        }
        let body = Body::new(Prefixed {
            head,
            rest: body,
            deadline,
            timer: None,
        });
        return Ok((http::Request::from_parts(parts, body), None));
    }
    let data = match (first, more.is_empty()) {
        (None, _) => Bytes::new(),
        (Some(f), true) => f.into_data().unwrap_or_default(),
        (Some(f), false) => {
            let mut buf = BytesMut::with_capacity(size);
            for f in std::iter::once(f).chain(more) {
                if let Ok(d) = f.into_data() {
                    buf.extend_from_slice(&d);
                }
            }
            buf.freeze()
        }
    };
    let replay = Some(Replay {
        method: parts.method.clone(),
        uri: parts.uri.clone(),
        version: parts.version,
        headers: {
            let mut v = Vec::with_capacity(parts.headers.len());
            v.extend(parts.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
            v
        },
        hash_key: parts.extensions.get::<HashKey>().cloned(),
        body: data.clone(),
    });
    let req = http::Request::from_parts(parts, Body::new(Once(Some(data))));
    Ok((req, replay))
}

/// A complete body sent (again): one data frame, then the end. Unlike `Full`, it does not announce
/// its size: an exact size hint makes hyper add a `content-length` header (two allocations per
/// call, and a header tonic's own request bodies never carry).
struct Once(Option<Bytes>);

impl http_body::Body for Once {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.take().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }
}

/// Frames already read, then the rest of the body, until the call's deadline.
struct Prefixed {
    head: VecDeque<Frame<Bytes>>,
    rest: Body,
    deadline: Option<Instant>,
    /// Armed at the deadline when the rest is first pending (a stream waiting for its next
    /// message): a body that never waits arms none.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl http_body::Body for Prefixed {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = &mut *self;
        if let Some(f) = this.head.pop_front() {
            return Poll::Ready(Some(Ok(f)));
        }
        let polled = Pin::new(&mut this.rest).poll_frame(cx);
        if polled.is_pending()
            && let Some(deadline) = this.deadline
        {
            let timer = this.timer.get_or_insert_with(|| {
                Box::pin(tokio::time::sleep_until(tokio::time::Instant::from_std(
                    deadline,
                )))
            });
            if timer.as_mut().poll(cx).is_ready() {
                this.deadline = None;
                this.rest = Body::empty();
                return Poll::Ready(Some(Err(cancelled_at_deadline())));
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_empty() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let head: u64 = self
            .head
            .iter()
            .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
            .sum();
        let mut hint = self.rest.size_hint();
        hint.set_lower(hint.lower() + head);
        if let Some(u) = hint.upper() {
            hint.set_upper(u + head);
        }
        hint
    }
}

/// The error a request body still streaming at the call's deadline ends with: hyper resets the
/// stream with the HTTP/2 reason it finds in an error's sources, here `CANCEL` (any other error
/// would reset it with `INTERNAL_ERROR`).
fn cancelled_at_deadline() -> tonic::Status {
    let mut status =
        tonic::Status::deadline_exceeded("deadline exceeded while sending the request");
    status.set_source(Arc::new(h2::Error::from(h2::Reason::CANCEL)));
    status
}

#[cfg(test)]
mod tests {
    use http_body_util::Full;

    use super::*;

    #[tokio::test]
    async fn complete_body_is_kept_and_resent() {
        let mut req = http::Request::new(Body::new(Full::new(Bytes::from_static(b"hello"))));
        req.headers_mut().insert("x-a", "1".parse().unwrap());
        let (first, replay) = prepare(req, None).unwrap();
        let replay = replay.unwrap();
        assert_eq!(
            first.into_body().collect().await.unwrap().to_bytes(),
            "hello"
        );
        let again = replay.clone_request();
        assert_eq!(again.headers()["x-a"], "1");
        assert_eq!(
            again.into_body().collect().await.unwrap().to_bytes(),
            "hello"
        );
    }

    #[tokio::test]
    async fn the_replay_keeps_a_multi_frame_body_and_no_extension() {
        let frames = http_body_util::StreamBody::new(futures_util::stream::iter([
            Ok::<_, tonic::Status>(Frame::data(Bytes::from_static(b"he"))),
            Ok(Frame::data(Bytes::from_static(b"llo"))),
        ]));
        let mut req = http::Request::new(Body::new(frames));
        req.extensions_mut().insert(7u8);
        let (first, replay) = prepare(req, None).unwrap();
        assert_eq!(
            first.extensions().get::<u8>(),
            Some(&7),
            "the first attempt keeps all"
        );
        let again = replay.unwrap().clone_request();
        assert_eq!(again.extensions().get::<u8>(), None);
        assert_eq!(
            again.into_body().collect().await.unwrap().to_bytes(),
            "hello"
        );
    }

    /// A client stream whose first message `a` is ready and whose next ones come on the sender.
    async fn streaming() -> (
        tokio::sync::mpsc::Sender<Result<Frame<Bytes>, tonic::Status>>,
        Body,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, tonic::Status>>(4);
        tx.send(Ok(Frame::data(Bytes::from_static(b"a"))))
            .await
            .unwrap();
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        (tx, Body::new(http_body_util::StreamBody::new(stream)))
    }

    #[tokio::test]
    async fn pending_body_is_passed_through_and_not_kept() {
        let (tx, body) = streaming().await;
        let (req, replay) = prepare(http::Request::new(body), None).unwrap();
        assert!(replay.is_none());
        tx.send(Ok(Frame::data(Bytes::from_static(b"b"))))
            .await
            .unwrap();
        drop(tx);
        assert_eq!(req.into_body().collect().await.unwrap().to_bytes(), "ab");
    }

    #[tokio::test]
    async fn large_body_is_not_kept() {
        let big = Bytes::from(vec![0u8; MAX_REPLAY_BYTES + 1]);
        let (req, replay) = prepare(http::Request::new(Body::new(Full::new(big))), None).unwrap();
        assert!(replay.is_none());
        assert_eq!(
            req.into_body().collect().await.unwrap().to_bytes().len(),
            MAX_REPLAY_BYTES + 1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_still_streaming_at_the_deadline_ends_with_a_cancel() {
        let (tx, body) = streaming().await;
        let deadline = Instant::now() + std::time::Duration::from_millis(100);
        let (req, _) = prepare(http::Request::new(body), Some(deadline)).unwrap();
        let mut body = req.into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "a");
        // nothing more is sent: at the deadline the body fails with CANCEL in its sources
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded);
        let reason = std::error::Error::source(&err)
            .and_then(|e| e.downcast_ref::<h2::Error>())
            .and_then(h2::Error::reason);
        assert_eq!(reason, Some(h2::Reason::CANCEL));
        assert!(body.frame().await.is_none(), "then it ends");
        drop(tx);
    }
}
