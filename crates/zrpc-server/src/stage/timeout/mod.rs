//! Timeout: the caller's deadline over the whole call, and go-zero's
//! `serverinterceptors/timeoutinterceptor.go` (the server's own `Timeout`), minus its leak.
//!
//! **The caller's deadline** (`grpc-timeout`, read as the request arrived) bounds every call,
//! unary or streaming, health and reflection included, until its response ends, as grpc-go
//! bounds it: past it, a call still waiting for its response head is answered
//! `DeadlineExceeded "context deadline exceeded"`, and a call whose head was sent is reset
//! with `RST_STREAM CANCEL` (what grpc-go's server sends); either way the handler is dropped and
//! every record sees `DeadlineExceeded`. A caller that resets its call at (or just before) its
//! deadline is recorded as `DeadlineExceeded` too: its clock started before the request
//! arrived, so its reset and the server's timer are a race (`call::CallerDeadline`). Any other
//! reset by the caller is `Cancelled`, never a failure of the server.
//!
//! **The server's own timeout** of a unary call is `MethodTimeouts[method]` if listed (0 there =
//! no timeout for that method), else the default `Timeout`, and never longer than the caller's
//! deadline; as in go-zero it covers unary methods only: known streaming methods and
//! health/reflection (the call's kind, `call::CallKind`) get only their caller's deadline. On
//! expiry the call gets `DeadlineExceeded` and the handler future is **dropped** (go-zero
//! returns but leaves the handler running). The effective deadline is written back into the
//! request's `grpc-timeout` header so the handler (and any client call it makes) can see it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Response};
use tower::BoxError;
use zrpc_core::grpc::{code, status_response, timeout as grpc_timeout};

use super::{Admission, Call, Env, Stage};
use crate::layers::util::GRPC_TIMEOUT;

/// Settings of the timeout stage.
#[derive(Debug, Clone, Default)]
pub(crate) struct TimeoutSettings {
    /// The default timeout (`Timeout`; `None` = 0 = none).
    pub(crate) default: Option<Duration>,
    /// Per-method overrides (`MethodTimeouts`; a zero duration means no timeout).
    pub(crate) per_method: HashMap<String, Duration>,
}

/// A server timeout with its `grpc-timeout` header value, formatted once.
type Limit = Option<(Duration, HeaderValue)>;

fn limit(d: Option<Duration>) -> Limit {
    let d = d.filter(|d| !d.is_zero())?;
    Some((d, HeaderValue::from_str(&grpc_timeout::format(d)).ok()?))
}

/// [`TimeoutSettings`] ready for the hot path.
#[derive(Debug)]
pub(crate) struct Compiled {
    default: Limit,
    per_method: HashMap<String, Limit>,
}

impl Compiled {
    fn limit_for(&self, full_method: &str) -> Option<&(Duration, HeaderValue)> {
        match self.per_method.get(full_method) {
            Some(l) => l.as_ref(),
            None => self.default.as_ref(),
        }
    }
}

/// The timeout stage's settings, compiled for the hot path.
#[derive(Debug, Clone)]
pub(crate) struct TimeoutStage {
    settings: Option<Arc<Compiled>>,
}

impl TimeoutStage {
    /// A timeout stage. It is off when there is neither a default nor a per-method timeout.
    pub(crate) fn new(settings: TimeoutSettings) -> Self {
        let on = settings.default.is_some() || !settings.per_method.is_empty();
        Self {
            settings: on.then(|| {
                Arc::new(Compiled {
                    default: limit(settings.default),
                    per_method: settings
                        .per_method
                        .into_iter()
                        .map(|(m, d)| (m, limit(Some(d))))
                        .collect(),
                })
            }),
        }
    }
}

/// The stage, when there is a default or a per-method timeout.
pub(crate) fn build(env: &Env<'_>) -> Option<Box<dyn Stage>> {
    let conf = env.conf;
    let stage = TimeoutStage::new(TimeoutSettings {
        default: conf.timeout_duration(),
        per_method: conf
            .method_timeouts
            .iter()
            .map(|m| (m.full_method.clone(), m.timeout))
            .collect(),
    });
    stage.settings.is_some().then(|| Box::new(stage) as _)
}

