//! A call's facts: who caused its failure, so the breaker and the shedder learn only from the
//! server (a zrpc addition; go-zero's interceptors count every failure), and the trailers its
//! handler adds ([`Trailers`](super::Trailers)).
//!
//! A final gRPC code alone cannot say whose fault a failure was: `Internal` is what tonic
//! answers to an undecodable request *and* what a failing handler returns; `DeadlineExceeded`
//! is a slow handler *or* a request body that never arrived. Each call gets a [`CallFacts`] as it
//! arrives (in its `Arrival`), and its request body is watched to record whether it was read **to
//! its end**, by the transport's request body (its byte budget's when one is set, else
//! [`FactsBody`]). The stages that learn from outcomes read it:
//!
//! - **The request was never read to its end**: the handler of a unary or server-streaming
//!   method never ran, because tonic reads the whole request body (message, then trailers: its
//!   `map_request_unary`) before it calls the handler. Whatever the call ended with (a decode
//!   error, a missing message, a deadline while waiting for the body, the caller's reset, an
//!   unknown method), the caller caused it. This is the structural signal we rely on instead of
//!   matching tonic's decode error text (`"failed to decode Protobuf message: ..."`, prost's
//!   `Display`, which is neither a stable API nor the only caller-caused error: a truncated
//!   frame is `"Unexpected EOF decoding stream."`, an absent one `"Missing request message."`).
//!   It also covers the decode error raised while reading trailing messages, and any codec.
//! - **The request body failed** (the client reset the stream): the caller went away.
//! - **A handler panicked** (the recover stage marks it before it drops the handler's future,
//!   which would otherwise look like a cancellation): the server failed.
//!
//! For client- and bidi-streaming methods the handler reads the body itself, so a failure it
//! returns before the caller finished sending is not attributed to the server either (the
//! conservative side: a caller that keeps its stream open cannot make the server reject others).

use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
#[cfg(test)]
use http::Request;
use http::{HeaderMap, HeaderName};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use zrpc_core::grpc::code;

const REQUEST_ENDED: u8 = 1;
const REQUEST_FAILED: u8 = 2;
const PANICKED: u8 = 4;

/// What is known of one call, shared by the transport that records it, the stages that read
/// it and the handler: whose fault a failure is, and the trailers the handler adds. One
/// allocation per call, made by the transport as the call arrives.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallFacts(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    bits: AtomicU8,
    /// Set when the handler adds trailers (most calls never do: one atomic read at the end).
    trailers: OnceLock<Mutex<HeaderMap>>,
}

/// Whose fault a call's final code is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Blame {
    /// The call succeeded or failed acceptably (go-zero's acceptable codes).
    None,
    /// The server failed: the handler returned a failure code, timed out or panicked.
    Server,
    /// The caller caused the failure (its request never arrived whole, or it went away).
    Caller,
}

impl CallFacts {
    fn set(&self, bit: u8) {
        self.0.bits.fetch_or(bit, Ordering::Relaxed);
    }

    fn has(&self, bit: u8) -> bool {
        self.0.bits.load(Ordering::Relaxed) & bit != 0
    }

    /// Adds `md` to the trailers of the call's response (entries appended, as grpc-go's
    /// `SetTrailer` does).
    pub(crate) fn add_trailers(&self, md: HeaderMap) {
        let slot = self.0.trailers.get_or_init(Mutex::default);
        let mut trailers = slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut last = None;
        for (name, value) in md {
            // `None`: another value of the name before it.
            if let Some(name) = name {
                last = Some(name);
            }
            if let Some(name) = &last {
                trailers.append(name.clone(), value);
            }
        }
    }

