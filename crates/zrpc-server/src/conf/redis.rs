//! The `Redis` block: go-zero's `redis.RedisKeyConf` ([`zrpc_core::conf::RedisKeyConf`]), the
//! Redis-backed token store of `Auth` (`crate::auth::RedisTokens`). zrpc accepts every key with
//! go-zero's defaults and checks the enumerated ones; `Type: cluster` and `Tls: true` are refused
//! when the store is built, `MaintNotifications` is reported by
//! [`super::RpcServerConf::ignored_keys`].

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
