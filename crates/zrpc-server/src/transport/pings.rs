//! Enforcement of a minimum interval between the client's PINGs: grpc-go's keepalive
//! `EnforcementPolicy` (`MinTime`, default 5 min), which answers a client that pings too
//! often with GOAWAY `ENHANCE_YOUR_CALM` and the debug data `too_many_pings`.
//!
//! hyper 1 / h2 0.4 answer every PING and have no such policy, so zrpc follows the frame
//! headers in both directions below h2, in [`Guarded`](super::conn::Guarded):
//! - a PING from the client (not an ACK) sooner than `MinTime` after the previous one is a
//!   strike, unless the server has sent DATA or HEADERS since the previous PING (grpc-go
//!   resets its strikes then: BDP-estimation pings follow the server's data);
//! - the third strike (grpc-go's `maxPingStrikes` is 2: strikes > 2) ends the connection:
//!   zrpc writes the GOAWAY itself, at a frame boundary of h2's outgoing octets, then fails
//!   the connection's read so that hyper drops it. When h2 is in the middle of writing a
//!   frame at that moment, the GOAWAY cannot be interleaved safely and the connection is
//!   closed without it (logged).
//!
//! One difference from grpc-go: grpc-go applies 2 hours instead of `MinTime` while no call
//! is open (unless `PermitWithoutStream`); zrpc does not count open calls below h2 and
//! applies `MinTime` in both cases, which is more lenient to idle pingers, never stricter.
//!
//! Cost: a few comparisons per frame header read or written; nothing per octet of payload.
//! Written by hand because neither h2 nor hyper exposes frames or a ping hook.

use std::time::Duration;

use tokio::time::Instant;

/// HTTP/2 frame header (RFC 9113 §4.1).
const FRAME_HEADER_LEN: usize = 9;
/// Client connection preface (RFC 9113 §3.4), skipped by the read side.
pub(crate) const PREFACE_LEN: u32 = 24;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PING: u8 = 0x6;
const FLAG_ACK: u8 = 0x1;

/// grpc-go's `maxPingStrikes`: the connection ends when strikes exceed it.
const MAX_PING_STRIKES: u8 = 2;

/// A frame header, as [`FrameScanner`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHead {
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
}

/// Follows the frame headers of one direction of an HTTP/2 connection, octets fed in any
/// split; payloads are skipped without being looked at.
#[derive(Debug, Clone)]
pub(crate) struct FrameScanner {
    header: [u8; FRAME_HEADER_LEN],
    have: usize,
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

    /// Feeds octets; calls `on_frame` for each frame header completed by them.
    #[inline]
    pub(crate) fn feed(&mut self, mut data: &[u8], mut on_frame: impl FnMut(FrameHead)) {
        loop {
            if self.skip > 0 {
                if data.len() <= self.skip as usize {
                    self.skip -= data.len() as u32;
                    return;
                }
                data = &data[self.skip as usize..];
                self.skip = 0;
            }
            // Fast path: a whole header in `data` (nearly always), read in place.
            let h = match (self.have, data.split_first_chunk::<FRAME_HEADER_LEN>()) {
                (0, Some((h, rest))) => {
                    data = rest;
                    *h
                }
                _ if data.is_empty() => return,
                _ => {
                    let n = (FRAME_HEADER_LEN - self.have).min(data.len());
                    self.header[self.have..self.have + n].copy_from_slice(&data[..n]);
                    self.have += n;
                    data = &data[n..];
                    if self.have < FRAME_HEADER_LEN {
                        return;
                    }
                    self.have = 0;
                    self.header
                }
            };
            self.skip = u32::from_be_bytes([0, h[0], h[1], h[2]]);
            on_frame(FrameHead {
                kind: h[3],
                flags: h[4],
                stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
            });
        }
    }
}

/// grpc-go's ping strikes for one connection.
#[derive(Debug, Clone)]
pub(crate) struct PingPolicy {
    min_time: Duration,
    last_ping: Option<Instant>,
    strikes: u8,
    /// The server sent DATA or HEADERS since the last PING.
    reset: bool,
}

