//! Shedding: CPU-adaptive load shedding (go-zero `serverinterceptors/sheddinginterceptor.go`).
//!
//! One [`AdaptiveShedder`] per server. A dropped call gets
//! `ResourceExhausted "service overloaded: ..."` (go-zero's words, then the CPU and the flight
//! that shed it: `CPU 950 millicpu over threshold 900, 40 calls in flight over 32.0 (average
//! 38.5)`) and counts in
//! `rpc_server_dropped_total{reason="shedder"}`; drops are logged at most once
//! per second (go-zero logs every one). An allowed call is reported as failed when its final
//! code is `DeadlineExceeded`, else as passed (go-zero's rule). Known streaming methods and
//! health/reflection are never shed.
//!
//! A call whose failure the caller caused (see [`CallFacts`](crate::call::CallFacts): its request never
//! arrived whole, or the caller reset it) is reported as failed, never as passed: its response
//! time says nothing about the server, and a flood of instant decode errors would otherwise
//! drag the shedder's minimum response time (and so its flight limit) down. Auth runs before
//! this stage, so unauthenticated calls never reach it.

use std::sync::Arc;
use std::time::Instant;

use zrpc_core::grpc::code;
use zrpc_core::shedder::{AdaptiveShedder, Queued, ShedderPromise};

use super::{Admission, Call, End, Env, Rejection, Stage};
use crate::call::{Blame, CallKind};
use crate::layers::util::DropLog;
use crate::metrics::DropReason;

/// The message of a shedding rejection (go-zero's), which the figures follow.
#[cfg(test)]
pub(crate) const OVERLOADED_MESSAGE: &str = "service overloaded";

/// Settings of the shedding stage.
#[derive(Debug, Clone)]
pub(crate) struct SheddingSettings {
    /// The server's shedder.
    pub(crate) shedder: Arc<AdaptiveShedder>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    settings: SheddingSettings,
    log: DropLog,
}

/// The shedder counts a call in flight as its stream is accepted, before its task runs (see
/// [`AdaptiveShedder::queue`]); `None` for calls never shed (health, reflection, streams). It
/// ends the count when it admits or sheds the call ([`Shared::admit`]).
// Not the concurrency limit's count (`stage::limit`), on purpose: this one counts calls from their
// stream's acceptance, before any stage, waiting ones too; a limit, only the calls it admitted.
impl crate::call::InFlight for Shared {
    #[inline]
    fn accepted(&self, kind: CallKind) -> Option<Queued> {
        kind.is_user_unary().then(|| self.settings.shedder.queue())
    }
}

impl Shared {
    /// Admits a call to `path` at `now`: its record, or its rejection (logged at most once a
    /// second). `queued`: its count since its stream was accepted, when the serve loop made
    /// one.
    pub(crate) fn admit(&self, path: &str, now: Instant, queued: Option<Queued>) -> Admission {
        let shedder = &self.settings.shedder;
        let decision = match queued {
            Some(queued) => shedder.allow_queued(queued, now),
            None => shedder.allow(now),
        };
        match decision {
            Ok(promise) => Admission::built_in(SheddingRecord { promise }),
            Err(overloaded) => {
                // go-zero's words, then the CPU and the flight that shed the call.
                let message = overloaded.to_string();
                self.log_drop(path, &message);
                Admission::reject(
                    Rejection::of(code::RESOURCE_EXHAUSTED, message)
                        .dropped(DropReason::Shedder.label()),
                )
            }
        }
    }

    fn log_drop(&self, method: &str, message: &str) {
        if let Some(dropped) = self.log.due() {
            tracing::warn!(
                target: "zrpc::shedding",
                method,
                dropped,
                "[RPC] dropped, {message} ({dropped} drops in the last second)"
            );
        }
    }
}

/// The shedding stage's settings; `None` = off (`CpuThreshold: 0`).
#[derive(Debug, Clone)]
pub(crate) struct SheddingStage {
    shared: Option<Arc<Shared>>,
}

impl SheddingStage {
    /// A shedding stage.
    pub(crate) fn new(settings: Option<SheddingSettings>) -> Self {
        Self {
            shared: settings.map(|settings| {
                Arc::new(Shared {
                    settings,
                    log: DropLog::new(),
                })
            }),
        }
    }

    /// The shedder and its settings, when the stage is on.
    pub(crate) fn shared(&self) -> Option<Arc<Shared>> {
        self.shared.clone()
    }
}

/// The stage, when `CpuThreshold` is not 0.
pub(crate) fn build(env: &Env<'_>) -> Option<Box<dyn Stage>> {
    env.shedding
        .shared
        .is_some()
        .then(|| Box::new(env.shedding.clone()) as _)
}

