use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame};

use super::frame::prefix;
use super::*;
use crate::grpc::code;

/// A body replaying scripted frames.
struct Scripted(VecDeque<Frame<Bytes>>);

impl Body for Scripted {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// `wire` cut into chunks of `chunk` octets, then `trailers` when given.
fn chunked(wire: &[u8], chunk: usize, trailers: Option<HeaderMap>) -> Scripted {
    let mut frames: VecDeque<_> = wire
        .chunks(chunk.max(1))
        .map(|c| Frame::data(Bytes::copy_from_slice(c)))
        .collect();
    frames.extend(trailers.map(Frame::trailers));
    Scripted(frames)
}

/// Every frame of `body` (all are ready), data and trailers apart; the error ends it.
fn drain<B: Body<Data = Bytes> + Unpin>(
    mut body: B,
) -> (Vec<Bytes>, Option<HeaderMap>, Option<B::Error>) {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let (mut data, mut trailers) = (Vec::new(), None);
    loop {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(f))) => match f.into_data() {
                Ok(d) => data.push(d),
                Err(f) => trailers = f.into_trailers().ok(),
            },
            Poll::Ready(Some(Err(e))) => return (data, trailers, Some(e)),
            Poll::Ready(None) => return (data, trailers, None),
            Poll::Pending => panic!("scripted bodies are always ready"),
        }
    }
}

fn framed(flag: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = prefix(flag, payload.len() as u32).to_vec();
    v.extend_from_slice(payload);
    v
}

/// The messages of a wire, as (flag, payload).
fn messages(mut wire: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while !wire.is_empty() {
        let (flag, len) = frame::peek(wire).unwrap();
        let end = 5 + len as usize;
        out.push((flag, wire[5..end].to_vec()));
        wire = &wire[end..];
    }
    out
}

fn concat(parts: &[Bytes]) -> Vec<u8> {
    parts.iter().flat_map(|b| b.iter().copied()).collect()
}

/// Compressible payloads of several sizes.
fn payloads() -> Vec<Vec<u8>> {
    [0usize, 10, 1023, 1024, 40_000, 300_000]
        .iter()
        .map(|n| (0..*n).map(|i| b"zrpc compresses "[i % 16]).collect())
        .collect()
}

#[test]
fn settings_and_accept_headers_parse() {
    assert_eq!(parse_setting("gzip"), Ok(Some(Encoding::Gzip)));
    assert_eq!(parse_setting("identity"), Ok(None));
    assert_eq!(parse_setting(""), Ok(None));
    let e = parse_setting("br").unwrap_err().to_string();
    assert!(
        e.contains("\"br\"") && e.contains("gzip, deflate, zstd"),
        "{e}"
    );
    assert_eq!(Encoding::from_name(b"GZIP"), None, "names are exact");

    let mut h = HeaderMap::new();
    h.append(GRPC_ACCEPT_ENCODING, "identity, gzip,br".parse().unwrap());
    h.append(GRPC_ACCEPT_ENCODING, "zstd".parse().unwrap());
    let set = Encodings::from_accept_header(&h);
    assert_eq!(
        set.iter().collect::<Vec<_>>(),
        [Encoding::Gzip, Encoding::Zstd]
    );
    assert_eq!(set.header_value(), "gzip,zstd");
    assert_eq!(Encodings::none().header_value(), "identity");
    assert_eq!(
        Encodings::built().iter().collect::<Vec<_>>(),
        Encoding::ALL
            .into_iter()
            .filter(|e| e.is_built())
            .collect::<Vec<_>>()
    );
}

#[test]
fn messages_round_trip_through_compress_and_decompress() {
    let wire: Vec<u8> = payloads().iter().flat_map(|p| framed(0, p)).collect();
    for encoding in Encodings::built().iter() {
        for chunk in [1, 7, 4096, wire.len()] {
            let sent = Compress::new(chunked(&wire, chunk, None), encoding).min_size(1024);
            let (parts, _, err) = drain(sent);
            assert!(err.is_none());
            let on_wire = concat(&parts);
            let flags: Vec<u8> = messages(&on_wire).iter().map(|m| m.0).collect();
            assert_eq!(flags, [0, 0, 0, 1, 1, 1], "{encoding} by {chunk}");
            assert!(
                on_wire.len() < wire.len() / 10,
                "{encoding}: {}",
                on_wire.len()
            );

            let received = Decompress::new(chunked(&on_wire, chunk, None), encoding);
            let (parts, _, err) = drain(received);
            assert!(err.is_none(), "{encoding} by {chunk}");
            assert_eq!(concat(&parts), wire, "{encoding} by {chunk}");
        }
    }
}

#[test]
fn uncompressed_messages_pass_through_without_a_copy() {
    let wire = Bytes::from([framed(0, b"one"), framed(0, b"two")].concat());
    let body = Scripted(VecDeque::from([Frame::data(wire.clone())]));
    let (parts, _, _) = drain(Decompress::new(body, Encoding::Gzip));
    assert_eq!(parts.len(), 2, "one frame per message");
    assert_eq!(
        parts[0].as_ptr(),
        wire.as_ptr(),
        "a slice of the received chunk"
    );
    let body = Scripted(VecDeque::from([Frame::data(wire.clone())]));
    let (parts, _, _) = drain(Compress::new(body, Encoding::Gzip));
    assert_eq!(parts[1].as_ptr(), wire[8..].as_ptr());
}

