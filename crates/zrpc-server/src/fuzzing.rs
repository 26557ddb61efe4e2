//! Entry points of the fuzz targets (the repository's `fuzz/` directory, cargo-fuzz) and of the
//! replay of their corpora (`tests/fuzz_corpora.rs`): not public API, no semver promise.
//!
//! Each function drives one of the server's parsers of untrusted octets on an arbitrary input
//! and asserts the parser's invariants: a panic is a bug found. Inputs that carry both a split
//! and a stream (`frames`, `authority_repair`) start with `split_input`'s header.

use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, ReadBuf};

use crate::transport::authority::Repair;
use crate::transport::authority::hpack::{self, Walker};
use crate::transport::authority::huffman;
use crate::transport::conn::{ConnLimits, Guarded};
use crate::transport::frames::{FRAME_HEADER_LEN, FrameGuard, FrameHead, FrameScanner};

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Splits a fuzz input into cut positions and a stream: the first octet's low 3 bits give how
/// many cuts follow as big-endian `u16`s (each taken modulo the stream's length + 1), the rest
/// is the stream.
#[must_use]
pub fn split_input(data: &[u8]) -> (Vec<usize>, &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return (Vec::new(), data);
    };
    let n = usize::from(first & 7).min(rest.len() / 2);
    let (cuts, stream) = rest.split_at(2 * n);
    let cuts = cuts
        .chunks_exact(2)
        .map(|c| usize::from(u16::from_be_bytes([c[0], c[1]])) % (stream.len() + 1))
        .collect();
    (cuts, stream)
}

/// `stream` in the pieces that `cuts` mark (empty pieces left out).
#[must_use]
pub fn chunks<'a>(stream: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(stream.len())).collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut from = 0;
    for c in cuts.into_iter().chain(std::iter::once(stream.len())) {
        if c > from {
            out.push(&stream[from..c]);
            from = c;
        }
    }
    out
}

/// The frame headers in `stream`, read one after the other (the reference of [`frames`]).
fn reference_heads(stream: &[u8]) -> (Vec<FrameHead>, bool) {
    let mut heads = Vec::new();
    let mut at = 0;
    while let Some(h) = FrameHead::parse(&stream[at..]) {
        heads.push(h);
        at += FRAME_HEADER_LEN + h.len as usize;
        if at >= stream.len() {
            return (heads, at == stream.len());
        }
    }
    (heads, at == stream.len())
}

/// The HTTP/2 frame scanner under any split of its input: `FrameScanner::feed` and
/// `feed_whole` find the same frame headers as a plain walk of the whole stream, the payload
/// parts handed with them are the stream's own octets, and the connection's `FrameGuard`
/// (both directions) takes the same octets without panicking.
pub fn frames(data: &[u8]) {
    let (cuts, stream) = split_input(data);
    let pieces = chunks(stream, &cuts);
    let (want, ends_at_boundary) = reference_heads(stream);

    let mut scanner = FrameScanner::new(0);
    let mut got = Vec::new();
    let mut at = 0;
    for piece in &pieces {
        scanner.feed(piece, |h, payload| {
            assert!(
                payload.len() <= h.len as usize,
                "payload part past the frame"
            );
            got.push(h);
        });
        at += piece.len();
    }
    assert_eq!(at, stream.len());
    assert_eq!(got, want, "split reads found other frame headers");
    assert_eq!(scanner.at_boundary(), ends_at_boundary || stream.is_empty());

    // feed_whole never keeps part of a header: the caller feeds the rest again.
    let mut scanner = FrameScanner::new(0);
    let mut got = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    for piece in &pieces {
        pending.extend_from_slice(piece);
        let n = scanner.feed_whole(&pending, |h, _| {
            got.push(h);
            std::ops::ControlFlow::Continue(())
        });
        assert!(n <= pending.len());
        pending.drain(..n);
        assert!(
            pending.len() < FRAME_HEADER_LEN,
            "a whole header left unread"
        );
    }
    assert_eq!(got, want, "whole-header reads found other frame headers");

    // The guard of a connection: the client's octets after a preface, h2's as they are.
    let mut guard = FrameGuard::new(Some(std::time::Duration::from_secs(300)));
    let _ = guard.read(PREFACE);
    let mut handshaken = false;
    for piece in &pieces {
        let _ = guard.read(piece);
        guard.wrote(piece);
        assert!(
            !handshaken || guard.handshaken(),
            "the handshake came undone"
        );
        handshaken = guard.handshaken();
    }
    if let Some((_, debug)) = guard.h2_goaway() {
        assert!(debug.len() <= 64);
    }
}

