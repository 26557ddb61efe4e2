//! The token stores behind `Auth: true`, chosen from the config.
//!
//! - `Redis.Host` set: go-zero's Redis hash ([`RedisTokens`]), so go-zero and zrpc servers of
//!   one fleet share apps and tokens. `AuthTokens`, if also set, is not used (a warning says so).
//! - otherwise: the `AuthTokens` map ([`StaticTokens`](crate::layers::StaticTokens)).
//!
//! [`Server::token_store`](crate::Server::token_store) replaces either.

mod cache;
mod redis_store;

use std::sync::Arc;

pub use redis_store::RedisTokens;

use crate::Error;
use crate::conf::RpcServerConf;
use crate::layers::{StaticTokens, TokenStore};

/// The token store `conf` asks for; `None` when `Auth` is off.
///
/// With Redis and `NonBlock: false` this pings Redis once, blocking up to `PingTimeout`
/// (go-zero fails `NewServer` the same way).
pub(crate) fn store_from_conf(conf: &RpcServerConf) -> Result<Option<Arc<dyn TokenStore>>, Error> {
    if !conf.auth {
        return Ok(None);
    }
    if let Some(redis) = conf.redis.as_ref().filter(|r| !r.host.is_empty()) {
        let store = RedisTokens::new(redis)?;
        if !redis.non_block {
            store.ping(redis.ping_timeout)?;
        }
        if !conf.auth_tokens.is_empty() {
            tracing::warn!(
                target: "zrpc::auth",
                "Auth: both Redis.Host and AuthTokens are set; tokens are read from Redis {} (hash {}), AuthTokens is not used",
                redis.host,
                redis.key
            );
        }
        return Ok(Some(Arc::new(store)));
    }
    Ok(Some(Arc::new(StaticTokens::new(
        conf.auth_tokens
            .iter()
            .map(|t| (t.app.clone(), t.token.clone())),
    ))))
}
