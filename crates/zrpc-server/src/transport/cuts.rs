//! Connections the server ends because their client broke an HTTP/2 limit: counted in
//! `rpc_server_connections_cut_total{reason}` and logged at most once per client address per
//! [`LOG_PERIOD`], with the number of cuts held back since. An attacker that reconnects after
//! every cut therefore writes a few lines a minute, not one per connection or stream.
//!
//! Two sources, both seen below h2 by [`Guarded`](super::conn::Guarded): zrpc's own frame
//! policies ([`frames`](super::frames)), and the GOAWAYs h2 writes when one of its limits is
//! broken (named by [`h2_reason`]; hyper's connection error loses their debug data). h2 also
//! logs its cuts at WARN, once per connection; zrpc's default log filter keeps h2 at ERROR so
//! that only this summary remains.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::OnceLock;

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

/// When each address was last logged, and the cuts held back since.
#[derive(Debug, Default)]
struct Gates {
    by_source: HashMap<Option<IpAddr>, (Instant, u64)>,
}

impl Gates {
    /// `Some(held back)` when a cut from `source` at `now` is to be logged.
    fn allow(&mut self, source: Option<IpAddr>, now: Instant) -> Option<u64> {
        if self.by_source.len() >= MAX_SOURCES && !self.by_source.contains_key(&source) {
            self.by_source
                .retain(|_, (last, _)| now.saturating_duration_since(*last) < LOG_PERIOD);
        }
        let key = if self.by_source.len() >= MAX_SOURCES && !self.by_source.contains_key(&source) {
            None // every other address shares one gate
        } else {
            source
        };
        match self.by_source.get_mut(&key) {
            Some((last, held)) if now.saturating_duration_since(*last) < LOG_PERIOD => {
                *held += 1;
                None
            }
            Some((last, held)) => {
                *last = now;
                Some(std::mem::take(held))
            }
            None => {
                self.by_source.insert(key, (now, 0));
                Some(0)
            }
        }
    }
}

fn gates() -> &'static Mutex<Gates> {
    static GATES: OnceLock<Mutex<Gates>> = OnceLock::new();
    GATES.get_or_init(Mutex::default)
}

/// Counts and (rate-limited) logs a connection from `peer` cut for `reason` (the GOAWAY's
/// debug data or error code, a short fixed name); `what`: the client's misbehaviour.
pub(crate) fn connection_cut(peer: Option<IpAddr>, reason: &'static str, what: &str) {
    counter().with_label_values(&[reason]).inc();
    let allowed = gates().lock().allow(peer, Instant::now());
    if let Some(held) = allowed {
        let peer = peer.map_or_else(|| "an unknown address".to_owned(), |p| p.to_string());
        tracing::warn!(
            target: "zrpc::server",
            "closed a connection from {peer}: its client {what} (GOAWAY {reason}); \
             {held} more from this address in the last {}s",
            LOG_PERIOD.as_secs()
        );
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_line_per_source_per_period_with_the_count_held_back() {
        let mut g = Gates::default();
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        assert_eq!(g.allow(a, Instant::now()), Some(0));
        assert_eq!(g.allow(b, Instant::now()), Some(0), "sources are apart");
        for _ in 0..500 {
            assert_eq!(g.allow(a, Instant::now()), None);
        }
        tokio::time::advance(LOG_PERIOD).await;
        assert_eq!(g.allow(a, Instant::now()), Some(500));
        assert_eq!(g.allow(b, Instant::now()), Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn many_sources_share_one_line_and_the_map_stays_bounded() {
        let mut g = Gates::default();
        let mut logged = 0;
        for i in 0..(MAX_SOURCES as u32 * 3) {
            let ip = IpAddr::from(i.to_be_bytes());
            logged += u32::from(g.allow(Some(ip), Instant::now()).is_some());
        }
        assert!(g.by_source.len() <= MAX_SOURCES + 1);
        assert_eq!(logged, MAX_SOURCES as u32 + 1, "the rest share one gate");
        // once the period has passed, old entries make room again
        tokio::time::advance(LOG_PERIOD).await;
        assert!(
            g.allow(Some(IpAddr::from([1, 2, 3, 4])), Instant::now())
                .is_some()
        );
        assert!(g.by_source.len() <= 2);
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
