//! The DevServer's operator routes under `/admin`: the process's live state, the
//! registration's state, and pausing and resuming it (a node out of discovery, to debug or
//! drain it, while it keeps serving).
//!
//! - `GET /admin`: the admin page, the state below drawn as tables and live charts by the page
//!   itself ([`PAGE_HTML`]).
//! - `GET /admin/state`: the server's stages, drops, connections, registration, config (its
//!   secrets redacted), build, and every zrpc client of the process ([`super::state`]). With
//!   `DevServer.AdminToken` set it needs `Authorization: Bearer <token>` (401 without); without
//!   one it is readable by whoever reaches the port, as `/metrics` is.
//! - `GET /admin/registration`: `{"paused":false,"state":"registered","key":"...","lease":7}`.
//! - `POST /admin/registration/pause` and `POST /admin/registration/resume`: with
//!   `Authorization: Bearer <DevServer.AdminToken>`. Writes are off while `AdminToken` is empty
//!   (the default): a user who upgrades exposes no new write. Answers: 200 with the state after
//!   the change, 401 without the right token (compared in constant time), 403 with writes off,
//!   404 for an unknown action, 405 for another method. A refused write changes nothing.

use http::{Method, StatusCode, header};
use std::hash::BuildHasher;

use subtle::ConstantTimeEq;
use tokio::sync::watch;

use crate::handle::HandleParts;

/// The registration route; its actions are `<REGISTRATION>/<action>`.
pub(crate) const REGISTRATION: &str = "/admin/registration";
/// The live state, as JSON.
pub(crate) const STATE: &str = "/admin/state";
/// The admin page: the live state for a browser.
pub(crate) const PAGE: &str = "/admin";

/// The admin page (`GET /admin`): HTML and inline script that read `/admin/state` every
/// second and draw its tables and charts, with no external asset (the machine may have no
/// internet). It shows nothing by itself: with `AdminToken` set it asks for the token (or
/// takes it from the URL's fragment, `/admin#token=...`, which browsers never send).
pub(crate) const PAGE_HTML: &str = include_str!("admin.html");

/// The page's content security policy: its own inline script and style, requests to its own
/// origin, nothing else.
pub(crate) const PAGE_CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// What the admin routes read and steer.
pub(crate) struct Admin {
    pause: watch::Sender<bool>,
    #[cfg(feature = "etcd")]
    registration: watch::Receiver<crate::registry::RegistrationState>,
    /// When etcd last renewed the registration's lease (Unix ms; 0 = never).
    #[cfg(feature = "etcd")]
    renewed: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// `DevServer.AdminToken`; `None` (empty) turns the writes off.
    token: Option<String>,
    /// The key of the token's digest (`authorize`).
    token_key: foldhash::quality::RandomState,
    server: watch::Receiver<crate::handle::State>,
    /// The server's stages and config, once it serves.
    view: Option<super::state::ServerView>,
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
            #[cfg(feature = "etcd")]
            renewed: std::sync::Arc::clone(&parts.renewed),
            token: (!token.is_empty()).then(|| token.to_owned()),
            token_key: foldhash::quality::RandomState::default(),
            server: parts.state.subscribe(),
            view: None,
        }
    }

    /// The admin routes showing `view` in `/admin/state`.
    pub(crate) fn with_view(mut self, view: super::state::ServerView) -> Self {
        self.view = Some(view);
        self
    }

    /// Keeps a reading of the drop counters for the view's recent windows.
    pub(crate) fn keep_reading(&self, now: std::time::Instant) {
        if let Some(view) = &self.view {
            view.keep_reading(now);
        }
    }

    /// `Ok` when `authorization` carries the token, or no token is set and `open` (reads are
    /// open without a token, writes are off).
    fn authorize(&self, authorization: Option<&[u8]>, open: bool) -> Result<(), Answer> {
        let Some(token) = self.token.as_deref() else {
            return if open {
                Ok(())
            } else {
                Err(error(
                    StatusCode::FORBIDDEN,
                    "admin writes are off: set DevServer.AdminToken to a secret and send it as \
                     `Authorization: Bearer <token>`",
                ))
            };
        };
        // The scheme is case-insensitive (RFC 9110 11.1). Keyed digests are compared first,
        // so that the time taken says nothing of the token's length (subtle compares slices
        // of different lengths at once).
        let given = authorization
            .and_then(|v| {
                let (scheme, rest) = v.split_at(v.iter().position(|&b| b == b' ')?);
                scheme
                    .eq_ignore_ascii_case(b"bearer")
                    .then(|| rest.trim_ascii_start())
            })
            .unwrap_or_default();
        let key = &self.token_key;
        let same_digest = key.hash_one(given).ct_eq(&key.hash_one(token.as_bytes()));
        if bool::from(same_digest) && bool::from(given.ct_eq(token.as_bytes())) {
            Ok(())
        } else {
            Err((
                StatusCode::UNAUTHORIZED,
                Some((header::WWW_AUTHENTICATE, "Bearer")),
                json_error(if open {
                    "this view needs `Authorization: Bearer <DevServer.AdminToken>`"
                } else {
                    "a write needs `Authorization: Bearer <DevServer.AdminToken>`"
                }),
            ))
        }
    }

    /// The answer to `method path` with `authorization`, if `path` is an admin route.
    pub(crate) fn answer(
        &self,
        method: &Method,
        path: &str,
        authorization: Option<&[u8]>,
    ) -> Option<Answer> {
        if path == STATE {
            return Some(match *method {
                Method::GET | Method::HEAD => match self.authorize(authorization, true) {
                    Ok(()) => (StatusCode::OK, None, self.live_state().to_string() + "\n"),
                    Err(refused) => refused,
                },
                _ => not_allowed("GET, HEAD"),
            });
        }
        if path == REGISTRATION {
            return Some(match *method {
                Method::GET | Method::HEAD => (StatusCode::OK, None, self.state()),
                _ => not_allowed("GET, HEAD"),
            });
        }
        let action = path.strip_prefix(REGISTRATION)?.strip_prefix('/')?;
        // A path that is not a route is 404 whatever the method and the token.
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
        if *method != Method::POST {
            return Some(not_allowed("POST"));
        }
        if let Err(refused) = self.authorize(authorization, false) {
            return Some(refused);
        }
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
        self.registration().to_string() + "\n"
    }

    /// The registration's state.
    fn registration(&self) -> serde_json::Value {
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
            let renewed = self.renewed.load(std::sync::atomic::Ordering::Relaxed);
            serde_json::json!({
                "paused": paused,
                "state": state,
                "key": key,
                "lease": lease,
                "last_keepalive_unix_ms": (renewed > 0).then_some(renewed),
            })
        }
        #[cfg(not(feature = "etcd"))]
        {
            serde_json::json!({ "paused": paused, "state": "not_registered" })
        }
    }

    /// The live state (`GET /admin/state`), read now.
    fn live_state(&self) -> serde_json::Value {
        let phase = format!("{:?}", self.server.borrow().phase).to_ascii_lowercase();
        serde_json::json!({
            "taken_at_unix_ms": super::state::unix_ms(),
            "build": super::state::build(),
            "phase": phase,
            "server": self.view.as_ref().map(super::state::ServerView::snapshot),
            "registration": self.registration(),
            "clients": zrpc_core::inspect::client_snapshots(),
        })
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
