//! Per-method state of one client (its breaker, its metric handles, its log name), resolved once.
//!
//! The first call of a method builds its [`MethodState`]; later calls find it in a snapshot map
//! read without a lock or an allocation (arc-swap, as the balancer's endpoint set): one atomic
//! load, one hash of the path, one `Arc` clone. A new method swaps in a copy of the map with it
//! (rare: a client calls a handful of methods). Past [`MAX_METHODS`] distinct paths (a caller
//! making up paths) the state is built per call and not kept, so the map cannot grow unbounded.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use prometheus::{Histogram, IntCounter, IntCounterVec};
use zrpc_core::breaker::{BreakerRegistry, GoogleBreaker};

use crate::metrics::{ClientMetrics, DropReason};

/// At most this many methods are kept per client.
pub(crate) const MAX_METHODS: usize = 1024;

/// What the recorders of one method need, resolved on its first call.
#[derive(Debug)]
pub(crate) struct MethodState {
    /// `<target><full method>`: the breaker name and the log name.
    pub(crate) name: Box<str>,
    /// The full method (`/pkg.Service/Method`).
    pub(crate) path: Box<str>,
    pub(crate) breaker: Option<Arc<GoogleBreaker>>,
    pub(crate) metrics: Option<MethodMetrics>,
}

/// The metric handles of one method: the histogram child and one counter child per code, each
/// looked up in prometheus's label map once, in go-zero's unary families or, for a streaming
/// method, in `rpc_client_streams_*`.
#[derive(Debug)]
pub(crate) struct MethodMetrics {
    families: ClientMetrics,
    /// `code_total` or `stream_code_total`, by the method's kind.
    code_total: IntCounterVec,
    duration_ms: Histogram,
    codes: [OnceLock<IntCounter>; 17],
    /// `rpc_client_dropped_total` children, by [`DropReason`] (breaker, no endpoint).
    dropped: [OnceLock<IntCounter>; 2],
}

impl MethodMetrics {
    fn new(families: &ClientMetrics, path: &str) -> Self {
        let (duration_ms, code_total) = if crate::metrics::is_streaming_method(path) {
            (&families.stream_duration_ms, &families.stream_code_total)
        } else {
            (&families.duration_ms, &families.code_total)
        };
        MethodMetrics {
            duration_ms: duration_ms.with_label_values(&[path]),
            code_total: code_total.clone(),
            families: families.clone(),
            codes: Default::default(),
            dropped: Default::default(),
        }
    }

    /// Counts one call of `path` dropped for `reason`.
    pub(crate) fn dropped(&self, path: &str, reason: DropReason) {
        let i = match reason {
            DropReason::Breaker => 0,
            _ => 1,
        };
        self.dropped[i]
            .get_or_init(|| {
                self.families
                    .dropped_total
                    .with_label_values(&[path, reason.as_str()])
            })
            .inc();
    }

    /// Records one call of `ms` milliseconds that ended with `code`.
    pub(crate) fn record(&self, path: &str, ms: f64, code: i32) {
        self.duration_ms.observe(ms);
        let label = zrpc_core::grpc::code::as_str(code);
        // as_str maps codes outside 0..=16 to "2", the index of Unknown
        let i = usize::try_from(code)
            .ok()
            .filter(|&i| i < self.codes.len())
            .unwrap_or(2);
        self.codes[i]
            .get_or_init(|| self.code_total.with_label_values(&[path, label]))
            .inc();
    }
}

/// The per-method states of one client, shared by its clones.
#[derive(Debug)]
pub(crate) struct Methods {
    target: Arc<str>,
    breakers: Option<Arc<BreakerRegistry>>,
    metrics: Option<ClientMetrics>,
    /// Looked up on every call: foldhash (seeded per process) instead of std's slower SipHash;
    /// the keys are paths this client was asked to call, at most `MAX_METHODS` of them.
    map: ArcSwap<HashMap<Box<str>, Arc<MethodState>, foldhash::fast::RandomState>>,
}

impl Methods {
    pub(crate) fn new(
        target: Arc<str>,
        breakers: Option<Arc<BreakerRegistry>>,
        metrics: Option<ClientMetrics>,
    ) -> Self {
        Methods {
            target,
            breakers,
            metrics,
            map: ArcSwap::default(),
        }
    }

    pub(crate) fn target(&self) -> &Arc<str> {
        &self.target
    }

    /// The state of `path`, built on its first call.
    pub(crate) fn get(&self, path: &str) -> Arc<MethodState> {
        if let Some(m) = self.map.load().get(path) {
            return Arc::clone(m);
        }
        let state = Arc::new(self.build(path));
        if self.map.load().len() >= MAX_METHODS {
            return state;
        }
        let mut kept = Arc::clone(&state);
        self.map.rcu(|map| {
            let mut next = HashMap::clone(map);
            // another call may have inserted it meanwhile: keep the first
            kept = Arc::clone(
                next.entry(Box::from(path))
                    .or_insert_with(|| Arc::clone(&state)),
            );
            next
        });
        kept
    }

    fn build(&self, path: &str) -> MethodState {
        let name: Box<str> = format!("{}{path}", self.target).into();
        MethodState {
            breaker: self.breakers.as_ref().map(|r| r.get(&name)),
            metrics: self.metrics.as_ref().map(|m| MethodMetrics::new(m, path)),
            name,
            path: Box::from(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use zrpc_core::breaker::BreakerConfig;

    use super::*;

    #[test]
    fn a_method_is_resolved_once_and_shares_its_breaker() {
        let registry = Arc::new(BreakerRegistry::new(BreakerConfig::default()));
        let methods = Methods::new(Arc::from("direct:///a:1"), Some(registry.clone()), None);
        let a = methods.get("/p.S/A");
        let again = methods.get("/p.S/A");
        assert!(Arc::ptr_eq(&a, &again));
        assert_eq!(&*a.name, "direct:///a:1/p.S/A");
        assert!(Arc::ptr_eq(
            a.breaker.as_ref().unwrap_or_else(|| unreachable!()),
            &registry.get("direct:///a:1/p.S/A")
        ));
        assert!(!Arc::ptr_eq(&a, &methods.get("/p.S/B")));
    }

    #[test]
    fn made_up_paths_do_not_grow_the_map_past_its_cap() {
        let methods = Methods::new(Arc::from("t"), None, None);
        for i in 0..MAX_METHODS + 10 {
            methods.get(&format!("/p.S/M{i}"));
        }
        assert_eq!(methods.map.load().len(), MAX_METHODS);
        let late = methods.get("/p.S/late");
        assert_eq!(&*late.path, "/p.S/late");
        assert_eq!(methods.map.load().len(), MAX_METHODS);
    }
}
