//! Stat: the slow-call log (go-zero `serverinterceptors/statinterceptor.go`).
//!
//! A call slower than `SlowThreshold` (default 500 ms) is logged at warn level as
//! `[RPC] slowcall - <peer> - <method>` with its duration and final code. Unlike go-zero,
//! requests are **not** logged on every call (cost and PII); `StatConf.LogRequestContent`
//! turns on a per-call info line (peer, method, code, duration) for methods not listed in
//! `IgnoreContentMethods`. The request payload itself is not decoded at this HTTP level.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use http::uri::PathAndQuery;

use super::{Admission, Call, End, Env, Stage};
use crate::layers::util::method_of;

/// Settings of the stat stage.
#[derive(Debug, Clone)]
pub(crate) struct StatSettings {
    /// On/off (`Middlewares.Stat`).
    pub(crate) enabled: bool,
    /// Calls slower than this are logged (`StatConf.SlowThreshold`, default 500 ms).
    pub(crate) slow_threshold: Duration,
    /// Log one line per call (`StatConf.LogRequestContent`, default false).
    pub(crate) log_requests: bool,
    /// Methods never logged per call (`StatConf.IgnoreContentMethods`).
    pub(crate) ignore_content_methods: HashSet<String>,
}

impl Default for StatSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            slow_threshold: Duration::from_millis(500),
            log_requests: false,
            ignore_content_methods: HashSet::new(),
        }
    }
}

/// The stat stage's settings.
#[derive(Debug, Clone)]
pub(crate) struct StatStage {
    settings: Arc<StatSettings>,
}

impl StatStage {
    /// A stat stage.
    pub(crate) fn new(settings: StatSettings) -> Self {
        Self {
            settings: Arc::new(settings),
        }
    }
}

/// The stage, when `Middlewares.Stat` is on.
pub(crate) fn build(env: &Env<'_>) -> Option<Box<dyn Stage>> {
    let conf = env.conf;
    let stat = &conf.middlewares.stat_conf;
    conf.middlewares.stat.then(|| {
        Box::new(StatStage::new(StatSettings {
            enabled: true,
            slow_threshold: stat.slow_threshold,
            log_requests: stat.log_request_content,
            ignore_content_methods: stat.ignore_content_methods.iter().cloned().collect(),
        })) as Box<dyn Stage>
    })
}

impl Stage for StatStage {
    fn admit(&self, call: &mut Call<'_>) -> Admission {
        // Unary calls only, as go-zero's stat interceptor (a stream has none): a stream's
        // lifetime is no latency, and every long one would log as a slow call.
        if !self.settings.enabled || call.is_streaming() {
            return Admission::pass();
        }
        Admission::built_in(StatRecord {
            start: call.now(),
            method: method_of(call.request()),
            peer: call.peer(),
            settings: Arc::clone(&self.settings),
        })
    }

    fn name(&self) -> &'static str {
        "stat"
    }
}

/// What the stat stage remembers about a call until its final status.
#[derive(Debug)]
pub(crate) struct StatRecord {
    start: Instant,
    method: PathAndQuery,
    peer: Option<SocketAddr>,
    settings: Arc<StatSettings>,
}

/// A call's peer in a log line: its address, or `-` when unknown.
struct Peer(Option<SocketAddr>);

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(p) => p.fmt(f),
            None => f.write_str("-"),
        }
    }
}

impl StatRecord {
    /// Logs the call if it was slow (or every call is logged).
    pub(crate) fn finish(self, end: &End<'_>) {
        let (elapsed, code) = (end.now.saturating_duration_since(self.start), end.code);
        // The peer is formatted only into a line that is written: formatting a `SocketAddr`
        // into a `String` on every call would be one of the costliest steps of the chain.
        let peer = Peer(self.peer);
        let method = self.method.path();
        let duration_ms = elapsed.as_secs_f64() * 1000.0;
        if elapsed > self.settings.slow_threshold {
            tracing::warn!(
                target: "zrpc::stat",
                duration_ms,
                code,
                "[RPC] slowcall - {peer} - {method}"
            );
        } else if self.settings.log_requests
            && !self.settings.ignore_content_methods.contains(method)
        {
            tracing::info!(target: "zrpc::stat", duration_ms, code, "{peer} - {method}");
        }
    }
}

#[cfg(test)]
mod tests {
    use http::Request;
    use std::convert::Infallible;
    use tonic::body::Body;

    use tower::{Layer, ServiceExt};

    use super::*;
    use crate::layers::test_util::{arriving, capture_logs, final_code, ok_response};

    #[tokio::test(start_paused = true)]
    async fn logs_slow_calls_only() {
        let (_guard, logs) = capture_logs();
        let svc = StatStage::new(StatSettings {
            slow_threshold: Duration::from_millis(10),
            ..StatSettings::default()
        })
        .layer(tower::service_fn(|req: Request<Body>| async move {
            if req.uri().path().ends_with("Slow") {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok::<_, Infallible>(ok_response())
        }));
        for path in ["/a.B/Slow", "/a.B/Fast"] {
            let req = Request::builder().uri(path).body(Body::empty()).unwrap();
            let resp = svc.clone().oneshot(req).await.unwrap();
            assert_eq!(final_code(resp).await, Some(0));
        }
        // A stream as long is not a slow call (go-zero logs no stream).
        let req = Request::builder()
            .uri("/a.B/StreamSlow")
            .body(Body::empty())
            .unwrap();
        let req = arriving(req, crate::call::CallKind::STREAMING);
        final_code(svc.clone().oneshot(req).await.unwrap()).await;
        let out = logs.contents();
        assert!(out.contains("[RPC] slowcall - - - /a.B/Slow"), "{out}");
        assert!(!out.contains("/a.B/Fast"), "{out}");
        assert!(!out.contains("/a.B/StreamSlow"), "{out}");
    }

    #[tokio::test]
    async fn logs_every_call_only_when_opted_in() {
        let (_guard, logs) = capture_logs();
        let svc = |log_requests| {
            StatStage::new(StatSettings {
                log_requests,
                ignore_content_methods: ["/a.B/Secret".to_owned()].into_iter().collect(),
                ..StatSettings::default()
            })
            .layer(tower::service_fn(|_req: Request<Body>| async {
                Ok::<_, Infallible>(ok_response())
            }))
        };
        for (on, path) in [
            (false, "/a.B/Quiet"),
            (true, "/a.B/Loud"),
            (true, "/a.B/Secret"),
        ] {
            let req = Request::builder().uri(path).body(Body::empty()).unwrap();
            final_code(svc(on).oneshot(req).await.unwrap()).await;
        }
        let out = logs.contents();
        assert!(out.contains("/a.B/Loud"), "{out}");
        assert!(!out.contains("/a.B/Quiet"), "{out}");
        assert!(!out.contains("/a.B/Secret"), "{out}");
    }
}
