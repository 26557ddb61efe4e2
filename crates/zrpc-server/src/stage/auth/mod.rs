//! Auth: go-zero's app/token check (`serverinterceptors/authinterceptor.go`, `internal/auth`).
//!
//! Every call must carry `app` and `token` metadata:
//! - either missing or empty -> `Unauthenticated "app/token required"`;
//! - the token differs from the one the [`TokenStore`] has for the app (constant-time
//!   compare) -> `Unauthenticated "access denied"`;
//! - the store does not know the app, or fails: with `StrictControl` the call is rejected
//!   (`Unauthenticated "access denied"` / `Internal` with the store's error text, e.g.
//!   `redis: nil` for an app missing from go-zero's Redis hash); without it the
//!   call is **allowed**, as in go-zero.
//!
//! Health and reflection calls are exempt (probes carry no credentials).

use std::sync::Arc;

use subtle::ConstantTimeEq;
use zrpc_core::grpc::code;

use super::{Admission, Call, Env, Rejection, Stage};
use crate::Error;
use crate::auth::{Lookup, TokenStore};
use crate::layers::util::{APP, DropLog, TOKEN, find};

/// The auth stage's settings: the token store (`None`: auth off) and the policy.
#[derive(Debug, Clone)]
pub(crate) struct AuthStage {
    store: Option<Arc<dyn TokenStore>>,
    policy: Arc<Policy>,
}

/// `StrictControl`, and the once-per-second WARN for calls let through on a store error (a Redis
/// outage would otherwise log every call).
#[derive(Debug)]
pub(crate) struct Policy {
    strict: bool,
    allowed: DropLog,
}

impl Policy {
    fn log_allowed(&self, e: &Error) {
        if let Some(allowed) = self.allowed.due() {
            tracing::warn!(
                target: "zrpc::auth",
                allowed,
                "token store failed, call allowed (StrictControl off; {allowed} such calls in the last second): {e}"
            );
        }
    }
}

impl AuthStage {
    /// An auth stage checking against `store`; `None` = auth off.
    pub(crate) fn new(store: Option<Arc<dyn TokenStore>>, strict: bool) -> Self {
        Self {
            store,
            policy: Arc::new(Policy {
                strict,
                allowed: DropLog::new(),
            }),
        }
    }
}

/// The stage, when the server has a token store (`Auth`, or `Server::token_store`).
pub(crate) fn build(env: &Env<'_>) -> Option<Box<dyn Stage>> {
    let store = env.token_store.clone()?;
    Some(Box::new(AuthStage::new(
        Some(store),
        env.conf.strict_control,
    )))
}

impl Stage for AuthStage {
    fn admit(&self, call: &mut Call<'_>) -> Admission {
        let Some(store) = &self.store else {
            return Admission::pass();
        };
        if call.is_infrastructure() {
            return Admission::pass();
        }
        let headers = call.headers();
        let (Some(app), Some(token)) = (header(headers, &APP), header(headers, &TOKEN)) else {
            return denied("app/token required");
        };
        let Ok(app) = std::str::from_utf8(app) else {
            return denied("access denied");
        };
        match store.lookup(app) {
            Lookup::Ready(found) => decide(found, token, &self.policy),
            Lookup::Pending(lookup) => {
                let (token, policy) = (token.to_vec(), Arc::clone(&self.policy));
                Admission::wait(async move { decide(lookup.await, &token, &policy) })
            }
        }
    }

    fn name(&self) -> &'static str {
        "auth"
    }
}

fn header<'a>(headers: &'a http::HeaderMap, name: &http::HeaderName) -> Option<&'a [u8]> {
    find(headers, name)
        .map(http::HeaderValue::as_bytes)
        .filter(|v| !v.is_empty())
}

#[cold]
fn denied(message: &'static str) -> Admission {
    Admission::reject(Rejection::of(code::UNAUTHENTICATED, message))
}

/// The verdict on a looked-up token.
fn decide(found: Result<Option<Arc<str>>, Error>, token: &[u8], policy: &Policy) -> Admission {
    let strict = policy.strict;
    match found {
        Ok(Some(expected)) => {
            if bool::from(expected.as_bytes().ct_eq(token)) {
                Admission::pass()
            } else {
                denied("access denied")
            }
        }
        Ok(None) if strict => denied("access denied"),
        // go-zero answers with the store's own error text (`redis: nil`, a dial error).
        Err(Error::TokenStore(m)) if strict => Admission::reject(Rejection::of(code::INTERNAL, m)),
        Err(e) if strict => Admission::reject(Rejection::of(code::INTERNAL, e.to_string())),
        Ok(None) => Admission::pass(),
        Err(e) => {
            policy.log_allowed(&e);
            Admission::pass()
        }
    }
}

