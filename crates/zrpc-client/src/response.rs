//! The end of a call: its answer handed to the caller with one body wrapper ([`CallBody`]),
//! which reads the final status once (for the endpoint and the recorders together), ends the
//! call at its deadline while the body is still awaited (streams included), and reports a
//! failure of the body with the code grpc-go gives it. An uncompressed response message longer
//! than the client's limit (`MaxDecompressedSize`) ends the call with `ResourceExhausted` and
//! grpc-go's words as soon as its prefix arrives, as grpc-go's client does (tonic's decoder
//! would say `OutOfRange` after buffering it); compressed ones are bounded by the decompressor.
//! A stream that ends without trailers is `Internal`, in grpc-go's words, and a response that is
//! not gRPC (its content-type) is judged by its HTTP status, as grpc-go's client judges it
//! (gRPC's HTTP-to-gRPC table, the body's first 1 KiB quoted).
//!
//! Before the response headers, the call's deadline is enforced by one timer (tonic's
//! `grpc-timeout` timer or the attempt's own, see `balancer::endpoint::Attempt`). After them,
//! [`CallBody`] arms a timer at the deadline only when the body makes the caller wait: a unary
//! answer, whose message and trailers are read with its headers, arms none. At the deadline
//! the caller gets `DeadlineExceeded` and the body is dropped, which resets the stream with
//! `CANCEL` once the request is sent (a request still streaming ends at the same deadline,
//! `retry::replay`), as grpc-go's client does.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body::Frame;
use tonic::body::Body;
use tower::BoxError;
use zrpc_core::grpc::framing::{self, Framing};
use zrpc_core::grpc::{code, find_header, is_grpc_content_type, status_from_headers};

use crate::balancer::endpoint::{Answer, Done};
use crate::failure::{BodyFailure, body_failure, deadline_exceeded, is_past};
use crate::layers::observe::{Detail, Outcome};
use crate::layers::{Response, code_of_error};

/// The end of a call: its answer wired to the endpoint and the recorders ([`finish`]), or its
/// error recorded (tonic's own expiry past the deadline is `DeadlineExceeded`). `max_message`:
/// the longest uncompressed response message.
pub(crate) fn end(
    answer: Result<Answer, BoxError>,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    outcome: Option<Outcome>,
    max_message: Option<usize>,
) -> Result<Response, BoxError> {
    match answer {
        Ok(Answer { resp, done }) => Ok(finish(
            resp,
            done,
            outcome,
            (deadline, timeout),
            max_message,
        )),
        Err(err) => {
            let err = match deadline {
                Some(d) if code_of_error(&*err) == code::CANCELLED && is_past(d) => {
                    deadline_exceeded(timeout).into()
                }
                _ => err,
            };
            if let Some(o) = outcome {
                o.record(code_of_error(&*err), Detail::Error(&*err));
            }
            Err(err)
        }
    }
}

/// Wires the final status of `resp` to the endpoint's completion and the observing stage's
/// recorders, read once for both with one clock reading: from the headers of a trailers-only
/// response now, else from the trailers at the end of the body (one wrapper, one box), which
/// also ends the call at `deadline` and bounds its messages.
fn finish(
    resp: Response,
    done: Option<Done>,
    outcome: Option<Outcome>,
    (deadline, timeout): (Option<Instant>, Option<Duration>),
    max_message: Option<usize>,
) -> Response {
    let (mut parts, body) = resp.into_parts();
    if !is_grpc_content_type(find_header(&parts.headers, &http::header::CONTENT_TYPE)) {
        let body = not_grpc(&parts, body, done, outcome);
        return http::Response::from_parts(parts, body);
    }
    let body = match status_from_headers(&parts.headers) {
        Some(c) => {
            if c == code::UNKNOWN {
                name_malformed_status(&mut parts.headers);
            }
            let now = Instant::now();
            if let Some(d) = done {
                d.finish(c, now);
            }
            if let Some(o) = outcome {
                o.record_at(c, Detail::Message(&parts.headers), now);
            }
            body
        }
        None => Body::new(CallBody {
            inner: body,
            end: Completion { done, outcome },
            deadline,
            timeout,
            timer: None,
            framing: Framing::default(),
            max_message,
            ended: false,
            mid_message: false,
        }),
    };
    http::Response::from_parts(parts, body)
}

