//! The `Redis` block: go-zero's `redis.RedisKeyConf` (`core/stores/redis/conf.go`, v1.10.3), the
//! Redis-backed token store of `Auth` (`crate::auth::RedisTokens`). zrpc accepts every key with
//! go-zero's defaults and checks the enumerated ones; `Type: cluster` and `Tls: true` are refused
//! when the store is built, `MaintNotifications` is reported by
//! [`super::RpcServerConf::ignored_keys`].

use std::time::Duration;

use serde::{Deserialize, Serialize};
use zrpc_core::conf::{ConfError, Validate, duration};

use super::one_of;

/// go-zero's Redis token store config (`Redis`, a `redis.RedisKeyConf`: `RedisConf` + `Key`),
/// used when `Auth` is true and `Host` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
#[allow(clippy::struct_excessive_bools)]
pub struct RedisKeyConf {
    /// `host:port`.
    pub host: String,
    /// `node` (default) or `cluster`.
    #[serde(rename = "Type")]
    pub kind: String,
    /// User.
    pub user: String,
    /// Password.
    pub pass: String,
    /// Use TLS.
    pub tls: bool,
    /// Do not ping at start (default true).
    pub non_block: bool,
    /// Skip `CLIENT SETINFO` on connect (default false; go-zero v1.10.3).
    pub disable_identity: bool,
    /// RESP protocol version, 2 or 3 (default 3; go-zero v1.10.3).
    pub protocol: i64,
    /// `CLIENT MAINT_NOTIFICATIONS` mode: `disabled` (default), `enabled` or `auto`
    /// (go-zero v1.10.3).
    pub maint_notifications: String,
    /// Ping timeout (Go duration, default 1s).
    #[serde(with = "duration")]
    pub ping_timeout: Duration,
    /// The hash key holding app -> token.
    pub key: String,
}

impl Default for RedisKeyConf {
    fn default() -> Self {
        RedisKeyConf {
            host: String::new(),
            kind: "node".to_owned(),
            user: String::new(),
            pass: String::new(),
            tls: false,
            non_block: true,
            disable_identity: false,
            protocol: 3,
            maint_notifications: "disabled".to_owned(),
            ping_timeout: Duration::from_secs(1),
            key: String::new(),
        }
    }
}

impl Validate for RedisKeyConf {
    /// go-zero's option checks (`Type`, `MaintNotifications`).
    fn validate(&self) -> Result<(), ConfError> {
        one_of("Redis.Type", &self.kind, &["node", "cluster"])?;
        one_of(
            "Redis.MaintNotifications",
            &self.maint_notifications,
            &["disabled", "enabled", "auto"],
        )
    }
}

/// The error for `Auth: true` with `Redis.Host` in a build without the `redis-auth` feature.
#[cfg_attr(feature = "redis-auth", allow(dead_code))]
pub(crate) fn redis_auth_off(host: &str) -> zrpc_core::conf::ConfError {
    zrpc_core::conf::ConfError::invalid(
        "Redis.Host",
        format!(
            "{host:?} asks for go-zero's Redis token store (Auth: true), which this build of \
             zrpc leaves out: enable the `redis-auth` cargo feature of zrpc \
             (zrpc = {{ ..., features = [\"redis-auth\"] }}), or list the apps in AuthTokens"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_go_zero_v1_10_3() {
        let r = RedisKeyConf::default();
        assert_eq!(r.kind, "node");
        assert!(r.non_block && !r.tls && !r.disable_identity);
        assert_eq!(r.protocol, 3);
        assert_eq!(r.maint_notifications, "disabled");
        assert_eq!(r.ping_timeout, Duration::from_secs(1));
        r.validate().unwrap();
    }

    #[test]
    fn options_are_checked() {
        let r = RedisKeyConf {
            maint_notifications: "sometimes".into(),
            ..RedisKeyConf::default()
        };
        assert_eq!(
            r.validate().unwrap_err().path(),
            Some("Redis.MaintNotifications")
        );
        let r = RedisKeyConf {
            kind: "sentinel".into(),
            ..RedisKeyConf::default()
        };
        assert_eq!(r.validate().unwrap_err().path(), Some("Redis.Type"));
    }
}
