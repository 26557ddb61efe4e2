//! How a failed attempt reaches the caller: the gRPC status of each transport failure, as
//! grpc-go reports it, and which failures prove that the request never reached a server.
//!
//! grpc-go's rules (`internal/transport`): a stream reset by the server (`RST_STREAM`) maps
//! its HTTP/2 reason to a code (`CANCEL` is `Cancelled`, `REFUSED_STREAM` `Unavailable`,
//! `ENHANCE_YOUR_CALM` and `FLOW_CONTROL_ERROR` `ResourceExhausted`, `INADEQUATE_SECURITY`
//! `PermissionDenied`, the others `Internal`), and a `CANCEL` at or after the caller's
//! deadline is `DeadlineExceeded` (the server ended the call at that deadline, as grpc-go's
//! server does); a lost connection (an I/O error, the peer's close, a GOAWAY) is
//! `Unavailable`, before or after the response headers.
//!
//! The balancer (its endpoints' answers and its no-endpoint status), the client's stages (the
//! code of a failed call) and the response path read failures through this one module, which
//! imports none of them.

use std::error::Error as StdError;
use std::time::{Duration, Instant};

use zrpc_core::grpc::code;

/// True once `deadline` has passed, on tokio's clock (as the deadline was read).
pub(crate) fn is_past(deadline: Instant) -> bool {
    tokio::time::Instant::now().into_std() >= deadline
}

/// The one client timeout status: `DeadlineExceeded "deadline exceeded after 1s"`, whichever
/// timer of the call fired.
pub(crate) fn deadline_exceeded(timeout: Option<Duration>) -> tonic::Status {
    match timeout {
        Some(t) => tonic::Status::deadline_exceeded(format!("deadline exceeded after {t:?}")),
        None => tonic::Status::deadline_exceeded("deadline exceeded"),
    }
}

/// The first error of type `T` in `err`'s source chain (`err` itself included).
pub(crate) fn find<'a, T: StdError + 'static>(err: &'a (dyn StdError + 'static)) -> Option<&'a T> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(t) = e.downcast_ref::<T>() {
            return Some(t);
        }
        cur = e.source();
    }
    None
}

/// `err` and its source chain, joined with ": " (a source that repeats the text before it is
/// skipped): an error's own words often say only what failed ("cannot connect", "connection
/// error"), its cause (a broken pipe, a refused connection) is in the chain.
pub(crate) fn describe(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    let mut last = out.clone();
    let mut cur = err.source();
    while let Some(e) = cur {
        let text = e.to_string();
        if !last.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        last = text;
        cur = e.source();
    }
    out
}

/// An endpoint's connection could not be made (TCP, TLS or HTTP/2 handshake): the request
/// never left the client. Shared by the calls that waited for the same connect.
#[derive(Debug, Clone)]
pub(crate) struct ConnectFailed {
    error: std::sync::Arc<dyn StdError + Send + Sync>,
    /// A call that waited for this connect has counted it as the endpoint's transport failure.
    counted: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl ConnectFailed {
    pub(crate) fn new(e: impl Into<Box<dyn StdError + Send + Sync>>) -> ConnectFailed {
        ConnectFailed {
            error: std::sync::Arc::from(e.into()),
            counted: std::sync::Arc::default(),
        }
    }
}

/// True for a failed connect that another call waiting for it has counted already: one failed
/// connect is one transport failure of the endpoint (one step of its back-off, one of its
/// failure streak), however many calls waited for it; the others were never sent. The first
/// call to ask counts it.
pub(crate) fn connect_failure_counted(err: &(dyn StdError + 'static)) -> bool {
    find::<ConnectFailed>(err)
        .is_some_and(|c| c.counted.swap(true, std::sync::atomic::Ordering::Relaxed))
}

impl std::fmt::Display for ConnectFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cannot connect")
    }
}

impl StdError for ConnectFailed {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.error)
    }
}

/// An attempt's deadline timer fired before the response came.
#[derive(Debug)]
pub(crate) struct DeadlinePassed;

impl std::fmt::Display for DeadlinePassed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline exceeded")
    }
}

impl StdError for DeadlinePassed {}