/// A `grpc-status` that is not a number ends the call as `Unknown` (tonic's and grpc-go's code)
/// with a message naming the value, in grpc-go's words up to Go's parser's: tonic's message
/// would be empty, or the server's `grpc-message`, which says nothing of the broken status.
/// Rewrites the status headers in place, as tonic reads them (`Status::add_header`).
#[cold]
#[inline(never)]
fn name_malformed_status(headers: &mut http::HeaderMap) {
    let Some(raw) = headers.get(zrpc_core::grpc::GRPC_STATUS) else {
        return;
    };
    let raw = raw.as_bytes();
    if std::str::from_utf8(raw).is_ok_and(|v| v.trim().parse::<i32>().is_ok()) {
        return; // a number: Unknown itself, or a code tonic does not know
    }
    let status = tonic::Status::unknown(format!(
        "transport: malformed grpc-status: {:?} is not a status code",
        String::from_utf8_lossy(raw)
    ));
    // fails only for a message a header cannot hold, which this one, percent-encoded, never is
    let _ = status.add_header(headers);
}

/// The most of a non-gRPC response's body quoted in its status (grpc-go's `nonGRPCDataMaxLen`).
const NOT_GRPC_DATA: usize = 1024;

/// A response whose `content-type` is not gRPC's: a proxy's, load balancer's or web server's
/// answer. As grpc-go's client: the code from gRPC's HTTP-to-gRPC table for its HTTP status
/// (`Unknown` for a status the table lacks, 200 included), `grpc-status` ignored, and grpc-go's
/// words, with the first 1 KiB of the body quoted (an error page says what went wrong). tonic
/// alone would decode the page as gRPC messages (`Internal`, "invalid compression flag").
#[cold]
#[inline(never)]
fn not_grpc(
    parts: &http::response::Parts,
    body: Body,
    done: Option<Done>,
    outcome: Option<Outcome>,
) -> Body {
    let status = parts.status;
    let c = match status.as_u16() {
        400 => code::INTERNAL,
        401 => code::UNAUTHENTICATED,
        403 => code::PERMISSION_DENIED,
        404 => code::UNIMPLEMENTED,
        429 | 502 | 503 | 504 => code::UNAVAILABLE,
        _ => code::UNKNOWN,
    };
    let content_type = match parts.headers.get(http::header::CONTENT_TYPE) {
        Some(v) => format!(
            "transport: received unexpected content-type {:?}",
            String::from_utf8_lossy(v.as_bytes())
        ),
        None => "malformed header: missing HTTP content-type".to_owned(),
    };
    let message = format!(
        "unexpected HTTP status code received from server: {} ({}); {content_type}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    let now = Instant::now();
    if let Some(d) = done {
        d.finish(c, now);
    }
    let status = tonic::Status::new(tonic::Code::from(c), message);
    if let Some(o) = outcome {
        o.record_at(c, Detail::Error(&status), now);
    }
    Body::new(NotGrpcBody {
        inner: body,
        status: Some(status),
        data: Vec::new(),
    })
}

/// The body of a non-gRPC response ([`not_grpc`]): its first [`NOT_GRPC_DATA`] octets are
/// collected, then the call ends with the status, the octets quoted.
struct NotGrpcBody {
    inner: Body,
    status: Option<tonic::Status>,
    data: Vec<u8>,
}

impl http_body::Body for NotGrpcBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, tonic::Status>>> {
        let this = &mut *self;
        let Some(status) = &this.status else {
            return Poll::Ready(None);
        };
        loop {
            let ended = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(d) = frame.data_ref() {
                        let n = d.len().min(NOT_GRPC_DATA - this.data.len());
                        this.data.extend_from_slice(&d[..n]);
                    }
                    this.data.len() >= NOT_GRPC_DATA
                }
                // the body ended, or failed: the status says what came
                Poll::Ready(Some(Err(_)) | None) => true,
            };
            if ended {
                let message = if this.data.is_empty() {
                    status.message().to_owned()
                } else {
                    format!(
                        "{}\ndata: {:?}",
                        status.message(),
                        String::from_utf8_lossy(&this.data)
                    )
                };
                let status = tonic::Status::new(status.code(), message);
                this.status = None;
                // the rest of the body is not read: dropping it resets the stream
                this.inner = Body::empty();
                return Poll::Ready(Some(Err(status)));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.status.is_none()
    }
}

