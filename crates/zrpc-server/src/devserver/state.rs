//! `GET /admin/state`: the server's live state as JSON, and every zrpc client of the process.
//!
//! Everything is read when the view is asked for: the stages' own counters and windows (the
//! limit's, the shedder's, the breakers'), the drop counter `rpc_server_dropped_total`, the
//! count of open connections (kept per connection, not per call), and the clients' snapshots
//! (`zrpc_core::inspect`). No call does any work for the view.
//!
//! Drops over the last minute and ten minutes are differences from earlier readings of the drop
//! counters, which the DevServer takes every 5 s and keeps for 11 minutes (one counter family
//! read, not per-call work). A window ends at the view and starts at the newest reading at
//! least its length old; until the DevServer has run that long it starts at the first reading,
//! and says how many seconds it covers.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use prometheus::core::Collector;
use serde_json::{Value, json};
use zrpc_core::breaker::BreakerRegistry;
use zrpc_core::shedder::AdaptiveShedder;

use crate::conf::RpcServerConf;
use crate::transport::connections::Connections;

/// The client addresses shown, those with the most connections first.
const MAX_PEERS: usize = 32;
/// How often a reading of the drop counters is kept.
pub(crate) const READING_EVERY: Duration = Duration::from_secs(5);
/// How long readings are kept.
const READINGS_FOR: Duration = Duration::from_secs(11 * 60);

/// What the view reads of a server: its stages' shared state, fixed when it starts serving.
pub(crate) struct ServerView {
    name: String,
    listen_on: String,
    limit: Option<Arc<crate::stage::limit::Shared>>,
    shedder: Option<Arc<AdaptiveShedder>>,
    /// The breakers, when `Middlewares.Breaker` is on.
    breakers: Option<Arc<BreakerRegistry>>,
    connections: Arc<Connections>,
    /// The effective config, its secrets redacted (made once).
    config: Value,
    /// Readings of `rpc_server_dropped_total` by reason.
    readings: Mutex<VecDeque<(Instant, BTreeMap<String, u64>)>>,
}

impl std::fmt::Debug for ServerView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerView")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ServerView {
    /// The view of the server `conf` bound at `local`.
    pub(crate) fn new(
        conf: &RpcServerConf,
        local: std::net::SocketAddr,
        limit: Option<Arc<crate::stage::limit::Shared>>,
        shedder: Option<Arc<AdaptiveShedder>>,
        breakers: Option<Arc<BreakerRegistry>>,
        connections: Arc<Connections>,
    ) -> Self {
        ServerView {
            name: conf.name.clone(),
            listen_on: local.to_string(),
            limit,
            shedder,
            breakers,
            connections,
            config: super::redact::config_json(conf),
            readings: Mutex::default(),
        }
    }

    /// The server's part of the view.
    pub(crate) fn snapshot(&self) -> Value {
        let now = Instant::now();
        json!({
            "name": self.name,
            "listen_on": self.listen_on,
            "connections": {
                "open": self.connections.open(),
                "peers": self.connections.peers(MAX_PEERS).into_iter().map(|p| json!({
                    "addr": p.addr.to_string(),
                    "connections": p.connections,
                    "open_calls": p.open_calls,
                })).collect::<Vec<_>>(),
            },
            "limit": self.limit.as_ref().map(|l| limit(l)),
            "shedder": self.shedder.as_ref().map(|s| shedder(s, now)),
            "breakers": self.breakers.as_ref().map(|b| breakers(b, now)),
            "drops": self.drops(now),
            "config": self.config,
        })
    }

    /// Keeps a reading of the drop counters taken at `now` (the DevServer's timer calls this
    /// every [`READING_EVERY`]), and forgets those older than the longest window needs.
    pub(crate) fn keep_reading(&self, now: Instant) {
        let (by_reason, _) = dropped();
        let mut readings = self.readings.lock();
        while readings
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > READINGS_FOR)
        {
            readings.pop_front();
        }
        readings.push_back((now, by_reason));
    }

    /// The drop counters: in all, by method and reason, and over the last minute and ten.
    fn drops(&self, now: Instant) -> Value {
        let (by_reason, by_method) = dropped();
        let readings = self.readings.lock();
        json!({
            "total": by_reason,
            "last_1m": window(&readings, &by_reason, now, Duration::from_secs(60)),
            "last_10m": window(&readings, &by_reason, now, Duration::from_secs(600)),
            "by_method": by_method,
        })
    }
}

/// The drops by reason from the newest reading at least `span` before `now` (else the oldest
/// there is) to the counts `current`; `null` without a reading.
fn window(
    readings: &VecDeque<(Instant, BTreeMap<String, u64>)>,
    current: &BTreeMap<String, u64>,
    now: Instant,
    span: Duration,
) -> Value {
    let Some((at, base)) = readings
        .iter()
        .rev()
        .find(|(t, _)| now.saturating_duration_since(*t) >= span)
        .or_else(|| readings.front())
    else {
        return Value::Null;
    };
    let delta: BTreeMap<&String, u64> = current
        .iter()
        .map(|(r, n)| (r, n.saturating_sub(base.get(r).copied().unwrap_or(0))))
        .collect();
    json!({
        "seconds": now.saturating_duration_since(*at).as_secs(),
        "by_reason": delta,
    })
}

