//! The server's compression stage, for every service it serves (generated services, health,
//! reflection): tonic's own compression is configured service by service in the generated
//! code (`accept_compressed`/`send_compressed`) and its codec functions are private to tonic,
//! so a stage of the chain works on the messages' frames instead
//! (`zrpc_core::grpc::compression`), before tonic's codec sees them:
//!
//! - a request whose `grpc-encoding` names an encoding of this build is decompressed (each
//!   message bounded by `MaxDecompressedSize`, past which the call ends with
//!   `ResourceExhausted`) and reaches the service without the header; the response then lists
//!   the server's encodings in `grpc-accept-encoding`;
//! - one naming another encoding is answered `Unimplemented`, with the encodings the server
//!   accepts in `grpc-accept-encoding`, as the gRPC compression spec asks;
//! - the response is compressed with `Compression` when the client lists it in
//!   `grpc-accept-encoding`, messages below `CompressionMinSize` excepted; a handler can choose
//!   otherwise for its call or message by message through the [`CallCompression`] in its
//!   request's extensions;
//! - a message with the compressed flag in a call without `grpc-encoding` is left to tonic,
//!   which ends the call with `Internal`, as the spec asks.
//!
//! A call that is not compressed either way costs one header lookup and nothing else.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use pin_project_lite::pin_project;
use tonic::Status;
use tonic::body::Body;
use tower_layer::Layer;
use tower_service::Service;
use zrpc_core::grpc::compression::{
    CallCompression, Compress, Decompress, DecompressError, Encoding, Encodings,
    GRPC_ACCEPT_ENCODING, GRPC_ENCODING,
};
use zrpc_core::grpc::{GRPC_STATUS, code, find_header, status_response};

use crate::conf::RpcServerConf;

/// What the stage does, from the config.
#[derive(Debug)]
struct Settings {
    /// The encodings of this build: accepted in requests.
    accepted: Encodings,
    /// `accepted` as a `grpc-accept-encoding` value.
    accept_value: HeaderValue,
    /// `Compression`.
    send: Option<Encoding>,
    min_size: usize,
    limit: usize,
}

/// Puts the compression stage around a service.
#[derive(Debug, Clone)]
pub(crate) struct CompressionLayer {
    settings: Arc<Settings>,
}

impl CompressionLayer {
    /// The stage as `conf` sets it.
    pub(crate) fn new(conf: &RpcServerConf) -> Self {
        let accepted = Encodings::built();
        CompressionLayer {
            settings: Arc::new(Settings {
                accepted,
                accept_value: accepted.header_value(),
                send: conf.compression.filter(|e| accepted.contains(*e)),
                min_size: conf.compression_min_size,
                limit: conf.max_decompressed_size,
            }),
        }
    }
}

impl<S> Layer<S> for CompressionLayer {
    type Service = Compression<S>;

    fn layer(&self, inner: S) -> Compression<S> {
        Compression {
            inner,
            settings: Arc::clone(&self.settings),
        }
    }
}

/// The compression stage ([`CompressionLayer`]).
#[derive(Debug, Clone)]
pub(crate) struct Compression<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S, B> Service<Request<Body>> for Compression<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    B: Default,
{
    type Response = Response<ResponseBody<B>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let s = &*self.settings;
        let received = match find_header(req.headers(), &GRPC_ENCODING) {
            None => None,
            Some(v) if v.as_bytes() == b"identity" => None,
            Some(v) => {
                match Encoding::from_name(v.as_bytes()).filter(|e| s.accepted.contains(*e)) {
                    Some(e) => Some(e),
                    None => return ResponseFuture::refused(unsupported(v, &s.accept_value)),
                }
            }
        };
        if received.is_none() && s.send.is_none() {
            return ResponseFuture::passed(self.inner.call(req));
        }
        let client_accepts = Encodings::from_accept_header(req.headers());
        let send = s.send.filter(|e| client_accepts.contains(*e));
        if received.is_none() && send.is_none() {
            return ResponseFuture::passed(self.inner.call(req));
        }
        let call = CallCompression::new();
        req.extensions_mut().insert(call.clone());
        if let Some(encoding) = received {
            req.headers_mut().remove(&GRPC_ENCODING);
            let limit = s.limit;
            let recorded = Some(call.clone());
            req = req.map(|body| {
                Body::new(
                    Decompress::new(body, encoding)
                        .limit(limit)
                        .record(recorded)
                        .map_err(into_status),
                )
            });
        }
        let watch = Watch {
            call,
            client_accepts,
            send,
            received: received.is_some(),
            settings: Arc::clone(&self.settings),
        };
        ResponseFuture {
            inner: Some(self.inner.call(req)),
            extra: Some(Box::new(Extra::Watch(watch))),
        }
    }
}

