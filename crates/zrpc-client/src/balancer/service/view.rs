//! The balancer's part of the admin view: the resolver's state and each endpoint's stats, read
//! when the view is asked for (nothing per call).

use serde_json::{Value, json};

use super::Shared;
use crate::balancer::stats::EndpointStats;
use crate::client::EndpointState;

impl Shared {
    /// The resolver's state: whether the first set came, its problem, when the last set was
    /// applied (Unix ms) and how many endpoints it has.
    pub(crate) fn resolver_view(&self) -> Value {
        let updated = self.updated_ms.load(std::sync::atomic::Ordering::Relaxed);
        json!({
            "ready": self.is_ready(),
            "problem": self.status.problem().map(|p| p.to_string()),
            "last_update_unix_ms": (updated > 0).then_some(updated),
            "endpoints": self.set.load().len(),
        })
    }

    /// Each endpoint with its balancer stats and state, in the set's order.
    pub(crate) fn endpoints_view(&self) -> Value {
        let clock = self.p2c.clock();
        let now = clock.coarse_now();
        let list: Vec<Value> = self
            .set
            .load()
            .iter()
            .map(|e| {
                let s = &e.stats;
                json!({
                    "addr": &*e.addr,
                    "state": state(s, now).as_str(),
                    "ewma_ms": s.lag().map(|d| d.as_secs_f64() * 1000.0),
                    "inflight": s.inflight(),
                    "success": s.success(),
                    "requests": s.requests(),
                })
            })
            .collect();
        Value::Array(list)
    }

    /// The balancer's name (`p2c_ewma`, `round_robin`, `consistent_hash`).
    pub(crate) fn kind_name(&self) -> &'static str {
        self.kind.as_str()
    }
}

/// An endpoint's state at `now` (ns), as [`EndpointState`] names it.
pub(crate) fn state(s: &EndpointStats, now: u64) -> EndpointState {
    if s.is_unreachable(now) {
        EndpointState::Down
    } else if s.is_suspect() {
        EndpointState::Suspect
    } else if s.is_ejected(now) {
        EndpointState::Ejected
    } else if s.is_probing() {
        EndpointState::Probing
    } else {
        EndpointState::Healthy
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::balancer::Balancer;
    use crate::balancer::endpoint::ConnectOptions;
    use crate::conf::BalancerName;

    #[tokio::test]
    async fn shows_the_set_and_each_endpoint_cold() {
        let (_tx, rx) = tokio::sync::watch::channel(Some(Arc::new(vec![
            "127.0.0.1:1".to_owned(),
            "127.0.0.1:2".to_owned(),
        ])));
        let b = Balancer::new(
            Arc::from("direct:///127.0.0.1:1,127.0.0.1:2"),
            BalancerName::P2cEwma,
            rx,
            ConnectOptions::default(),
            1,
        );
        let r = b.shared.resolver_view();
        assert_eq!(
            (r["ready"].as_bool(), r["endpoints"].as_u64()),
            (Some(true), Some(2))
        );
        assert!(
            r["last_update_unix_ms"].as_u64().is_some_and(|ms| ms > 0),
            "{r}"
        );
        assert!(r["problem"].is_null());
        let e = b.shared.endpoints_view();
        let addrs: Vec<_> = e
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["addr"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(addrs.len(), 2);
        assert!(addrs.contains(&"127.0.0.1:1".to_owned()));
        // cold: no latency yet, probing, full success score
        assert_eq!(e[0]["state"], "probing");
        assert!(e[0]["ewma_ms"].is_null());
        assert_eq!(e[0]["success"].as_f64(), Some(1000.0));
        assert_eq!(b.shared.kind_name(), "p2c_ewma");
    }
}
