//! DNS discovery (`dns:///host:port`): the addresses of `host`, re-resolved periodically.
//!
//! A background task looks the name up with the system resolver (`tokio::net::lookup_host`), publishes the
//! distinct `ip:port` addresses (sorted) when they change, then sleeps 30 s (sooner after a failure:
//! 1 s, doubling up to the refresh interval). A failed lookup, or one that returns no address, keeps the last
//! known set. The task stops when the [`Resolution`] (and every client built on it) is dropped.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{Resolution, ResolverStatus};

/// How often a healthy name is re-resolved.
const REFRESH: Duration = Duration::from_secs(30);
/// First retry delay after a failed lookup (doubles up to the refresh interval).
const RETRY: Duration = Duration::from_secs(1);
/// One lookup may take at most this long.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

type Sender = watch::Sender<Option<Arc<Vec<String>>>>;

/// Stops the lookup task when the last clone of the [`Resolution`] (and every client built on
/// it) is dropped.
#[derive(Debug)]
struct DnsTask(tokio::task::AbortHandle);

impl Drop for DnsTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves `host:port` now and every 30 s. Returns at once (`updates` is `None` until the first
/// successful lookup); must be called inside a tokio runtime.
pub fn resolve(host: &str, port: u16) -> Result<Resolution, crate::Error> {
    resolve_every(host, port, REFRESH)
}

/// [`resolve`] with another refresh interval.
fn resolve_every(host: &str, port: u16, refresh: Duration) -> Result<Resolution, crate::Error> {
    let error = |reason: &str| crate::Error::Resolve {
        target: format!("dns:///{host}:{port}"),
        reason: reason.to_string(),
    };
    let host = host
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if host.is_empty() {
        return Err(error("empty host"));
    }
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| error("the dns resolver must be started inside a tokio runtime"))?;
    let (tx, updates) = watch::channel(None);
    let status = ResolverStatus::default();
    let label = format!("{host}:{port}");
    let lookup = move || {
        let host = host.clone();
        async move {
            tokio::net::lookup_host((host.as_str(), port))
                .await
                .map(Iterator::collect)
        }
    };
    let task = runtime
        .spawn(run(lookup, refresh, tx, status.clone(), label))
        .abort_handle();
    Ok(Resolution::new(updates, DnsTask(task)).with_status(status))
}

