//! Waiting for what a test can observe, instead of sleeping for a fixed time.
//!
//! A test that sleeps "long enough" for something to happen either wastes the time or, on a loaded
//! machine, checks too early. These helpers poll a condition the test can see (a client's endpoint
//! set, a counter, a health status) until it holds, and fail with what was awaited when a generous
//! deadline passes. A check that something does *not* happen still needs a bounded wait: say so
//! where it is written.

use std::future::Future;
use std::time::{Duration, Instant};

/// The deadline of [`until`] and [`until_async`]: far above what any awaited event takes on a
/// loaded 2-core machine, so reaching it means the event did not come.
pub const LIMIT: Duration = Duration::from_secs(20);

/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(10);

/// Polls `cond` until it holds, for at most [`LIMIT`]; returns how long it took.
///
/// # Panics
///
/// When `cond` does not hold within [`LIMIT`] (the message names `what`).
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    until_async(what, || std::future::ready(cond())).await
}

/// Like [`until`], with a condition that awaits (an etcd read, a health check).
///
/// # Panics
///
/// When `cond` does not hold within [`LIMIT`].
pub async fn until_async<F, Fut>(what: &str, cond: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    match within(LIMIT, cond).await {
        Some(took) => took,
        None => panic!("timed out after {LIMIT:?} waiting for {what}"),
    }
}

/// Polls `cond` until it holds (Some(time taken)) or `limit` passes (None).
pub async fn within<F, Fut>(limit: Duration, mut cond: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if cond().await {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}
