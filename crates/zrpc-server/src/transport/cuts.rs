//! Connections the server ends because their client broke an HTTP/2 limit: counted in
//! `rpc_server_connections_cut_total{reason}` and logged at most once per client address per
//! [`LOG_PERIOD`], with the number of cuts held back since. An attacker that reconnects after
//! every cut therefore writes a few lines a minute, not one per connection or stream; and an
//! address cut again and again has its next connections held ([`Peer::hold`]).
//!
//! Two sources, both seen below h2 by [`Guarded`](super::conn::Guarded): zrpc's own frame
//! policies ([`frames`](super::frames)), and the GOAWAYs h2 writes when one of its limits is
//! broken (named by [`h2_reason`]; hyper's connection error loses their debug data). h2 also
//! logs its cuts at WARN, once per connection; zrpc's default log filter keeps h2 at ERROR so
//! that only this summary remains.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use std::time::Duration;

use prometheus::{IntCounterVec, Opts};
use tokio::time::Instant;

/// One log line per client address per this period.
pub(crate) const LOG_PERIOD: Duration = Duration::from_secs(10);
/// Addresses remembered at most; past it, the ones not logged within [`LOG_PERIOD`] are
/// forgotten, and if all are recent, every other address shares one line.
const MAX_SOURCES: usize = 4096;

/// `rpc_server_connections_cut_total{reason}` (zrpc addition).
fn counter() -> &'static IntCounterVec {
    static COUNTER: OnceLock<IntCounterVec> = OnceLock::new();
    COUNTER.get_or_init(|| {
        let c = IntCounterVec::new(
            Opts::new(
                "rpc_server_connections_cut_total",
                "connections the server ended for breaking an HTTP/2 limit (zrpc).",
            ),
            &["reason"],
        )
        .unwrap_or_else(|e| unreachable!("static metric options are valid: {e}"));
        if let Err(e) = crate::metrics::registry().register(Box::new(c.clone())) {
            tracing::debug!(target: "zrpc::server", "rpc_server_connections_cut_total: {e}");
        }
        c
    })
}

/// What is remembered of a client address that was cut.
#[derive(Debug, Clone, Copy)]
struct Source {
    /// When a cut from it was last logged, and the cuts held back since.
    logged: Instant,
    held: u64,
    /// Cuts in a row, each within [`STRIKE_WINDOW`] of the previous one.
    strikes: u32,
    last_cut: Instant,
}

/// The addresses cut lately.
#[derive(Debug, Default)]
struct Sources {
    by_addr: HashMap<Option<IpAddr>, Source>,
}

impl Sources {
    /// The key for `source`: itself, or `None` (shared by every other address) when
    /// [`MAX_SOURCES`] addresses cut lately are remembered already.
    fn key(&mut self, source: Option<IpAddr>, now: Instant) -> Option<IpAddr> {
        if self.by_addr.len() >= MAX_SOURCES && !self.by_addr.contains_key(&source) {
            self.by_addr.retain(|_, s| {
                now.saturating_duration_since(s.logged) < LOG_PERIOD
                    || now.saturating_duration_since(s.last_cut) < STRIKE_WINDOW
            });
        }
        if self.by_addr.len() >= MAX_SOURCES && !self.by_addr.contains_key(&source) {
            None
        } else {
            source
        }
    }

    /// Records a cut from `source` at `now`; `Some(held back)` when it is to be logged.
    fn cut(&mut self, source: Option<IpAddr>, now: Instant) -> Option<u64> {
        let key = self.key(source, now);
        let Some(s) = self.by_addr.get_mut(&key) else {
            self.by_addr.insert(
                key,
                Source {
                    logged: now,
                    held: 0,
                    strikes: 1,
                    last_cut: now,
                },
            );
            return Some(0);
        };
        s.strikes = if now.saturating_duration_since(s.last_cut) < STRIKE_WINDOW {
            s.strikes.saturating_add(1)
        } else {
            1
        };
        s.last_cut = now;
        if now.saturating_duration_since(s.logged) < LOG_PERIOD {
            s.held += 1;
            None
        } else {
            s.logged = now;
            Some(std::mem::take(&mut s.held))
        }
    }

    /// How long a new connection from `source` waits before it is read (see [`Peer::hold`]).
    fn hold(&self, source: Option<IpAddr>, now: Instant) -> Option<Duration> {
        let s = self
            .by_addr
            .get(&source)
            .or_else(|| (self.by_addr.len() >= MAX_SOURCES).then(|| self.by_addr.get(&None))?)?;
        let recent = now.saturating_duration_since(s.last_cut) < STRIKE_WINDOW;
        let over = s.strikes.checked_sub(FREE_CUTS + 1).filter(|_| recent)?;
        Some((HOLD_STEP * (1 << over.min(5))).min(MAX_HOLD))
    }
}

/// Cuts from one address that cost it nothing: a client cut by mistake reconnects at once.
const FREE_CUTS: u32 = 3;
/// Cuts further apart than this start the count again.
const STRIKE_WINDOW: Duration = Duration::from_secs(10);
/// The first hold, doubled for every further cut in a row.
const HOLD_STEP: Duration = Duration::from_millis(50);
/// The longest hold.
const MAX_HOLD: Duration = Duration::from_secs(1);

/// The addresses one server cut lately: its log gate and its holds (one per server, so that
/// servers in one process do not hold each other's clients).
#[derive(Debug, Default)]
pub(crate) struct CutLog {
    /// Set at the first cut: until then no accepted connection takes the lock.
    any: AtomicBool,
    sources: Mutex<Sources>,
}

/// A connection's client address, and the server's [`CutLog`].
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) ip: IpAddr,
    pub(crate) cuts: Arc<CutLog>,
}

