//! Per-call deadline (go-zero `TimeoutInterceptor`), with the caller's shorter deadline winning.
//!
//! The timeout of a call is [`CallTimeout`] from the request extensions if present (go-zero
//! `WithCallTimeout`), else the client's `Timeout`; an incoming `grpc-timeout` header (tonic's
//! `Request::set_timeout`, or a deadline propagated by a server handler) wins when shorter. Zero
//! means no timeout. With the stage off (`Middlewares.Timeout: false`), the caller's own
//! `grpc-timeout` is the deadline ([`caller_deadline`]). The deadline is sent on as
//! `grpc-timeout` and bounds the **whole call**, streams included, as grpc-go's does: its
//! attempts until their response headers (`balancer::endpoint`), then the response body
//! (`crate::response`) and a request body still streaming (`retry::replay`). Expiry gives
//! `DeadlineExceeded` (tonic's own timeout would say `Cancelled`), and the picker counts a call
//! dropped at its deadline as `DeadlineExceeded`. go-zero's `Timeout` bounds unary calls only.
//!
//! # One timer per call
//!
//! This stage sets the header and arms no timer: each attempt arms the one timer of its call
//! (`balancer::endpoint`'s `Attempt`) the first time it waits. A second timer per call would
//! cost a lock, a wheel insertion and removal, and a wake-up of the runtime's parked I/O driver
//! (an `eventfd` write) per serial call. Inserting that one timer would also wake the parked
//! I/O driver if it were the only timer in tokio's wheel; the client's balancer keeps an
//! earlier one there (`balancer::service`'s `anchor_period`) so that a call's timer wakes
//! nobody.

use std::time::{Duration, Instant};

use http::HeaderValue;
use tonic::body::Body;
use zrpc_core::grpc::timeout as grpc_timeout;

/// A per-call timeout, as a request extension (go-zero `WithCallTimeout`): it replaces the
/// client's `Timeout` for this call (zero: no timeout); a shorter `grpc-timeout` the caller
/// set still wins.
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

/// The timeout stage: each call's deadline, for the balancer to enforce.
#[derive(Debug, Clone)]
pub(crate) struct Timeout {
    default: Option<Duration>,
    /// `grpc-timeout` of the default, formatted once.
    header: Option<HeaderValue>,
}

impl Timeout {
    /// A stage whose default timeout is `default` (`None` or zero = none).
    #[must_use]
    pub(crate) fn new(default: Option<Duration>) -> Self {
        let default = default.filter(|d| !d.is_zero());
        Timeout {
            default,
            header: default.and_then(header_value),
        }
    }
}

/// The header name as a constant: converting the `&str` at each call allocates (a non-standard
/// name is copied into a fresh buffer, and copied again by each clone of the header map).
use grpc_timeout::GRPC_TIMEOUT_HEADER as GRPC_TIMEOUT;

fn header_value(d: Duration) -> Option<HeaderValue> {
    HeaderValue::from_str(&grpc_timeout::format(d)).ok()
}

impl Timeout {
    /// The deadline of `req` (see the module docs) and its timeout, sent on as its
    /// `grpc-timeout`; `None`: no timeout. The deadline is read on tokio's clock (which honours
    /// a paused test clock).
    pub(crate) fn apply(&self, req: &mut http::Request<Body>) -> Option<(Instant, Duration)> {
        let call = req.extensions().get::<CallTimeout>().copied();
        let header = grpc_timeout::from_headers(req.headers());
        let timeout = effective(self.default, call, header)?;
        let deadline = (tokio::time::Instant::now() + timeout).into_std();
        let value = match &self.header {
            Some(v) if Some(timeout) == self.default => Some(v.clone()),
            _ => header_value(timeout),
        };
        if let Some(v) = value {
            req.headers_mut().insert(GRPC_TIMEOUT, v);
        }
        Some((deadline, timeout))
    }
}

/// Tolerance of a deadline derived from the `grpc-timeout` header: the header is read after the
/// caller took its own clock reading, and rounds the timeout up to its unit (at most 1 ms below
/// 27 hours), so the derived deadline may be up to ~1 ms late; a call dropped this close to it
/// was dropped by its deadline.
const DEADLINE_SLACK: Duration = Duration::from_millis(2);

/// The deadline and timeout of a call with the timeout stage off: the caller's own
/// `grpc-timeout`, from `now` (less [`DEADLINE_SLACK`]).
pub(crate) fn caller_deadline(
    req: &http::Request<Body>,
    now: Instant,
) -> (Option<Instant>, Option<Duration>) {
    let timeout = grpc_timeout::from_headers(req.headers());
    let deadline = timeout.and_then(|t| now.checked_add(t.saturating_sub(DEADLINE_SLACK)));
    (deadline, timeout)
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
mod stage_tests {
    use tower::ServiceExt;

    use super::*;
    use crate::Client;
    use crate::conf::RpcClientConf;
    use crate::layers::Response;

    fn request() -> http::Request<Body> {
        http::Request::builder()
            .uri("/greeter.Greeter/SayHello")
            .body(Body::empty())
            .unwrap()
    }

    #[tokio::test]
    async fn expiry_is_deadline_exceeded_and_deadline_is_propagated() {
        // An HTTP/2 server that takes each call's headers and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let (io, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(io).await.unwrap();
            let mut unanswered = Vec::new();
            while let Some(Ok((req, respond))) = conn.accept().await {
                let header = req
                    .headers()
                    .get("grpc-timeout")
                    .map(|v| v.to_str().unwrap().to_owned());
                let _ = seen_tx.send(header);
                unanswered.push(respond);
            }
        });
        let conf =
            RpcClientConf::direct([addr.to_string()]).with_timeout(Duration::from_millis(500));
        let client = Client::new(conf).await.unwrap();
        let req = http::Request::builder()
            .uri(format!("http://{addr}/greeter.Greeter/SayHello"))
            .body(Body::empty())
            .unwrap();
        let err = client.oneshot(req).await.unwrap_err();
        let status = err.downcast::<tonic::Status>().unwrap();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
        let header = seen.recv().await.unwrap();
        assert_eq!(header.as_deref(), Some("500000u"));
    }

    #[tokio::test(start_paused = true)]
    async fn tonic_cancelled_at_the_deadline_becomes_deadline_exceeded() {
        let mut req = request();
        let (deadline, timeout) = Timeout::new(Some(Duration::from_millis(50)))
            .apply(&mut req)
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let cancelled: tower::BoxError = tonic::Status::cancelled("Timeout expired").into();
        let err = crate::response::end(Err(cancelled), Some(deadline), Some(timeout), None, None)
            .map(|_: Response| ())
            .unwrap_err();
        let status = err.downcast::<tonic::Status>().unwrap();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    }
}