    /// Moves the trailers the handler added into `into` (a response's trailers or the headers
    /// of a trailers-only answer); nothing when it added none. The status the response carries
    /// is kept: a handler's `grpc-status` or `grpc-message` entry does not replace it.
    pub(crate) fn take_trailers(&self, into: &mut HeaderMap) {
        let Some(slot) = self.0.trailers.get() else {
            return;
        };
        let added = std::mem::take(
            &mut *slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for (name, value) in added.iter() {
            if is_status_header(name) {
                continue;
            }
            into.append(name.clone(), value.clone());
        }
    }

    /// The request body was read to its end (so a unary handler got its request).
    #[cfg(test)]
    pub(crate) fn request_ended(&self) -> bool {
        self.has(REQUEST_ENDED)
    }

    /// Records that the handler panicked.
    pub(crate) fn mark_panicked(&self) {
        self.set(PANICKED);
    }

    /// Records that the request body was read to its end (the body wrapper does this).
    #[cfg(test)]
    pub(crate) fn mark_request_ended(&self) {
        self.set(REQUEST_ENDED);
    }

    /// Whose fault the final `code` is.
    pub(crate) fn blame(&self, code: i32) -> Blame {
        if self.has(PANICKED) {
            return Blame::Server;
        }
        if code::is_acceptable(code) {
            return Blame::None;
        }
        if self.has(REQUEST_FAILED) || !self.has(REQUEST_ENDED) {
            return Blame::Caller;
        }
        Blame::Server
    }
}

/// Whose fault `code` is for a call with `facts` (`None`: the chain keeps no facts, the code
/// alone decides). A record dropped while the thread unwinds is a panic in the handler.
pub(crate) fn blame(facts: Option<&CallFacts>, code: i32) -> Blame {
    if std::thread::panicking() {
        return Blame::Server;
    }
    match facts {
        Some(f) => f.blame(code),
        None if code::is_acceptable(code) => Blame::None,
        None => Blame::Server,
    }
}

/// Whether `name` is one of the status entries the server writes itself.
fn is_status_header(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "grpc-status" | "grpc-message" | "grpc-status-details-bin"
    )
}

/// The facts of a request made by a test's nested facts layer.
#[cfg(test)]
pub(crate) fn facts_of<B>(req: &Request<B>) -> Option<CallFacts> {
    req.extensions().get::<CallFacts>().cloned()
}

/// `req` with its [`CallFacts`] in its extensions and its body watched for them, unless it
/// has them already: the nested facts layer of the tests (the server's transport makes every
/// call's facts as it arrives).
#[cfg(test)]
pub(crate) fn with_facts(req: Request<tonic::body::Body>) -> Request<tonic::body::Body> {
    if req.extensions().get::<CallFacts>().is_some() {
        return req;
    }
    let facts = CallFacts::default();
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(facts.clone());
    // A request without a body (END_STREAM on its headers) stays "not ended": no handler
    // of a unary method runs without a message.
    let body = tonic::body::Body::new(FactsBody::new(body, facts));
    Request::from_parts(parts, body)
}

/// Records in `facts` what a request body's `frame` says (once: `facts` is taken then): read
/// to its end (the end of the stream, or its trailers, always last) or failed.
pub(crate) fn record_frame<D, E>(
    facts: &mut Option<CallFacts>,
    frame: &Option<Result<Frame<D>, E>>,
) {
    let bit = match frame {
        None => REQUEST_ENDED,
        Some(Ok(f)) if f.is_trailers() => REQUEST_ENDED,
        Some(Ok(_)) => return,
        Some(Err(_)) => REQUEST_FAILED,
    };
    if let Some(facts) = facts.take() {
        facts.set(bit);
    }
}

pin_project! {
    /// A request body that records in [`CallFacts`] whether it was read to its end or failed.
    #[derive(Debug)]
    pub(crate) struct FactsBody<B> {
        #[pin]
        inner: B,
        // `None` once the outcome is recorded.
        facts: Option<CallFacts>,
    }
}

impl<B> FactsBody<B> {
    /// Watches `inner` for `facts`.
    pub(crate) fn new(inner: B, facts: CallFacts) -> Self {
        Self {
            inner,
            facts: Some(facts),
        }
    }
}

impl<B> Body for FactsBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        record_frame(this.facts, &frame);
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
pub(crate) mod nested {
    //! The facts stage as a tower layer of its own, for the unit tests (the server's transport
    //! makes every call's facts as it arrives).

    use std::task::{Context, Poll};

    use http::Request;
    use tower_layer::Layer;
    use tower_service::Service;

    use super::with_facts;

