//! Server auth with go-zero's Redis token store: `Auth: true` + `Redis` reads the
//! expected token with `HGET <Redis.Key> <app>` from a real `redis-server`, caches it for 5
//! minutes, and treats a Redis error or a missing app as go-zero does (`Internal` with
//! `StrictControl`, allowed without it).

use std::sync::Arc;
use std::time::Duration;

use tonic::{Code, Request};
use zrpc::conf::{RedisKeyConf, RpcServerConf};
use zrpc_server::RedisTokens;
use zrpc_tests::greeter::{TestGreeter, start_server, start_server_with, test_conf};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;
use zrpc_tests::ports::closed_port;
use zrpc_tests::redis::RedisServer;

const KEY: &str = "rpc:apps";

fn req(app: Option<&str>, token: Option<&str>) -> Request<HelloRequest> {
    let mut r = Request::new(HelloRequest { name: "x".into() });
    if let Some(a) = app {
        r.metadata_mut().insert("app", a.parse().unwrap());
    }
    if let Some(t) = token {
        r.metadata_mut().insert("token", t.parse().unwrap());
    }
    r
}

fn redis_conf(host: &str) -> RedisKeyConf {
    RedisKeyConf::new(host, KEY)
}

fn conf(name: &str, host: &str, strict: bool) -> RpcServerConf {
    let mut c = test_conf(name);
    c.auth = true;
    c.strict_control = strict;
    c.redis = Some(redis_conf(host));
    c
}

async fn call(
    c: &mut GreeterClient<tonic::transport::Channel>,
    app: Option<&str>,
    token: Option<&str>,
) -> (Code, String) {
    match c.say_hello(req(app, token)).await {
        Ok(r) => (Code::Ok, r.into_inner().message),
        Err(e) => (e.code(), e.message().to_owned()),
    }
}

fn ok() -> (Code, String) {
    (Code::Ok, "hello x".to_owned())
}

fn status(code: Code, msg: &str) -> (Code, String) {
    (code, msg.to_owned())
}

#[tokio::test]
async fn redis_auth_right_wrong_missing_and_unknown_strict() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    redis.hset(KEY, "billing", "s3cret").await;
    let srv = start_server(
        conf("auth-redis.rpc", &redis.addr, true),
        TestGreeter::new(),
    )
    .await;
    let mut c = srv.client().await;

    assert_eq!(call(&mut c, Some("billing"), Some("s3cret")).await, ok());
    let denied = status(Code::Unauthenticated, "access denied");
    assert_eq!(call(&mut c, Some("billing"), Some("guess")).await, denied);
    let required = status(Code::Unauthenticated, "app/token required");
    assert_eq!(call(&mut c, None, None).await, required);
    assert_eq!(call(&mut c, Some("billing"), None).await, required);
    assert_eq!(call(&mut c, Some(""), Some("s3cret")).await, required);
    // go-zero: HGET of a missing field is redis.Nil, an error: Internal under StrictControl.
    assert_eq!(
        call(&mut c, Some("stranger"), Some("s3cret")).await,
        status(Code::Internal, "redis: nil")
    );
    assert_eq!(
        srv.greeter.started(),
        1,
        "rejected calls never reach the handler"
    );
    srv.shutdown().await.unwrap();
}

#[tokio::test]
async fn redis_auth_unknown_app_is_allowed_without_strict_control() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    redis.hset(KEY, "billing", "s3cret").await;
    let srv = start_server(
        conf("auth-redis-lax.rpc", &redis.addr, false),
        TestGreeter::new(),
    )
    .await;
    let mut c = srv.client().await;
    // go-zero's weak spot, kept for parity (docs/security.md).
    assert_eq!(call(&mut c, Some("stranger"), Some("anything")).await, ok());
    assert_eq!(
        call(&mut c, Some("billing"), Some("guess")).await,
        status(Code::Unauthenticated, "access denied")
    );
    assert_eq!(
        call(&mut c, None, None).await,
        status(Code::Unauthenticated, "app/token required")
    );
    srv.shutdown().await.unwrap();
}