/// The recorders of one call's end.
struct Completion {
    done: Option<Done>,
    outcome: Option<Outcome>,
}

impl Completion {
    fn is_armed(&self) -> bool {
        self.done.is_some() || self.outcome.is_some()
    }

    /// The call ended with `c` at `now`.
    fn record(&mut self, c: i32, now: Instant) {
        if let Some(d) = self.done.take() {
            d.finish(c, now);
        }
        if let Some(o) = self.outcome.take() {
            o.record_at(c, Detail::None, now);
        }
    }

    /// The body failed with `status` (as tonic reported it) at `now`: the status the caller
    /// gets, recorded.
    fn failed(
        &mut self,
        status: tonic::Status,
        deadline: Option<Instant>,
        timeout: Option<Duration>,
        now: Instant,
    ) -> tonic::Status {
        let status = if deadline.is_some_and(is_past) {
            // the server ended the call at its deadline (grpc-go resets it with CANCEL then)
            if let Some(d) = self.done.take() {
                d.finish(code::DEADLINE_EXCEEDED, now);
            }
            deadline_exceeded(timeout)
        } else {
            match self.done.take() {
                Some(d) => d.body_failed(status, now),
                None => match body_failure(&status, false) {
                    BodyFailure::Reset(_) => status,
                    BodyFailure::Connection => tonic::Status::unavailable(format!(
                        "connection lost while receiving the response: {}",
                        status.message()
                    )),
                },
            }
        };
        if let Some(o) = self.outcome.take() {
            o.record_at(status.code() as i32, Detail::Error(&status), now);
        }
        status
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        // dropped before its end: Cancelled (past the deadline, the endpoint records it so)
        if self.is_armed() {
            self.record(code::CANCELLED, Instant::now());
        }
    }
}

/// The body of a call's response (see the module docs).
struct CallBody {
    inner: Body,
    end: Completion,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    /// Armed at the deadline when the body first makes its caller wait.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    framing: Framing,
    max_message: Option<usize>,
    /// The call's end came (its trailers) or was given (an error): a stream that ends before
    /// is a broken one.
    ended: bool,
    /// The body stopped inside a message (as far as the framing is followed: with a limit).
    mid_message: bool,
}

impl CallBody {
    /// A message of `len` octets over `max`: the stream is dropped (reset with CANCEL), the
    /// caller told with grpc-go's words, the call recorded as `ResourceExhausted`.
    #[cold]
    fn too_large(&mut self, len: usize, max: usize) -> tonic::Status {
        self.inner = Body::empty();
        self.deadline = None;
        self.max_message = None;
        self.ended = true;
        let status = tonic::Status::resource_exhausted(framing::too_large(len, max));
        let now = Instant::now();
        if let Some(d) = self.end.done.take() {
            d.finish(code::RESOURCE_EXHAUSTED, now);
        }
        if let Some(o) = self.end.outcome.take() {
            o.record_at(code::RESOURCE_EXHAUSTED, Detail::Error(&status), now);
        }
        status
    }
}

