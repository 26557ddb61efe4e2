//! HTTP 415 for requests whose `content-type` is not `application/grpc*`, and HTTP 400 for a
//! `grpc-timeout` that does not parse.
//!
//! The gRPC over HTTP/2 spec: "If Content-Type does not begin with `application/grpc`, gRPC
//! servers SHOULD respond with HTTP status of 415 (Unsupported Media Type). This will prevent
//! other HTTP/2 clients from interpreting a gRPC error response, which uses status 200 (OK),
//! as successful." Like grpc-go, the 415 also carries `grpc-status: 3` (InvalidArgument) and a
//! `grpc-message` naming the content-type, for gRPC clients that look only at those.

use http::{HeaderValue, Response, StatusCode, header};
pub(crate) use zrpc_core::grpc::is_grpc_content_type as is_grpc;

/// The answer to a request that is not gRPC.
#[cold]
#[inline(never)]
pub(crate) fn unsupported<B: Default>(value: Option<&HeaderValue>) -> Response<B> {
    let shown = value.map_or_else(
        || "none".to_owned(),
        |v| String::from_utf8_lossy(v.as_bytes()).into_owned(),
    );
    let message = format!("invalid gRPC request content-type {shown:?}");
    refused(StatusCode::UNSUPPORTED_MEDIA_TYPE, "3", &message)
}

/// The answer to a request whose `grpc-timeout` does not parse: HTTP 400 with `Internal`, as
/// grpc-go's server answers it (the spec's HTTP-to-gRPC table maps 400 to `Internal` too).
#[cold]
#[inline(never)]
pub(crate) fn malformed_timeout<B: Default>(value: &HeaderValue) -> Response<B> {
    let shown = String::from_utf8_lossy(value.as_bytes());
    let message = format!(
        "malformed grpc-timeout {shown:?}: want 1 to 8 digits and a unit (H, M, S, m, u, n)"
    );
    refused(StatusCode::BAD_REQUEST, "13", &message)
}

/// An HTTP `status` answer with a gRPC status (`code`, `message`) in its head, for gRPC clients
/// that read only those.
fn refused<B: Default>(status: StatusCode, code: &'static str, message: &str) -> Response<B> {
    let mut res = Response::new(B::default());
    *res.status_mut() = status;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from_static(code));
    if let Ok(v) = HeaderValue::from_str(&zrpc_core::grpc::encode_grpc_message(message)) {
        h.insert("grpc-message", v);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_answer_is_415_with_invalid_argument() {
        let res: Response<String> =
            unsupported(Some(&HeaderValue::from_static("application/json")));
        assert_eq!(res.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(res.headers()["grpc-status"], "3");
        assert_eq!(
            res.headers()["grpc-message"],
            "invalid gRPC request content-type \"application/json\""
        );
    }
}
