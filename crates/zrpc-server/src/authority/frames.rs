//! The client-to-server byte stream of one HTTP/2 connection, read frame by frame (RFC 9113 §4):
//! the preface and every frame but header blocks pass at once; a header block (HEADERS plus its
//! CONTINUATIONs) is held until complete, walked by [`Walker`] and released, repaired or not.
//!
//! Sans-IO: [`Inspector::process`] gets the bytes not yet released and says how many of them
//! may go to `h2` now. Splitting the input anywhere gives the same output (a property test
//! checks it).

use super::hpack::{BlockReport, Walker};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The largest header block (frames included) held back for inspection. A larger one is
/// passed on untouched and inspection of the connection stops (it is far above the 16 KiB
/// frame size `h2` accepts by default; such requests are not go-zero's).
pub(crate) const MAX_BLOCK: usize = 64 * 1024;

/// Whether to keep inspecting the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Keep inspecting: the connection needed a repair, or no header block has been seen.
    Inspect,
    /// Stop inspecting: release everything and pass the rest of the connection straight on.
    PassThrough,
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// So many preface octets have matched.
    Preface(usize),
    /// At a frame header.
    Head,
    /// Inside a frame payload that passes untouched; so many octets remain.
    Skip(usize),
}

/// One connection's frame reader.
#[derive(Debug)]
pub(crate) struct Inspector {
    state: State,
    walker: Walker,
    blocks: u64,
    repairing: bool,
    /// The first repair made on this connection, taken by the IO adapter to log and record it.
    pub(crate) first_repair: Option<(String, String)>,
}

impl Default for Inspector {
    fn default() -> Self {
        Self {
            state: State::Preface(0),
            walker: Walker::default(),
            blocks: 0,
            repairing: false,
            first_repair: None,
        }
    }
}

impl Inspector {
    /// Processes `buf` (the octets not yet released, oldest first), repairing complete header
    /// blocks in place. Returns how many leading octets may be released now.
    pub(crate) fn process(&mut self, buf: &mut [u8]) -> (usize, Verdict) {
        let mut pos = 0;
        loop {
            let avail = buf.len() - pos;
            match self.state {
                State::Preface(matched) => {
                    let take = avail.min(PREFACE.len() - matched);
                    if buf[pos..pos + take] != PREFACE[matched..matched + take] {
                        // Not HTTP/2 with prior knowledge: h2 will refuse it.
                        return (buf.len(), Verdict::PassThrough);
                    }
                    pos += take;
                    if matched + take < PREFACE.len() {
                        self.state = State::Preface(matched + take);
                        return (pos, Verdict::Inspect);
                    }
                    self.state = State::Head;
                }
                State::Skip(remaining) => {
                    let take = avail.min(remaining);
                    pos += take;
                    if take < remaining {
                        self.state = State::Skip(remaining - take);
                        return (pos, Verdict::Inspect);
                    }
                    self.state = State::Head;
                }
                State::Head => {
                    let Some(head) = FrameHead::parse(&buf[pos..]) else {
                        return (pos, Verdict::Inspect);
                    };
                    match head.kind {
                        HEADERS => match self.header_block(&mut buf[pos..]) {
                            Block::Incomplete => return (pos, Verdict::Inspect),
                            Block::Unfollowable => return (buf.len(), Verdict::PassThrough),
                            Block::Done { len, report } => {
                                pos += len;
                                if self.after_block(&report) == Verdict::PassThrough {
                                    return (buf.len(), Verdict::PassThrough);
                                }
                            }
                        },
                        // A CONTINUATION outside a header block is a protocol error for h2.
                        CONTINUATION => return (buf.len(), Verdict::PassThrough),
                        _ => {
                            pos += FRAME_HEADER_LEN;
                            self.state = State::Skip(head.len);
                        }
                    }
                }
            }
        }
    }

    /// Collects the header block starting at `buf[0]` (a HEADERS frame header) and walks it.
    fn header_block(&mut self, buf: &mut [u8]) -> Block {
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
            let frame_end = at + FRAME_HEADER_LEN + head.len;
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
            self.walker.walk(&mut buf[first.0..first.1])
        } else {
            // A string may straddle frames: walk a contiguous copy, then write it back.
            let mut block = Vec::with_capacity(end);
            for &(s, e) in &fragments {
                block.extend_from_slice(&buf[s..e]);
            }
            let result = self.walker.walk(&mut block);
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

    /// Decides, after a header block, whether the connection still needs inspecting.
    fn after_block(&mut self, report: &BlockReport) -> Verdict {
        self.blocks += 1;
        if report.repaired > 0 {
            self.repairing = true;
            if self.first_repair.is_none() {
                self.first_repair.clone_from(&report.first_repair);
            }
        }
        if self.repairing {
            Verdict::Inspect
        } else {
            // The first header block carried a valid authority (or none, or one that cannot be
            // repaired): this client needs nothing from us.
            Verdict::PassThrough
        }
    }
}

enum Block {
    Incomplete,
    Unfollowable,
    Done { len: usize, report: BlockReport },
}

struct FrameHead {
    len: usize,
    kind: u8,
    flags: u8,
}

impl FrameHead {
    fn parse(buf: &[u8]) -> Option<FrameHead> {
        let h = buf.get(..FRAME_HEADER_LEN)?;
        Some(FrameHead {
            len: (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]),
            kind: h[3],
            flags: h[4],
        })
    }
}
