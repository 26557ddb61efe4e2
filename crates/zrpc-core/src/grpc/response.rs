//! Reading a status from headers/trailers and building trailers-only error responses.

use http::{HeaderMap, HeaderValue, Response};

use super::code;

/// The `grpc-status` header/trailer name.
pub const GRPC_STATUS: &str = "grpc-status";
/// The `grpc-message` header/trailer name (percent-encoded text).
pub const GRPC_MESSAGE: &str = "grpc-message";

/// The numeric `grpc-status` in a header map, if present. A malformed value is
/// [`code::UNKNOWN`].
#[must_use]
pub fn status_from_headers(headers: &HeaderMap) -> Option<i32> {
    let v = headers.get(GRPC_STATUS)?;
    Some(
        std::str::from_utf8(v.as_bytes())
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(code::UNKNOWN),
    )
}

/// The decoded `grpc-message` in a header map, if present.
#[must_use]
pub fn status_message_from_headers(headers: &HeaderMap) -> Option<String> {
    headers
        .get(GRPC_MESSAGE)
        .map(|v| decode_grpc_message(v.as_bytes()))
}

/// Percent-encodes a status message as the gRPC spec asks (bytes outside `0x20..=0x7E`
/// and `%` become `%XX`).
#[must_use]
pub fn encode_grpc_message(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    for &b in msg.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes a percent-encoded `grpc-message` (lossy on invalid UTF-8).
#[must_use]
pub fn decode_grpc_message(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' && i + 2 < raw.len() {
            let hex = std::str::from_utf8(&raw[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A trailers-only gRPC error response: HTTP 200, `content-type: application/grpc`,
/// `grpc-status` and `grpc-message` in the headers, and an empty (default) body.
///
/// This is what tonic sends for a `Status` returned before any message, so clients and
/// the [`StatusBody`](super::StatusBody) wrappers further out read it the same way.
#[must_use]
pub fn status_response<B: Default>(code: i32, message: &str) -> Response<B> {
    let mut resp = Response::new(B::default());
    let headers = resp.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert(GRPC_STATUS, HeaderValue::from_static(code::as_str(code)));
    if !message.is_empty()
        && let Ok(v) = HeaderValue::from_str(&encode_grpc_message(message))
    {
        headers.insert(GRPC_MESSAGE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_round_trips() {
        for m in ["service overloaded", "panic: 100% ünïcode\nline", ""] {
            let enc = encode_grpc_message(m);
            assert!(enc.bytes().all(|b| (0x20..=0x7e).contains(&b)));
            assert_eq!(decode_grpc_message(enc.as_bytes()), m);
        }
        assert_eq!(decode_grpc_message(b"50%"), "50%");
    }

    #[test]
    fn builds_trailers_only_response() {
        let r: Response<String> = status_response(code::RESOURCE_EXHAUSTED, "service overloaded");
        assert_eq!(status_from_headers(r.headers()), Some(8));
        assert_eq!(
            status_message_from_headers(r.headers()).as_deref(),
            Some("service overloaded")
        );
        assert_eq!(r.headers()["content-type"], "application/grpc");
    }

    #[test]
    fn malformed_status_is_unknown() {
        let mut h = HeaderMap::new();
        assert_eq!(status_from_headers(&h), None);
        h.insert(GRPC_STATUS, HeaderValue::from_static("x"));
        assert_eq!(status_from_headers(&h), Some(code::UNKNOWN));
    }
}
