//! Where an app's expected token comes from: the [`TokenStore`] trait, its answer [`Lookup`], and
//! [`StaticTokens`], the `AuthTokens` map (the Redis store is `redis_store.rs`).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::Error;

/// A boxed token lookup, for stores that must do I/O.
pub type TokenFuture = Pin<Box<dyn Future<Output = Result<Option<Arc<str>>, Error>> + Send>>;

/// The answer of [`TokenStore::lookup`]: at once (no allocation) or later.
#[allow(missing_debug_implementations)]
pub enum Lookup {
    /// The answer is known now: the expected token, `None` for an unknown app, or an error.
    Ready(Result<Option<Arc<str>>, Error>),
    /// The answer needs I/O (e.g. Redis).
    Pending(TokenFuture),
}

/// Where the expected token of an app comes from (go-zero uses a Redis hash).
///
/// Implement it for custom stores and hand it to
/// [`Server::token_store`](crate::Server::token_store); [`StaticTokens`] is the built-in map
/// from `AuthTokens`.
pub trait TokenStore: Send + Sync + fmt::Debug + 'static {
    /// The expected token of `app`.
    fn lookup(&self, app: &str) -> Lookup;
}

/// A fixed app -> token map (config `AuthTokens`).
#[derive(Clone, Default)]
pub struct StaticTokens(HashMap<String, Arc<str>>);

impl StaticTokens {
    /// A store from `(app, token)` pairs.
    pub fn new<I, A, T>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (A, T)>,
        A: Into<String>,
        T: AsRef<str>,
    {
        Self(
            pairs
                .into_iter()
                .map(|(a, t)| (a.into(), Arc::from(t.as_ref())))
                .collect(),
        )
    }
}

impl fmt::Debug for StaticTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the tokens.
        f.debug_struct("StaticTokens")
            .field("apps", &self.0.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl TokenStore for StaticTokens {
    fn lookup(&self, app: &str) -> Lookup {
        Lookup::Ready(Ok(self.0.get(app).cloned()))
    }
}