#[tokio::test]
async fn redis_down_is_internal_when_strict_and_allowed_otherwise() {
    let down = format!("127.0.0.1:{}", closed_port());
    let strict = start_server(conf("auth-down.rpc", &down, true), TestGreeter::new()).await;
    let mut c = strict.client().await;
    let (code, msg) = call(&mut c, Some("billing"), Some("s3cret")).await;
    assert_eq!(code, Code::Internal, "{msg}");
    assert!(msg.starts_with(&format!("redis {down}: ")), "{msg}");
    strict.shutdown().await.unwrap();

    let lax = start_server(conf("auth-down-lax.rpc", &down, false), TestGreeter::new()).await;
    let mut c = lax.client().await;
    assert_eq!(call(&mut c, Some("billing"), Some("s3cret")).await, ok());
    assert_eq!(
        call(&mut c, None, Some("s3cret")).await,
        status(Code::Unauthenticated, "app/token required")
    );
    lax.shutdown().await.unwrap();
}

#[tokio::test]
async fn redis_non_block_false_fails_at_start_naming_the_host() {
    let down = format!("127.0.0.1:{}", closed_port());
    let mut c = conf("auth-block.rpc", &down, true);
    if let Some(r) = c.redis.as_mut() {
        r.redis.non_block = false;
        r.redis.ping_timeout = Duration::from_millis(300);
    }
    let e = zrpc::Server::new(c).unwrap_err().to_string();
    assert!(
        e.contains(&format!("redis connect error, addr: {down}")),
        "{e}"
    );

    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let mut c = conf("auth-block-up.rpc", &redis.addr, true);
    if let Some(r) = c.redis.as_mut() {
        r.redis.non_block = false;
    }
    zrpc::Server::new(c).expect("Redis answers the start-up ping");
}

#[tokio::test]
async fn redis_unsupported_options_fail_at_start() {
    for (key, set) in [
        (
            "Redis.Type",
            (|r: &mut RedisKeyConf| r.redis.kind = "cluster".into()) as fn(&mut RedisKeyConf),
        ),
        ("Redis.Tls", |r| r.redis.tls = true),
        ("Redis.Key", |r| r.key = String::new()),
        ("Redis.Host", |r| r.redis.host = "no-port".into()),
    ] {
        let mut c = conf("auth-bad.rpc", "127.0.0.1:6379", true);
        if let Some(r) = c.redis.as_mut() {
            set(r);
        }
        let e = zrpc::Server::new(c).unwrap_err().to_string();
        assert!(e.contains(key), "{key}: {e}");
    }
}

#[tokio::test]
async fn redis_user_and_password_are_used() {
    let Some(redis) = RedisServer::start_with_password("pa55").await else {
        return;
    };
    redis.hset(KEY, "billing", "s3cret").await;
    let mut with_pass = conf("auth-pass.rpc", &redis.addr, true);
    if let Some(r) = with_pass.redis.as_mut() {
        r.redis.pass = "pa55".into();
    }
    let srv = start_server(with_pass, TestGreeter::new()).await;
    let mut c = srv.client().await;
    assert_eq!(call(&mut c, Some("billing"), Some("s3cret")).await, ok());
    srv.shutdown().await.unwrap();

    // An ACL user (Redis 6+): `User` + `Pass`.
    let reply = redis
        .command(&["ACL", "SETUSER", "svc", "on", ">svcpw", "~*", "+@all"])
        .await;
    assert!(reply.starts_with("+OK"), "ACL SETUSER: {reply}");
    let mut with_user = conf("auth-user.rpc", &redis.addr, true);
    if let Some(r) = with_user.redis.as_mut() {
        r.redis.user = "svc".into();
        r.redis.pass = "svcpw".into();
    }
    let srv = start_server(with_user, TestGreeter::new()).await;
    let mut c = srv.client().await;
    assert_eq!(call(&mut c, Some("billing"), Some("s3cret")).await, ok());
    srv.shutdown().await.unwrap();

    let srv = start_server(
        conf("auth-nopass.rpc", &redis.addr, true),
        TestGreeter::new(),
    )
    .await;
    let mut c = srv.client().await;
    let (code, msg) = call(&mut c, Some("billing"), Some("s3cret")).await;
    assert_eq!(code, Code::Internal, "without Pass Redis refuses: {msg}");
    srv.shutdown().await.unwrap();
}

