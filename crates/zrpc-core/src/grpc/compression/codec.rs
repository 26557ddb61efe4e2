//! One message compressed or decompressed whole, framed for the wire: the algorithms are
//! flate2's (gzip, zlib) and zstd's, the crates tonic's own compression uses.

#![cfg_attr(
    not(any(feature = "gzip", feature = "deflate", feature = "zstd")),
    allow(unused_imports, unused_variables, unused_mut, unreachable_code)
)]

use std::io::{self, Read, Write};

use bytes::{BufMut, Bytes, BytesMut};

use super::frame::{PREFIX_LEN, prefix};
use super::{CodecError, Encoding};
use crate::grpc::code;

/// `payload` (a message received with the compressed flag) decompressed and framed as an
/// uncompressed message. At most `limit + 1` octets are ever inflated: a message past `limit`
/// is `ResourceExhausted`, a payload that does not decode `Internal`.
pub(super) fn decompress(
    encoding: Encoding,
    payload: &[u8],
    limit: usize,
) -> Result<Bytes, CodecError> {
    let bound = limit as u64 + 1;
    let mut out = BytesMut::with_capacity(PREFIX_LEN + payload.len().saturating_mul(2).min(limit));
    out.put_slice(&prefix(0, 0));
    let mut sink = (&mut out).writer();
    let copied: io::Result<u64> = match encoding {
        #[cfg(feature = "gzip")]
        Encoding::Gzip => io::copy(
            // every member, as Go's gzip reader reads them
            &mut flate2::read::MultiGzDecoder::new(payload).take(bound),
            &mut sink,
        ),
        #[cfg(feature = "deflate")]
        Encoding::Deflate => io::copy(
            &mut flate2::read::ZlibDecoder::new(payload).take(bound),
            &mut sink,
        ),
        #[cfg(feature = "zstd")]
        Encoding::Zstd => {
            zstd_decoder(payload, limit).and_then(|d| io::copy(&mut d.take(bound), &mut sink))
        }
        #[allow(unreachable_patterns)]
        other => Err(io::Error::other(format!(
            "this build has no {other} (the `{}` cargo feature)",
            other.feature()
        ))),
    };
    let n = copied.map_err(|e| {
        CodecError::new(
            code::INTERNAL,
            format!("failed to decompress a {encoding} message: {e}"),
        )
    })?;
    let len = match u32::try_from(n) {
        Ok(len) if n <= limit as u64 => len,
        _ => {
            return Err(CodecError::new(
                code::RESOURCE_EXHAUSTED,
                crate::grpc::framing::too_large_decompressed(limit),
            ));
        }
    };
    out[..PREFIX_LEN].copy_from_slice(&prefix(0, len));
    Ok(out.freeze())
}

/// A zstd decoder whose window (the memory a frame can ask for) is bounded by the message
/// limit, and never below 8 MiB (what zstd's encoders use up to level 19).
#[cfg(feature = "zstd")]
fn zstd_decoder(payload: &[u8], limit: usize) -> io::Result<impl Read + '_> {
    let log = (usize::BITS - limit.saturating_sub(1).leading_zeros()).clamp(23, 31);
    let mut d = zstd::stream::read::Decoder::with_buffer(payload)?;
    d.window_log_max(log)?;
    Ok(d)
}

/// `payload` compressed with `encoding` and framed as a compressed message.
pub(super) fn compress(encoding: Encoding, payload: &[u8]) -> io::Result<Bytes> {
    let mut out = BytesMut::with_capacity(PREFIX_LEN + payload.len() / 2 + 64);
    out.put_slice(&prefix(1, 0));
    let sink = out.writer();
    let sink: bytes::buf::Writer<BytesMut> = match encoding {
        #[cfg(feature = "gzip")]
        Encoding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(sink, flate2::Compression::default());
            e.write_all(payload)?;
            e.finish()?
        }
        #[cfg(feature = "deflate")]
        Encoding::Deflate => {
            let mut e = flate2::write::ZlibEncoder::new(sink, flate2::Compression::default());
            e.write_all(payload)?;
            e.finish()?
        }
        #[cfg(feature = "zstd")]
        Encoding::Zstd => {
            let mut e = zstd::stream::write::Encoder::new(sink, zstd::DEFAULT_COMPRESSION_LEVEL)?;
            // the window then fits the message, whatever the receiver's window limit
            e.set_pledged_src_size(Some(payload.len() as u64))?;
            e.write_all(payload)?;
            e.finish()?
        }
        #[allow(unreachable_patterns)]
        other => return Err(io::Error::other(format!("this build has no {other}"))),
    };
    let mut out = sink.into_inner();
    let len = u32::try_from(out.len() - PREFIX_LEN)
        .map_err(|_| io::Error::other("compressed message past 4 GiB"))?;
    out[..PREFIX_LEN].copy_from_slice(&prefix(1, len));
    Ok(out.freeze())
}