impl Stage for TimeoutStage {
    /// The call's deadline: its caller's, or the server's own timeout when sooner, for a unary
    /// method that is not health or reflection; with the server's, the effective
    /// `grpc-timeout` is written into its headers for the handler.
    fn admit(&self, call: &mut Call<'_>) -> Admission {
        let Some(settings) = &self.settings else {
            return Admission::pass();
        };
        if !call.kind().is_user_unary() {
            return Admission::pass();
        }
        let Some((server, header)) = settings.limit_for(call.method()) else {
            return Admission::pass();
        };
        // Past the end of time there is no deadline (tokio's own `sleep` would wait
        // "forever", ~30 years).
        let Some(ours) = call.now().checked_add(*server) else {
            return Admission::pass();
        };
        // The caller's deadline is sooner: its header already says so.
        if call.deadline().is_none_or(|caller| caller >= ours) {
            call.request_mut()
                .headers_mut()
                .insert(GRPC_TIMEOUT, header.clone());
            call.set_deadline(Some(ours));
        }
        Admission::pass()
    }

    fn name(&self) -> &'static str {
        "timeout"
    }
}

/// The answer to a call whose deadline passed before its response head.
#[cold]
#[inline(never)]
pub(crate) fn expired<B: Default>() -> Response<B> {
    status_response(code::DEADLINE_EXCEEDED, "context deadline exceeded")
}

/// How a call whose deadline passed after its response head ends: a body error that hyper
/// turns into `RST_STREAM CANCEL`, as grpc-go's server resets a stream at its deadline (the
/// status can no longer go in a response head, and trailers could wait behind data the client
/// does not read).
#[cold]
#[inline(never)]
pub(crate) fn reset() -> BoxError {
    Box::new(h2::Error::from(h2::Reason::CANCEL))
}

#[cfg(test)]
mod tests {
    use http::Request;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tonic::body::Body;

    use tower::{Layer, Service, ServiceExt};

    use super::*;
    use crate::call::CallKind;
    use crate::layers::test_util::{TestBody, arriving, final_code, ok_response};

    fn sleepy(
        d: Duration,
        finished: Arc<AtomicBool>,
    ) -> impl Service<Request<Body>, Response = Response<TestBody>, Error = Infallible> + Clone
    {
        tower::service_fn(move |_req: Request<Body>| {
            let finished = finished.clone();
            async move {
                tokio::time::sleep(d).await;
                finished.store(true, Ordering::SeqCst);
                Ok::<_, Infallible>(ok_response())
            }
        })
    }

    fn settings(default_ms: u64) -> TimeoutSettings {
        TimeoutSettings {
            default: Some(Duration::from_millis(default_ms)),
            per_method: HashMap::from([
                ("/t.T/Long".to_owned(), Duration::from_secs(10)),
                ("/t.T/Never".to_owned(), Duration::ZERO),
            ]),
        }
    }

    async fn run(path: &str, handler_ms: u64, header: Option<&str>) -> (Option<i32>, bool) {
        let finished = Arc::new(AtomicBool::new(false));
        let svc = TimeoutStage::new(settings(100))
            .layer(sleepy(Duration::from_millis(handler_ms), finished.clone()));
        let mut req = Request::builder().uri(path).body(Body::empty()).unwrap();
        if let Some(h) = header {
            req.headers_mut()
                .insert("grpc-timeout", HeaderValue::from_str(h).unwrap());
        }
        // The test's streaming method arrives as a stream.
        if path == "/t.T/Stream" {
            req = arriving(req, CallKind::STREAMING);
        }
        let code = final_code(svc.oneshot(req).await.unwrap()).await;
        tokio::time::sleep(Duration::from_secs(20)).await;
        (code, finished.load(Ordering::SeqCst))
    }

    #[tokio::test(start_paused = true)]
    async fn default_timeout_expires_and_drops_the_handler() {
        assert_eq!(run("/t.T/M", 500, None).await, (Some(4), false));
        assert_eq!(run("/t.T/M", 50, None).await, (Some(0), true));
    }

    #[tokio::test(start_paused = true)]
    async fn method_timeouts_override_the_default() {
        assert_eq!(run("/t.T/Long", 500, None).await, (Some(0), true));
        assert_eq!(run("/t.T/Never", 15_000, None).await, (Some(0), true));
    }

    #[tokio::test(start_paused = true)]
    async fn the_callers_shorter_deadline_wins() {
        assert_eq!(run("/t.T/Long", 500, Some("200m")).await, (Some(4), false));
        assert_eq!(run("/t.T/M", 80, Some("20S")).await, (Some(0), true));
    }

    #[tokio::test(start_paused = true)]
    async fn streams_and_health_are_not_timed_out() {
        assert_eq!(run("/t.T/Stream", 500, None).await, (Some(0), true));
        assert_eq!(
            run("/grpc.health.v1.Health/Check", 500, None).await,
            (Some(0), true)
        );
    }
}
