//! Error and slow-call logging (go-zero `DurationInterceptor`): every failed call is logged at
//! error level (`fail - <target><method> - code <n> (<Name>): <message> - <elapsed>`, or the
//! error instead of the code for a call that got no status), a successful call slower than
//! 500 ms (go-zero's `slowThreshold`) at warn level (`slowcall`). No per-call info log.
//! Switched on with [`ObserveBuilder::duration_log`](super::observe::ObserveBuilder::duration_log).

use std::time::Duration;

use zrpc_core::grpc::{code, status_message_from_headers};

/// go-zero's default slow-call threshold.
pub(crate) const SLOW_THRESHOLD: Duration = Duration::from_millis(500);

/// A call that failed without a response (local rejection, transport error, timeout).
pub(crate) fn log_error(name: &str, err: &dyn std::error::Error, elapsed: Duration) {
    tracing::error!(target: "zrpc::client", "fail - {name} - {err} - {elapsed:?}");
}

/// A call whose status came in the response headers (trailers-only).
pub(crate) fn log_status(
    name: &str,
    c: i32,
    headers: &http::HeaderMap,
    elapsed: Duration,
    slow: Duration,
) {
    if c == code::OK {
        return log_end(name, c, elapsed, slow);
    }
    let msg = status_message_from_headers(headers).unwrap_or_default();
    tracing::error!(target: "zrpc::client", "fail - {name} - code {c} ({}): {msg} - {elapsed:?}", code::name(c));
}

/// A call whose status came at the end of its body (or that was dropped: not logged).
pub(crate) fn log_end(name: &str, c: i32, elapsed: Duration, slow: Duration) {
    if c == code::OK && elapsed > slow {
        tracing::warn!(target: "zrpc::client", "[RPC] ok - slowcall - {name} - {elapsed:?}");
    } else if c != code::OK && c != code::CANCELLED {
        tracing::error!(target: "zrpc::client", "fail - {name} - code {c} ({}) - {elapsed:?}", code::name(c));
    }
}