/// An `AsyncRead` that hands out its pieces one read at a time, never pending.
struct Pieces<'a> {
    pieces: std::vec::IntoIter<&'a [u8]>,
    current: &'a [u8],
}

impl AsyncRead for Pieces<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.current.is_empty() {
            self.current = self.pieces.next().unwrap_or_default();
        }
        let n = self.current.len().min(buf.remaining());
        buf.put_slice(&self.current[..n]);
        self.current = &self.current[n..];
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for Pieces<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// What the server's connection wrapper hands h2 when the client sends `PREFACE` + `stream`
/// in the pieces `cuts` mark, read into a buffer of `read_buf` octets: the octets after the
/// repair, or `None` when a frame policy cut the connection.
///
/// # Panics
/// When the wrapper gives h2 more or fewer octets than the client sent, or keeps reading
/// without progress.
#[must_use]
pub fn repair_stream(stream: &[u8], cuts: &[usize], read_buf: usize) -> Option<Vec<u8>> {
    let mut input = PREFACE.to_vec();
    input.extend_from_slice(stream);
    let cuts: Vec<usize> = cuts.iter().map(|c| c + PREFACE.len()).collect();
    let pieces = chunks(&input, &cuts);
    let io = Pieces {
        pieces: pieces.into_iter(),
        current: &[],
    };
    let mut conn = Guarded::new(
        io,
        None,
        ConnLimits::default(),
        None,
        None,
        Repair::new(true, None),
        tokio::time::Instant::now(),
    );
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::with_capacity(input.len());
    let mut buf = vec![0u8; read_buf.clamp(1, 1 << 16)];
    let mut empty_reads = 0;
    loop {
        let mut rb = ReadBuf::new(&mut buf);
        match Pin::new(&mut conn).poll_read(&mut cx, &mut rb) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(_)) => return None,
            Poll::Pending => panic!("a connection whose octets are all there is pending"),
        }
        if rb.filled().is_empty() {
            // EOF of the client (the held octets, if any, came before it).
            empty_reads += 1;
            if empty_reads > 2 {
                break;
            }
            continue;
        }
        out.extend_from_slice(rb.filled());
        assert!(
            out.len() <= input.len(),
            "h2 got octets the client never sent"
        );
        assert!(
            out.len() < input.len() || empty_reads == 0,
            "reads after the end"
        );
    }
    assert_eq!(out.len(), input.len(), "octets lost by the repair");
    assert_eq!(out[..PREFACE.len()], PREFACE[..], "the preface was changed");
    Some(out.split_off(PREFACE.len()))
}

/// The `:authority` repair of a connection: under any split of the client's octets and any
/// read size of h2, the repair hands h2 as many octets as the client sent, the same octets
/// whatever the split, and a stream it repaired needs no second repair.
pub fn authority_repair(data: &[u8]) {
    let (cuts, stream) = split_input(data);
    let whole = repair_stream(stream, &[], 1 << 16);
    let split = repair_stream(stream, &cuts, 1 + cuts.first().copied().unwrap_or(0) % 4096);
    assert_eq!(whole, split, "the repair depends on how the octets arrive");
    if let Some(repaired) = whole {
        let changed = repaired != stream;
        let again = repair_stream(&repaired, &[], 1 << 16);
        assert_eq!(
            again.as_ref(),
            Some(&repaired),
            "a repaired stream was changed again (changed the first time: {changed})"
        );
    }
}

