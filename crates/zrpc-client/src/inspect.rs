//! A client's part of the admin view (`GET /admin/state` on the DevServer of a server in the
//! same process): its target, resolver, endpoints, breakers and retry budget.
//!
//! Each client adds itself to the process-wide registry (`zrpc_core::inspect`) once, as it is
//! built, with a weak reference: the registry keeps no client alive, and nothing is done per
//! call. The snapshot is taken only when the view is asked for.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use zrpc_core::breaker::BreakerRegistry;
use zrpc_core::inspect::Inspect;

use crate::balancer::Balancer;
use crate::retry::policy::Policies;

/// What the view reads of one client (shared by its clones).
pub(crate) struct ClientView {
    pub(crate) balancer: Balancer,
    pub(crate) breakers: Option<Arc<BreakerRegistry>>,
    pub(crate) policies: Option<Arc<Policies>>,
}

impl ClientView {
    /// The view of a client, registered: it shows while the returned `Arc` lives.
    pub(crate) fn register(self) -> Arc<dyn Inspect> {
        let view: Arc<dyn Inspect> = Arc::new(self);
        zrpc_core::inspect::register_client(&view);
        view
    }

    /// The breakers of this client's methods (named `<target><method>` in the registry).
    fn breakers(&self) -> Value {
        let Some(registry) = &self.breakers else {
            return Value::Null;
        };
        let target = &*self.balancer.shared.target;
        let now = Instant::now();
        let mut list: Vec<Value> = registry
            .names()
            .into_iter()
            .filter_map(|name| {
                let method = name.strip_prefix(target)?.to_owned();
                if !method.starts_with('/') {
                    return None;
                }
                let b = registry.find(&name)?;
                let s = b.stats(now);
                Some(json!({
                    "method": method,
                    "drop_ratio": b.drop_ratio(now),
                    "accepts": s.accepts,
                    "failures": s.failures,
                    "drops": s.drops,
                    "total": s.total,
                }))
            })
            .collect();
        list.sort_by(|a, b| a["method"].as_str().cmp(&b["method"].as_str()));
        Value::Array(list)
    }
}

impl Inspect for ClientView {
    fn snapshot(&self) -> Value {
        let shared = &self.balancer.shared;
        json!({
            "target": &*shared.target,
            "balancer": shared.kind_name(),
            "resolver": shared.resolver_view(),
            "endpoints": shared.endpoints_view(),
            "breakers": self.breakers(),
            "retry_budget": self
                .policies
                .as_ref()
                .map(|p| json!({ "remaining": p.budget_remaining() })),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::Client;
    use crate::conf::RpcClientConf;

    /// The snapshot of the live client whose target is `target`.
    fn view_of(target: &str) -> Option<serde_json::Value> {
        zrpc_core::inspect::client_snapshots()
            .into_iter()
            .find(|s| s["target"] == target)
    }

    #[tokio::test]
    async fn a_client_shows_while_a_clone_lives() {
        let client = Client::new(RpcClientConf::direct(["127.0.0.1:7", "127.0.0.1:9"]))
            .await
            .unwrap();
        let target = client.target().to_owned();
        let clone = client.clone();
        drop(client);
        let view = view_of(&target).expect("the live client is shown");
        assert_eq!(view["balancer"], "p2c_ewma");
        assert_eq!(view["resolver"]["endpoints"], 2);
        assert_eq!(view["endpoints"].as_array().map(Vec::len), Some(2));
        // breakers on by default (none made yet), no retry policy: no budget
        assert_eq!(view["breakers"], serde_json::json!([]));
        assert!(view["retry_budget"].is_null());
        drop(clone);
        assert!(
            view_of(&target).is_none(),
            "a dropped client leaves the view"
        );
    }
}
