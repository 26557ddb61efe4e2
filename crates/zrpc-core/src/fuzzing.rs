//! Entry points of the fuzz targets (the repository's `fuzz/` directory, cargo-fuzz) and of the
//! replay of their corpora (`tests/fuzz_corpora.rs`): not public API, no semver promise.
//!
//! Each function drives one parser of untrusted input on arbitrary octets and asserts its
//! invariants, against a small independent reference where there is one: a panic is a bug found.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body::{Body, Frame};

use crate::grpc::compression::{Decompress, DecompressError, Encoding};
use crate::grpc::{code, decode_grpc_message, encode_grpc_message, timeout, trace_context};
use crate::limit::Tier;

/// grpc-go's `decodeTimeout` (internal/transport/http_util.go), written out again: 1 to 8
/// digits and a unit; hours past what an `int64` of nanoseconds holds clamp to that maximum.
fn grpc_go_timeout(s: &[u8]) -> Option<Duration> {
    if s.len() < 2 || s.len() > 9 {
        return None;
    }
    let (digits, unit) = s.split_at(s.len() - 1);
    let nanos_per: u64 = match unit[0] {
        b'H' => 3_600_000_000_000,
        b'M' => 60_000_000_000,
        b'S' => 1_000_000_000,
        b'm' => 1_000_000,
        b'u' => 1_000,
        b'n' => 1,
        _ => return None,
    };
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let t: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    let max = i64::MAX as u64;
    Some(Duration::from_nanos(if t > max / nanos_per {
        max
    } else {
        t * nanos_per
    }))
}

/// `grpc-timeout`: the same answer as grpc-go's parser (zrpc keeps the exact value where
/// grpc-go clamps to ~292 years), and formatting any duration gives a value grpc-go accepts
/// that is never shorter than the duration (except when the coarsest unit truncates).
pub fn grpc_timeout(data: &[u8]) {
    let ours = timeout::parse(data);
    let reference = grpc_go_timeout(data);
    match (ours, reference) {
        (Some(a), Some(b)) if b == Duration::from_nanos(i64::MAX as u64) => assert!(a >= b),
        (a, b) => assert_eq!(a, b, "grpc-timeout {:?}", String::from_utf8_lossy(data)),
    }
    if let Ok(v) = HeaderValue::from_bytes(data) {
        let mut h = HeaderMap::new();
        h.insert(timeout::GRPC_TIMEOUT_HEADER, v);
        assert_eq!(timeout::from_headers(&h), ours);
    }
    if let Some(bytes) = data.first_chunk::<12>() {
        let secs = u64::from_be_bytes(bytes[..8].try_into().unwrap_or_default());
        let nanos = u32::from_be_bytes(bytes[8..].try_into().unwrap_or_default()) % 1_000_000_000;
        let d = Duration::new(secs % (100_000_000 * 3600), nanos);
        let text = timeout::format(d);
        assert!(
            grpc_go_timeout(text.as_bytes()).is_some(),
            "grpc-go refuses {text}"
        );
        let back = timeout::parse(text.as_bytes()).expect("zrpc refuses its own timeout");
        if d < Duration::from_secs(99_999_999 * 3600) {
            assert!(back >= d, "{d:?} formatted as {text} is shorter");
        }
    }
}