#[cfg(test)]
mod tests {
    use http::Request;
    use std::convert::Infallible;
    use tonic::body::Body;

    use crate::auth::StaticTokens;

    use http::Response;
    use tower::{Layer, Service, ServiceExt};
    use zrpc_core::grpc::status_message_from_headers;

    use super::*;
    use crate::layers::test_util::{TestBody, final_code, ok_response};
    use crate::stage::governor::GovernedBody;

    #[derive(Debug)]
    struct SlowStore(Result<Option<&'static str>, &'static str>);
    impl TokenStore for SlowStore {
        fn lookup(&self, _app: &str) -> Lookup {
            let r = self.0;
            Lookup::Pending(Box::pin(async move {
                tokio::task::yield_now().await;
                r.map(|t| t.map(Arc::from))
                    .map_err(|e| Error::TokenStore(e.to_owned()))
            }))
        }
    }

    fn svc(
        store: Arc<dyn TokenStore>,
        strict: bool,
    ) -> impl Service<Request<Body>, Response = Response<GovernedBody<TestBody>>, Error = Infallible>
    + Clone {
        AuthStage::new(Some(store), strict).layer(tower::service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(ok_response())
        }))
    }

    async fn call(
        s: impl Service<Request<Body>, Response = Response<GovernedBody<TestBody>>, Error = Infallible>,
        path: &str,
        app: Option<&str>,
        token: Option<&str>,
    ) -> (Option<i32>, Option<String>) {
        let mut b = Request::builder().uri(path);
        if let Some(a) = app {
            b = b.header("app", a);
        }
        if let Some(t) = token {
            b = b.header("token", t);
        }
        let resp = s.oneshot(b.body(Body::empty()).unwrap()).await.unwrap();
        let msg = status_message_from_headers(resp.headers());
        (final_code(resp).await, msg)
    }

    #[tokio::test]
    async fn static_tokens() {
        let store: Arc<dyn TokenStore> = Arc::new(StaticTokens::new([("app1", "s3cret")]));
        let s = svc(store.clone(), true);
        let m = "/t.T/M";
        let required = (Some(16), Some("app/token required".to_owned()));
        let denied = (Some(16), Some("access denied".to_owned()));
        assert_eq!(call(s.clone(), m, None, None).await, required);
        assert_eq!(call(s.clone(), m, Some("app1"), None).await, required);
        assert_eq!(call(s.clone(), m, Some("app1"), Some("")).await, required);
        assert_eq!(
            call(s.clone(), m, Some("app1"), Some("wrong")).await,
            denied
        );
        assert_eq!(call(s.clone(), m, Some("nobody"), Some("x")).await, denied);
        assert_eq!(
            call(s.clone(), m, Some("app1"), Some("s3cret")).await,
            (Some(0), None)
        );
        assert_eq!(
            call(s, "/grpc.health.v1.Health/Check", None, None).await,
            (Some(0), None)
        );
        // Not strict: an unknown app is let through (go-zero semantics), a wrong token is not.
        let lax = svc(store, false);
        assert_eq!(
            call(lax.clone(), m, Some("nobody"), Some("x")).await,
            (Some(0), None)
        );
        assert_eq!(call(lax, m, Some("app1"), Some("wrong")).await, denied);
    }

    #[tokio::test]
    async fn async_store_and_strict_control() {
        let m = "/t.T/M";
        let ok = svc(Arc::new(SlowStore(Ok(Some("t")))), true);
        assert_eq!(
            call(ok.clone(), m, Some("a"), Some("t")).await,
            (Some(0), None)
        );
        assert_eq!(call(ok, m, Some("a"), Some("u")).await.0, Some(16));
        let failing: Arc<dyn TokenStore> = Arc::new(SlowStore(Err("redis down")));
        assert_eq!(
            call(svc(failing.clone(), true), m, Some("a"), Some("t")).await,
            (Some(13), Some("redis down".to_owned()))
        );
        assert_eq!(
            call(svc(failing, false), m, Some("a"), Some("t")).await,
            (Some(0), None)
        );
    }
}