/// Each limit (`*` for the server's, else per method).
fn limit(shared: &crate::stage::limit::Shared) -> Value {
    let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
    let list: Vec<Value> = shared
        .limits()
        .into_iter()
        .map(|(method, l)| {
            let s = l.stats();
            json!({
                "method": method,
                "limit": s.limit,
                "inflight": s.inflight,
                "min_rtt_ms": ms(s.min_rtt),
                "sample_rtt_ms": ms(s.sample_rtt),
                "measuring": s.measuring,
            })
        })
        .collect();
    Value::Array(list)
}

/// The CPU shedder.
fn shedder(s: &AdaptiveShedder, now: Instant) -> Value {
    let st = s.stats(now);
    json!({
        "cpu_millicpu": st.cpu,
        "threshold_millicpu": s.config().cpu_threshold,
        "inflight": st.flying,
        "avg_inflight": st.avg_flying,
        "max_flight": st.max_flight * st.overload_factor,
        "min_rt_ms": st.min_rt.as_secs_f64() * 1000.0,
        "hot": st.hot,
    })
}

/// Each method's breaker and its window; `open` while it drops calls.
fn breakers(registry: &BreakerRegistry, now: Instant) -> Value {
    let mut names = registry.names();
    names.sort();
    let list: Vec<Value> = names
        .iter()
        .filter_map(|name| {
            let b = registry.find(name)?;
            let s = b.stats(now);
            let ratio = b.drop_ratio(now);
            Some(json!({
                "method": name,
                "state": if ratio > 0.0 { "open" } else { "closed" },
                "drop_ratio": ratio,
                "accepts": s.accepts,
                "failures": s.failures,
                "drops": s.drops,
                "total": s.total,
            }))
        })
        .collect();
    Value::Array(list)
}

/// `rpc_server_dropped_total` (the process's): by reason, and by method and reason.
fn dropped() -> (BTreeMap<String, u64>, Vec<Value>) {
    let mut by_reason = BTreeMap::new();
    let mut by_method = Vec::new();
    for family in crate::metrics::server_metrics().dropped_total.collect() {
        for m in family.get_metric() {
            let label = |name: &str| {
                m.get_label()
                    .iter()
                    .find(|l| l.name() == name)
                    .map(|l| l.value().to_owned())
                    .unwrap_or_default()
            };
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let n = m.get_counter().get_value() as u64;
            let reason = label("reason");
            *by_reason.entry(reason.clone()).or_insert(0) += n;
            by_method.push(json!({ "method": label("method"), "reason": reason, "count": n }));
        }
    }
    (by_reason, by_method)
}

/// The build: zrpc's version and the features compiled in.
pub(crate) fn build() -> Value {
    let mut features: Vec<&str> = [
        ("etcd", cfg!(feature = "etcd")),
        ("devserver", cfg!(feature = "devserver")),
        ("otel", cfg!(feature = "otel")),
        ("reflection", cfg!(feature = "reflection")),
        ("env-filter", cfg!(feature = "env-filter")),
        ("redis-auth", cfg!(feature = "redis-auth")),
        ("tls", cfg!(feature = "tls")),
        ("gzip", cfg!(feature = "gzip")),
        ("deflate", cfg!(feature = "deflate")),
        ("zstd", cfg!(feature = "zstd")),
        ("toml", zrpc_core::conf::format_compiled("toml")),
        ("json5", zrpc_core::conf::format_compiled("json5")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    features.sort_unstable();
    json!({ "version": env!("CARGO_PKG_VERSION"), "features": features })
}

/// Now, in Unix milliseconds.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(limit: u64, breaker: u64) -> BTreeMap<String, u64> {
        BTreeMap::from([("limit".into(), limit), ("breaker".into(), breaker)])
    }

    /// Each window starts at the newest reading at least its length old, or at the first one
    /// while the readings are younger, and says how long it covers.
    #[test]
    fn the_recent_windows_count_from_the_right_reading() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let none = VecDeque::new();
        assert!(window(&none, &counts(1, 0), t0, Duration::from_secs(60)).is_null());

        let readings: VecDeque<_> = [(at(0), counts(0, 0)), (at(5), counts(2, 1))]
            .into_iter()
            .collect();
        // younger than a minute: from the first reading, covering 30 s
        let w = window(&readings, &counts(7, 1), at(30), Duration::from_secs(60));
        assert_eq!(w["seconds"], 30);
        assert_eq!(
            (
                w["by_reason"]["limit"].as_u64(),
                w["by_reason"]["breaker"].as_u64()
            ),
            (Some(7), Some(1))
        );

        let readings: VecDeque<_> = (0..=120).map(|i| (at(i * 5), counts(i * 10, i))).collect();
        // at 605 s: the last minute starts at 545 s (reading 109), ten minutes at 5 s (reading 1)
        let now = at(605);
        let current = counts(1210, 121);
        let m = window(&readings, &current, now, Duration::from_secs(60));
        assert_eq!(m["seconds"], 60);
        assert_eq!(m["by_reason"]["limit"], 1210 - 1090);
        let ten = window(&readings, &current, now, Duration::from_secs(600));
        assert_eq!(ten["seconds"], 600);
        assert_eq!(ten["by_reason"]["breaker"], 121 - 1);
    }
}