impl PingPolicy {
    pub(crate) fn new(min_time: Duration) -> Self {
        PingPolicy {
            min_time,
            last_ping: None,
            strikes: 0,
            reset: false,
        }
    }

    /// The server wrote DATA or HEADERS.
    pub(crate) fn server_sent_data(&mut self) {
        self.reset = true;
    }

    /// A PING (not an ACK) from the client at `now`; true when it is one too many.
    pub(crate) fn on_ping(&mut self, now: Instant) -> bool {
        let last = self.last_ping.replace(now);
        if std::mem::take(&mut self.reset) {
            self.strikes = 0;
            return false;
        }
        if last.is_some_and(|l| now < l + self.min_time) {
            self.strikes += 1;
        }
        self.strikes > MAX_PING_STRIKES
    }
}

/// Both directions of one connection under a [`PingPolicy`].
#[derive(Debug, Clone)]
pub(crate) struct PingGuard {
    read: FrameScanner,
    write: FrameScanner,
    policy: PingPolicy,
    /// Highest stream the client opened (for the GOAWAY).
    last_stream: u32,
    /// Set once the policy is violated.
    violated: bool,
}

impl PingGuard {
    pub(crate) fn new(min_time: Duration) -> Self {
        PingGuard {
            read: FrameScanner::new(PREFACE_LEN),
            write: FrameScanner::new(0),
            policy: PingPolicy::new(min_time),
            last_stream: 0,
            violated: false,
        }
    }

    /// Octets read from the client; true once the policy is violated.
    pub(crate) fn read(&mut self, data: &[u8]) -> bool {
        let PingGuard {
            read,
            policy,
            last_stream,
            violated,
            ..
        } = self;
        read.feed(data, |f| match f.kind {
            HEADERS => *last_stream = (*last_stream).max(f.stream),
            PING if f.flags & FLAG_ACK == 0 && policy.on_ping(Instant::now()) => {
                *violated = true;
            }
            _ => {}
        });
        *violated
    }

    /// Octets h2 wrote to the client.
    pub(crate) fn wrote(&mut self, data: &[u8]) {
        let policy = &mut self.policy;
        self.write.feed(data, |f| {
            if matches!(f.kind, DATA | HEADERS) {
                policy.server_sent_data();
            }
        });
    }

    /// True when the GOAWAY can be written without splitting one of h2's frames.
    pub(crate) fn can_write_goaway(&self) -> bool {
        self.write.at_boundary()
    }

    /// GOAWAY(last stream, ENHANCE_YOUR_CALM, "too_many_pings") as grpc-go sends it.
    pub(crate) fn goaway(&self) -> [u8; GOAWAY_LEN] {
        goaway_frame(self.last_stream)
    }
}

const DEBUG_DATA: &[u8] = b"too_many_pings";
/// Octets of the GOAWAY frame zrpc writes.
pub(crate) const GOAWAY_LEN: usize = FRAME_HEADER_LEN + 8 + DEBUG_DATA.len();
const ENHANCE_YOUR_CALM: u32 = 0xb;