/// grpc-go's `decodeGrpcMessage` (internal/transport/http_util.go), written out again: `%`
/// and two hex digits (`strconv.ParseUint(s, 16, 8)`, no sign) is one octet.
fn grpc_go_decode_message(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' && i + 2 < raw.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(raw[i + 1]), hex(raw[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}

/// Percent-encoded `grpc-message`: decoding is grpc-go's, and any text survives encode then
/// decode; the encoded form is a valid header value.
pub fn grpc_message(data: &[u8]) {
    let ours = decode_grpc_message(data);
    let reference = String::from_utf8_lossy(&grpc_go_decode_message(data)).into_owned();
    assert_eq!(ours, reference, "grpc-message {data:?}");
    let text = String::from_utf8_lossy(data);
    let encoded = encode_grpc_message(&text);
    assert!(HeaderValue::from_str(&encoded).is_ok(), "{encoded:?}");
    assert_eq!(decode_grpc_message(encoded.as_bytes()), text);
}

/// W3C `traceparent` by OpenTelemetry Go's propagator (`propagation/trace_context.go`),
/// written out again: version (2 lowercase hex, not `ff`), trace id (32), span id (16),
/// flags (2); version `00` has nothing after its flags and flags of at most `02`; a later
/// version may go on after a `-`; ids not all zeros.
fn otel_traceparent_valid(t: &[u8]) -> bool {
    let hex = |s: &[u8]| s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let byte = |s: &[u8]| u8::from_str_radix(std::str::from_utf8(s).unwrap_or("zz"), 16).ok();
    if t.len() < 55 || !hex(&t[..2]) || t[2] != b'-' || t[35] != b'-' || t[52] != b'-' {
        return false;
    }
    let (Some(version), Some(flags)) = (byte(&t[..2]), byte(&t[53..55])) else {
        return false;
    };
    let tail_ok = match version {
        0xff => false,
        0 => t.len() == 55 && flags <= 2,
        _ => t.len() == 55 || t[55] == b'-',
    };
    tail_ok
        && hex(&t[3..35])
        && hex(&t[36..52])
        && hex(&t[53..55])
        && t[3..35].iter().any(|b| *b != b'0')
        && t[36..52].iter().any(|b| *b != b'0')
}

/// Trace context and baggage: `traceparent` is taken exactly when OpenTelemetry's propagator
/// takes it; inject puts back what was extracted; merging baggage never drops the call's own
/// members nor takes the header past W3C's 8192 octets (unless it already was).
///
/// `data`: `traceparent`, `tracestate`, own `baggage` and passed-on `baggage`, separated by
/// newlines.
pub fn trace_context(data: &[u8]) {
    let mut parts = data.splitn(4, |&b| b == b'\n');
    let (tp, ts, own, more) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let mut h = HeaderMap::new();
    let tp_value = HeaderValue::from_bytes(tp).ok();
    if let Some(v) = &tp_value {
        h.insert(trace_context::TRACEPARENT, v.clone());
    }
    if let Ok(v) = HeaderValue::from_bytes(ts) {
        h.insert(trace_context::TRACESTATE, v);
    }
    let cx = trace_context::TraceContext::extract(&h);
    assert_eq!(
        cx.is_some(),
        tp_value.is_some() && otel_traceparent_valid(tp),
        "traceparent {:?}",
        String::from_utf8_lossy(tp)
    );
    if let Some(cx) = cx {
        let mut out = HeaderMap::new();
        cx.inject(&mut out);
        assert_eq!(
            out.get(trace_context::TRACEPARENT),
            h.get(trace_context::TRACEPARENT)
        );
        assert_eq!(
            out.get(trace_context::TRACESTATE),
            h.get(trace_context::TRACESTATE)
        );
        assert_eq!(cx.trace_id().len(), 32);
    }
    let (Ok(own_v), Ok(more_v)) = (HeaderValue::from_bytes(own), HeaderValue::from_bytes(more))
    else {
        return;
    };
    let mut h = HeaderMap::new();
    h.insert(trace_context::BAGGAGE, own_v.clone());
    trace_context::merge_baggage(&mut h, &more_v);
    let merged = h.get(trace_context::BAGGAGE).map(HeaderValue::as_bytes);
    let merged = merged.unwrap_or_default();
    assert!(
        merged.starts_with(own),
        "the call's own baggage was changed"
    );
    assert!(
        merged.len() <= own.len().max(8192),
        "baggage past 8192 octets"
    );
}

/// Tier metadata: a value names a tier exactly when it is one of the names in any case, and a
/// tier's own name reads back as that tier.
pub fn tier(data: &[u8]) {
    let reference = ["critical", "default", "sheddable"]
        .iter()
        .position(|n| data.eq_ignore_ascii_case(n.as_bytes()));
    let ours = Tier::from_metadata(data);
    assert_eq!(ours.is_some(), reference.is_some());
    if let Some(t) = ours {
        assert!(data.eq_ignore_ascii_case(t.as_str().as_bytes()));
        assert_eq!(Tier::from_metadata(t.as_str().as_bytes()), Some(t));
        assert_eq!(t.as_str().parse::<Tier>().ok(), Some(t));
    }
    // A config's name (`FromStr`) may have blanks around it; metadata may not.
    if let Ok(s) = std::str::from_utf8(data) {
        assert_eq!(
            s.parse::<Tier>().ok(),
            Tier::from_metadata(s.trim().as_bytes())
        );
    }
}

/// A body of fixed pieces.
struct Pieces(VecDeque<Bytes>);

impl Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}

