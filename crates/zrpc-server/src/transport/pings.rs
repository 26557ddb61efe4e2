//! grpc-go's keepalive `EnforcementPolicy` (`MinTime`, default 5 min) for one connection: a
//! PING from the client sooner than `MinTime` after the previous one is a strike, unless the
//! server has sent DATA or HEADERS since (grpc-go resets its strikes then: BDP pings follow the
//! server's data); the third strike ends the connection with GOAWAY `ENHANCE_YOUR_CALM`
//! `too_many_pings`, as grpc-go does. grpc-go applies 2 hours instead of `MinTime` while no
//! call is open; zrpc applies `MinTime` always (more lenient to idle pingers, never stricter).
//! The frames come from [`FrameGuard`](super::frames::FrameGuard).

use std::time::Duration;

use tokio::time::Instant;

/// grpc-go's `maxPingStrikes`: the connection ends when strikes exceed it.
const MAX_PING_STRIKES: u8 = 2;

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
            // saturating: the frame scanner keeps reporting the pings of a read after the
            // violation (hundreds fit in one), and a debug build's overflow check would panic
            self.strikes = self.strikes.saturating_add(1);
        }
        self.strikes > MAX_PING_STRIKES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A flood keeps violating, never overflows (hundreds of PINGs fit in one read).
    #[test]
    fn a_flood_of_pings_keeps_violating_without_overflow() {
        let t0 = Instant::now();
        let mut p = PingPolicy::new(Duration::from_secs(300));
        for i in 1..1000u64 {
            let violated = p.on_ping(t0 + Duration::from_micros(i));
            assert_eq!(violated, i > 3, "ping {i}");
        }
    }
}
