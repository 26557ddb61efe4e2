//! The DevServer's operator routes under `/admin`: the registration's state, and pausing and
//! resuming it (a node out of discovery, to debug or drain it, while it keeps serving).
//!
//! - `GET /admin/registration`: `{"paused":false,"state":"registered","key":"...","lease":7}`.
//! - `POST /admin/registration/pause` and `POST /admin/registration/resume`: with
//!   `Authorization: Bearer <DevServer.AdminToken>`. Writes are off while `AdminToken` is empty
//!   (the default): a user who upgrades exposes no new write. Answers: 200 with the state after
//!   the change, 401 without the right token (compared in constant time), 403 with writes off,
//!   404 for an unknown action, 405 for another method. A refused write changes nothing.

use http::{Method, StatusCode, header};
use subtle::ConstantTimeEq;
use tokio::sync::watch;

use crate::handle::HandleParts;

/// The registration route; its actions are `<REGISTRATION>/<action>`.
pub(crate) const REGISTRATION: &str = "/admin/registration";

/// What the admin routes read and steer.
pub(crate) struct Admin {
    pause: watch::Sender<bool>,
    #[cfg(feature = "etcd")]
    registration: watch::Receiver<crate::registry::RegistrationState>,
    /// `DevServer.AdminToken`; `None` (empty) turns the writes off.
    token: Option<String>,
}

/// An answer: status, extra header, content type and body.
pub(crate) type Answer = (
    StatusCode,
    Option<(header::HeaderName, &'static str)>,
    String,
);

impl Admin {
    /// The admin routes of a server whose handle parts are `parts`.
    pub(crate) fn new(parts: &HandleParts, token: &str) -> Self {
        Admin {
            pause: parts.pause.clone(),
            #[cfg(feature = "etcd")]
            registration: parts.registration.subscribe(),
            token: (!token.is_empty()).then(|| token.to_owned()),
        }
    }

    /// The answer to `method path` with `authorization`, if `path` is an admin route.
    pub(crate) fn answer(
        &self,
        method: &Method,
        path: &str,
        authorization: Option<&[u8]>,
    ) -> Option<Answer> {
        if path == REGISTRATION {
            return Some(match *method {
                Method::GET | Method::HEAD => (StatusCode::OK, None, self.state()),
                _ => not_allowed("GET, HEAD"),
            });
        }
        let action = path.strip_prefix(REGISTRATION)?.strip_prefix('/')?;
        if *method != Method::POST {
            return Some(not_allowed("POST"));
        }
        let Some(token) = self.token.as_deref() else {
            return Some(error(
                StatusCode::FORBIDDEN,
                "admin writes are off: set DevServer.AdminToken to a secret and send it as \
                 `Authorization: Bearer <token>`",
            ));
        };
        let given = authorization
            .and_then(|v| v.strip_prefix(b"Bearer "))
            .unwrap_or_default();
        if !bool::from(given.ct_eq(token.as_bytes())) {
            return Some((
                StatusCode::UNAUTHORIZED,
                Some((header::WWW_AUTHENTICATE, "Bearer")),
                json_error("a write needs `Authorization: Bearer <DevServer.AdminToken>`"),
            ));
        }
        let paused = match action {
            "pause" => true,
            "resume" => false,
            _ => {
                return Some(error(
                    StatusCode::NOT_FOUND,
                    &format!(
                        "unknown action {:?} of {REGISTRATION}: pause or resume",
                        action.chars().take(64).collect::<String>()
                    ),
                ));
            }
        };
        if self.pause.send_replace(paused) != paused {
            tracing::warn!(
                target: "zrpc::devserver",
                "registration {} by an operator (POST {path})",
                if paused { "paused" } else { "resumed" }
            );
        }
        Some((StatusCode::OK, None, self.state()))
    }

    /// The registration's state as JSON.
    fn state(&self) -> String {
        let paused = *self.pause.borrow();
        #[cfg(feature = "etcd")]
        {
            use crate::registry::RegistrationState as S;
            let (state, key, lease) = match &*self.registration.borrow() {
                S::Registered { key, lease } => ("registered", Some(key.clone()), Some(*lease)),
                S::Paused => ("paused", None, None),
                S::Stopped => ("stopped", None, None),
                _ => ("not_registered", None, None),
            };
            serde_json::json!({ "paused": paused, "state": state, "key": key, "lease": lease })
                .to_string()
                + "\n"
        }
        #[cfg(not(feature = "etcd"))]
        {
            serde_json::json!({ "paused": paused, "state": "not_registered" }).to_string() + "\n"
        }
    }
}

fn not_allowed(allow: &'static str) -> Answer {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        Some((header::ALLOW, allow)),
        json_error(&format!("allowed: {allow}")),
    )
}

fn error(status: StatusCode, message: &str) -> Answer {
    (status, None, json_error(message))
}

fn json_error(message: &str) -> String {
    serde_json::json!({ "error": message }).to_string() + "\n"
}
