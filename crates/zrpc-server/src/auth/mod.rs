//! The token stores behind `Auth: true` ([`TokenStore`]), chosen from the config.
//!
//! - `Redis.Host` set: go-zero's Redis hash ([`RedisTokens`]), so go-zero and zrpc servers of
//!   one fleet share apps and tokens. `AuthTokens`, if also set, is not used (a warning says so).
//! - otherwise: the `AuthTokens` map ([`StaticTokens`]).
//!
//! [`Server::token_store`](crate::Server::token_store) replaces either.

#[cfg(feature = "redis-auth")]
mod cache;
#[cfg(feature = "redis-auth")]
mod redis_store;
mod store;

use std::sync::Arc;

#[cfg(feature = "redis-auth")]
pub use redis_store::RedisTokens;
#[cfg(feature = "redis-auth")]
pub(crate) use redis_store::connection_info;
pub use store::{Lookup, StaticTokens, TokenFuture, TokenStore};

use crate::Error;
use crate::conf::RpcServerConf;

/// The token store `conf` asks for; `None` when `Auth` is off.
///
/// With Redis and `NonBlock: false` this pings Redis once, blocking up to `PingTimeout`
/// (go-zero fails `NewServer` the same way).
pub(crate) fn store_from_conf(conf: &RpcServerConf) -> Result<Option<Arc<dyn TokenStore>>, Error> {
    if !conf.auth {
        return Ok(None);
    }
    #[cfg(not(feature = "redis-auth"))]
    if let Some(redis) = conf.redis.as_ref().filter(|r| !r.redis.host.is_empty()) {
        return Err(Error::Conf(crate::conf::redis_auth_off(&redis.redis.host)));
    }
    #[cfg(feature = "redis-auth")]
    if let Some(redis) = conf.redis.as_ref().filter(|r| !r.redis.host.is_empty()) {
        let store = RedisTokens::new(redis)?;
        if !redis.redis.non_block {
            store.ping(redis.redis.ping_timeout)?;
        }
        if !conf.auth_tokens.is_empty() {
            tracing::warn!(
                target: "zrpc::auth",
                "Auth: both Redis.Host and AuthTokens are set; tokens are read from Redis {} (hash {}), AuthTokens is not used",
                redis.redis.host,
                redis.key
            );
        }
        return Ok(Some(Arc::new(store)));
    }
    if conf.auth_tokens.is_empty() {
        tracing::warn!(
            target: "zrpc::auth",
            "Auth: true with neither Redis.Host nor AuthTokens: no app is known, so every call with app/token is {}",
            if conf.strict_control { "rejected (StrictControl)" } else { "allowed (StrictControl off)" }
        );
    }
    Ok(Some(Arc::new(StaticTokens::new(
        conf.auth_tokens
            .iter()
            .map(|t| (t.app.clone(), t.token.clone())),
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::RedisKeyConf;

    fn conf(auth: bool, redis_host: &str) -> RpcServerConf {
        let mut c = RpcServerConf::new("a", "127.0.0.1:0").with_auth_tokens([("app", "tok")]);
        c.auth = auth;
        c.redis = Some(RedisKeyConf::new(redis_host, "apps"));
        c
    }

    fn kind(c: &RpcServerConf) -> Option<String> {
        store_from_conf(c).unwrap().map(|s| format!("{s:?}"))
    }

    #[cfg(not(feature = "redis-auth"))]
    #[test]
    fn redis_auth_without_the_feature_names_it() {
        assert_eq!(kind(&conf(false, "127.0.0.1:6379")), None);
        assert!(kind(&conf(true, "")).unwrap().starts_with("StaticTokens"));
        let err = store_from_conf(&conf(true, "127.0.0.1:6379"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Redis.Host") && err.contains("redis-auth"),
            "{err}"
        );
    }

    #[cfg(feature = "redis-auth")]
    #[test]
    fn redis_wins_over_auth_tokens_when_its_host_is_set() {
        assert_eq!(kind(&conf(false, "127.0.0.1:6379")), None);
        assert!(
            kind(&conf(true, "127.0.0.1:6379"))
                .unwrap()
                .starts_with("RedisTokens")
        );
        assert!(kind(&conf(true, "")).unwrap().starts_with("StaticTokens"));
        let mut no_block = conf(true, "127.0.0.1:1");
        if let Some(r) = no_block.redis.as_mut() {
            r.redis.non_block = false;
            r.redis.ping_timeout = std::time::Duration::from_millis(200);
        }
        assert!(store_from_conf(&no_block).is_err());
    }
}