/// The lookup loop, generic over the lookup so that it can be tested with a fake one and tokio's paused clock.
async fn run<F, Fut>(
    lookup: F,
    refresh: Duration,
    tx: Sender,
    status: ResolverStatus,
    label: String,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = io::Result<Vec<SocketAddr>>>,
{
    let mut retry = RETRY.min(refresh);
    loop {
        let result = match tokio::time::timeout(LOOKUP_TIMEOUT, lookup()).await {
            Ok(Ok(addrs)) if addrs.is_empty() => Err("no address".to_string()),
            Ok(Ok(addrs)) => Ok(addrs),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("timed out after {LOOKUP_TIMEOUT:?}")),
        };
        let wait = match result {
            Ok(addrs) => {
                let mut addresses: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
                addresses.sort();
                addresses.dedup();
                tx.send_if_modified(|current| {
                    if current.as_deref() == Some(&addresses) {
                        return false;
                    }
                    tracing::info!(endpoints = ?addresses, "dns resolver: endpoints updated");
                    *current = Some(Arc::new(addresses.clone()));
                    true
                });
                retry = RETRY.min(refresh);
                status.set(None);
                refresh
            }
            Err(e) => {
                status.set(Some(format!("DNS lookup of {label} failed: {e}")));
                tracing::warn!(error = %e, retry_in = ?retry, "dns resolver: lookup failed, keeping the last known endpoints");
                let wait = retry;
                retry = (retry * 2).min(refresh);
                wait
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = tx.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    type Script = Arc<Mutex<VecDeque<io::Result<Vec<SocketAddr>>>>>;
    type Calls = Arc<Mutex<Vec<tokio::time::Instant>>>;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// A lookup that plays a script (then keeps returning the last answer) and records when it was called.
    fn scripted(
        script: Vec<io::Result<Vec<SocketAddr>>>,
    ) -> (
        impl Fn() -> std::future::Ready<io::Result<Vec<SocketAddr>>>,
        Calls,
    ) {
        let script: Script = Arc::new(Mutex::new(script.into()));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let c = calls.clone();
        let f = move || {
            c.lock().unwrap().push(tokio::time::Instant::now());
            let mut s = script.lock().unwrap();
            let next = if s.len() > 1 {
                s.pop_front().unwrap()
            } else {
                clone(s.front().unwrap())
            };
            std::future::ready(next)
        };
        (f, calls)
    }

    fn clone(r: &io::Result<Vec<SocketAddr>>) -> io::Result<Vec<SocketAddr>> {
        match r {
            Ok(v) => Ok(v.clone()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        }
    }

    fn current(rx: &watch::Receiver<Option<Arc<Vec<String>>>>) -> Option<Vec<String>> {
        rx.borrow().as_deref().cloned()
    }

    #[tokio::test(start_paused = true)]
    async fn publishes_refreshes_and_keeps_the_last_set_on_errors() {
        let fail = || Err(io::Error::other("SERVFAIL"));
        let (lookup, calls) = scripted(vec![
            fail(),
            Ok(vec![
                addr("10.0.0.2:80"),
                addr("10.0.0.1:80"),
                addr("10.0.0.1:80"),
            ]),
            fail(),
            Ok(vec![]),
            Ok(vec![addr("10.0.0.1:80"), addr("10.0.0.2:80")]),
            Ok(vec![addr("10.0.0.3:80")]),
        ]);
        let (tx, mut rx) = watch::channel(None);
        let start = tokio::time::Instant::now();
        let task = tokio::spawn(run(
            lookup,
            Duration::from_secs(30),
            tx,
            ResolverStatus::default(),
            "h:1".into(),
        ));

        // First lookup fails: nothing published (None), retry after 1 s.
        rx.changed().await.unwrap();
        assert_eq!(
            current(&rx),
            Some(vec!["10.0.0.1:80".to_string(), "10.0.0.2:80".to_string()])
        );
        // Failure, then an empty answer: the set is kept; then the same set again: no update; then a change.
        rx.changed().await.unwrap();
        assert_eq!(current(&rx), Some(vec!["10.0.0.3:80".to_string()]));
        task.abort();

        let at: Vec<Duration> = calls.lock().unwrap().iter().map(|t| *t - start).collect();
        // fail@0 -> retry 1 s; ok@1 -> refresh 30 s; fail@31 -> retry 1 s; empty@32 -> retry 2 s; ok@34 (same) ->
        // 30 s; ok@64 (changed).
        let secs: Vec<u64> = at.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [0, 1, 31, 32, 34, 64]);
    }

    #[tokio::test(start_paused = true)]
    async fn stops_when_every_receiver_is_gone() {
        let (lookup, _) = scripted(vec![Ok(vec![addr("10.0.0.1:80")])]);
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(run(
            lookup,
            Duration::from_secs(30),
            tx,
            ResolverStatus::default(),
            "h:1".into(),
        ));
        drop(rx);
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn resolves_localhost_and_stops_with_its_guard() {
        let r = resolve("localhost", 8080).unwrap();
        let mut rx = r.updates();
        // The first lookup's verdict: the set, or the problem the resolver reports (a failed
        // lookup, or one past its own LOOKUP_TIMEOUT), whichever comes first. The guard lies
        // past that timeout, so that a slow system resolver fails with the resolver's own
        // words rather than this test's timeout.
        let verdict = tokio::time::timeout(LOOKUP_TIMEOUT + Duration::from_secs(5), async {
            tokio::select! {
                set = rx.wait_for(Option::is_some) => set.map(drop).map_err(|e| e.to_string()),
                problem = r.status().failed() => Err(problem.to_string()),
            }
        })
        .await
        .expect("the resolver reported nothing past its own lookup timeout");
        if let Err(problem) = verdict {
            panic!("localhost did not resolve at the first lookup: {problem}");
        }
        let got = current(&rx).unwrap();
        assert!(
            got.iter()
                .any(|a| a == "127.0.0.1:8080" || a == "[::1]:8080"),
            "localhost resolved to {got:?}"
        );
        drop(r);
        tokio::time::timeout(Duration::from_secs(1), async {
            while rx.changed().await.is_ok() {}
        })
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn bad_input_is_an_error() {
        assert!(resolve("", 80).is_err());
    }
}