/// The `Unimplemented` answer to a request compressed in an encoding the server lacks.
fn unsupported(value: &HeaderValue, accept_value: &HeaderValue) -> Refused {
    Refused {
        message: format!(
            "the request is compressed with grpc-encoding {:?}, which this server does not \
             support (grpc-accept-encoding: {})",
            String::from_utf8_lossy(value.as_bytes()),
            String::from_utf8_lossy(accept_value.as_bytes()),
        ),
        accept_value: accept_value.clone(),
    }
}

/// A decompressed request body's error, as tonic's codec takes it.
fn into_status(e: DecompressError<Status>) -> Status {
    e.or_codec(|c| Status::new(c.code().into(), c.message()))
}

#[derive(Debug)]
struct Refused {
    message: String,
    accept_value: HeaderValue,
}

/// What the response of a compressed or compressible call needs.
#[derive(Debug)]
struct Watch {
    call: CallCompression,
    client_accepts: Encodings,
    /// `Compression`, when the client accepts it.
    send: Option<Encoding>,
    /// The request was compressed.
    received: bool,
    settings: Arc<Settings>,
}

impl Watch {
    /// The response, compressed when the call's choice or the config says so and the client
    /// accepts the encoding.
    fn respond<B>(self, resp: Response<B>) -> Response<ResponseBody<B>> {
        let (mut parts, body) = resp.into_parts();
        let s = &*self.settings;
        if self.received {
            // the spec: a server that received a compressed message lists its encodings
            parts
                .headers
                .insert(GRPC_ACCEPT_ENCODING, s.accept_value.clone());
        }
        let encoding = match self.call.send_choice() {
            Some(choice) => {
                choice.filter(|e| self.client_accepts.contains(*e) && s.accepted.contains(*e))
            }
            None => self.send,
        };
        let body = match encoding {
            // trailers-only, or already compressed by the service itself (tonic's own)
            Some(e)
                if !parts.headers.contains_key(GRPC_STATUS)
                    && !parts.headers.contains_key(&GRPC_ENCODING) =>
            {
                parts.headers.insert(GRPC_ENCODING, e.header_value());
                ResponseBody::Compressed {
                    body: Box::pin(
                        Compress::new(body, e)
                            .min_size(s.min_size)
                            .choices(Some(self.call)),
                    ),
                }
            }
            _ => ResponseBody::Plain { body },
        };
        Response::from_parts(parts, body)
    }
}

/// What a call compressed either way, or refused, needs besides the inner future (boxed: a
/// call compressed neither way carries none of it).
#[derive(Debug)]
enum Extra {
    Watch(Watch),
    Refused(Refused),
}

pin_project! {
    /// The response future of [`Compression`].
    pub(crate) struct ResponseFuture<F> {
        // `None`: refused before the service was called
        #[pin]
        inner: Option<F>,
        extra: Option<Box<Extra>>,
    }
}

impl<F> ResponseFuture<F> {
    fn passed(inner: F) -> Self {
        ResponseFuture {
            inner: Some(inner),
            extra: None,
        }
    }

    fn refused(refused: Refused) -> Self {
        ResponseFuture {
            inner: None,
            extra: Some(Box::new(Extra::Refused(refused))),
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Default,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Some(inner) = this.inner.as_pin_mut() {
            let resp = ready!(inner.poll(cx))?;
            return Poll::Ready(Ok(match this.extra.take().map(|b| *b) {
                Some(Extra::Watch(w)) => w.respond(resp),
                _ => resp.map(|body| ResponseBody::Plain { body }),
            }));
        }
        let (message, accept_value) = match this.extra.take().map(|b| *b) {
            Some(Extra::Refused(r)) => (r.message, r.accept_value),
            _ => (
                "polled after completion".to_owned(),
                HeaderValue::from_static("identity"),
            ),
        };
        let mut resp = status_response(code::UNIMPLEMENTED, &message);
        resp.headers_mut()
            .insert(GRPC_ACCEPT_ENCODING, accept_value);
        Poll::Ready(Ok(resp))
    }
}

pin_project! {
    /// A response body of the stage: as the service gave it, or compressed (boxed, so that
    /// every other response's body stays the size of the service's).
    #[project = BodyProj]
    pub(crate) enum ResponseBody<B> {
        Plain { #[pin] body: B },
        Compressed { body: Pin<Box<Compress<B>>> },
    }
}

impl<B: Default> Default for ResponseBody<B> {
    fn default() -> Self {
        ResponseBody::Plain { body: B::default() }
    }
}

impl<B: http_body::Body<Data = Bytes>> http_body::Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project() {
            BodyProj::Plain { body } => body.poll_frame(cx),
            BodyProj::Compressed { body } => body.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Plain { body } => body.is_end_stream(),
            ResponseBody::Compressed { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Plain { body } => body.size_hint(),
            ResponseBody::Compressed { .. } => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests;