#[cfg(feature = "gzip")]
fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[cfg(feature = "gzip")]
fn codec_err(e: Option<DecompressError<Infallible>>) -> CodecError {
    match e {
        Some(DecompressError::Codec(c)) => c,
        other => panic!("expected a codec error, got {other:?}"),
    }
}

#[cfg(feature = "gzip")]
#[test]
fn a_zip_bomb_is_refused_with_resource_exhausted() {
    use std::io::Write;
    // 64 MiB of zeros: about 64 KiB compressed, written in pieces
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        e.write_all(&zeros).unwrap();
    }
    let bomb = e.finish().unwrap();
    assert!(bomb.len() < 128 << 10, "{}", bomb.len());
    let body = chunked(&framed(1, &bomb), 16 * 1024, None);
    let (parts, _, err) = drain(Decompress::new(body, Encoding::Gzip).limit(4 << 20));
    assert!(parts.is_empty());
    let err = codec_err(err);
    assert_eq!(err.code(), code::RESOURCE_EXHAUSTED, "{err}");
    assert_eq!(
        err.message(),
        "grpc: received message after decompression larger than max 4194304",
        "grpc-go's words"
    );

    // exactly at the limit it is taken
    let body = chunked(&framed(1, &gzip(&zeros)), 1 << 20, None);
    let (parts, _, err) = drain(Decompress::new(body, Encoding::Gzip).limit(1 << 20));
    assert!(err.is_none());
    assert_eq!(concat(&parts), framed(0, &zeros));
}

#[cfg(feature = "gzip")]
#[test]
fn bad_messages_end_the_body_with_a_status() {
    let cases: [(Vec<u8>, i32, &str); 4] = [
        (
            framed(1, &[7; 100]),
            code::RESOURCE_EXHAUSTED,
            "grpc: received message larger than max (100 vs. 64)",
        ),
        (
            framed(1, b"not gzip"),
            code::INTERNAL,
            "failed to decompress a gzip",
        ),
        (framed(2, b"x"), code::INTERNAL, "compressed-flag 2"),
        (
            framed(1, &gzip(b"cut"))[..12].to_vec(),
            code::INTERNAL,
            "ended inside",
        ),
    ];
    for (wire, code, text) in cases {
        let body = chunked(&wire, 5, None);
        let (_, _, err) = drain(Decompress::new(body, Encoding::Gzip).limit(64));
        let err = codec_err(err);
        assert_eq!(err.code(), code, "{err}");
        assert!(err.message().contains(text), "{err}");
    }
}

#[cfg(feature = "gzip")]
#[test]
fn each_frame_ends_at_a_message_so_the_call_knows_how_the_last_one_arrived() {
    let wire = [
        framed(1, &gzip(b"first")),
        framed(0, b"second"),
        framed(1, &gzip(b"third")),
    ]
    .concat();
    let call = CallCompression::new();
    let mut body = Decompress::new(
        Scripted(VecDeque::from([Frame::data(Bytes::from(wire))])),
        Encoding::Gzip,
    )
    .record(Some(call.clone()));
    let mut cx = Context::from_waker(std::task::Waker::noop());
    assert_eq!(call.last_received_compressed(), None);
    for (payload, compressed) in [(&b"first"[..], true), (b"second", false), (b"third", true)] {
        let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut body).poll_frame(&mut cx) else {
            panic!("a frame")
        };
        assert_eq!(frame.into_data().unwrap(), framed(0, payload));
        assert_eq!(call.last_received_compressed(), Some(compressed));
    }
}

#[cfg(feature = "gzip")]
#[test]
fn the_call_chooses_message_by_message_and_trailers_pass() {
    let wire = [
        framed(0, &[1; 10]),
        framed(0, &[2; 5000]),
        framed(0, &[3; 5000]),
    ]
    .concat();
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().unwrap());
    let call = CallCompression::new();
    call.compress_next(true);
    call.compress_next(false);
    let body = Compress::new(chunked(&wire, 3000, Some(trailers.clone())), Encoding::Gzip)
        .choices(Some(call.clone()));
    let (parts, got, _) = drain(body);
    let flags: Vec<u8> = messages(&concat(&parts)).iter().map(|m| m.0).collect();
    assert_eq!(flags, [1, 0, 1], "chosen, chosen, then by size");
    assert_eq!(got, Some(trailers));

    // a call sent uncompressed stays so; one chosen compressed compresses every size
    for (choice, expected) in [(None, [0, 0, 0]), (Some(Encoding::Gzip), [1, 1, 1])] {
        let body = Compress::new(chunked(&wire, 64, None), Encoding::Gzip)
            .choices(Some(CallCompression::send(choice)));
        let (parts, _, _) = drain(body);
        let flags: Vec<u8> = messages(&concat(&parts)).iter().map(|m| m.0).collect();
        assert_eq!(flags, expected, "{choice:?}");
    }
}

#[test]
fn an_encoding_this_build_lacks_is_refused_not_panicked_on() {
    for encoding in Encoding::ALL.into_iter().filter(|e| !e.is_built()) {
        let body = chunked(&framed(1, b"payload"), 64, None);
        let (_, _, err) = drain(Decompress::new(body, encoding));
        assert!(matches!(err, Some(DecompressError::Codec(c)) if c.code() == code::INTERNAL));
        let mut held = BytesMut::new();
        held.extend_from_slice(&framed(0, &[0; 2000]));
        let (parts, _, _) = drain(Compress::new(chunked(&held, 64, None), encoding));
        assert_eq!(concat(&parts), held.to_vec(), "sent uncompressed");
    }
}