impl http_body::Body for CallBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, tonic::Status>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(mut frame))) => {
                if let Some(max) = this.max_message
                    && let Some(data) = frame.data_ref()
                {
                    let followed = this.framing.follow(data, Some(max));
                    if let Some(len) = followed.oversized {
                        return Poll::Ready(Some(Err(this.too_large(len, max))));
                    }
                    this.mid_message = followed.pending;
                }
                if let Some(trailers) = frame.trailers_mut() {
                    this.ended = true;
                    let c = status_from_headers(trailers).unwrap_or(code::UNKNOWN);
                    if c == code::UNKNOWN {
                        name_malformed_status(trailers);
                    }
                    if this.end.is_armed() {
                        this.end.record(c, Instant::now());
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(status))) => {
                this.ended = true;
                let status = this
                    .end
                    .failed(status, this.deadline, this.timeout, Instant::now());
                Poll::Ready(Some(Err(status)))
            }
            Poll::Ready(None) if this.ended => Poll::Ready(None),
            Poll::Ready(None) => {
                // the stream ended without a status, or inside a message: `Internal` in grpc-go's
                // words (tonic would say `Unknown`, or `Internal` "Unexpected EOF decoding stream")
                this.ended = true;
                let status = tonic::Status::internal(if this.mid_message {
                    "unexpected EOF"
                } else {
                    "server closed the stream without sending trailers"
                });
                let now = Instant::now();
                if let Some(d) = this.end.done.take() {
                    d.finish(code::INTERNAL, now);
                }
                if let Some(o) = this.end.outcome.take() {
                    o.record_at(code::INTERNAL, Detail::Error(&status), now);
                }
                Poll::Ready(Some(Err(status)))
            }
            Poll::Pending => {
                let Some(deadline) = this.deadline else {
                    return Poll::Pending;
                };
                let timer = this.timer.get_or_insert_with(|| {
                    Box::pin(tokio::time::sleep_until(tokio::time::Instant::from_std(
                        deadline,
                    )))
                });
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                // the deadline: the stream is dropped (reset with CANCEL), the caller told
                this.deadline = None;
                this.ended = true;
                this.inner = Body::empty();
                let now = Instant::now();
                if let Some(d) = this.end.done.take() {
                    d.finish(code::DEADLINE_EXCEEDED, now);
                }
                let status = deadline_exceeded(this.timeout);
                if let Some(o) = this.end.outcome.take() {
                    o.record_at(code::DEADLINE_EXCEEDED, Detail::Error(&status), now);
                }
                Poll::Ready(Some(Err(status)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::balancer::endpoint::{ConnectOptions, Endpoint};
    use crate::layers::observe::Observe;
    use crate::metrics::ClientMetrics;

    /// `finish` reads a call's final status once for the endpoint's statistics and the observing
    /// stage's recorders: from the headers of a trailers-only answer at once, from the trailers
    /// at the end of the body, and as `Cancelled` for a body dropped before them.
    #[tokio::test]
    async fn one_status_read_feeds_the_endpoint_and_the_recorders() {
        use http_body_util::BodyExt;

        let registry = prometheus::Registry::new();
        let metrics = ClientMetrics::register(&registry).unwrap();
        let observe = Observe::builder("direct:///x:1")
            .metrics(Some(metrics.clone()))
            .build();
        // never connected: only its statistics are used
        let endpoint = Arc::new(Endpoint::new("127.0.0.1:1", &ConnectOptions::default()).unwrap());
        let count = |c: &str| metrics.code_total.with_label_values(&["/p.S/M", c]).get();
        let start = || {
            let mut req = http::Request::builder()
                .uri("/p.S/M")
                .body(Body::empty())
                .unwrap();
            endpoint.stats.on_pick();
            let outcome = observe.begin(&mut req, Instant::now()).unwrap();
            (Some(Done::for_test(Arc::clone(&endpoint))), Some(outcome))
        };
        let trailed = |c: &'static str| -> Response {
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", c.parse().unwrap());
            let body = http_body_util::Full::new(bytes::Bytes::from_static(b"msg"))
                .with_trailers(async move { Some(Ok(trailers)) });
            http::Response::builder()
                .header("content-type", "application/grpc")
                .body(Body::new(body))
                .unwrap()
        };

        // trailers-only Unavailable: both at once
        let (done, outcome) = start();
        let resp: Response = zrpc_core::grpc::status_response(14, "down");
        drop(finish(resp, done, outcome, (None, None), None));
        assert_eq!(count("14"), 1);
        assert_eq!(endpoint.stats.inflight(), 0);
        assert!(
            endpoint.stats.success() < 1000.0,
            "a failure for the endpoint"
        );

        // OK in the trailers: both at the end of the body, not before
        let (done, outcome) = start();
        let resp = finish(trailed("0"), done, outcome, (None, None), None);
        assert_eq!((count("0"), endpoint.stats.inflight()), (0, 1));
        resp.into_body().collect().await.unwrap();
        assert_eq!((count("0"), endpoint.stats.inflight()), (1, 0));

        // dropped before its trailers: Cancelled, for both
        let (done, outcome) = start();
        drop(finish(trailed("0"), done, outcome, (None, None), None));
        assert_eq!((count("1"), endpoint.stats.inflight()), (1, 0));
        assert_eq!(endpoint.stats.requests(), 3);
        let calls = metrics
            .duration_ms
            .with_label_values(&["/p.S/M"])
            .get_sample_count();
        assert_eq!(calls, 3, "one duration per call");
    }

    /// An uncompressed message over the limit ends the call at its prefix with
    /// `ResourceExhausted` in grpc-go's words, recorded so for both; a compressed one is left
    /// to the decompressor.
    #[tokio::test]
    async fn a_message_over_the_limit_is_resource_exhausted_at_its_prefix() {
        use http_body_util::BodyExt;

        let registry = prometheus::Registry::new();
        let metrics = ClientMetrics::register(&registry).unwrap();
        let observe = Observe::builder("direct:///x:1")
            .metrics(Some(metrics.clone()))
            .build();
        let endpoint = Arc::new(Endpoint::new("127.0.0.1:1", &ConnectOptions::default()).unwrap());
        let count = |c: &str| metrics.code_total.with_label_values(&["/p.S/M", c]).get();
        let call = |flag: u8| {
            let mut req = http::Request::builder()
                .uri("/p.S/M")
                .body(Body::empty())
                .unwrap();
            endpoint.stats.on_pick();
            let outcome = observe.begin(&mut req, Instant::now()).unwrap();
            // a prefix declaring 11 octets, and 2 of them
            let body = http_body_util::Full::new(bytes::Bytes::from(vec![flag, 0, 0, 0, 11, 1, 2]));
            let resp = http::Response::builder()
                .header("content-type", "application/grpc")
                .body(Body::new(body))
                .unwrap();
            let done = Some(Done::for_test(Arc::clone(&endpoint)));
            finish(resp, done, Some(outcome), (None, None), Some(10))
        };

        let err = call(0).into_body().frame().await.unwrap().unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            err.message(),
            "grpc: received message larger than max (11 vs. 10)"
        );
        assert_eq!((count("8"), endpoint.stats.inflight()), (1, 0));

        let mut body = call(1).into_body();
        assert!(body.frame().await.unwrap().unwrap().is_data());
        drop(body);
        assert_eq!(count("8"), 1, "the compressed one is not refused here");
    }

    /// A `grpc-status` that is not a number is `Unknown` with a message naming the value, in
    /// the trailers and in a trailers-only answer (whose `grpc-message` it replaces); a number
    /// tonic does not know stays as the server sent it.
    #[tokio::test]
    async fn a_malformed_grpc_status_is_named() {
        use http_body_util::BodyExt;

        let status_of = |h: &http::HeaderMap| {
            (
                h.get("grpc-status").unwrap().to_str().unwrap().to_owned(),
                tonic::Status::from_header_map(h)
                    .unwrap()
                    .message()
                    .to_owned(),
            )
        };
        let named = || {
            (
                "2".to_owned(),
                "transport: malformed grpc-status: \"a b\" is not a status code".to_owned(),
            )
        };

        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", "a b".parse().unwrap());
        let body = http_body_util::Full::new(bytes::Bytes::new())
            .with_trailers(async move { Some(Ok(trailers)) });
        let resp: Response = http::Response::builder()
            .header("content-type", "application/grpc")
            .body(Body::new(body))
            .unwrap();
        let got = finish(resp, None, None, (None, None), None)
            .into_body()
            .collect()
            .await
            .unwrap();
        assert_eq!(status_of(got.trailers().unwrap()), named());

        // a trailers-only answer, as `finish` leaves its headers
        let trailers_only = |status: &str, message: &str| {
            let resp: Response = http::Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", status)
                .header("grpc-message", message)
                .body(Body::empty())
                .unwrap();
            finish(resp, None, None, (None, None), None)
        };
        let resp = trailers_only("a b", "from the server");
        assert_eq!(status_of(resp.headers()), named());
        let resp = trailers_only("99", "new code");
        assert_eq!(
            status_of(resp.headers()),
            ("99".to_owned(), "new code".to_owned())
        );
    }
}

/// How failures after the request went out are reported and recorded, against an HTTP/2 server
/// (the `h2` crate) that resets or cuts: the caller's code, and the endpoint's record (a
/// transport failure puts the endpoint in back-off: `down_until`).
#[cfg(test)]
mod edge_tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use http_body_util::BodyExt;
    use tokio::sync::oneshot;

