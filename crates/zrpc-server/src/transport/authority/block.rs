//! A header block (HEADERS plus its CONTINUATIONs, RFC 9113 §4.3) held whole in a buffer:
//! its fragments found (padding and priority skipped) and walked by [`Walker`], which repairs
//! them in place.

use super::hpack::{BlockReport, Walker};
use crate::transport::frames::{CONTINUATION, FRAME_HEADER_LEN, FrameHead, HEADERS};

const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The largest header block (frames included) held back for inspection. A larger one is
/// passed on untouched and inspection of the connection stops (it is far above the 16 KiB
/// frame size `h2` accepts by default; such requests are not go-zero's).
pub(crate) const MAX_BLOCK: usize = 64 * 1024;

/// What [`walk`] made of the octets it was given.
#[derive(Debug)]
pub(crate) enum Block {
    /// The block is not all there yet.
    Incomplete,
    /// Not a header block this module can follow (too large, malformed, or an HPACK
    /// representation the walker refuses): `h2` judges it.
    Unfollowable,
    /// The block took `len` octets and was walked (and repaired, as `report` says).
    Done { len: usize, report: BlockReport },
}

/// Walks the header block starting at `buf[0]` (a HEADERS frame header), if it is complete.
pub(crate) fn walk(buf: &mut [u8], walker: &mut Walker) -> Block {
    // The fragments' places: (start, end) in `buf`, padding and priority excluded. Only a
    // block continued in CONTINUATION frames allocates.
    let mut fragments: Vec<(usize, usize)> = Vec::new();
    let mut first = (0, 0);
    let mut at = 0;
    let end = loop {
        let Some(head) = FrameHead::parse(&buf[at..]) else {
            return Block::Incomplete;
        };
        let expected = if at == 0 { HEADERS } else { CONTINUATION };
        if head.kind != expected {
            return Block::Unfollowable;
        }
        let frame_end = at + FRAME_HEADER_LEN + head.len as usize;
        if frame_end > MAX_BLOCK {
            return Block::Unfollowable;
        }
        if frame_end > buf.len() {
            return Block::Incomplete;
        }
        let mut start = at + FRAME_HEADER_LEN;
        let mut stop = frame_end;
        if head.kind == HEADERS {
            if head.flags & PADDED != 0 {
                let Some(&pad) = buf.get(start) else {
                    return Block::Unfollowable;
                };
                start += 1;
                stop = match stop.checked_sub(pad as usize) {
                    Some(s) => s,
                    None => return Block::Unfollowable,
                };
            }
            if head.flags & PRIORITY != 0 {
                start += 5;
            }
            if start > stop {
                return Block::Unfollowable;
            }
        }
        if at == 0 {
            first = (start, stop);
        } else {
            if fragments.is_empty() {
                fragments.push(first);
            }
            fragments.push((start, stop));
        }
        at = frame_end;
        if head.flags & END_HEADERS != 0 {
            break frame_end;
        }
    };
    let result = if fragments.is_empty() {
        walker.walk(&mut buf[first.0..first.1])
    } else {
        // A string may straddle frames: walk a contiguous copy, then write it back.
        let mut block = Vec::with_capacity(end);
        for &(s, e) in &fragments {
            block.extend_from_slice(&buf[s..e]);
        }
        let result = walker.walk(&mut block);
        let mut from = 0;
        for (s, e) in fragments {
            buf[s..e].copy_from_slice(&block[from..from + (e - s)]);
            from += e - s;
        }
        result
    };
    match result {
        Ok(report) => Block::Done { len: end, report },
        Err(_) => Block::Unfollowable,
    }
}
