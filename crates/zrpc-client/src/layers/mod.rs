//! go-zero's client chain as tower layers (outer -> inner): [`trace`], [`duration`], [`metrics`],
//! [`breaker`], [`timeout`], then the app/token [`credentials`] and the balancer.
//!
//! Every layer that needs the final gRPC status reads it the same way: from a local error (a
//! `tonic::Status`), from the response headers (trailers-only) or from the trailers at the end of
//! the body, with a drop guard so that a cancelled call is still accounted for
//! (`zrpc_core::grpc::StatusBody`).

pub mod breaker;
pub mod credentials;
pub mod duration;
pub mod metrics;
pub mod timeout;
pub mod trace;

use std::future::Future;

use tonic::body::Body;
use zrpc_core::grpc::{OnStatus, StatusBody, StatusGuard, code};

/// The error type of every client service: a boxed error, in practice a `tonic::Status`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The response type of every client service.
pub type Response = http::Response<Body>;

/// The numeric gRPC code of an error returned by a client service (a `tonic::Status` anywhere in
/// its source chain, else what tonic would map it to).
#[must_use]
pub fn code_of_error(err: &(dyn std::error::Error + 'static)) -> i32 {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(s) = e.downcast_ref::<tonic::Status>() {
            return s.code() as i32;
        }
        cur = e.source();
    }
    code::UNKNOWN
}

/// Awaits `fut` and reports its final gRPC code to `on_status` exactly once: at once for an error or
/// a trailers-only response, at the end of the body otherwise, `Cancelled` if dropped before.
pub(crate) async fn observe<Fut, F>(fut: Fut, on_status: F) -> Result<Response, BoxError>
where
    Fut: Future<Output = Result<Response, BoxError>>,
    F: OnStatus + Send + 'static,
{
    let mut guard = StatusGuard::new(on_status);
    let result = fut.await;
    let Some(on_status) = guard.take() else {
        return result;
    };
    match result {
        Ok(resp) => Ok(StatusBody::wrap_response(resp, on_status).map(Body::new)),
        Err(err) => {
            on_status.on_status(code_of_error(&*err));
            Err(err)
        }
    }
}