/// The gRPC messages of `octets` (flag, payload), and whether it ends inside one.
fn messages(octets: &[u8]) -> (Vec<(u8, &[u8])>, bool) {
    let mut out = Vec::new();
    let mut rest = octets;
    while rest.len() >= 5 {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        if rest.len() - 5 < len {
            return (out, true);
        }
        out.push((rest[0], &rest[5..5 + len]));
        rest = &rest[5 + len..];
    }
    (out, !rest.is_empty())
}

/// Compressed message frames through [`Decompress`]: a message out is never larger than the
/// limit when it came compressed, plain messages pass unchanged, refusals are
/// `RESOURCE_EXHAUSTED` (over the limit) or `INTERNAL` (bad payload or flag, body cut), and
/// gzip payloads decode as `flate2` decodes them.
///
/// `data`: one octet choosing the encoding, two the limit (in octets, + 1), one the piece
/// size of the body; then the body.
pub fn decompress(data: &[u8]) {
    let Some((head, body)) = data.split_first_chunk::<4>() else {
        return;
    };
    let encodings = [Encoding::Gzip, Encoding::Deflate, Encoding::Zstd];
    let encoding = encodings[usize::from(head[0]) % encodings.len()];
    let limit = usize::from(u16::from_be_bytes([head[1], head[2]])) + 1;
    let piece = usize::from(head[3]).max(1);
    let pieces = body.chunks(piece).map(Bytes::copy_from_slice).collect();
    let mut d = Decompress::new(Pieces(pieces), encoding).limit(limit);
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    let mut frames = 0usize;
    loop {
        match Pin::new(&mut d).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(f))) => {
                if let Ok(data) = f.into_data() {
                    out.extend_from_slice(&data);
                }
            }
            Poll::Ready(Some(Err(e))) => {
                let DecompressError::Codec(c) = e;
                assert!(
                    matches!(c.code(), code::RESOURCE_EXHAUSTED | code::INTERNAL),
                    "refused with code {}: {}",
                    c.code(),
                    c.message()
                );
                break;
            }
            Poll::Ready(None) => break,
            Poll::Pending => panic!("a body whose octets are all there is pending"),
        }
        frames += 1;
        assert!(frames <= body.len() * 2 + 8, "more frames than octets");
    }
    let (sent, body_cut) = messages(body);
    let (got, cut) = messages(&out);
    // A plain message is handed on as it comes; one the body cuts short stays short (the
    // message decoder after this refuses it).
    assert!(!cut || body_cut, "a message handed on in part");
    assert!(got.len() <= sent.len());
    for ((flag, payload), (out_flag, out_payload)) in sent.iter().zip(&got) {
        assert_eq!(*out_flag, 0, "a message handed on compressed");
        if *flag == 0 {
            assert_eq!(payload, out_payload, "a plain message changed");
        } else {
            assert!(out_payload.len() <= limit, "decompressed past the limit");
            check_inflate(encoding, payload, out_payload, limit);
        }
    }
}

#[cfg(feature = "gzip")]
fn check_inflate(encoding: Encoding, payload: &[u8], out: &[u8], limit: usize) {
    use std::io::Read;
    if encoding != Encoding::Gzip {
        return;
    }
    let mut want = Vec::new();
    let n = flate2::read::MultiGzDecoder::new(payload)
        .take(limit as u64 + 1)
        .read_to_end(&mut want);
    assert!(n.is_ok(), "a gzip payload flate2 refuses was taken");
    assert_eq!(
        want, out,
        "gzip payload decoded otherwise than flate2 decodes it"
    );
}

#[cfg(not(feature = "gzip"))]
fn check_inflate(_: Encoding, _: &[u8], _: &[u8], _: usize) {}

/// Replays every input of the fuzz corpus of `target` (`fuzz/corpus/<target>/` of the repository
/// holding the crate at `manifest_dir`) through `run`, failing on the first that panics: the
/// corpus replay of each crate's `tests/fuzz_corpora.rs`. A packaged crate has no corpora: the
/// replay then says so and passes.
pub fn replay(manifest_dir: &str, target: &str, run: fn(&[u8])) {
    let dir = std::path::Path::new(manifest_dir)
        .join("../../fuzz/corpus")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!(
            "note: no fuzz corpus at {} (a packaged crate?): nothing replayed",
            dir.display()
        );
        return;
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the corpus of {target} is empty");
    for path in &files {
        let data = std::fs::read(path)
            .unwrap_or_else(|e| panic!("{}: cannot be read: {e}", path.display()));
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{target}: {} fails", path.display());
    }
    eprintln!("{target}: {} inputs replayed", files.len());
}