impl Stage for SheddingStage {
    fn admit(&self, call: &mut Call<'_>) -> Admission {
        let Some(shared) = &self.shared else {
            return Admission::pass();
        };
        // A call the serve loop counted as queued is one the shedder watches: unary calls of
        // the user's services (not health, reflection, streams).
        let queued = call.queued.take();
        if queued.is_none() && !call.kind().is_user_unary() {
            return Admission::pass();
        }
        let now = call.now().into_std();
        shared.admit(call.method(), now, queued)
    }

    fn name(&self) -> &'static str {
        "shedding"
    }
}

/// Reports the call's outcome to the shedder.
#[derive(Debug)]
pub(crate) struct SheddingRecord {
    promise: ShedderPromise,
}

impl SheddingRecord {
    /// A failure when the deadline passed or the caller caused it, else a pass (go-zero's
    /// rule, but for the caller's failures).
    pub(crate) fn finish(self, end: &End<'_>) {
        let now = end.now.into_std();
        if end.code == code::DEADLINE_EXCEEDED || end.blame() == Blame::Caller {
            self.promise.fail(now);
        } else {
            self.promise.pass(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use tonic::body::Body;

    use http::Request;
    use tokio::sync::Semaphore;
    use tower::{Layer, ServiceExt};
    use zrpc_core::cpu::FixedCpu;
    use zrpc_core::grpc::status_message_from_headers;
    use zrpc_core::shedder::ShedderConfig;

    use super::*;
    use crate::layers::test_util::{arriving, final_code, ok_response};

    #[test]
    fn logs_drops_at_most_once_per_second() {
        let (_guard, logs) = crate::layers::test_util::capture_logs();
        let shedder = Arc::new(AdaptiveShedder::new(
            ShedderConfig::default(),
            Arc::new(FixedCpu::new(0)),
        ));
        let layer = SheddingStage::new(Some(SheddingSettings { shedder }));
        let shared = layer.shared.unwrap();
        for _ in 0..50 {
            shared.log_drop("/s.T/M", "service overloaded: CPU 1000 millicpu");
        }
        let out = logs.contents();
        assert_eq!(out.matches("service overloaded").count(), 1, "{out}");
    }

    #[tokio::test]
    async fn sheds_when_cpu_hot_and_saturated() {
        let cpu = Arc::new(FixedCpu::new(1000));
        let shedder = Arc::new(AdaptiveShedder::new(ShedderConfig::default(), cpu));
        let gate = Arc::new(Semaphore::new(0));
        let g = gate.clone();
        let svc = SheddingStage::new(Some(SheddingSettings { shedder })).layer(tower::service_fn(
            move |_req: Request<Body>| {
                let g = g.clone();
                async move {
                    g.acquire().await.unwrap().forget();
                    Ok::<_, Infallible>(ok_response())
                }
            },
        ));
        let call = |path: &'static str| {
            let svc = svc.clone();
            async move {
                let req = Request::builder().uri(path).body(Body::empty()).unwrap();
                // The test's streaming method arrives as a stream.
                let req = if path == "/s.T/Stream" {
                    arriving(req, CallKind::STREAMING)
                } else {
                    req
                };
                let resp = svc.oneshot(req).await.unwrap();
                let msg = status_message_from_headers(resp.headers());
                (final_code(resp).await, msg)
            }
        };
        let mut running = Vec::new();
        for _ in 0..80 {
            running.push(tokio::spawn(call("/s.T/M")));
        }
        tokio::task::yield_now().await;
        // Let 30 finish: the in-flight average climbs well over the estimated capacity.
        gate.add_permits(30);
        let mut shed = 0;
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let (code, msg) = tokio::spawn(call("/s.T/M")).await.unwrap();
        if code == Some(code::RESOURCE_EXHAUSTED) {
            // go-zero's words, then the CPU and the flight that shed the call.
            let msg = msg.unwrap_or_default();
            assert!(
                msg.starts_with(&format!(
                    "{OVERLOADED_MESSAGE}: CPU 1000 millicpu over threshold 900, 50 calls in flight over "
                )),
                "{msg}"
            );
            shed += 1;
        }
        assert_eq!(shed, 1, "a hot, saturated server sheds");
        let dropped = |m: &str| {
            crate::metrics::server_metrics()
                .dropped_total
                .with_label_values(&[m, "shedder"])
                .get()
        };
        assert_eq!(
            dropped("/s.T/M"),
            1,
            "the drop is counted once, as the shedder's"
        );
        // Streams are never shed (the gate blocks it: it was admitted).
        let stream = tokio::spawn(call("/s.T/Stream"));
        gate.add_permits(1000);
        assert_eq!(stream.await.unwrap().0, Some(0));
        assert_eq!(dropped("/s.T/Stream"), 0);
        for r in running {
            r.await.unwrap();
        }
        // Nothing in flight: nothing is shed, hot or not.
        assert_eq!(tokio::spawn(call("/s.T/M")).await.unwrap().0, Some(0));
    }
}
pub(crate) mod gauges;