/// True when the attempt's deadline timer ended the call.
pub(crate) fn is_timeout(err: &(dyn StdError + 'static)) -> bool {
    find::<DeadlinePassed>(err).is_some()
}

/// True when the connection's HTTP/2 failed the request: an HTTP/2 error (of the connection or
/// the stream) is in the chain, or hyper's "operation was canceled" (the connection ended
/// before h2 took the request).
pub(crate) fn is_h2_failure(err: &(dyn StdError + 'static)) -> bool {
    find::<h2::Error>(err).is_some() || find::<hyper::Error>(err).is_some_and(|h| h.is_canceled())
}

/// True for an I/O error of the connection (the peer closed or reset it, or a write to it failed):
/// the request may or may not have been written; `Wire::unsent_since` tells.
pub(crate) fn is_connection_loss(err: &(dyn StdError + 'static)) -> bool {
    find::<std::io::Error>(err).is_some_and(|io| {
        matches!(
            io.kind(),
            std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::UnexpectedEof
        )
    })
}

/// True when the error proves the request was not processed by any server, so it may be sent
/// again even if it is not idempotent:
/// - the connection could not be established ([`ConnectFailed`]: refused, unreachable, timeout,
///   a failed TLS handshake);
/// - the server refused the stream (`REFUSED_STREAM`);
/// - the connection [was closing](closing): a graceful GOAWAY below the stream, or a request
///   hyper cancelled before writing it.
pub(crate) fn never_reached_server(err: &(dyn StdError + 'static)) -> bool {
    find::<ConnectFailed>(err).is_some()
        || find::<h2::Error>(err).is_some_and(|h2| h2.reason() == Some(h2::Reason::REFUSED_STREAM))
        || closing(err).is_some()
}

/// How a connection on its way out turned a request away before it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closing {
    /// The server announced a graceful GOAWAY whose last-stream-id is below this stream (h2
    /// reports it as a remote GOAWAY with `NO_ERROR`; tonic would surface it as `Internal`): a
    /// server ending a connection's age, or shutting down.
    GoAway,
    /// hyper cancelled the request before writing it: the connection closed while it was
    /// queued, gracefully or not.
    Canceled,
}

/// See [`Closing`]; `None` for a connect that failed (the connect's own failure).
pub(crate) fn closing(err: &(dyn StdError + 'static)) -> Option<Closing> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.is::<ConnectFailed>() {
            return None;
        }
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            let graceful =
                h2.is_go_away() && h2.is_remote() && h2.reason() == Some(h2::Reason::NO_ERROR);
            return graceful.then_some(Closing::GoAway);
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && h.is_canceled()
        {
            return Some(Closing::Canceled);
        }
        cur = e.source();
    }
    None
}

/// The reason of a stream reset by the peer (`RST_STREAM` from the server), if that is what
/// `err` is.
pub(crate) fn remote_reset(err: &(dyn StdError + 'static)) -> Option<h2::Reason> {
    find::<h2::Error>(err)
        .filter(|h2| h2.is_reset() && h2.is_remote())
        .and_then(h2::Error::reason)
}

/// The gRPC code of a stream reset with `reason` (grpc-go's `http2ErrConvTab`).
pub(crate) fn reset_code(reason: h2::Reason) -> i32 {
    match reason {
        h2::Reason::CANCEL => code::CANCELLED,
        h2::Reason::REFUSED_STREAM => code::UNAVAILABLE,
        h2::Reason::FLOW_CONTROL_ERROR | h2::Reason::ENHANCE_YOUR_CALM => code::RESOURCE_EXHAUSTED,
        h2::Reason::INADEQUATE_SECURITY => code::PERMISSION_DENIED,
        _ => code::INTERNAL,
    }
}

/// What a response body's error was, from the status tonic made of it (tonic keeps the code
/// its own table gives a reset's reason, the same as grpc-go's but for `FLOW_CONTROL_ERROR`,
/// and no source) and whether a connection of the endpoint was lost since the request went
/// out (`lost`).
pub(crate) fn body_failure(status: &tonic::Status, lost: bool) -> BodyFailure {
    let c = status.code() as i32;
    if c == code::CANCELLED {
        BodyFailure::Reset(c)
    } else if lost || c == code::UNKNOWN || c == code::UNAVAILABLE {
        // an I/O error of the connection (tonic finds no reason in it: `Unknown`), a GOAWAY,
        // the keepalive's timeout
        BodyFailure::Connection
    } else {
        BodyFailure::Reset(c)
    }
}

/// See [`body_failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFailure {
    /// The stream was reset (the code of its reason).
    Reset(i32),
    /// The connection was lost: `Unavailable`, a transport failure of the endpoint.
    Connection,
}

#[cfg(test)]
mod tests {
    use tower::BoxError;

    use super::*;

    fn boxed(e: impl StdError + Send + Sync + 'static) -> BoxError {
        Box::new(e)
    }

    #[test]
    fn classifies_errors_that_never_reached_a_server() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(never_reached_server(&*boxed(ConnectFailed::new(refused))));
        assert!(never_reached_server(&*boxed(h2::Error::from(
            h2::Reason::REFUSED_STREAM
        ))));
        // a reset or a protocol error may come after the server started processing
        assert!(!never_reached_server(&*boxed(h2::Error::from(
            h2::Reason::CANCEL
        ))));
        assert!(!never_reached_server(&*boxed(h2::Error::from(
            h2::Reason::INTERNAL_ERROR
        ))));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(!never_reached_server(&*boxed(reset)));
        // nested in a status source chain
        let status = tonic::Status::from_error(boxed(ConnectFailed::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        ))));
        assert!(never_reached_server(&status));
        // a refused stream or a reset is no closing connection (h2 and hyper make the errors
        // that are, a remote GOAWAY and a cancel, only on a live connection: the tests of the
        // connection ages against zrpc's and grpc-go's servers exercise them)
        assert_eq!(
            closing(&*boxed(h2::Error::from(h2::Reason::REFUSED_STREAM))),
            None
        );
        assert_eq!(closing(&*boxed(h2::Error::from(h2::Reason::CANCEL))), None);
    }

    #[test]
    fn connection_losses_are_io_errors_of_the_connection() {
        for kind in [
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::ConnectionReset,
        ] {
            let status = tonic::Status::from_error(boxed(std::io::Error::from(kind)));
            assert!(is_connection_loss(&status), "{kind:?}");
        }
        assert!(!is_connection_loss(&*boxed(std::io::Error::from(
            std::io::ErrorKind::InvalidData
        ))));
        assert!(!is_connection_loss(&*boxed(h2::Error::from(
            h2::Reason::INTERNAL_ERROR
        ))));
    }

    #[test]
    fn recognises_the_attempts_deadline() {
        assert!(is_timeout(&*boxed(DeadlinePassed)));
        assert!(!is_timeout(&*boxed(std::io::Error::from(
            std::io::ErrorKind::TimedOut
        ))));
    }

    #[test]
    fn reset_reasons_map_as_grpc_go_maps_them() {
        let table = [
            (h2::Reason::NO_ERROR, code::INTERNAL),
            (h2::Reason::PROTOCOL_ERROR, code::INTERNAL),
            (h2::Reason::INTERNAL_ERROR, code::INTERNAL),
            (h2::Reason::FLOW_CONTROL_ERROR, code::RESOURCE_EXHAUSTED),
            (h2::Reason::SETTINGS_TIMEOUT, code::INTERNAL),
            (h2::Reason::STREAM_CLOSED, code::INTERNAL),
            (h2::Reason::FRAME_SIZE_ERROR, code::INTERNAL),
            (h2::Reason::REFUSED_STREAM, code::UNAVAILABLE),
            (h2::Reason::CANCEL, code::CANCELLED),
            (h2::Reason::COMPRESSION_ERROR, code::INTERNAL),
            (h2::Reason::CONNECT_ERROR, code::INTERNAL),
            (h2::Reason::ENHANCE_YOUR_CALM, code::RESOURCE_EXHAUSTED),
            (h2::Reason::INADEQUATE_SECURITY, code::PERMISSION_DENIED),
            (h2::Reason::HTTP_1_1_REQUIRED, code::INTERNAL),
        ];
        for (reason, c) in table {
            assert_eq!(reset_code(reason), c, "{reason:?}");
        }
    }

    #[test]
    fn body_errors_are_resets_or_lost_connections() {
        let io = tonic::Status::unknown("h2 protocol error: error reading a body from connection");
        assert_eq!(body_failure(&io, false), BodyFailure::Connection);
        let cancel = tonic::Status::cancelled("h2 protocol error: stream error received");
        assert_eq!(
            body_failure(&cancel, false),
            BodyFailure::Reset(code::CANCELLED)
        );
        assert_eq!(
            body_failure(&cancel, true),
            BodyFailure::Reset(code::CANCELLED)
        );
        let protocol = tonic::Status::internal("h2 protocol error: protocol error");
        assert_eq!(
            body_failure(&protocol, false),
            BodyFailure::Reset(code::INTERNAL)
        );
        // the connection went down with it (a GOAWAY and the close)
        assert_eq!(body_failure(&protocol, true), BodyFailure::Connection);
    }
}
