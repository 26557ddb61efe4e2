//! Tests of the frame scanner and the policies on both directions of a connection.

use super::*;

fn frame(kind: u8, flags: u8, stream: u32, payload: usize) -> Vec<u8> {
    frame_with(kind, flags, stream, &vec![0xAA; payload])
}

fn frame_with(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
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
            len: 6,
            kind: 0x4,
            flags: 0,
            stream: 0,
        },
        FrameHead {
            len: 40,
            kind: HEADERS,
            flags: 0x4,
            stream: 1,
        },
        FrameHead {
            len: 1000,
            kind: DATA,
            flags: 0x1,
            stream: 1,
        },
        FrameHead {
            len: 8,
            kind: PING,
            flags: 0,
            stream: 0,
        },
    ];
    for chunk in [1, 2, 7, 9, 10, 100, wire.len()] {
        let mut s = FrameScanner::new(PREFACE_LEN);
        let mut got = Vec::new();
        for c in wire.chunks(chunk) {
            s.feed(c, |f, _| got.push(f));
        }
        assert_eq!(got, expect, "chunks of {chunk}");
        assert!(s.at_boundary());
    }
    let mut s = FrameScanner::new(0);
    s.feed(&frame(DATA, 0, 1, 10)[..12], |_, _| {});
    assert!(!s.at_boundary());
}

#[tokio::test(start_paused = true)]
async fn guard_follows_pings_acks_and_the_servers_data() {
    let mut g = FrameGuard::new(Some(Duration::from_secs(300)));
    let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    wire.extend(frame(0x4, 0, 0, 0));
    wire.extend(frame(HEADERS, 0x5, 7, 20));
    assert_eq!(g.read(&wire), None);
    // ping ACKs (answers to the server's own pings) never count
    for _ in 0..10 {
        assert_eq!(g.read(&frame(PING, FLAG_ACK, 0, 8)), None);
    }
    // BDP-style: a ping after each DATA the server wrote is fine
    for _ in 0..10 {
        g.wrote(&frame(DATA, 0, 7, 100));
        assert_eq!(g.read(&frame(PING, 0, 0, 8)), None);
    }
    // the server's own PING ACKs and WINDOW_UPDATEs do not reset the strikes
    let mut flood = None;
    for _ in 0..3 {
        g.wrote(&frame(PING, FLAG_ACK, 0, 8));
        g.wrote(&frame(0x8, 0, 0, 4));
        flood = g.read(&frame(PING, 0, 0, 8));
    }
    assert_eq!(flood, Some(Violation::Pings));
    assert!(g.can_write_goaway());
    let goaway = g.goaway(Violation::Pings);
    assert_eq!(&goaway[..9], &[0, 0, 22, 0x7, 0, 0, 0, 0, 0]);
    assert_eq!(&goaway[9..13], &7u32.to_be_bytes());
    assert_eq!(&goaway[13..17], &ENHANCE_YOUR_CALM.to_be_bytes());
    assert_eq!(&goaway[17..], b"too_many_pings");
}

/// A guard past the client's preface.
fn guard(ping_min_time: Option<Duration>) -> FrameGuard {
    let mut g = FrameGuard::new(ping_min_time);
    assert_eq!(g.read(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), None);
    g
}

#[test]
fn goaways_h2_writes_with_an_error_code_are_kept() {
    let mut g = FrameGuard::new(None);
    // a graceful GOAWAY (NO_ERROR) is not a cut
    let mut payload = 7u32.to_be_bytes().to_vec();
    payload.extend_from_slice(&0u32.to_be_bytes());
    g.wrote(&frame_with(GOAWAY, 0, 0, &payload));
    assert_eq!(g.h2_goaway(), None);
    let mut payload = 9u32.to_be_bytes().to_vec();
    payload.extend_from_slice(&0xbu32.to_be_bytes());
    payload.extend_from_slice(b"too_many_internal_resets");
    let mut wire = frame(DATA, 0, 9, 100);
    wire.extend(frame_with(GOAWAY, 0, 0, &payload));
    g.wrote(&wire);
    assert_eq!(g.h2_goaway(), Some((0xb, &b"too_many_internal_resets"[..])));
}

#[test]
fn streams_h2_refuses_are_counted_as_dropped_at_the_stream_cap() {
    let refused = || {
        crate::metrics::server_metrics()
            .dropped_total
            .with_label_values(&["", "stream_cap"])
            .get()
    };
    let before = refused();
    let mut g = FrameGuard::new(None);
    // Two refusals, in two writes, and a cancel (not a refusal).
    let mut wire = frame_with(RST_STREAM, 0, 1001, &[0, 0, 0, 7]);
    wire.extend(frame_with(RST_STREAM, 0, 1003, &[0, 0, 0, 8]));
    g.wrote(&wire);
    let second = frame_with(RST_STREAM, 0, 1005, &[0, 0, 0, 7]);
    g.wrote(&second);
    assert!(refused() >= before + 2, "{before} -> {}", refused());
}

#[test]
fn pings_are_answered_without_limit_when_min_time_is_off() {
    let mut g = guard(None);
    for _ in 0..10_000 {
        assert_eq!(g.read(&frame(PING, 0, 0, 8)), None);
    }
}

