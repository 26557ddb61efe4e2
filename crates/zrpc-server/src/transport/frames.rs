//! The one reader of the client's HTTP/2 frames below h2, and the frame policies h2 offers no
//! hook for.
//!
//! [`FrameScanner`] follows the frame headers of one direction of a connection, octets fed in
//! any split, payloads skipped unread. [`FrameGuard`] runs one over what the client sends and
//! one over what h2 writes back, in [`Guarded`](super::conn::Guarded). The client's octets are
//! scanned once, as they are read, for three users:
//!
//! - the **handshake deadline**: [`FrameGuard::handshaken`] once the preface and a whole first
//!   frame are in;
//! - the **frame policies** below;
//! - the **`:authority` repair** ([`Repair`](crate::transport::authority::Repair)): while it watches the
//!   connection, [`FrameGuard::read_to_block`] stops before each header block, which the repair
//!   holds until complete, repairs in place and hands back to [`FrameGuard::read`].
//!
//! The policies:
//!
//! - **Ping floods**: grpc-go's keepalive `EnforcementPolicy` ([`pings`](super::pings)).
//! - **Control-frame and reset floods**: SETTINGS, WINDOW_UPDATE and PRIORITY frames cost the
//!   server work but move no call forward, and a stream the client resets (RST_STREAM) costs
//!   the work of accepting it; h2 answers them all (its own rapid-reset guard only counts
//!   streams reset before hyper accepts them, which hyper does at once). Each such frame
//!   spends one credit of a per-connection [`FloodBudget`]; the server's work for the client
//!   earns credits back (a DATA frame sent: 1, a call finished: 2), up to the starting
//!   [`FLOOD_CREDITS`]. A connection out of credit ends with GOAWAY `ENHANCE_YOUR_CALM`
//!   `too_many_resets` or `too_many_control_frames`. A polite client never runs out: it sends
//!   a few SETTINGS per connection, WINDOW_UPDATEs for data it was sent, and resets fewer
//!   calls than it completes; a client that cancels more than two of three calls without
//!   pause is cut after about a thousand (Envoy cuts at half of its streams).
//!
//! zrpc writes the GOAWAY itself, at a frame boundary of h2's outgoing octets, then fails the
//! connection's read so that hyper drops it. When h2 is in the middle of writing a frame at
//! that moment, the GOAWAY cannot be interleaved safely and the connection is closed without
//! it. Cost: a few comparisons per frame header read or written; nothing per octet of
//! payload.

use std::ops::ControlFlow;
use std::time::Duration;

use tokio::time::Instant;

use super::pings::PingPolicy;

/// HTTP/2 frame header (RFC 9113 §4.1).
pub(crate) const FRAME_HEADER_LEN: usize = 9;
/// Client connection preface (RFC 9113 §3.4), skipped by the read side.
pub(crate) const PREFACE_LEN: u32 = 24;

const DATA: u8 = 0x0;
pub(crate) const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
pub(crate) const CONTINUATION: u8 = 0x9;
const FLAG_ACK: u8 = 0x1;
const FLAG_END_STREAM: u8 = 0x1;
/// RST_STREAM's error code when h2 refuses a stream past `MaxConcurrentStreams`.
const REFUSED_STREAM: [u8; 4] = [0, 0, 0, 0x7];

/// Credits a connection starts with, and the most it can hold (see the module docs): room
/// for a burst of a thousand cancelled calls or control frames before any work is done.
pub(crate) const FLOOD_CREDITS: u32 = 1000;

/// A frame header (RFC 9113 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHead {
    /// Payload length.
    pub(crate) len: u32,
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
}

impl FrameHead {
    /// The frame header at the start of `buf`, if it is whole there.
    pub(crate) fn parse(buf: &[u8]) -> Option<FrameHead> {
        buf.first_chunk().map(FrameHead::from_bytes)
    }