    /// Adds [`Facts`]; `enabled` when a stage that learns from outcomes (breaker, shedding) is on.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct FactsLayer {
        enabled: bool,
    }

    impl FactsLayer {
        /// A facts layer.
        pub(crate) fn new(enabled: bool) -> Self {
            Self { enabled }
        }
    }

    impl<S> Layer<S> for FactsLayer {
        type Service = Facts<S>;
        fn layer(&self, inner: S) -> Facts<S> {
            Facts {
                inner,
                enabled: self.enabled,
            }
        }
    }

    /// Gives each call its [`CallFacts`] and watches its request body.
    #[derive(Debug, Clone)]
    pub(crate) struct Facts<S> {
        inner: S,
        enabled: bool,
    }

    impl<S> Service<Request<tonic::body::Body>> for Facts<S>
    where
        S: Service<Request<tonic::body::Body>>,
    {
        type Response = S::Response;
        type Error = S::Error;
        type Future = S::Future;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            self.inner.poll_ready(cx)
        }

        #[inline(always)]
        fn call(&mut self, req: Request<tonic::body::Body>) -> Self::Future {
            // The transport's request budget watches the body itself when it wraps it (one body
            // wrapper and one box per call fewer: `transport::RequestBudget`).
            if !self.enabled {
                return self.inner.call(req);
            }
            self.inner.call(with_facts(req))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::{BodyExt, StreamBody};
    use tower_layer::Layer;
    use zrpc_core::grpc::code;

    use super::nested::FactsLayer;
    use super::*;

    fn body(
        frames: Vec<Result<Frame<Bytes>, &'static str>>,
    ) -> (
        FactsBody<impl Body<Data = Bytes, Error = &'static str>>,
        CallFacts,
    ) {
        let facts = CallFacts::default();
        let inner = StreamBody::new(tokio_stream::iter(frames));
        (FactsBody::new(inner, facts.clone()), facts)
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_blames_the_server() {
        let (mut b, facts) = body(vec![Ok(Frame::data(Bytes::from_static(b"x")))]);
        assert!(b.frame().await.unwrap().is_ok());
        // Data alone is not the end: a decode error stops reading here.
        assert!(!facts.request_ended());
        assert_eq!(facts.blame(code::INTERNAL), Blame::Caller);
        assert_eq!(facts.blame(code::DEADLINE_EXCEEDED), Blame::Caller);
        assert!(b.frame().await.is_none());
        assert!(facts.request_ended());
        assert_eq!(facts.blame(code::INTERNAL), Blame::Server);
        assert_eq!(facts.blame(code::OK), Blame::None);
        assert_eq!(facts.blame(code::UNAUTHENTICATED), Blame::None);
    }

    #[tokio::test]
    async fn trailers_end_the_request() {
        let (mut b, facts) = body(vec![Ok(Frame::trailers(http::HeaderMap::new()))]);
        assert!(b.frame().await.unwrap().is_ok());
        assert_eq!(facts.blame(code::UNAVAILABLE), Blame::Server);
    }

    #[tokio::test]
    async fn a_failed_body_blames_the_caller() {
        let (mut b, facts) = body(vec![Err("reset")]);
        assert!(b.frame().await.unwrap().is_err());
        assert_eq!(facts.blame(code::UNAVAILABLE), Blame::Caller);
        assert_eq!(facts.blame(code::INTERNAL), Blame::Caller);
    }

    #[test]
    fn a_panic_blames_the_server_whatever_the_code() {
        let facts = CallFacts::default();
        facts.mark_panicked();
        assert_eq!(facts.blame(code::CANCELLED), Blame::Server);
        assert_eq!(blame(None, code::INTERNAL), Blame::Server);
        assert_eq!(blame(None, code::CANCELLED), Blame::None);
    }

    #[tokio::test]
    async fn the_layer_inserts_facts_and_watches_the_body() {
        use tower::ServiceExt;
        let svc = FactsLayer::new(true).layer(tower::service_fn(
            |req: Request<tonic::body::Body>| async move {
                let facts = facts_of(&req).unwrap();
                assert!(!facts.request_ended());
                let _ = req.into_body().collect().await;
                Ok::<_, Infallible>(facts.request_ended())
            },
        ));
        let req = Request::new(tonic::body::Body::new(http_body_util::Full::new(
            Bytes::from_static(b"abc"),
        )));
        assert!(svc.oneshot(req).await.unwrap());
    }
}
