//! Recover: a panic in a handler becomes `Internal "panic: <msg>"`, the stack goes to the
//! log and the server lives on (go-zero `serverinterceptors/recoverinterceptor.go`).
//!
//! Panics are caught in `call`, while polling the response future, and while polling the
//! response body (a panicking stream ends with an `Internal` trailer instead of killing the
//! HTTP/2 connection). The stack is captured at the panic site by a panic hook that is
//! active only while zrpc polls a guarded handler; other panics keep the default hook.

use std::any::Any;
use std::backtrace::Backtrace;
use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Response};
use http_body::Frame;
use zrpc_core::grpc::{GRPC_MESSAGE, GRPC_STATUS, code, encode_grpc_message, status_response};

use crate::call::CallFacts;

thread_local! {
    static GUARDED: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(Cell::get) {
                let location = info
                    .location()
                    .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
                    .unwrap_or_default();
                let stack = format!("at {location}\n{}", Backtrace::force_capture());
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(stack));
            } else {
                prev(info);
            }
        }));
    });
}

/// A caught panic: its message and, when the hook saw it, where it happened and the stack.
pub(crate) struct Caught {
    message: String,
    stack: String,
}

/// Runs `f`, catching its panic when `on` is set (it comes back with `on`, its stack captured
/// by the hook); otherwise `f`'s panic goes on unwinding. One copy of `f` either way: the governor's call and poll steps inline the whole
/// chain below them (the handler's call and future included), and a guarded and an
/// unguarded copy of each would double the code a call runs through (and its
/// instruction-cache misses).
#[inline(always)]
pub(crate) fn guarded_if<T, R>(on: Option<T>, f: impl FnOnce() -> R) -> Result<R, (T, Caught)> {
    let was = on.is_some().then(|| GUARDED.with(|g| g.replace(true)));
    let r = catch_unwind(AssertUnwindSafe(f));
    if let Some(was) = was {
        GUARDED.with(|g| g.set(was));
    }
    match (r, on) {
        (Ok(r), _) => Ok(r),
        (Err(payload), Some(on)) => Err((on, caught(payload))),
        (Err(payload), None) => std::panic::resume_unwind(payload),
    }
}

/// What a caught panic left: its message and the stack the hook captured.
#[cold]
#[inline(never)]
fn caught(payload: Box<dyn Any + Send>) -> Caught {
    Caught {
        message: payload_message(payload.as_ref()),
        stack: LAST_PANIC
            .with(|p| p.borrow_mut().take())
            .unwrap_or_default(),
    }
}

fn payload_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_owned()
    }
}

fn log_panic(method: &PathAndQuery, caught: &Caught) {
    tracing::error!(
        target: "zrpc::recover",
        method = method.path(),
        "panic: {}\n\n{}",
        caught.message,
        caught.stack
    );
}

/// The answer to a call whose handler panicked (the panic is logged).
#[cold]
#[inline(never)]
pub(crate) fn panic_response<B: Default>(method: &PathAndQuery, caught: &Caught) -> Response<B> {
    log_panic(method, caught);
    status_response::<B>(code::INTERNAL, &format!("panic: {}", caught.message))
}

/// The recover stage's settings; `enabled = false` (`Middlewares.Recover: false`) lets panics
/// through.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecoverStage {
    enabled: bool,
}

impl RecoverStage {
    /// A recover stage.
    pub(crate) fn new(enabled: bool) -> Self {
        if enabled {
            install_hook();
        }
        Self { enabled }
    }

    /// Whether panics are caught (`Middlewares.Recover`).
    pub(crate) fn is_on(&self) -> bool {
        self.enabled
    }
}

/// The trailers that end a body whose poll panicked: `Internal "panic: ..."` (the panic is
/// logged, and the call's facts blame the server).
#[cold]
#[inline(never)]
pub(crate) fn panic_trailers<D>(
    method: &PathAndQuery,
    facts: Option<&CallFacts>,
    caught: &Caught,
) -> Frame<D> {
    log_panic(method, caught);
    mark_panicked(facts);
    let mut trailers = HeaderMap::new();
    trailers.insert(GRPC_STATUS, HeaderValue::from_static("13"));
    if let Ok(v) =
        HeaderValue::from_str(&encode_grpc_message(&format!("panic: {}", caught.message)))
    {
        trailers.insert(GRPC_MESSAGE, v);
    }
    Frame::trailers(trailers)
}

#[cold]
#[inline(never)]
pub(crate) fn mark_panicked(facts: Option<&CallFacts>) {
    if let Some(f) = facts {
        f.mark_panicked();
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use tonic::body::Body;

    use std::task::{Context, Poll};

    use http::Request;
    use http_body_util::BodyExt;
    use tower::{Layer, Service, ServiceExt};
    use zrpc_core::grpc::{status_from_headers, status_message_from_headers};

    use super::*;
    use crate::layers::test_util::{TestBody, capture_logs, ok_response};

    fn req() -> Request<Body> {
        Request::builder()
            .uri("/greeter.Greeter/SayHello")
            .body(Body::empty())
            .unwrap()
    }

    #[tokio::test]
    async fn panic_in_future_becomes_internal() {
        let (_guard, logs) = capture_logs();
        let svc = RecoverStage::new(true).layer(tower::service_fn(|_req: Request<Body>| async {
            if true {
                panic!("boom");
            }
            Ok::<_, Infallible>(ok_response())
        }));
        let resp = svc.oneshot(req()).await.unwrap();
        assert_eq!(status_from_headers(resp.headers()), Some(code::INTERNAL));
        assert_eq!(
            status_message_from_headers(resp.headers()).as_deref(),
            Some("panic: boom")
        );
        // The log has the message, the panic site and a stack.
        let out = logs.contents();
        assert!(out.contains("panic: boom"), "{out}");
        assert!(out.contains("stage/recover/mod.rs:"), "{out}");
    }

    #[tokio::test]
    async fn panic_in_call_becomes_internal() {
        #[derive(Clone)]
        struct PanicsInCall;
        impl Service<Request<Body>> for PanicsInCall {
            type Response = Response<TestBody>;
            type Error = Infallible;
            type Future = std::future::Ready<Result<Response<TestBody>, Infallible>>;
            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
                Poll::Ready(Ok(()))
            }
            fn call(&mut self, _: Request<Body>) -> Self::Future {
                panic!("in call {}", 42)
            }
        }
        let resp = RecoverStage::new(true)
            .layer(PanicsInCall)
            .oneshot(req())
            .await
            .unwrap();
        assert_eq!(
            status_message_from_headers(resp.headers()).as_deref(),
            Some("panic: in call 42")
        );
    }

    #[tokio::test]
    async fn panic_in_body_becomes_internal_trailer() {
        let svc = RecoverStage::new(true).layer(tower::service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(Response::new(TestBody::Panics))
        }));
        let resp = svc.oneshot(req()).await.unwrap();
        let trailers = resp
            .into_body()
            .collect()
            .await
            .unwrap()
            .trailers()
            .cloned();
        assert_eq!(
            status_from_headers(&trailers.unwrap()),
            Some(code::INTERNAL)
        );
    }

    #[tokio::test]
    async fn passes_through_without_panic() {
        let svc = RecoverStage::new(true).layer(tower::service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(ok_response())
        }));
        let resp = svc.oneshot(req()).await.unwrap();
        assert_eq!(status_from_headers(resp.headers()), None);
    }
}