impl Peer {
    /// Counts and (rate-limited) logs this connection cut for `reason` (the GOAWAY's debug
    /// data or error code, a short fixed name); `what`: the client's misbehaviour.
    pub(crate) fn cut(&self, reason: &'static str, what: &str) {
        counter().with_label_values(&[reason]).inc();
        self.cuts.any.store(true, Ordering::Relaxed);
        let logged = self.cuts.sources.lock().cut(Some(self.ip), Instant::now());
        if let Some(held) = logged {
            tracing::warn!(
                target: "zrpc::server",
                "closed a connection from {}: its client {what} (GOAWAY {reason}); \
                 {held} more from this address in the last {}s",
                self.ip,
                LOG_PERIOD.as_secs()
            );
        }
    }

    /// How long a new connection from this address waits before the server reads it:
    /// nothing, unless the address was cut more than [`FREE_CUTS`] times in a row (each within
    /// 10 s of the previous); then 50 ms, doubled for each further cut, at most 1 s. An
    /// attacker that reconnects after every cut so gets at most one connection's worth of
    /// work a second from each connection it opens; connections already open from the same
    /// address (a proxy's, a NAT's) are not touched.
    pub(crate) fn hold(&self) -> Option<Duration> {
        if !self.cuts.any.load(Ordering::Relaxed) {
            return None;
        }
        self.cuts.sources.lock().hold(Some(self.ip), Instant::now())
    }
}

/// The metric's reason for a GOAWAY that h2 sent with `code` (not NO_ERROR) and `debug`
/// data: h2 names its flood guards only in the debug data.
pub(crate) fn h2_reason(code: u32, debug: &[u8]) -> &'static str {
    const NAMED: [&str; 4] = [
        "too_many_internal_resets",
        "too_many_resets",
        "too_many_data_frames",
        "too_many_continuations",
    ];
    if let Some(named) = NAMED.into_iter().find(|n| n.as_bytes() == debug) {
        return named;
    }
    match code {
        0x1 => "protocol_error",
        0x3 => "flow_control_error",
        0x6 => "frame_size_error",
        0x9 => "compression_error",
        0xb => "enhance_your_calm",
        _ => "other_h2_error",
    }
}

/// What the client did, for a reason [`h2_reason`] returned.
pub(crate) fn h2_describe(reason: &str) -> &'static str {
    match reason {
        "too_many_internal_resets" => {
            "made the server reset too many streams (MadeYouReset; \
             Transport.MaxLocalErrorResetStreams)"
        }
        "too_many_resets" => {
            "reset too many streams before they were accepted (rapid reset; \
             Transport.MaxPendingAcceptResetStreams)"
        }
        "too_many_data_frames" => "sent too many small or empty DATA frames",
        "too_many_continuations" => {
            "sent a header block too long or never ending (Transport.MaxHeaderListSize)"
        }
        _ => "broke the HTTP/2 protocol",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_line_per_source_per_period_with_the_count_held_back() {
        let mut g = Sources::default();
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        assert_eq!(g.cut(a, Instant::now()), Some(0));
        assert_eq!(g.cut(b, Instant::now()), Some(0), "sources are apart");
        for _ in 0..500 {
            assert_eq!(g.cut(a, Instant::now()), None);
        }
        tokio::time::advance(LOG_PERIOD).await;
        assert_eq!(g.cut(a, Instant::now()), Some(500));
        assert_eq!(g.cut(b, Instant::now()), Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn many_sources_share_one_line_and_the_map_stays_bounded() {
        let mut g = Sources::default();
        let mut logged = 0;
        for i in 0..(MAX_SOURCES as u32 * 3) {
            let ip = IpAddr::from(i.to_be_bytes());
            logged += u32::from(g.cut(Some(ip), Instant::now()).is_some());
        }
        assert!(g.by_addr.len() <= MAX_SOURCES + 1);
        assert_eq!(logged, MAX_SOURCES as u32 + 1, "the rest share one gate");
        // once the period has passed, old entries make room again
        tokio::time::advance(LOG_PERIOD.max(STRIKE_WINDOW)).await;
        assert!(
            g.cut(Some(IpAddr::from([1, 2, 3, 4])), Instant::now())
                .is_some()
        );
        assert!(g.by_addr.len() <= 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_cut_again_and_again_waits_longer_to_reconnect() {
        let mut g = Sources::default();
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        let now = Instant::now;
        assert_eq!(g.hold(a, now()), None, "never cut");
        for _ in 0..FREE_CUTS {
            g.cut(a, now());
            assert_eq!(g.hold(a, now()), None, "the first cuts are free");
        }
        let mut holds = Vec::new();
        for _ in 0..8 {
            g.cut(a, now());
            holds.push(g.hold(a, now()).unwrap().as_millis());
        }
        assert_eq!(holds, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(g.hold(b, now()), None, "other addresses are not held");
        // a quiet spell ends the holds, and the count starts again
        tokio::time::advance(STRIKE_WINDOW).await;
        assert_eq!(g.hold(a, now()), None);
        g.cut(a, now());
        assert_eq!(g.hold(a, now()), None);
    }

    #[test]
    fn h2_goaways_are_named_by_their_debug_data_or_code() {
        assert_eq!(h2_reason(0xb, b"too_many_resets"), "too_many_resets");
        assert_eq!(
            h2_reason(0xb, b"too_many_internal_resets"),
            "too_many_internal_resets"
        );
        assert_eq!(h2_reason(0xb, b""), "enhance_your_calm");
        assert_eq!(
            h2_reason(0x1, b"anything a client made h2 say"),
            "protocol_error"
        );
        assert_eq!(h2_reason(0x2, b""), "other_h2_error");
    }
}