    fn from_bytes(h: &[u8; FRAME_HEADER_LEN]) -> FrameHead {
        FrameHead {
            len: u32::from_be_bytes([0, h[0], h[1], h[2]]),
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        }
    }
}

/// Follows the frame headers of one direction of an HTTP/2 connection, octets fed in any
/// split; payloads are skipped without being looked at.
#[derive(Debug, Clone)]
pub(crate) struct FrameScanner {
    header: [u8; FRAME_HEADER_LEN],
    have: u8,
    /// Payload octets still to skip.
    skip: u32,
}

impl FrameScanner {
    /// A scanner that first skips `skip` octets (the client preface on the read side).
    pub(crate) fn new(skip: u32) -> Self {
        FrameScanner {
            header: [0; FRAME_HEADER_LEN],
            have: 0,
            skip,
        }
    }

    /// True between two frames (no header or payload half-seen).
    pub(crate) fn at_boundary(&self) -> bool {
        self.have == 0 && self.skip == 0
    }

    /// Feeds octets; calls `on_frame` for each frame header completed by them, with the part
    /// of its payload that is in `data` (possibly less than all of it).
    #[inline]
    pub(crate) fn feed(&mut self, data: &[u8], mut on_frame: impl FnMut(FrameHead, &[u8])) {
        self.scan(data, false, |f, payload| {
            on_frame(f, payload);
            ControlFlow::Continue(())
        });
    }

    /// Like [`feed`](Self::feed), but stops before a frame whose header `on_frame` breaks on,
    /// and before a frame header that is not whole in `data` (never keeping part of one);
    /// returns how many octets were consumed. The octets from there on are the caller's to
    /// feed again. Only for a scanner that [`feed`](Self::feed) has not left inside a header.
    #[inline]
    pub(crate) fn feed_whole(
        &mut self,
        data: &[u8],
        on_frame: impl FnMut(FrameHead, &[u8]) -> ControlFlow<()>,
    ) -> usize {
        debug_assert_eq!(self.have, 0, "feed_whole inside a frame header");
        self.scan(data, true, on_frame)
    }

    #[inline]
    fn scan(
        &mut self,
        data: &[u8],
        whole: bool,
        mut on_frame: impl FnMut(FrameHead, &[u8]) -> ControlFlow<()>,
    ) -> usize {
        let mut rest = data;
        loop {
            if self.skip > 0 {
                if rest.len() <= self.skip as usize {
                    self.skip -= rest.len() as u32;
                    return data.len();
                }
                rest = &rest[self.skip as usize..];
                self.skip = 0;
            }
            // Fast path: a whole header in `data` (nearly always), read in place.
            let (h, after) = match (self.have, rest.split_first_chunk::<FRAME_HEADER_LEN>()) {
                (0, Some((h, after))) => (*h, after),
                _ if rest.is_empty() || whole => return data.len() - rest.len(),
                _ => {
                    let have = usize::from(self.have);
                    let n = (FRAME_HEADER_LEN - have).min(rest.len());
                    self.header[have..have + n].copy_from_slice(&rest[..n]);
                    if have + n < FRAME_HEADER_LEN {
                        self.have = (have + n) as u8;
                        return data.len();
                    }
                    self.have = 0;
                    (self.header, &rest[n..])
                }
            };
            let head = FrameHead::from_bytes(&h);
            let payload = &after[..after.len().min(head.len as usize)];
            if on_frame(head, payload).is_break() {
                return data.len() - rest.len();
            }
            rest = after;
            self.skip = head.len;
        }
    }
}

/// Credits for frames that move no call forward (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct FloodBudget {
    credits: u32,
}

impl Default for FloodBudget {
    fn default() -> Self {
        FloodBudget {
            credits: FLOOD_CREDITS,
        }
    }
}

impl FloodBudget {
    /// Spends one credit; false when none was left.
    fn spend(&mut self) -> bool {
        match self.credits.checked_sub(1) {
            Some(left) => {
                self.credits = left;
                true
            }
            None => false,
        }
    }

