//! go-zero's client chain, the stages [`Client::call`](crate::Client) runs for each call (outer ->
//! inner): [`observe`] (tracing, duration log, metrics and breaker, in go-zero's order, fed by one
//! classification of the outcome), then [`timeout`], the app/token [`credentials`] and the
//! call's priority [`tier`], and the balancer.
//!
//! The final gRPC status of a call is read once: from a local error (a `tonic::Status`), from the
//! response headers (trailers-only) or from the trailers at the end of the body, with a drop
//! guard so that a cancelled call is still accounted for (`zrpc_core::grpc::StatusBody`), for
//! the recorders and the balancer's endpoint statistics together.

pub(crate) mod breaker;
pub(crate) mod credentials;
pub(crate) mod duration;
mod method;
pub(crate) mod observe;
pub(crate) mod tier;
pub(crate) mod timeout;
mod trace;

use zrpc_core::grpc::code;

/// The response type of the client's services.
pub(crate) type Response = http::Response<tonic::body::Body>;

/// The numeric gRPC code of an error returned by a client service (a `tonic::Status` anywhere in
/// its source chain, else what tonic would map it to).
#[must_use]
pub(crate) fn code_of_error(err: &(dyn std::error::Error + 'static)) -> i32 {
    crate::failure::find::<tonic::Status>(err).map_or(code::UNKNOWN, |s| s.code() as i32)
}
