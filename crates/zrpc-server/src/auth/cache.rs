//! The token cache of the Redis store: go-zero's `collection.Cache` as `internal/auth` uses it
//! (`core/collection/cache.go`, v1.10.3).
//!
//! - Only successful lookups are cached, each for a fixed time from when it was fetched
//!   (go-zero: 5 minutes); errors, including a missing field, are never cached.
//! - Concurrent misses for one app share one fetch (go-zero's `syncx.SingleFlight`): the first
//!   caller starts it, the others wait for the same result.
//! - No size limit, as in go-zero: only apps present in the Redis hash are ever cached.
//!
//! A hit takes a read lock and clones an `Arc<str>`: no allocation. Time is
//! `tokio::time::Instant`, so tests drive it with a paused clock.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use parking_lot::{Mutex, RwLock};
use tokio::time::Instant;

/// The result of one fetch, shared by every caller waiting for it (the error is its text).
pub(crate) type Fetched = Result<Arc<str>, Arc<str>>;

/// A cached token and when it was fetched.
type Entry = (Arc<str>, Instant);

/// A fetch in flight, shared by every caller that missed.
pub(crate) type InFlight = Shared<BoxFuture<'static, Fetched>>;

/// A TTL cache of app -> token with single-flight misses.
#[derive(Debug)]
pub(crate) struct TokenCache {
    ttl: Duration,
    entries: RwLock<HashMap<Box<str>, Entry>>,
    in_flight: Mutex<HashMap<Box<str>, InFlight>>,
}

impl TokenCache {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: RwLock::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The cached token of `app`, if fetched less than the TTL ago.
    pub(crate) fn get(&self, app: &str, now: Instant) -> Option<Arc<str>> {
        let entries = self.entries.read();
        let (token, fetched) = entries.get(app)?;
        (now.saturating_duration_since(*fetched) < self.ttl).then(|| Arc::clone(token))
    }

    /// Joins the fetch in flight for `app`, or starts `fetch` (cached on success).
    pub(crate) fn take<F>(self: &Arc<Self>, app: &str, fetch: F) -> InFlight
    where
        F: Future<Output = Fetched> + Send + 'static,
    {
        let mut in_flight = self.in_flight.lock();
        if let Some(shared) = in_flight.get(app) {
            return shared.clone();
        }
        let cache = Arc::clone(self);
        let key: Box<str> = app.into();
        let owned = key.clone();
        // A task of its own: a shared future runs only while a waiter polls it, so a fetch
        // whose waiters all gave up (their deadline, a reset) would stay in `in_flight` for
        // good, and a later miss would take its stale answer.
        let fetching = tokio::spawn(async move {
            let found = fetch.await;
            if let Ok(token) = &found {
                cache
                    .entries
                    .write()
                    .insert(owned.clone(), (Arc::clone(token), Instant::now()));
            }
            cache.in_flight.lock().remove(&owned);
            found
        });
        let shared = async move {
            fetching
                .await
                .unwrap_or_else(|e| Err(format!("token lookup failed: {e}").into()))
        }
        .boxed()
        .shared();
        in_flight.insert(key, shared.clone());
        shared
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn counting(
        calls: &Arc<AtomicUsize>,
        answer: Fetched,
    ) -> impl Future<Output = Fetched> + Send + use<> {
        let calls = Arc::clone(calls);
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            answer
        }
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_misses_share_one_fetch() {
        let cache = Arc::new(TokenCache::new(Duration::from_secs(300)));
        let calls = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = (0..50)
            .map(|_| cache.take("app", counting(&calls, Ok("t".into()))))
            .collect();
        for r in futures_util::future::join_all(waiters).await {
            assert_eq!(r.unwrap().as_ref(), "t");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(cache.get("app", Instant::now()).as_deref(), Some("t"));
    }

    /// A fetch whose every waiter gave up still ends, and leaves nothing in flight.
    #[tokio::test(start_paused = true)]
    async fn a_fetch_nobody_waits_for_any_more_still_ends() {
        let cache = Arc::new(TokenCache::new(Duration::from_secs(300)));
        let calls = Arc::new(AtomicUsize::new(0));
        drop(cache.take("gone", counting(&calls, Ok("t".into()))));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(cache.in_flight.lock().is_empty(), "no fetch left in flight");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(cache.get("gone", Instant::now()).as_deref(), Some("t"));
    }

    #[tokio::test(start_paused = true)]
    async fn entries_expire_after_the_ttl() {
        let cache = Arc::new(TokenCache::new(Duration::from_secs(300)));
        let calls = Arc::new(AtomicUsize::new(0));
        cache
            .take("app", counting(&calls, Ok("t".into())))
            .await
            .unwrap();
        tokio::time::advance(Duration::from_secs(299)).await;
        assert!(cache.get("app", Instant::now()).is_some());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(cache.get("app", Instant::now()).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn errors_are_not_cached() {
        let cache = Arc::new(TokenCache::new(Duration::from_secs(300)));
        let calls = Arc::new(AtomicUsize::new(0));
        let e = cache.take("app", counting(&calls, Err("redis: nil".into())));
        assert_eq!(e.await.unwrap_err().as_ref(), "redis: nil");
        assert!(cache.get("app", Instant::now()).is_none());
        cache
            .take("app", counting(&calls, Ok("t".into())))
            .await
            .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}
