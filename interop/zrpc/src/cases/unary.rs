//! empty_unary and large_unary.

use super::{Runner, failed};
use crate::payload;
use crate::pb::{Empty, PayloadType, SimpleRequest};

/// The request size of large_unary (and the soak cases' default).
pub(super) const LARGE_REQUEST: usize = 271_828;
/// The response size of large_unary (and the soak cases' default).
pub(super) const LARGE_RESPONSE: usize = 314_159;

pub(super) async fn empty_unary(r: &Runner) -> anyhow::Result<()> {
    // prost decodes a non-empty answer as Empty too (unknown fields are skipped); the spec
    // asks only that the call succeeds with a message
    let Empty {} = r
        .stub()
        .empty_call(Empty {})
        .await
        .map_err(failed("EmptyCall"))?
        .into_inner();
    Ok(())
}

pub(super) async fn large_unary(r: &Runner) -> anyhow::Result<()> {
    let reply = r
        .stub()
        .unary_call(large_request(LARGE_REQUEST, LARGE_RESPONSE))
        .await
        .map_err(failed("UnaryCall"))?
        .into_inner();
    payload::check(reply.payload.as_ref(), LARGE_RESPONSE)
}

/// A `SimpleRequest` of `request` zeros asking for `response` zeros.
pub(super) fn large_request(request: usize, response: usize) -> SimpleRequest {
    SimpleRequest {
        response_type: PayloadType::Compressable.into(),
        response_size: i32::try_from(response).unwrap_or(i32::MAX),
        payload: Some(payload::zeros(request)),
        ..SimpleRequest::default()
    }
}