#[test]
fn a_control_frame_flood_is_cut_after_the_starting_credits() {
    for (kind, flags) in [(SETTINGS, 0), (WINDOW_UPDATE, 0), (PRIORITY, 0)] {
        let mut g = guard(None);
        let f = frame(kind, flags, 0, 4);
        for i in 0..FLOOD_CREDITS {
            assert_eq!(g.read(&f), None, "frame {kind} #{i}");
        }
        assert_eq!(g.read(&f), Some(Violation::ControlFrames));
        assert_eq!(
            &g.goaway(Violation::ControlFrames)[17..],
            b"too_many_control_frames"
        );
    }
    // SETTINGS ACKs cost nothing
    let mut g = guard(None);
    for _ in 0..10_000 {
        assert_eq!(g.read(&frame(SETTINGS, FLAG_ACK, 0, 0)), None);
    }
}

#[test]
fn resets_are_paid_for_by_completed_calls() {
    let mut g = guard(None);
    // A client that completes every call and then resets it (some clients do) never
    // runs out, however long the connection lives.
    for s in (1..200_001).step_by(2) {
        assert_eq!(g.read(&frame(HEADERS, 0x4, s, 10)), None);
        g.wrote(&frame(HEADERS, 0x4, s, 5));
        g.wrote(&frame(DATA, 0, s, 20));
        g.wrote(&frame(HEADERS, 0x5, s, 5));
        assert_eq!(g.read(&frame(RST_STREAM, 0, s, 4)), None);
    }
    // Two cancelled calls for each completed one: still within the budget.
    for s in (200_001..260_001).step_by(6) {
        assert_eq!(g.read(&frame(RST_STREAM, 0, s + 2, 4)), None);
        assert_eq!(g.read(&frame(RST_STREAM, 0, s + 4, 4)), None);
        g.wrote(&frame(HEADERS, 0x5, s, 5));
    }
    // Rapid reset: nothing completed; cut once the credits (back at the cap after one more
    // completed call) are spent.
    g.wrote(&frame(HEADERS, 0x5, 299_999, 5));
    let mut cut = None;
    for i in 0..=FLOOD_CREDITS {
        let s = 300_001 + 2 * i;
        g.read(&frame(HEADERS, 0x4, s, 10));
        cut = g.read(&frame(RST_STREAM, 0, s, 4));
        if cut.is_some() {
            assert_eq!(i, FLOOD_CREDITS, "cut at the first reset over the budget");
        }
    }
    assert_eq!(cut, Some(Violation::Resets));
    // the GOAWAY names the last stream the client opened
    let goaway = g.goaway(Violation::Resets);
    assert_eq!(&goaway[9..13], &(300_001 + 2 * FLOOD_CREDITS).to_be_bytes());
    assert_eq!(&goaway[17..], b"too_many_resets");
}

#[test]
fn data_sent_pays_for_window_updates() {
    // A client reading a long server stream sends a WINDOW_UPDATE per DATA frame (more
    // than any real client) and is never cut.
    let mut g = guard(None);
    g.read(&frame(HEADERS, 0x4, 1, 10));
    for _ in 0..100_000 {
        g.wrote(&frame(DATA, 0, 1, 16));
        assert_eq!(g.read(&frame(WINDOW_UPDATE, 0, 1, 4)), None);
    }
}

#[test]
fn handshake_completes_after_preface_and_first_frame_octet_by_octet() {
    let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    wire.extend_from_slice(&[0, 0, 6, 4, 0, 0, 0, 0, 0]);
    wire.extend_from_slice(&[0, 3, 0, 0, 0, 100]);
    let mut g = FrameGuard::new(None);
    let (rest, last) = wire.split_at(wire.len() - 1);
    for b in rest {
        g.read(std::slice::from_ref(b));
        assert!(!g.handshaken());
    }
    g.read(last);
    assert!(g.handshaken());
}

#[test]
fn handshake_with_empty_settings_completes_in_one_read() {
    let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    wire.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    let mut g = FrameGuard::new(None);
    g.read(&wire);
    assert!(g.handshaken());
    let mut g = FrameGuard::new(None);
    g.read(&wire[..wire.len() - 1]);
    assert!(!g.handshaken());
}

#[test]
fn read_to_block_stops_before_header_blocks_and_split_headers() {
    let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    wire.extend(frame(SETTINGS, 0, 0, 6));
    wire.extend(frame(PING, 0, 0, 8));
    let block = wire.len();
    wire.extend(frame(HEADERS, 0, 1, 10));
    wire.extend(frame(CONTINUATION, 0x4, 1, 10));
    wire.extend(frame(RST_STREAM, 0, 1, 4));
    let ping = 24 + 9 + 6;
    let mut g = guard(None);
    assert_eq!(g.read_to_block(&wire[24..ping + 5]), Ok(ping - 24));
    assert!(g.handshaken());
    // the held-back PING header, again with the rest: stops before HEADERS
    assert_eq!(g.read_to_block(&wire[ping..]), Ok(block - ping));
    // the block read whole, then the frame after it
    let end = block + 2 * (9 + 10);
    assert_eq!(g.read(&wire[block..end]), None);
    assert_eq!(g.read_to_block(&wire[end..]), Ok(13));
    assert_eq!(g.policy.last_stream, 1);
    assert_eq!(g.policy.flood.credits, FLOOD_CREDITS - 2);
}
