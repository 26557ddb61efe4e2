//! Per-call deadline (go-zero `TimeoutInterceptor`), with the caller's shorter deadline winning.
//!
//! The timeout of a call is [`CallTimeout`] from the request extensions if present (go-zero
//! `WithCallTimeout`), else the client's `Timeout`; an incoming `grpc-timeout` header (tonic's
//! `Request::set_timeout`, or a deadline propagated by a server handler) wins when shorter. Zero
//! means no timeout. The deadline is sent on as `grpc-timeout`, recorded as a
//! [`Deadline`] extension (so the picker counts a call dropped at its
//! deadline as `DeadlineExceeded`), and enforced on the response: expiry gives
//! `DeadlineExceeded` (tonic's own timeout would say `Cancelled`).
//!
//! # One timer per call
//!
//! A call that carries `grpc-timeout` already gets a timer from tonic: the connection stack of
//! every tonic `Channel` (`GrpcTimeout`) arms one from that header when it sends the request, and
//! fails the call with `TimeoutExpired` at expiry (which the endpoint reports as
//! `DeadlineExceeded`). The client's own chain therefore builds this layer "enforced below": it
//! sets the header (and hands the deadline to the balancer: `Client::call` passes it directly,
//! the layer as a tower service in the [`Deadline`] extension) but arms no timer of its own, and
//! the balancer arms one only where tonic's cannot
//! be relied on (a request not yet handed to a live connection, a retry: see
//! `balancer::endpoint`). A second timer per call cost a lock, a wheel insertion and removal, and
//! mostly a wake-up of the runtime's parked I/O driver (an `eventfd` write) per serial call.
//! [`TimeoutLayer::new`] used on its own keeps its timer: it cannot know what is below it.
//! Inserting tonic's timer also woke the parked I/O driver, since it was the only timer in
//! tokio's wheel; the client's balancer keeps an earlier one there (`balancer::service`'s
//! `anchor_period`) so that a call's timer wakes nobody.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::HeaderValue;
use pin_project_lite::pin_project;
use tonic::body::Body;
use tower::BoxError;
use zrpc_core::grpc::timeout as grpc_timeout;

use super::Response;
use crate::balancer::Deadline;

/// A per-call timeout override, as a request extension:
///
/// ```
/// use std::time::Duration;
/// use zrpc_client::CallTimeout;
///
/// let mut req = tonic::Request::new(());
/// req.extensions_mut().insert(CallTimeout(Duration::from_millis(300)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallTimeout(pub Duration);

/// Applies the call deadline.
#[derive(Debug, Clone)]
pub struct TimeoutLayer {
    default: Option<Duration>,
    /// `grpc-timeout` of the default, formatted once.
    header: Option<HeaderValue>,
    /// The service below enforces the [`Deadline`] extension: arm no timer here.
    enforced_below: bool,
}

impl TimeoutLayer {
    /// A layer whose default timeout is `default` (`None` or zero = none).
    #[must_use]
    pub fn new(default: Option<Duration>) -> Self {
        let default = default.filter(|d| !d.is_zero());
        TimeoutLayer {
            default,
            header: default.and_then(header_value),
            enforced_below: false,
        }
    }

    /// The same layer over a zrpc balancer, which enforces the deadline itself (tonic's timer
    /// from the `grpc-timeout` header, or its own where that one cannot be relied on): this layer
    /// then arms no timer (see the module docs).
    #[must_use]
    pub(crate) fn enforced_below(mut self) -> Self {
        self.enforced_below = true;
        self
    }
}

/// The header name as a constant: converting the `&str` at each call allocates (a non-standard
/// name is copied into a fresh buffer, and copied again by each clone of the header map).
use grpc_timeout::GRPC_TIMEOUT_HEADER as GRPC_TIMEOUT;

fn header_value(d: Duration) -> Option<HeaderValue> {
    HeaderValue::from_str(&grpc_timeout::format(d)).ok()
}

impl<S> tower::Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;
    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`TimeoutLayer`].
#[derive(Debug, Clone)]
pub struct Timeout<S> {
    inner: S,
    layer: TimeoutLayer,
}

/// A call's deadline and the timeout it came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    /// On tokio's clock (honours a paused test clock).
    pub(crate) deadline: tokio::time::Instant,
    pub(crate) timeout: Duration,
}

impl Bound {
    /// `err` as the caller sees it: tonic's own expiry (`Cancelled`) past the deadline is
    /// `DeadlineExceeded`.
    pub(crate) fn error(self, err: BoxError) -> BoxError {
        past_deadline(err, self.deadline, self.timeout)
    }
}

impl TimeoutLayer {
    /// The deadline of `req` (see the module docs), sent on as its `grpc-timeout`; `None`: no
    /// timeout.
    pub(crate) fn apply(&self, req: &mut http::Request<Body>) -> Option<Bound> {
        let call = req.extensions().get::<CallTimeout>().copied();
        let header = grpc_timeout::from_headers(req.headers());
        let timeout = effective(self.default, call, header)?;
        let deadline = tokio::time::Instant::now() + timeout;
        let value = match &self.header {
            Some(v) if Some(timeout) == self.default => Some(v.clone()),
            _ => header_value(timeout),
        };
        if let Some(v) = value {
            req.headers_mut().insert(GRPC_TIMEOUT, v);
        }
        Some(Bound { deadline, timeout })
    }
}