/// The HPACK walk over a connection's header blocks, and the same-length repair of a value.
///
/// `data`: blocks, each one octet of length and that many octets. The walk keeps a block's
/// length, and walking the repaired blocks again with a fresh table repairs nothing and
/// changes nothing (so the repair kept the client's and h2's tables in step); `hpack::repair`
/// of any value is a valid authority of the same length and the same Huffman code lengths;
/// a Huffman string that decodes re-encodes to itself.
pub fn hpack_walk(data: &[u8]) {
    let mut blocks = Vec::new();
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len).min(tail.len());
        blocks.push(tail[..n].to_vec());
        rest = &tail[n..];
    }
    let mut walker = Walker::default();
    let mut repaired = Vec::new();
    for block in &blocks {
        let mut b = block.clone();
        let result = walker.walk(&mut b);
        let ok = result.is_ok();
        if let Ok(report) = &result {
            assert!(report.repaired == 0 || report.saw_invalid);
            assert!(report.first_repair.is_some() == (report.repaired > 0));
        }
        repaired.push((b, ok));
        if !ok {
            break;
        }
    }
    let mut walker = Walker::default();
    for (block, ok) in &repaired {
        let mut b = block.clone();
        let result = walker.walk(&mut b);
        assert_eq!(&b, block, "a repaired block was repaired again");
        assert_eq!(result.is_ok(), *ok, "the repaired block walks otherwise");
        if let Ok(report) = result {
            assert_eq!(report.repaired, 0);
        }
    }

    for value in data.split(|&b| b == b'\n') {
        if let Some(r) = hpack::repair(value) {
            assert_eq!(r.len(), value.len());
            assert!(hpack::is_valid(&r));
            assert_eq!(huffman::encoded_len(&r), huffman::encoded_len(value));
            for (a, b) in value.iter().zip(&r) {
                assert_eq!(huffman::code_len(*a), huffman::code_len(*b));
            }
        }
        let mut decoded = Vec::new();
        if huffman::decode(value, |b| decoded.push(b)).is_ok() {
            assert_eq!(huffman::encoded_len(&decoded), value.len());
            let mut again = vec![0u8; value.len()];
            huffman::encode_into(&decoded, &mut again);
            assert_eq!(
                again, value,
                "Huffman decode then encode is not the identity"
            );
        }
    }
}

/// The server config loader on any text in every format: errors are fine, panics are not.
pub fn server_conf(data: &[u8]) {
    use zrpc_core::conf::{Format, from_str_with_env};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env = |name: &str| (!name.len().is_multiple_of(3)).then(|| name.to_ascii_lowercase());
    for format in [Format::Yaml, Format::Json, Format::Toml] {
        let _ = from_str_with_env::<crate::RpcServerConf, _>(text, format, "fuzz.yaml", env);
    }
}

/// Binary metadata (`-bin` keys, base64) as handlers see it through tonic: any header value
/// decodes or fails without a panic, padded and unpadded base64 decode alike, and bytes sent
/// as binary metadata come back as they were.
pub fn binary_metadata(data: &[u8]) {
    use tonic::metadata::{BinaryMetadataValue, MetadataMap};
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_bytes(data) {
        headers.insert("x-fuzz-bin", v);
    }
    let map = MetadataMap::from_headers(headers);
    let decoded = map.get_bin("x-fuzz-bin").map(|v| v.to_bytes());
    if let Some(Ok(bytes)) = &decoded {
        let trimmed = data.strip_suffix(b"==").or_else(|| data.strip_suffix(b"="));
        if let Some(unpadded) = trimmed
            && let Ok(hv) = http::HeaderValue::from_bytes(unpadded)
        {
            let mut h = http::HeaderMap::new();
            h.insert("x-fuzz-bin", hv);
            let m = MetadataMap::from_headers(h);
            if let Some(Ok(again)) = m.get_bin("x-fuzz-bin").map(|v| v.to_bytes()) {
                assert_eq!(&again, bytes, "padded and unpadded base64 differ");
            }
        }
    }
    let sent = BinaryMetadataValue::from_bytes(data);
    let mut map = MetadataMap::new();
    map.insert_bin("x-fuzz-bin", sent);
    let headers = map.into_headers();
    let map = MetadataMap::from_headers(headers);
    let back = map.get_bin("x-fuzz-bin").and_then(|v| v.to_bytes().ok());
    assert_eq!(back.as_deref(), Some(data), "binary metadata changed");
}
