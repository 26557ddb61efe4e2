//! Sends `App`/`Token` as `app`/`token` metadata on every call (go-zero `auth.Credential`, used only
//! when both are set).

use std::task::{Context, Poll};

use http::{HeaderName, HeaderValue};

// By `HeaderName`: a `&str` key is parsed and validated on every insert.
const APP: HeaderName = HeaderName::from_static("app");
const TOKEN: HeaderName = HeaderName::from_static("token");
use tonic::body::Body;

/// Adds the `app` and `token` headers.
#[derive(Debug, Clone)]
pub struct CredentialsLayer {
    app: HeaderValue,
    token: HeaderValue,
}

impl CredentialsLayer {
    /// A layer sending `app` and `token`.
    ///
    /// # Errors
    ///
    /// A value that is not a valid header value (control characters, non-visible ASCII).
    pub fn new(app: &str, token: &str) -> Result<Self, http::header::InvalidHeaderValue> {
        Ok(CredentialsLayer {
            app: HeaderValue::from_str(app)?,
            token: HeaderValue::from_str(token)?,
        })
    }
}

impl CredentialsLayer {
    /// Adds the headers to `req`.
    pub(crate) fn apply(&self, req: &mut http::Request<Body>) {
        let h = req.headers_mut();
        h.insert(APP, self.app.clone());
        h.insert(TOKEN, self.token.clone());
    }
}

impl<S> tower::Layer<S> for CredentialsLayer {
    type Service = Credentials<S>;
    fn layer(&self, inner: S) -> Credentials<S> {
        Credentials {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`CredentialsLayer`].
#[derive(Debug, Clone)]
pub struct Credentials<S> {
    inner: S,
    layer: CredentialsLayer,
}

impl<S> tower::Service<http::Request<Body>> for Credentials<S>
where
    S: tower::Service<http::Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> S::Future {
        self.layer.apply(&mut req);
        self.inner.call(req)
    }
}
