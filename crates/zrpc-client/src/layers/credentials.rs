//! Sends `App`/`Token` as `app`/`token` metadata on every call (go-zero `auth.Credential`, used only
//! when both are set).

use http::{HeaderName, HeaderValue};
use tonic::body::Body;

// By `HeaderName`: a `&str` key is parsed and validated on every insert.
const APP: HeaderName = HeaderName::from_static("app");
const TOKEN: HeaderName = HeaderName::from_static("token");

/// The credentials stage: adds the `app` and `token` headers.
#[derive(Debug, Clone)]
pub(crate) struct Credentials {
    app: HeaderValue,
    token: HeaderValue,
}

impl Credentials {
    /// A stage sending `app` and `token`.
    ///
    /// # Errors
    ///
    /// A value that is not a valid header value (control characters, non-visible ASCII).
    pub(crate) fn new(app: &str, token: &str) -> Result<Self, http::header::InvalidHeaderValue> {
        Ok(Credentials {
            app: HeaderValue::from_str(app)?,
            token: HeaderValue::from_str(token)?,
        })
    }

    /// Adds the headers to `req`.
    pub(crate) fn apply(&self, req: &mut http::Request<Body>) {
        let h = req.headers_mut();
        h.insert(APP, self.app.clone());
        h.insert(TOKEN, self.token.clone());
    }
}
