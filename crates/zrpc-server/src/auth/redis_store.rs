//! go-zero's Redis token store (`zrpc/internal/auth/auth.go`, v1.10.3), so that go-zero and zrpc
//! servers of one fleet share apps and tokens.
//!
//! The expected token of an app is `HGET <Redis.Key> <app>`, cached in-process for 5 minutes
//! (go-zero's `collection.Cache`, concurrent misses share one `HGET`). A Redis error, **and a
//! missing field** (go-redis' `redis.Nil`, text `redis: nil`), is an error of the store: with
//! `StrictControl` the call fails with `Internal`, without it the call is **allowed**, as in
//! go-zero (see `docs/security.md`).
//!
//! One multiplexed connection is shared by all lookups; it is opened on first use and opened
//! again on the next lookup after an I/O error. Dial timeout 5 s and response timeout 3 s are
//! go-redis' defaults.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};
use zrpc_core::conf::ConfError;

use super::cache::{Fetched, TokenCache};
use super::store::{Lookup, TokenStore};
use crate::Error;
use crate::conf::RedisKeyConf;

/// go-zero's token cache expiry (`internal/auth/auth.go`: `defaultExpiration = 5 * time.Minute`).
const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(5 * 60);
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// The token store of `Auth: true` with a `Redis` block: a Redis hash `Redis.Key` of
/// app -> token, read with `HGET` and cached for 5 minutes, as go-zero does.
///
/// Built by [`Server::new`](crate::Server::new) from the config; build it yourself only to change
/// the cache time ([`cache_ttl`](Self::cache_ttl)) and pass it to
/// [`Server::token_store`](crate::Server::token_store).
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use zrpc_server::conf::{RedisKeyConf, RpcServerConf};
/// use zrpc_server::{RedisTokens, Server};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let redis = RedisKeyConf::new("127.0.0.1:6379", "rpc:apps");
/// let store = RedisTokens::new(&redis)?.cache_ttl(Duration::from_secs(30));
/// let mut conf = RpcServerConf::new("greeter.rpc", "127.0.0.1:8080");
/// conf.auth = true;
/// let server = Server::new(conf)?.token_store(Arc::new(store));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisTokens {
    inner: Arc<Inner>,
}

struct Inner {
    host: String,
    key: String,
    client: Client,
    conn: Mutex<Option<MultiplexedConnection>>,
    cache: Arc<TokenCache>,
}

impl fmt::Debug for RedisTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the password or the tokens.
        f.debug_struct("RedisTokens")
            .field("host", &self.inner.host)
            .field("key", &self.inner.key)
            .field("cache_ttl", &self.inner.cache.ttl())
            .finish_non_exhaustive()
    }
}

impl RedisTokens {
    /// A store reading the hash `conf.key` on `conf.redis.host`. Connects lazily: it never blocks
    /// and
    /// never fails because Redis is down (see [`ping`](Self::ping) for `NonBlock: false`).
    ///
    /// # Errors
    ///
    /// [`Error::Conf`] naming the key: `Redis.Host` not `host:port`, `Redis.Key` empty,
    /// `Redis.Type: cluster` or `Redis.Tls: true` (not supported, see `docs/configuration.md`).
    pub fn new(conf: &RedisKeyConf) -> Result<Self, Error> {
        let info = connection_info(conf)?;
        if conf.key.is_empty() {
            return Err(ConfError::missing("Redis.Key").into());
        }
        let client = Client::open(info).map_err(|e| {
            Error::Conf(ConfError::invalid(
                "Redis.Host",
                format!("{}: {e}", conf.redis.host),
            ))
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                host: conf.redis.host.clone(),
                key: conf.key.clone(),
                client,
                conn: Mutex::new(None),
                cache: Arc::new(TokenCache::new(DEFAULT_CACHE_TTL)),
            }),
        })
    }

    /// How long a token read from Redis is used before it is read again (default 5 minutes,
    /// go-zero's). A revoked or changed token keeps working for up to this long.
    #[must_use]
    pub fn cache_ttl(self, ttl: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                host: self.inner.host.clone(),
                key: self.inner.key.clone(),
                client: self.inner.client.clone(),
                conn: Mutex::new(None),
                cache: Arc::new(TokenCache::new(ttl)),
            }),
        }
    }

    /// Pings Redis once, blocking the calling thread up to `timeout` (go-zero's start-up check
    /// with `NonBlock: false`).
    ///
    /// # Errors
    ///
    /// [`Error::TokenStore`] `redis connect error, addr: <host>: ...` (go-zero's text).
    pub fn ping(&self, timeout: Duration) -> Result<(), Error> {
        let fail = |e: redis::RedisError| {
            Error::TokenStore(format!(
                "redis connect error, addr: {}: {e}",
                self.inner.host
            ))
        };
        let mut conn = self
            .inner
            .client
            .get_connection_with_timeout(timeout)
            .map_err(fail)?;
        conn.set_read_timeout(Some(timeout)).map_err(fail)?;
        conn.set_write_timeout(Some(timeout)).map_err(fail)?;
        redis::cmd("PING")
            .query::<String>(&mut conn)
            .map_err(fail)?;
        Ok(())
    }
}