    /// Earns `n` credits, up to [`FLOOD_CREDITS`].
    fn earn(&mut self, n: u32) {
        self.credits = (self.credits + n).min(FLOOD_CREDITS);
    }
}

/// Why a connection was cut below h2; the GOAWAY's debug data names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Violation {
    /// PINGs more often than `KeepaliveMinTime` allows.
    Pings,
    /// More streams reset by the client than its completed calls pay for.
    Resets,
    /// More SETTINGS, WINDOW_UPDATE or PRIORITY frames than the server's work pays for.
    ControlFrames,
}

impl Violation {
    /// The GOAWAY's debug data, also the `reason` label of the cut-connections metric.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Violation::Pings => "too_many_pings",
            Violation::Resets => "too_many_resets",
            Violation::ControlFrames => "too_many_control_frames",
        }
    }

    /// What the client did, and the setting or rule behind the cut, for the log.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Violation::Pings => {
                "pinged more often than Transport.KeepaliveMinTime allows (as grpc-go)"
            }
            Violation::Resets => "reset far more streams than it completed (rapid reset)",
            Violation::ControlFrames => "flooded SETTINGS, WINDOW_UPDATE or PRIORITY frames",
        }
    }
}

/// Both directions of one connection under the frame policies of the module docs.
#[derive(Debug, Clone)]
pub(crate) struct FrameGuard {
    read: FrameScanner,
    write: FrameScanner,
    policy: Policy,
    /// The first GOAWAY with an error code h2 wrote: (code, debug data as far as seen).
    h2_goaway: Option<(u32, Vec<u8>)>,
}

/// What the policies keep of the frames read.
#[derive(Debug, Clone)]
struct Policy {
    /// Frame headers read, counted up to 2 (for the handshake).
    heads: u8,
    /// `KeepaliveMinTime`'s strikes; `None` when it is 0 (every PING answered).
    pings: Option<PingPolicy>,
    flood: FloodBudget,
    /// Highest stream the client opened (for the GOAWAY).
    last_stream: u32,
    /// Set once a policy is violated.
    violated: Option<Violation>,
}

impl Policy {
    /// A frame header read from the client.
    #[inline]
    fn on_read(&mut self, f: FrameHead) {
        self.heads = (self.heads + 1).min(2);
        let broke = match f.kind {
            HEADERS => {
                self.last_stream = self.last_stream.max(f.stream);
                None
            }
            PING if f.flags & FLAG_ACK == 0 => self
                .pings
                .as_mut()
                .is_some_and(|p| p.on_ping(Instant::now()))
                .then_some(Violation::Pings),
            RST_STREAM => (!self.flood.spend()).then_some(Violation::Resets),
            SETTINGS if f.flags & FLAG_ACK == 0 => {
                (!self.flood.spend()).then_some(Violation::ControlFrames)
            }
            WINDOW_UPDATE | PRIORITY => (!self.flood.spend()).then_some(Violation::ControlFrames),
            _ => None,
        };
        if self.violated.is_none() {
            self.violated = broke;
        }
    }
}

impl FrameGuard {
    /// A guard for a new connection; `ping_min_time`: `KeepaliveMinTime`, if set.
    pub(crate) fn new(ping_min_time: Option<Duration>) -> Self {
        FrameGuard {
            read: FrameScanner::new(PREFACE_LEN),
            write: FrameScanner::new(0),
            policy: Policy {
                heads: 0,
                pings: ping_min_time.map(PingPolicy::new),
                flood: FloodBudget::default(),
                last_stream: 0,
                violated: None,
            },
            h2_goaway: None,
        }
    }

    /// Octets read from the client; the violation once a policy is violated.
    #[inline]
    pub(crate) fn read(&mut self, data: &[u8]) -> Option<Violation> {
        let FrameGuard { read, policy, .. } = self;
        read.feed(data, |f, _| policy.on_read(f));
        policy.violated
    }

