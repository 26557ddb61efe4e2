//! Sends a call's priority tier as `zrpc-tier` metadata (zrpc addition): the caller's own (set
//! with [`set_tier`], or as metadata) wins, then the method's (`MethodTiers`), then the
//! client's (`Tier`). A server with a concurrency limit sheds the lower tiers first.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use tonic::body::Body;
use tonic::metadata::MetadataValue;
use zrpc_core::limit::{TIER_KEY, Tier};

use crate::conf::RpcClientConf;

const TIER: HeaderName = HeaderName::from_static(TIER_KEY);

/// The tiers a client's config gives its calls.
#[derive(Debug)]
pub(crate) struct Tiers {
    methods: HashMap<Box<str>, Tier>,
    all: Option<Tier>,
}

impl Tiers {
    /// The config's tiers; `None` when it sets none (the stage is skipped).
    pub(crate) fn new(conf: &RpcClientConf) -> Option<Arc<Self>> {
        (conf.tier.is_some() || !conf.method_tiers.is_empty()).then(|| {
            Arc::new(Tiers {
                methods: conf
                    .method_tiers
                    .iter()
                    .map(|m| (Box::from(m.full_method.as_str()), m.tier))
                    .collect(),
                all: conf.tier,
            })
        })
    }

    /// Adds the `zrpc-tier` header to `req`, unless the caller set one.
    pub(crate) fn apply(&self, req: &mut http::Request<Body>) {
        if req.headers().contains_key(&TIER) {
            return;
        }
        if let Some(t) = self.methods.get(req.uri().path()).copied().or(self.all) {
            req.headers_mut()
                .insert(TIER, HeaderValue::from_static(t.as_str()));
        }
    }
}

/// Marks one call's priority tier: the `zrpc-tier` metadata, which wins over the client's
/// `Tier` and `MethodTiers`. Any gRPC client can send the same metadata (a go-zero client with
/// `metadata.AppendToOutgoingContext(ctx, "zrpc-tier", "critical")`).
///
/// # Examples
///
/// ```
/// use zrpc_client::{conf::Tier, set_tier};
///
/// let mut req = tonic::Request::new(());
/// set_tier(&mut req, Tier::Critical);
/// assert_eq!(req.metadata().get("zrpc-tier").unwrap(), "critical");
/// ```
pub fn set_tier<T>(req: &mut tonic::Request<T>, tier: Tier) {
    req.metadata_mut()
        .insert(TIER_KEY, MetadataValue::from_static(tier.as_str()));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str) -> http::Request<Body> {
        http::Request::builder()
            .uri(path)
            .body(Body::empty())
            .unwrap()
    }

    fn tier_of(req: &http::Request<Body>) -> Option<&str> {
        req.headers().get(TIER).map(|v| v.to_str().unwrap())
    }

    #[test]
    fn the_callers_tier_wins_then_the_methods_then_the_clients() {
        let conf = RpcClientConf::direct(["127.0.0.1:1"])
            .with_tier(Tier::Sheddable)
            .with_method_tier("/pay.Pay/Charge", Tier::Critical);
        let tiers = Tiers::new(&conf).expect("tiers configured");
        let mut charge = request("/pay.Pay/Charge");
        tiers.apply(&mut charge);
        assert_eq!(tier_of(&charge), Some("critical"));
        let mut other = request("/pay.Pay/List");
        tiers.apply(&mut other);
        assert_eq!(tier_of(&other), Some("sheddable"));
        let mut own = tonic::Request::new(());
        set_tier(&mut own, Tier::Default);
        let (metadata, _, ()) = own.into_parts();
        let mut own = request("/pay.Pay/Charge");
        *own.headers_mut() = metadata.into_headers();
        tiers.apply(&mut own);
        assert_eq!(tier_of(&own), Some("default"));
        // Without tiers in the config the stage is off.
        assert!(Tiers::new(&RpcClientConf::direct(["127.0.0.1:1"])).is_none());
        let only = Tiers::new(
            &RpcClientConf::direct(["127.0.0.1:1"]).with_method_tier("/a.B/C", Tier::Critical),
        )
        .unwrap();
        let mut none = request("/a.B/D");
        only.apply(&mut none);
        assert_eq!(tier_of(&none), None);
    }
}