    use super::end;
    use crate::balancer::endpoint::{ConnectOptions, Endpoint};
    use crate::balancer::stats::Clock;
    use crate::layers::Response;

    /// What the server does with its one stream: reset it (`BeforeHead`, `AfterHead`), or close
    /// its connection after a response head and a message, when told (`Cut`).
    #[derive(Debug)]
    enum Server {
        BeforeHead { wait: Duration },
        AfterHead { wait: Duration },
        Cut { when: oneshot::Receiver<()> },
    }

    /// Serves one connection as `server` says; the receiver fires once it acted.
    async fn serve(server: Server) -> (String, oneshot::Receiver<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (acted, rx) = oneshot::channel();
        tokio::spawn(async move {
            let (io, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(io).await.unwrap();
            let (_req, mut respond) = conn.accept().await.unwrap().unwrap();
            let driver = tokio::spawn(async move { while conn.accept().await.is_some() {} });
            let head = http::Response::builder()
                .header("content-type", "application/grpc")
                .body(())
                .unwrap();
            match server {
                Server::BeforeHead { wait } => {
                    tokio::time::sleep(wait).await;
                    respond.send_reset(h2::Reason::CANCEL);
                }
                Server::AfterHead { wait } => {
                    let mut stream = respond.send_response(head, false).unwrap();
                    tokio::time::sleep(wait).await;
                    stream.send_reset(h2::Reason::CANCEL);
                }
                Server::Cut { when } => {
                    let mut stream = respond.send_response(head, false).unwrap();
                    let message = Bytes::from_static(b"\0\0\0\0\x02\x0a\0");
                    stream.send_data(message, false).unwrap();
                    let _ = when.await;
                    // the connection is dropped with the stream open: the socket closes
                    driver.abort();
                    let _ = driver.await;
                }
            }
            let _ = acted.send(());
        });
        (addr, rx)
    }

    /// Sends one call to `addr` with `timeout` and polls it once `first` is done: its endpoint,
    /// and its end as the caller gets it.
    async fn call(
        addr: &str,
        timeout: Duration,
        first: impl std::future::Future,
    ) -> (Arc<Endpoint>, Result<Response, tonic::Status>) {
        let ep = Arc::new(Endpoint::new(addr, &ConnectOptions::default()).unwrap());
        let clock = Clock::new(Instant::now());
        let deadline = Instant::now() + timeout;
        let mut req = http::Request::builder()
            .method("POST")
            .uri(format!("http://{addr}/p.S/M"))
            .header("content-type", "application/grpc")
            .body(tonic::body::Body::empty())
            .unwrap();
        req.headers_mut().insert(
            "grpc-timeout",
            zrpc_core::grpc::timeout::format(timeout).parse().unwrap(),
        );
        ep.stats.on_pick();
        let attempt = Arc::clone(&ep).send(
            (clock, clock.nanos(Instant::now())),
            Some(deadline),
            Some(timeout),
            req,
            &Arc::from("direct:///test"),
        );
        first.await;
        let ended = end(
            attempt.await.map_err(|e| e.status.into()),
            Some(deadline),
            Some(timeout),
            None,
            None,
        )
        .map_err(|e| *e.downcast::<tonic::Status>().unwrap());
        (ep, ended)
    }

    /// The error the body of `resp` ends with.
    async fn body_error(resp: Response) -> tonic::Status {
        let mut body = resp.into_body();
        loop {
            match body.frame().await {
                Some(Ok(frame)) => assert!(frame.is_data()),
                Some(Err(e)) => return e,
                None => panic!("the body ended whole"),
            }
        }
    }

    #[tokio::test]
    async fn a_response_that_is_not_grpc_is_judged_by_its_http_status_and_quotes_1_kib() {
        let page = |status: u16, content_type: Option<&str>, body: Vec<u8>| {
            let mut b = http::Response::builder().status(status);
            if let Some(t) = content_type {
                b = b.header("content-type", t);
            }
            let resp = b
                .body(tonic::body::Body::new(http_body_util::Full::new(
                    bytes::Bytes::from(body),
                )))
                .unwrap();
            super::finish(resp, None, None, (None, None), None)
        };
        let err = body_error(page(503, Some("text/html"), vec![b'x'; 5000])).await;
        assert_eq!(err.code(), tonic::Code::Unavailable);
        let want = format!(
            "unexpected HTTP status code received from server: 503 (Service Unavailable); \
             transport: received unexpected content-type \"text/html\"\ndata: \"{}\"",
            "x".repeat(super::NOT_GRPC_DATA)
        );
        assert_eq!(err.message(), want);
        // a 200 without a content-type: Unknown, in grpc-go's words; no body, no data
        let err = body_error(page(200, None, Vec::new())).await;
        assert_eq!(err.code(), tonic::Code::Unknown);
        assert_eq!(
            err.message(),
            "unexpected HTTP status code received from server: 200 (OK); malformed header: \
             missing HTTP content-type"
        );
    }

    /// Asserts what the endpoint recorded of its one call: a transport failure or not.
    fn assert_record(ep: &Endpoint, transport_failure: bool) {
        assert_eq!(ep.stats.inflight(), 0);
        assert_eq!(
            ep.stats.down_until() > 0,
            transport_failure,
            "{:?}",
            ep.stats
        );
    }

    #[tokio::test]
    async fn a_reset_at_the_deadline_is_deadline_exceeded_not_a_transport_failure() {
        let timeout = Duration::from_millis(100);
        let late = timeout + Duration::from_millis(50);

        // before the head: the call is not polled until the server reset the stream, so the
        // reset, not a timer, ends it (when it arrives first)
        let (addr, acted) = serve(Server::BeforeHead { wait: late }).await;
        let (ep, ended) = call(&addr, timeout, acted).await;
        let err = ended.unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
        assert_record(&ep, false);
        assert!(ep.stats.success() < 1000.0, "recorded as a deadline");

        // after the head
        let (addr, acted) = serve(Server::AfterHead { wait: late }).await;
        let (ep, ended) = call(&addr, timeout, async {}).await;
        acted.await.unwrap();
        let err = body_error(ended.unwrap()).await;
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
        assert_record(&ep, false);
        assert!(ep.stats.success() < 1000.0, "recorded as a deadline");
    }

    #[tokio::test]
    async fn a_cancel_before_the_deadline_is_cancelled_not_a_transport_failure() {
        let timeout = Duration::from_secs(5);
        let (addr, _acted) = serve(Server::BeforeHead {
            wait: Duration::ZERO,
        })
        .await;
        let (ep, ended) = call(&addr, timeout, async {}).await;
        let err = ended.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Cancelled, "{err:?}");
        assert!(
            err.message()
                .contains("stream terminated by RST_STREAM with error code: CANCEL"),
            "{err:?}"
        );
        assert_record(&ep, false);

        let wait = Duration::from_millis(10);
        let (addr, _acted) = serve(Server::AfterHead { wait }).await;
        let (ep, ended) = call(&addr, timeout, async {}).await;
        let err = body_error(ended.unwrap()).await;
        assert_eq!(err.code(), tonic::Code::Cancelled, "{err:?}");
        assert_record(&ep, false);
    }

    #[tokio::test]
    async fn a_connection_lost_in_the_middle_of_the_body_is_unavailable_and_a_transport_failure() {
        let (cut, when) = oneshot::channel();
        let (addr, _acted) = serve(Server::Cut { when }).await;
        let (ep, ended) = call(&addr, Duration::from_secs(5), async {}).await;
        let mut body = ended.unwrap().into_body();
        assert!(body.frame().await.unwrap().unwrap().is_data());
        cut.send(()).unwrap();
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
        assert!(
            err.message()
                .contains("connection lost while receiving the response"),
            "{err:?}"
        );
        assert_record(&ep, true);
    }
}
