//! Calls through a zrpc client: one [`say_hello`], or a [`zrpc_load`] run and its [`ZrpcRun`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tonic::Code;

use super::SERVER_HEADER;
use crate::pb::HelloRequest;

/// One call's outcome through a zrpc client: the `x-server` that answered (if any), the code and
/// the reply or status message.
#[derive(Debug, Clone)]
pub struct ZrpcCall {
    /// `x-server` header value ("" if none).
    pub server: String,
    /// The gRPC code.
    pub code: Code,
    /// The reply text or the status message.
    pub message: String,
    /// When the call started and when it ended.
    pub span: (Instant, Instant),
}

/// A unary `SayHello(name)` through any tonic channel (a zrpc `Client` included).
pub async fn say_hello<T>(
    client: &mut crate::pb::greeter_client::GreeterClient<T>,
    name: &str,
) -> ZrpcCall
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error:
        Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    let header = |md: &tonic::metadata::MetadataMap| {
        md.get(SERVER_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let started = Instant::now();
    let result = client
        .say_hello(HelloRequest {
            name: name.to_owned(),
        })
        .await;
    let span = (started, Instant::now());
    match result {
        Ok(r) => ZrpcCall {
            server: header(r.metadata()),
            code: Code::Ok,
            message: r.into_inner().message,
            span,
        },
        Err(st) => ZrpcCall {
            server: header(st.metadata()),
            code: st.code(),
            message: st.message().to_owned(),
            span,
        },
    }
}

/// Results of a load run through a zrpc client.
#[derive(Clone, Default)]
pub struct ZrpcRun {
    /// Calls made.
    pub calls: u64,
    /// Calls that failed.
    pub failed: u64,
    /// Calls per `x-server`.
    pub servers: BTreeMap<String, u64>,
    /// Calls per code (`Ok`, `Unavailable`, ...).
    pub codes: BTreeMap<String, u64>,
    /// The first distinct failures.
    pub first_errors: Vec<String>,
    /// Each call's start, end and code, in no particular order.
    pub spans: Vec<(Instant, Instant, Code)>,
    /// Wall time.
    pub elapsed: Duration,
}

/// Everything but the spans (a failed assertion prints the run: the figures, not every call).
impl std::fmt::Debug for ZrpcRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZrpcRun")
            .field("calls", &self.calls)
            .field("failed", &self.failed)
            .field("servers", &self.servers)
            .field("codes", &self.codes)
            .field("first_errors", &self.first_errors)
            .field("elapsed", &self.elapsed)
            .finish_non_exhaustive()
    }
}

impl ZrpcRun {
    /// Share of the calls answered by `server` (0..=1).
    pub fn share(&self, server: &str) -> f64 {
        if self.calls == 0 {
            return 0.0;
        }
        self.servers.get(server).copied().unwrap_or(0) as f64 / self.calls as f64
    }

    /// The shares of `servers` as `server=NN%` text.
    pub fn shares_text(&self, servers: &[String]) -> String {
        servers
            .iter()
            .map(|s| format!("{s}={:.0}%", self.share(s) * 100.0))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Asserts 0 failures and that each of `servers` answered at least `min` of the calls.
    ///
    /// # Panics
    /// When a call failed or a share is too small.
    pub fn assert_ok_and_shares(&self, what: &str, servers: &[String], min: f64) {
        assert!(self.calls > 0, "{what}: no calls");
        assert_eq!(self.failed, 0, "{what}: failed calls: {self:?}");
        for s in servers {
            assert!(
                self.share(s) >= min,
                "{what}: {s} answered {:.1}% (want >= {:.0}%): {self:?}",
                self.share(s) * 100.0,
                min * 100.0
            );
        }
        let counted: u64 = servers
            .iter()
            .map(|s| self.servers.get(s).copied().unwrap_or(0))
            .sum();
        assert_eq!(counted, self.calls, "{what}: unexpected servers: {self:?}");
    }
}

/// How a zrpc-client load run is shaped.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Calls per worker (ignored with `duration`).
    pub calls_per_worker: u64,
    /// Concurrent workers.
    pub workers: u64,
    /// Pause between two calls of a worker.
    pub gap: Duration,
    /// If set, call until it elapses.
    pub duration: Option<Duration>,
    /// The request name (may carry a directive, e.g. `sleep:5`).
    pub name: &'static str,
}

/// Calls `SayHello(load.name)` through `client` as `load` says; the first call of each worker is
/// retried (for up to `wait`) while it fails with `Unavailable` before any call succeeded, as
/// `gz-client` does (discovery lags).
pub async fn zrpc_load(client: &zrpc_client::Client, load: Load, wait: Duration) -> ZrpcRun {
    use crate::pb::greeter_client::GreeterClient;
    let started = Instant::now();
    let stop_at = load.duration.map(|d| started + d);
    // The first call (uncounted retries until one reaches a server or `wait` passes).
    let mut first = GreeterClient::new(client.clone());
    let mut first_call = say_hello(&mut first, load.name).await;
    while first_call.code != Code::Ok && first_call.server.is_empty() && started.elapsed() < wait {
        tokio::time::sleep(Duration::from_millis(100)).await;
        first_call = say_hello(&mut first, load.name).await;
    }
    let total = load.calls_per_worker * load.workers.max(1);
    let next = Arc::new(AtomicU64::new(1)); // the first call was call 0
    let mut workers = Vec::new();
    for _ in 0..load.workers.max(1) {
        let mut greeter = GreeterClient::new(client.clone());
        let next = next.clone();
        workers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for n in 0u64.. {
                if n > 0 && !load.gap.is_zero() {
                    tokio::time::sleep(load.gap).await;
                }
                match stop_at {
                    Some(stop) if Instant::now() >= stop => break,
                    Some(_) => {}
                    None if next.fetch_add(1, Ordering::SeqCst) >= total => break,
                    None => {}
                }
                out.push(say_hello(&mut greeter, load.name).await);
            }
            out
        }));
    }
    let mut all = vec![first_call];
    for w in workers {
        all.extend(w.await.expect("load worker panicked"));
    }
    let mut run = ZrpcRun {
        elapsed: started.elapsed(),
        ..ZrpcRun::default()
    };
    for c in all {
        run.calls += 1;
        run.spans.push((c.span.0, c.span.1, c.code));
        *run.codes.entry(format!("{:?}", c.code)).or_default() += 1;
        if !c.server.is_empty() {
            *run.servers.entry(c.server.clone()).or_default() += 1;
        }
        if c.code != Code::Ok {
            run.failed += 1;
            let e = format!("{:?}: {}", c.code, c.message);
            if run.first_errors.len() < 5 && !run.first_errors.contains(&e) {
                run.first_errors.push(e);
            }
        }
    }
    run
}
