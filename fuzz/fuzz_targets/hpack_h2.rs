//! The `:authority` repair against h2's own HPACK decoder (its `unstable` codec, the decoder
//! zrpc's server runs): a connection's frames decoded as the client sent them and as the repair
//! hands them to h2 give the same frames and header lists, except `:authority` values that
//! `http::uri::Authority` refused and that became valid values of the same length.
//! Input: as `authority_repair` (cuts, then the frames after the preface).
#![no_main]

use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use futures_util::Stream;
use h2::frame::Frame;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

struct Wire<'a>(&'a [u8]);

impl AsyncRead for Wire<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self.0.len().min(buf.remaining());
        buf.put_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Wire<'_> {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// One frame as h2 decoded it: a HEADERS frame's authority apart, everything else as text.
#[derive(Debug, PartialEq)]
struct Decoded {
    authority: Option<String>,
    rest: String,
}

fn decode(stream: &[u8]) -> Vec<Decoded> {
    let mut codec: h2::Codec<Wire<'_>, bytes::Bytes> = h2::Codec::new(Wire(stream));
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    loop {
        match Pin::new(&mut codec).poll_next(&mut cx) {
            Poll::Ready(Some(Ok(Frame::Headers(h)))) => {
                let id = h.stream_id();
                let end = (h.is_end_headers(), h.is_end_stream());
                let (mut pseudo, fields) = h.into_parts();
                let authority = pseudo.authority.take().map(|a| a.to_string());
                out.push(Decoded {
                    authority,
                    rest: format!("{id:?} {end:?} {pseudo:?} {fields:?}"),
                });
            }
            Poll::Ready(Some(Ok(f))) => out.push(Decoded {
                authority: None,
                rest: format!("{f:?}"),
            }),
            Poll::Ready(Some(Err(e))) => {
                out.push(Decoded {
                    authority: None,
                    rest: format!("error {e:?}"),
                });
                break;
            }
            Poll::Ready(None) | Poll::Pending => break,
        }
        if out.len() > 4096 {
            break;
        }
    }
    out
}

fn valid(a: &str) -> bool {
    http::uri::Authority::try_from(a).is_ok()
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (cuts, stream) = zrpc_server::fuzzing::split_input(data);
    let Some(repaired) = zrpc_server::fuzzing::repair_stream(stream, &cuts, 4096) else {
        return;
    };
    let sent = decode(stream);
    let seen = decode(&repaired);
    assert_eq!(sent.len(), seen.len(), "h2 decodes another number of frames");
    for (a, b) in sent.iter().zip(&seen) {
        assert_eq!(a.rest, b.rest, "the repair changed more than :authority");
        if a.authority != b.authority {
            let (Some(x), Some(y)) = (&a.authority, &b.authority) else {
                panic!("an :authority appeared or vanished: {a:?} -> {b:?}");
            };
            assert!(!valid(x), "a valid :authority was rewritten: {x} -> {y}");
            assert!(valid(y), "a rewritten :authority is still invalid: {x} -> {y}");
            assert_eq!(x.len(), y.len());
        }
    }
});
