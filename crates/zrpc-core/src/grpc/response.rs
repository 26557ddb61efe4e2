//! Reading a status from headers/trailers and building trailers-only error responses.

use http::{HeaderMap, HeaderName, HeaderValue, Response};

use super::code;

/// The `grpc-status` header/trailer name.
pub const GRPC_STATUS: &str = "grpc-status";
/// The `grpc-message` header/trailer name (percent-encoded text).
pub const GRPC_MESSAGE: &str = "grpc-message";

/// The numeric `grpc-status` in a header map, if present. A malformed value is
/// [`code::UNKNOWN`].
#[must_use]
pub fn status_from_headers(headers: &HeaderMap) -> Option<i32> {
    const NAME: HeaderName = HeaderName::from_static(GRPC_STATUS);
    let v = find_header(headers, &NAME)?.as_bytes();
    Some(match *v {
        // The usual one- or two-digit codes, without UTF-8 checks and trimming.
        [d @ b'0'..=b'9'] => i32::from(d - b'0'),
        [a @ b'0'..=b'9', b @ b'0'..=b'9'] => i32::from(a - b'0') * 10 + i32::from(b - b'0'),
        _ => std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(code::UNKNOWN),
    })
}

/// Up to this many entries, [`find_header`] scans instead of hashing.
const SCAN_HEADERS: usize = 8;

/// `headers.get(name)`, by a scan of the entries when there are few: gRPC response headers,
/// trailers and most request headers hold a handful, and comparing names (an enum tag for a
/// standard name, a short `memcmp` for a custom one) costs less than hashing the name. The
/// first value of `name`, as `get` gives.
#[must_use]
pub fn find_header<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    if headers.keys_len() > SCAN_HEADERS {
        return headers.get(name);
    }
    headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
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
        // Two hex digits exactly, as grpc-go's `strconv.ParseUint(s, 16, 8)`: not
        // `u8::from_str_radix`, which also takes a sign (`%+5` would become 0x05).
        if raw[i] == b'%'
            && let Some(&[h, l]) = raw.get(i + 1..i + 3)
            && let (Some(h), Some(l)) = (hex_digit(h), hex_digit(l))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(raw[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_digit(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
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

/// Whether a `content-type` is gRPC's: `application/grpc`, alone or followed by `+` or `;`
/// (ASCII case ignored). The server answers other requests 415; the client takes a response
/// without it for a proxy's or web server's answer (gRPC's HTTP-to-gRPC status table).
#[must_use]
pub fn is_grpc_content_type(value: Option<&HeaderValue>) -> bool {
    value.is_some_and(|v| {
        let v = v.as_bytes();
        v.len() >= 16
            && v[..16].eq_ignore_ascii_case(b"application/grpc")
            && matches!(v.get(16), None | Some(b'+' | b';'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_grpc_content_types() {
        for ok in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC+json",
            "application/grpc;charset=utf-8",
        ] {
            assert!(
                is_grpc_content_type(Some(&HeaderValue::from_static(ok))),
                "{ok}"
            );
        }
        for bad in [
            "application/json",
            "application/grpcx",
            "text/plain",
            "application/grp",
        ] {
            assert!(
                !is_grpc_content_type(Some(&HeaderValue::from_static(bad))),
                "{bad}"
            );
        }
        assert!(!is_grpc_content_type(None));
    }

    #[test]
    fn find_header_answers_as_get_for_small_and_large_maps() {
        for n in [0, 1, 3, SCAN_HEADERS, SCAN_HEADERS + 1, 20] {
            let mut h = HeaderMap::new();
            for i in 0..n {
                h.append(
                    HeaderName::try_from(format!("x-h{i}")).unwrap_or_else(|e| panic!("{e}")),
                    HeaderValue::from(i),
                );
            }
            h.append(http::header::CONTENT_TYPE, HeaderValue::from_static("a"));
            h.append(
                HeaderName::from_static(GRPC_STATUS),
                HeaderValue::from_static("3"),
            );
            h.append(
                HeaderName::from_static(GRPC_STATUS),
                HeaderValue::from_static("4"),
            );
            for name in [
                HeaderName::from_static(GRPC_STATUS),
                http::header::CONTENT_TYPE,
                HeaderName::from_static("grpc-timeout"),
                HeaderName::from_static("x-h0"),
                HeaderName::from_static("grpc-statu"),
            ] {
                assert_eq!(find_header(&h, &name), h.get(&name), "{n} {name}");
            }
        }
    }

    /// The fast path reads every value as the plain parse does (moved from the server's
    /// `status_of` when it became this function).
    #[test]
    fn status_fast_path_reads_codes_as_the_plain_parse_does() {
        let plain = |h: &HeaderMap| {
            h.get(GRPC_STATUS).map(|v| {
                std::str::from_utf8(v.as_bytes())
                    .ok()
                    .and_then(|s| s.trim().parse::<i32>().ok())
                    .unwrap_or(code::UNKNOWN)
            })
        };
        let mut h = HeaderMap::new();
        assert_eq!(status_from_headers(&h), None);
        for raw in [
            "0", "7", "14", "16", "99", " 3", "3 ", "+4", "-1", "123", "", "x", "1x",
        ] {
            h.insert(
                GRPC_STATUS,
                HeaderValue::from_str(raw).unwrap_or_else(|e| panic!("{e}")),
            );
            assert_eq!(status_from_headers(&h), plain(&h), "{raw:?}");
        }
        h.insert(
            GRPC_STATUS,
            HeaderValue::from_bytes(b"\xff").unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(status_from_headers(&h), Some(code::UNKNOWN));
    }

    #[test]
    fn message_round_trips() {
        for m in ["service overloaded", "panic: 100% ünïcode\nline", ""] {
            let enc = encode_grpc_message(m);
            assert!(enc.bytes().all(|b| (0x20..=0x7e).contains(&b)));
            assert_eq!(decode_grpc_message(enc.as_bytes()), m);
        }
        assert_eq!(decode_grpc_message(b"50%"), "50%");
    }

    /// Found by fuzzing against grpc-go's decoder: a sign is not a hex digit.
    #[test]
    fn a_percent_and_a_sign_stay_as_they_are() {
        assert_eq!(decode_grpc_message(b"%+5"), "%+5");
        assert_eq!(decode_grpc_message(b"%-1%2b"), "%-1+");
        assert_eq!(decode_grpc_message(b"%4a%4A%"), "JJ%");
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