    /// Like [`read`](Self::read), but stops before a header block (a HEADERS or CONTINUATION
    /// frame) and before a frame header that is not whole in `data`; returns how many octets
    /// were read, the rest being the caller's to read again. For the `:authority` repair,
    /// which holds header blocks until they are complete: only while every earlier octet went
    /// through this method or through [`read`](Self::read) a whole header block at a time.
    pub(crate) fn read_to_block(&mut self, data: &[u8]) -> Result<usize, Violation> {
        let FrameGuard { read, policy, .. } = self;
        let n = read.feed_whole(data, |f, _| {
            if matches!(f.kind, HEADERS | CONTINUATION) {
                return ControlFlow::Break(());
            }
            policy.on_read(f);
            ControlFlow::Continue(())
        });
        policy.violated.map_or(Ok(n), Err)
    }

    /// True once the client's preface and a whole first frame (its SETTINGS) have been read.
    pub(crate) fn handshaken(&self) -> bool {
        self.policy.heads > 1 || (self.policy.heads == 1 && self.read.skip == 0)
    }

    /// Octets h2 wrote to the client. A stream h2 refused (`RST_STREAM REFUSED_STREAM`: the
    /// connection had `MaxConcurrentStreams` open) is counted as a dropped call, with no
    /// method (h2 read its headers, hyper was never given them).
    pub(crate) fn wrote(&mut self, data: &[u8]) {
        let FrameGuard {
            write,
            policy,
            h2_goaway,
            ..
        } = self;
        write.feed(data, |f, payload| {
            if f.kind == GOAWAY && h2_goaway.is_none() {
                // code after the last stream id; NO_ERROR is a graceful close
                let code = payload
                    .get(4..8)
                    .map_or(0, |c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                if code != 0 {
                    let debug = payload.get(8..).unwrap_or_default();
                    *h2_goaway = Some((code, debug[..debug.len().min(64)].to_vec()));
                }
            }
            if f.kind == RST_STREAM && payload.get(..4) == Some(&REFUSED_STREAM) {
                crate::metrics::count_drop("", crate::metrics::DropReason::StreamCap.label());
            }
            if matches!(f.kind, DATA | HEADERS) {
                if let Some(p) = policy.pings.as_mut() {
                    p.server_sent_data();
                }
                // A DATA frame sent earns 1; a call finished (END_STREAM) earns 2.
                let earned = u32::from(f.kind == DATA) + 2 * u32::from(f.flags & FLAG_END_STREAM);
                policy.flood.earn(earned);
            }
        });
    }

    /// The first GOAWAY with an error code that h2 wrote: (code, debug data).
    pub(crate) fn h2_goaway(&self) -> Option<(u32, &[u8])> {
        self.h2_goaway.as_ref().map(|(c, d)| (*c, d.as_slice()))
    }

    /// True when the GOAWAY can be written without splitting one of h2's frames.
    pub(crate) fn can_write_goaway(&self) -> bool {
        self.write.at_boundary()
    }

    /// GOAWAY(last stream, ENHANCE_YOUR_CALM, the violation's name).
    pub(crate) fn goaway(&self, violation: Violation) -> Vec<u8> {
        goaway_frame(self.policy.last_stream, violation.as_str().as_bytes())
    }
}

const ENHANCE_YOUR_CALM: u32 = 0xb;

fn goaway_frame(last_stream: u32, debug: &[u8]) -> Vec<u8> {
    let len = u32::try_from(8 + debug.len()).unwrap_or(8);
    let mut f = Vec::with_capacity(FRAME_HEADER_LEN + 8 + debug.len());
    f.extend_from_slice(&len.to_be_bytes()[1..]);
    f.extend_from_slice(&[0x7, 0, 0, 0, 0, 0]); // GOAWAY, no flags, stream 0
    f.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
    f.extend_from_slice(debug);
    f
}

#[cfg(test)]
mod tests;
