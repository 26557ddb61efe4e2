//! go-zero's Redis config blocks (v1.10.3): `redis.RedisConf` and `redis.RedisKeyConf`
//! (`core/stores/redis/conf.go`), and `cache.CacheConf`, a list of `cache.NodeConf`
//! (`core/stores/cache/config.go`), so that a go-zero service's `Redis:` and `Cache:` blocks
//! load unchanged. As in Go, the key and node blocks embed a [`RedisConf`] ([`super::Embed`]
//! reads one block into both parts, case-insensitively, with unknown keys named).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfError, Embed, Validate, duration, one_of};

/// go-zero's `redis.RedisConf`: where a Redis is and how to talk to it.
///
/// | Key | Type | Default | Notes |
/// |---|---|---|---|
/// | `Host` | `host:port` | `""` | required |
/// | `Type` | string | `node` | `node` or `cluster` |
/// | `User`, `Pass` | string | `""` | |
/// | `Tls` | bool | `false` | |
/// | `NonBlock` | bool | `true` | false: ping at start |
/// | `DisableIdentity` | bool | `false` | skip `CLIENT SETINFO` on connect |
/// | `Protocol` | int | `3` | RESP version, 2 or 3 |
/// | `MaintNotifications` | string | `disabled` | `disabled`, `enabled` or `auto` |
/// | `PingTimeout` | duration | `1s` | |
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
#[allow(clippy::struct_excessive_bools)]
pub struct RedisConf {
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
    /// Skip `CLIENT SETINFO` on connect (default false).
    pub disable_identity: bool,
    /// RESP protocol version, 2 or 3 (default 3).
    pub protocol: i64,
    /// `CLIENT MAINT_NOTIFICATIONS` mode: `disabled` (default), `enabled` or `auto`.
    pub maint_notifications: String,
    /// Ping timeout (Go duration, default 1s).
    #[serde(with = "duration")]
    pub ping_timeout: Duration,
}

/// `Pass` shows whether it is set, never its value.
impl std::fmt::Debug for RedisConf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConf")
            .field("host", &self.host)
            .field("kind", &self.kind)
            .field("user", &self.user)
            .field("pass", &super::redacted(&self.pass))
            .field("tls", &self.tls)
            .field("non_block", &self.non_block)
            .field("disable_identity", &self.disable_identity)
            .field("protocol", &self.protocol)
            .field("maint_notifications", &self.maint_notifications)
            .field("ping_timeout", &self.ping_timeout)
            .finish()
    }
}

impl Default for RedisConf {
    fn default() -> Self {
        RedisConf {
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
        }
    }
}

impl RedisConf {
    /// A Redis at `host` (`host:port`), everything else go-zero's default.
    pub fn new(host: impl Into<String>) -> Self {
        RedisConf {
            host: host.into(),
            ..RedisConf::default()
        }
    }

    /// go-zero's option checks (`Type`, `MaintNotifications`), without `Host`.
    fn check_options(&self) -> Result<(), ConfError> {
        one_of("Type", &self.kind, &["node", "cluster"])?;
        one_of(
            "MaintNotifications",
            &self.maint_notifications,
            &["disabled", "enabled", "auto"],
        )
    }
}

impl Validate for RedisConf {
    /// `Host` is set (go-zero requires it), and the options are go-zero's. Key paths are
    /// relative to the block: check a `Redis:` block with `validate_at("Redis")`.
    fn validate(&self) -> Result<(), ConfError> {
        if self.host.is_empty() {
            return Err(ConfError::missing("Host"));
        }
        self.check_options()
    }
}

/// go-zero's `redis.RedisKeyConf`: a [`RedisConf`] and the `Key` of a hash in it, in one block
/// (the server's `Redis`, the token store of `Auth`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", from = "Embed<RedisConf, KeyPart>")]
#[non_exhaustive]
pub struct RedisKeyConf {
    /// The Redis (the block's other keys).
    #[serde(flatten)]
    pub redis: RedisConf,
    /// The hash key.
    pub key: String,
}

impl RedisKeyConf {
    /// The hash `key` in the Redis at `host` (`host:port`), everything else go-zero's default.
    pub fn new(host: impl Into<String>, key: impl Into<String>) -> Self {
        RedisKeyConf {
            redis: RedisConf::new(host),
            key: key.into(),
        }
    }
}

impl Validate for RedisKeyConf {
    /// The options are go-zero's. `Host` and `Key` are checked where the block is used: the
    /// server's `Redis` is read only with `Auth: true`.
    fn validate(&self) -> Result<(), ConfError> {
        self.redis.check_options()
    }
}

/// `RedisKeyConf`'s own key, next to the embedded [`RedisConf`].
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct KeyPart {
    key: String,
}

impl From<Embed<RedisConf, KeyPart>> for RedisKeyConf {
    fn from(e: Embed<RedisConf, KeyPart>) -> Self {
        RedisKeyConf {
            redis: e.base,
            key: e.extra.key,
        }
    }
}

/// go-zero's `cache.CacheConf` (`cache.ClusterConf`): the Redis nodes a cache spreads its keys
/// over, by weight. A go-zero service's `Cache:` block:
///
/// ```yaml
/// Cache:
///   - Host: 127.0.0.1:6379
///   - Host: 127.0.0.1:6380
///     Weight: 50
/// ```
///
/// Check it in a service's config with `self.cache.validate_at("Cache")`: errors then name
/// `Cache[1].Host`.
pub type CacheConf = Vec<NodeConf>;

/// go-zero's `cache.NodeConf`: one Redis of a [`CacheConf`] and its `Weight` (default 100).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", from = "Embed<RedisConf, WeightPart>")]
#[non_exhaustive]
pub struct NodeConf {
    /// The Redis (the block's other keys).
    #[serde(flatten)]
    pub redis: RedisConf,
    /// Its share of the keys, relative to the other nodes' (default 100).
    pub weight: i64,
}

impl Default for NodeConf {
    fn default() -> Self {
        NodeConf {
            redis: RedisConf::default(),
            weight: DEFAULT_WEIGHT,
        }
    }
}

impl NodeConf {
    /// The Redis at `host` (`host:port`) with go-zero's defaults (weight 100).
    pub fn new(host: impl Into<String>) -> Self {
        NodeConf {
            redis: RedisConf::new(host),
            weight: DEFAULT_WEIGHT,
        }
    }
}

/// go-zero's `NodeConf.Weight` default.
const DEFAULT_WEIGHT: i64 = 100;

impl Validate for NodeConf {
    /// As [`RedisConf`]'s (`Host` is required).
    fn validate(&self) -> Result<(), ConfError> {
        self.redis.validate()
    }
}

impl Validate for CacheConf {
    /// Each node's, named by its index (`[1].Host`; `Cache[1].Host` with `validate_at`).
    fn validate(&self) -> Result<(), ConfError> {
        for (i, node) in self.iter().enumerate() {
            node.validate_at(&format!("[{i}]"))?;
        }
        Ok(())
    }
}

/// `NodeConf`'s own key, next to the embedded [`RedisConf`].
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct WeightPart {
    weight: i64,
}

impl Default for WeightPart {
    fn default() -> Self {
        WeightPart {
            weight: DEFAULT_WEIGHT,
        }
    }
}

impl From<Embed<RedisConf, WeightPart>> for NodeConf {
    fn from(e: Embed<RedisConf, WeightPart>) -> Self {
        NodeConf {
            redis: e.base,
            weight: e.extra.weight,
        }
    }
}

#[cfg(test)]
mod tests;