/// The 5-minute cache: a token changed in Redis is not seen at once (go-zero's revocation delay);
/// with a short TTL (`RedisTokens::cache_ttl`) it is seen once the entry expires. Concurrent
/// first calls for one app make one HGET (singleflight).
#[tokio::test]
async fn redis_tokens_are_cached_and_concurrent_misses_share_one_hget() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    redis.hset(KEY, "billing", "old").await;

    let srv = start_server(
        conf("auth-cache.rpc", &redis.addr, true),
        TestGreeter::new(),
    )
    .await;
    let before = redis.calls("hget").await;
    let calls = (0..32).map(|_| {
        let url = srv.url();
        async move {
            let mut c = GreeterClient::connect(url).await.unwrap();
            call(&mut c, Some("billing"), Some("old")).await
        }
    });
    for r in futures_util::future::join_all(calls).await {
        assert_eq!(r, ok());
    }
    assert_eq!(
        redis.calls("hget").await - before,
        1,
        "32 concurrent misses, one HGET"
    );
    redis.hset(KEY, "billing", "new").await;
    let mut c = srv.client().await;
    assert_eq!(
        call(&mut c, Some("billing"), Some("old")).await,
        ok(),
        "the revoked token still works: cached for 5 minutes, as in go-zero"
    );
    assert_eq!(
        call(&mut c, Some("billing"), Some("new")).await,
        status(Code::Unauthenticated, "access denied")
    );
    srv.shutdown().await.unwrap();

    let ttl = Duration::from_millis(300);
    let store = RedisTokens::new(&redis_conf(&redis.addr))
        .unwrap()
        .cache_ttl(ttl);
    let srv = start_server_with(
        conf("auth-ttl.rpc", &redis.addr, true),
        TestGreeter::new(),
        |s| s.token_store(Arc::new(store)),
    )
    .await;
    let mut c = srv.client().await;
    assert_eq!(call(&mut c, Some("billing"), Some("new")).await, ok());
    redis.hset(KEY, "billing", "newer").await;
    assert_eq!(
        call(&mut c, Some("billing"), Some("new")).await,
        ok(),
        "cached"
    );
    // The clock itself: past the cache's TTL, the next call reads Redis again.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert_eq!(
        call(&mut c, Some("billing"), Some("new")).await,
        status(Code::Unauthenticated, "access denied"),
        "re-read after the TTL"
    );
    assert_eq!(call(&mut c, Some("billing"), Some("newer")).await, ok());
    srv.shutdown().await.unwrap();
}

/// Tokens already cached keep working while Redis is down (an unknown app gets `Internal` under
/// `StrictControl`), and the store reconnects by itself once Redis is back.
#[tokio::test]
async fn redis_outage_keeps_cached_tokens_and_the_store_reconnects() {
    let Some(mut redis) = RedisServer::start().await else {
        return;
    };
    redis.hset(KEY, "billing", "s3cret").await;
    let srv = start_server(
        conf("auth-outage.rpc", &redis.addr, true),
        TestGreeter::new(),
    )
    .await;
    let mut c = srv.client().await;
    assert_eq!(call(&mut c, Some("billing"), Some("s3cret")).await, ok());

    redis.kill();
    assert_eq!(
        call(&mut c, Some("billing"), Some("s3cret")).await,
        ok(),
        "cached: Redis is not asked"
    );
    let (code, msg) = call(&mut c, Some("ops"), Some("t0k")).await;
    assert_eq!(code, Code::Internal, "{msg}");
    assert!(msg.contains(&redis.addr), "the error names the host: {msg}");

    redis.restart().await;
    redis.hset(KEY, "ops", "t0k").await;
    assert_eq!(
        call(&mut c, Some("ops"), Some("t0k")).await,
        ok(),
        "reconnected after the outage"
    );
    srv.shutdown().await.unwrap();
}
