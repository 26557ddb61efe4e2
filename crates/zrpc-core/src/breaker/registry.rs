//! Breakers by name (go-zero `breakers.go`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use super::{BreakerConfig, GoogleBreaker};

/// A map of named breakers created on first use (go-zero `GetBreaker(name)`).
///
/// The server keys breakers by full gRPC method, the client by `target/method`. Lookups of an
/// existing name take a read lock and do not allocate; cache the returned [`Arc`] where you can.
///
/// Unlike go-zero, breakers can be removed ([`remove`](Self::remove)), and a registry can be created
/// with its own [`BreakerConfig`] instead of using the process-wide [`global`](Self::global) one.
///
/// # Examples
///
/// ```
/// use zrpc_core::breaker::BreakerRegistry;
///
/// let a = BreakerRegistry::global().get("/greeter.Greeter/SayHello");
/// let b = BreakerRegistry::global().get("/greeter.Greeter/SayHello");
/// assert!(std::sync::Arc::ptr_eq(&a, &b));
/// ```
#[derive(Debug, Default)]
pub struct BreakerRegistry {
    config: BreakerConfig,
    breakers: RwLock<HashMap<String, Arc<GoogleBreaker>, Hasher>>,
}

/// The server looks its method's breaker up on every call: foldhash, seeded per process, hashes
/// the path several times faster than SipHash (std's default). The keys are method names the
/// server or client knows, so there is no flooding to resist beyond what a seeded hash gives.
type Hasher = foldhash::fast::RandomState;

fn global_registry() -> &'static Arc<BreakerRegistry> {
    static GLOBAL: OnceLock<Arc<BreakerRegistry>> = OnceLock::new();
    GLOBAL.get_or_init(Arc::default)
}

impl BreakerRegistry {
    /// An empty registry whose breakers use `config`.
    #[must_use]
    pub fn new(config: BreakerConfig) -> Self {
        BreakerRegistry {
            config,
            breakers: RwLock::new(HashMap::default()),
        }
    }

    /// The process-wide registry (go-zero's package-level breakers), with the default config.
    #[must_use]
    pub fn global() -> &'static BreakerRegistry {
        global_registry()
    }

    /// A handle on the process-wide registry, for holders of an `Arc<BreakerRegistry>` (the
    /// client takes one, and a registry of its own in tests).
    #[must_use]
    pub fn shared() -> Arc<BreakerRegistry> {
        Arc::clone(global_registry())
    }

    /// The breaker called `name`, created on first use.
    #[must_use]
    pub fn get(&self, name: &str) -> Arc<GoogleBreaker> {
        if let Some(b) = self.breakers.read().get(name) {
            return Arc::clone(b);
        }
        let mut map = self.breakers.write();
        Arc::clone(
            map.entry(name.to_owned())
                .or_insert_with(|| Arc::new(GoogleBreaker::new(self.config.clone()))),
        )
    }

    /// The breaker called `name` if it exists (none is created).
    #[must_use]
    pub fn find(&self, name: &str) -> Option<Arc<GoogleBreaker>> {
        self.breakers.read().get(name).cloned()
    }

    /// Removes the breaker called `name`; holders of its [`Arc`] keep using it.
    pub fn remove(&self, name: &str) -> Option<Arc<GoogleBreaker>> {
        self.breakers.write().remove(name)
    }

    /// The number of breakers.
    #[must_use]
    pub fn len(&self) -> usize {
        self.breakers.read().len()
    }

    /// True when there are no breakers.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.breakers.read().is_empty()
    }

    /// The names of the breakers, in no particular order.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.breakers.read().keys().cloned().collect()
    }
}