/// The effective timeout: the override (zero = none) or the default, and the header if shorter.
fn effective(
    default: Option<Duration>,
    call: Option<CallTimeout>,
    header: Option<Duration>,
) -> Option<Duration> {
    let own = match call {
        Some(CallTimeout(d)) if d.is_zero() => None,
        Some(CallTimeout(d)) => Some(d),
        None => default,
    };
    match (own, header) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<S> tower::Service<http::Request<Body>> for Timeout<S>
where
    S: tower::Service<http::Request<Body>, Response = Response, Error = BoxError>,
{
    type Response = Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        let Some(Bound { deadline, timeout }) = self.layer.apply(&mut req) else {
            return ResponseFuture {
                state: State::Unbounded {
                    fut: self.inner.call(req),
                },
            };
        };
        req.extensions_mut().insert(Deadline(deadline.into_std()));
        if self.layer.enforced_below {
            return ResponseFuture {
                state: State::Delegated {
                    fut: self.inner.call(req),
                    deadline,
                    timeout,
                },
            };
        }
        ResponseFuture {
            state: State::Bounded {
                fut: tokio::time::timeout_at(deadline, self.inner.call(req)),
                deadline,
                timeout,
            },
        }
    }
}

pin_project! {
    /// The response future of [`Timeout`].
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Unbounded { #[pin] fut: F },
        Bounded {
            #[pin]
            fut: tokio::time::Timeout<F>,
            deadline: tokio::time::Instant,
            timeout: Duration,
        },
        // the service below enforces the deadline (no timer here)
        Delegated {
            #[pin]
            fut: F,
            deadline: tokio::time::Instant,
            timeout: Duration,
        },
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response, BoxError>>,
{
    type Output = Result<Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Unbounded { fut } => fut.poll(cx),
            StateProj::Bounded {
                fut,
                deadline,
                timeout,
            } => Poll::Ready(match ready!(fut.poll(cx)) {
                Ok(result) => result.map_err(|e| past_deadline(e, *deadline, *timeout)),
                Err(_) => Err(deadline_exceeded(Some(*timeout)).into()),
            }),
            StateProj::Delegated {
                fut,
                deadline,
                timeout,
            } => {
                Poll::Ready(ready!(fut.poll(cx)).map_err(|e| past_deadline(e, *deadline, *timeout)))
            }
        }
    }
}

/// tonic's own `grpc-timeout` expiry says `Cancelled("Timeout expired")`: past the deadline, that
/// is `DeadlineExceeded`.
fn past_deadline(e: BoxError, deadline: tokio::time::Instant, timeout: Duration) -> BoxError {
    match super::code_of_error(&*e) {
        zrpc_core::grpc::code::CANCELLED if tokio::time::Instant::now() >= deadline => {
            deadline_exceeded(Some(timeout)).into()
        }
        _ => e,
    }
}

/// The one client timeout status: `DeadlineExceeded "deadline exceeded after 1s"`, whether this
/// layer or the connection's own `grpc-timeout` timer fired first.
pub(crate) fn deadline_exceeded(timeout: Option<Duration>) -> tonic::Status {
    match timeout {
        Some(t) => tonic::Status::deadline_exceeded(format!("deadline exceeded after {t:?}")),
        None => tonic::Status::deadline_exceeded("deadline exceeded"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn shorter_deadline_wins() {
        assert_eq!(effective(Some(S(2000)), None, None), Some(S(2000)));
        assert_eq!(
            effective(Some(S(2000)), Some(CallTimeout(S(300))), None),
            Some(S(300))
        );
        assert_eq!(
            effective(Some(S(2000)), Some(CallTimeout(S(5000))), None),
            Some(S(5000))
        );
        assert_eq!(effective(Some(S(2000)), None, Some(S(100))), Some(S(100)));
        assert_eq!(effective(Some(S(100)), None, Some(S(2000))), Some(S(100)));
        assert_eq!(
            effective(Some(S(2000)), Some(CallTimeout(S(0))), None),
            None
        );
        assert_eq!(effective(None, None, Some(S(7))), Some(S(7)));
        assert_eq!(effective(None, None, None), None);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod layer_tests {
    use std::sync::{Arc, Mutex};

    use tower::{Layer, Service, ServiceExt};

    use super::*;

    fn request() -> http::Request<Body> {
        http::Request::builder()
            .uri("/greeter.Greeter/SayHello")
            .body(Body::empty())
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn expiry_is_deadline_exceeded_and_deadline_is_propagated() {
        // (grpc-timeout header, Deadline extension present)
        type Seen = Option<(Option<String>, bool)>;
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let inner = {
            let seen = seen.clone();
            tower::service_fn(move |req: http::Request<Body>| {
                let header = req
                    .headers()
                    .get("grpc-timeout")
                    .map(|v| v.to_str().unwrap().to_owned());
                *seen.lock().unwrap() =
                    Some((header, req.extensions().get::<Deadline>().is_some()));
                async {
                    std::future::pending::<()>().await;
                    Ok::<_, BoxError>(http::Response::new(Body::empty()))
                }
            })
        };
        let mut svc = TimeoutLayer::new(Some(Duration::from_millis(100))).layer(inner);
        let err = svc
            .ready()
            .await
            .unwrap()
            .call(request())
            .await
            .unwrap_err();
        let status = err.downcast::<tonic::Status>().unwrap();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        let (header, has_deadline) = seen.lock().unwrap().take().unwrap();
        assert_eq!(header.as_deref(), Some("100000u"));
        assert!(has_deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn tonic_cancelled_at_the_deadline_becomes_deadline_exceeded() {
        let inner = tower::service_fn(|_req: http::Request<Body>| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Err::<Response, BoxError>(tonic::Status::cancelled("Timeout expired").into())
        });
        let mut svc = TimeoutLayer::new(Some(Duration::from_millis(50))).layer(inner);
        let err = svc
            .ready()
            .await
            .unwrap()
            .call(request())
            .await
            .unwrap_err();
        let status = err.downcast::<tonic::Status>().unwrap();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    }
}