impl TokenStore for RedisTokens {
    fn lookup(&self, app: &str) -> Lookup {
        let cache = &self.inner.cache;
        if let Some(token) = cache.get(app, tokio::time::Instant::now()) {
            return Lookup::Ready(Ok(Some(token)));
        }
        let inner = Arc::clone(&self.inner);
        let owned = app.to_owned();
        let fetch = cache.take(app, async move { inner.hget(&owned).await });
        Lookup::Pending(Box::pin(async move {
            fetch
                .await
                .map(Some)
                .map_err(|e| Error::TokenStore(e.to_string()))
        }))
    }
}

impl Inner {
    async fn hget(&self, app: &str) -> Fetched {
        let mut conn = self.connection().await.map_err(|e| self.fail(&e))?;
        let found: Result<Option<String>, _> = redis::cmd("HGET")
            .arg(&self.key)
            .arg(app)
            .query_async(&mut conn)
            .await;
        match found {
            Ok(Some(token)) => Ok(token.into()),
            // go-redis' redis.Nil, the text a go-zero server answers with too.
            Ok(None) => Err("redis: nil".into()),
            Err(e) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
                    self.conn.lock().take();
                }
                Err(self.fail(&e))
            }
        }
    }

    async fn connection(&self) -> Result<MultiplexedConnection, redis::RedisError> {
        if let Some(conn) = self.conn.lock().clone() {
            return Ok(conn);
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(DIAL_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        *self.conn.lock() = Some(conn.clone());
        Ok(conn)
    }

    fn fail(&self, e: &redis::RedisError) -> Arc<str> {
        tracing::debug!(target: "zrpc::auth", host = %self.host, key = %self.key, "redis: {e}");
        format!("redis {}: {e}", self.host).into()
    }
}

/// `Redis.Host`, `User`, `Pass`, `Protocol`, `DisableIdentity` as a redis-rs connection.
pub(crate) fn connection_info(conf: &RedisKeyConf) -> Result<ConnectionInfo, Error> {
    if conf.redis.kind == "cluster" {
        return Err(ConfError::invalid(
            "Redis.Type",
            "`cluster` is not supported by zrpc's Redis token store; use `node`",
        )
        .into());
    }
    if conf.redis.tls {
        return Err(ConfError::invalid(
            "Redis.Tls",
            "TLS to Redis is not supported by zrpc's Redis token store yet",
        )
        .into());
    }
    let (host, port) = split_host_port(&conf.redis.host).ok_or_else(|| {
        ConfError::invalid(
            "Redis.Host",
            format!("expected host:port, got {:?}", conf.redis.host),
        )
    })?;
    let mut redis =
        redis::RedisConnectionInfo::default().set_protocol(if conf.redis.protocol == 2 {
            redis::ProtocolVersion::RESP2
        } else {
            redis::ProtocolVersion::RESP3
        });
    if !conf.redis.user.is_empty() {
        redis = redis.set_username(&conf.redis.user);
    }
    if !conf.redis.pass.is_empty() {
        redis = redis.set_password(&conf.redis.pass);
    }
    if conf.redis.disable_identity {
        redis = redis.set_skip_set_lib_name();
    }
    let info = ConnectionAddr::Tcp(host.to_owned(), port)
        .into_connection_info()
        .map_err(|e| ConfError::invalid("Redis.Host", format!("{}: {e}", conf.redis.host)))?;
    Ok(info.set_redis_settings(redis))
}

fn split_host_port(s: &str) -> Option<(&str, u16)> {
    let (host, port) = s.trim().rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let port = port.parse().ok().filter(|p| *p != 0)?;
    (!host.is_empty()).then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(host: &str) -> RedisKeyConf {
        RedisKeyConf::new(host, "apps")
    }

    #[test]
    fn host_must_be_host_port() {
        assert_eq!(split_host_port("127.0.0.1:6379"), Some(("127.0.0.1", 6379)));
        assert_eq!(split_host_port("[::1]:6379"), Some(("::1", 6379)));
        for bad in ["", "redis", ":6379", "r:0", "r:x"] {
            let e = RedisTokens::new(&conf(bad)).unwrap_err();
            assert!(e.to_string().contains("Redis.Host"), "{bad}: {e}");
        }
    }

    #[test]
    fn unsupported_options_are_errors_naming_the_key() {
        let mut c = conf("r:6379");
        c.redis.kind = "cluster".into();
        assert!(
            RedisTokens::new(&c)
                .unwrap_err()
                .to_string()
                .contains("Redis.Type")
        );
        let mut c = conf("r:6379");
        c.redis.tls = true;
        assert!(
            RedisTokens::new(&c)
                .unwrap_err()
                .to_string()
                .contains("Redis.Tls")
        );
        let mut c = conf("r:6379");
        c.key = String::new();
        assert!(
            RedisTokens::new(&c)
                .unwrap_err()
                .to_string()
                .contains("Redis.Key")
        );
    }

    #[test]
    fn debug_hides_the_password() {
        let mut c = conf("r:6379");
        c.redis.pass = "hunter2".into();
        let s = format!("{:?}", RedisTokens::new(&c).unwrap());
        assert!(s.contains("r:6379") && !s.contains("hunter2"), "{s}");
    }

    #[test]
    fn ping_names_the_host() {
        // Port 1 on loopback: nothing listens there.
        let e = RedisTokens::new(&conf("127.0.0.1:1"))
            .unwrap()
            .ping(Duration::from_millis(500))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("redis connect error, addr: 127.0.0.1:1"),
            "{e}"
        );
    }
}