fn goaway_frame(last_stream: u32) -> [u8; GOAWAY_LEN] {
    let mut f = [0u8; GOAWAY_LEN];
    let len = (GOAWAY_LEN - FRAME_HEADER_LEN) as u32;
    f[..3].copy_from_slice(&len.to_be_bytes()[1..]);
    f[3] = 0x7; // GOAWAY, no flags, stream 0
    f[9..13].copy_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    f[13..17].copy_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
    f[17..].copy_from_slice(DEBUG_DATA);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: usize) -> Vec<u8> {
        let mut f = (payload as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend(std::iter::repeat_n(0xAA, payload));
        f
    }

    #[test]
    fn scanner_reports_each_header_whatever_the_split() {
        let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        wire.extend(frame(0x4, 0, 0, 6));
        wire.extend(frame(HEADERS, 0x4, 1, 40));
        wire.extend(frame(DATA, 0x1, 1, 1000));
        wire.extend(frame(PING, 0, 0, 8));
        let expect = vec![
            FrameHead {
                kind: 0x4,
                flags: 0,
                stream: 0,
            },
            FrameHead {
                kind: HEADERS,
                flags: 0x4,
                stream: 1,
            },
            FrameHead {
                kind: DATA,
                flags: 0x1,
                stream: 1,
            },
            FrameHead {
                kind: PING,
                flags: 0,
                stream: 0,
            },
        ];
        for chunk in [1, 2, 7, 9, 10, 100, wire.len()] {
            let mut s = FrameScanner::new(PREFACE_LEN);
            let mut got = Vec::new();
            for c in wire.chunks(chunk) {
                s.feed(c, |f| got.push(f));
            }
            assert_eq!(got, expect, "chunks of {chunk}");
            assert!(s.at_boundary());
        }
        let mut s = FrameScanner::new(0);
        s.feed(&frame(DATA, 0, 1, 10)[..12], |_| {});
        assert!(!s.at_boundary());
    }

    #[test]
    fn the_third_strike_within_min_time_violates_as_in_grpc_go() {
        let t0 = Instant::now();
        let min = Duration::from_secs(300);
        let mut p = PingPolicy::new(min);
        assert!(!p.on_ping(t0)); // first ping: never a strike
        assert!(!p.on_ping(t0 + Duration::from_secs(1))); // strike 1
        assert!(!p.on_ping(t0 + Duration::from_secs(2))); // strike 2
        assert!(p.on_ping(t0 + Duration::from_secs(3))); // strike 3 > 2

        // pings MinTime apart never strike
        let mut p = PingPolicy::new(min);
        for i in 0..10 {
            assert!(!p.on_ping(t0 + min * i));
        }
    }

    #[test]
    fn server_data_between_pings_resets_the_strikes() {
        let t0 = Instant::now();
        let mut p = PingPolicy::new(Duration::from_secs(300));
        for i in 0..100 {
            p.server_sent_data();
            assert!(!p.on_ping(t0 + Duration::from_millis(i)), "ping {i}");
        }
        // without data in between, three quick pings after that are too many
        assert!(!p.on_ping(t0 + Duration::from_millis(101)));
        assert!(!p.on_ping(t0 + Duration::from_millis(102)));
        assert!(p.on_ping(t0 + Duration::from_millis(103)));
    }

    #[tokio::test(start_paused = true)]
    async fn guard_follows_pings_acks_and_the_servers_data() {
        let mut g = PingGuard::new(Duration::from_secs(300));
        let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        wire.extend(frame(0x4, 0, 0, 0));
        wire.extend(frame(HEADERS, 0x5, 7, 20));
        assert!(!g.read(&wire));
        // ping ACKs (answers to the server's own pings) never count
        for _ in 0..10 {
            assert!(!g.read(&frame(PING, FLAG_ACK, 0, 8)));
        }
        // BDP-style: a ping after each DATA the server wrote is fine
        for _ in 0..10 {
            g.wrote(&frame(DATA, 0, 7, 100));
            assert!(!g.read(&frame(PING, 0, 0, 8)));
        }
        // the server's own PING ACKs and WINDOW_UPDATEs do not reset the strikes
        let mut flood = false;
        for _ in 0..3 {
            g.wrote(&frame(PING, FLAG_ACK, 0, 8));
            g.wrote(&frame(0x8, 0, 0, 4));
            flood = g.read(&frame(PING, 0, 0, 8));
        }
        assert!(flood);
        assert!(g.can_write_goaway());
        let goaway = g.goaway();
        assert_eq!(&goaway[..9], &[0, 0, 22, 0x7, 0, 0, 0, 0, 0]);
        assert_eq!(&goaway[9..13], &7u32.to_be_bytes());
        assert_eq!(&goaway[13..17], &ENHANCE_YOUR_CALM.to_be_bytes());
        assert_eq!(&goaway[17..], b"too_many_pings");
    }
}
