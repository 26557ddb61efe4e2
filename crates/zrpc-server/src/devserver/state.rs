//! `GET /admin/state`: the server's live state as JSON, and every zrpc client of the process.
//!
//! Everything is read when the view is asked for: the stages' own counters and windows (the
//! limit's, the shedder's, the breakers'), the drop counter `rpc_server_dropped_total`, the
//! count of open connections (kept per connection, not per call), and the clients' snapshots
//! (`zrpc_core::inspect`). No call does any work for the view.
//!
//! Drops over the last minute and ten minutes are the differences from the counters seen by
//! earlier views: the view keeps a reading at most every 5 s for 11 minutes, so the windows
//! need someone (the admin page, `zrpcctl inspect --watch`, a scraper) to look now and then;
//! until a reading that old exists, a window says how many seconds it covers.

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
const READING_EVERY: Duration = Duration::from_secs(5);
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

    /// The drop counters: in all, by method and reason, and over the last minute and ten.
    fn drops(&self, now: Instant) -> Value {
        let (by_reason, by_method) = dropped();
        let mut readings = self.readings.lock();
        while readings
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > READINGS_FOR)
        {
            readings.pop_front();
        }
        let window = |span: Duration| {
            // the newest reading at least `span` old, else the oldest there is
            let base = readings
                .iter()
                .rev()
                .find(|(t, _)| now.saturating_duration_since(*t) >= span)
                .or_else(|| readings.front())?;
            let delta: BTreeMap<&String, u64> = by_reason
                .iter()
                .map(|(r, n)| (r, n.saturating_sub(base.1.get(r).copied().unwrap_or(0))))
                .collect();
            Some(json!({
                "seconds": now.saturating_duration_since(base.0).as_secs(),
                "by_reason": delta,
            }))
        };
        let view = json!({
            "total": by_reason,
            "last_1m": window(Duration::from_secs(60)),
            "last_10m": window(Duration::from_secs(600)),
            "by_method": by_method,
        });
        if readings
            .back()
            .is_none_or(|(t, _)| now.saturating_duration_since(*t) >= READING_EVERY)
        {
            readings.push_back((now, by_reason));
        }
        view
    }
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
