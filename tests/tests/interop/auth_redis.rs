//! go-zero's Redis-backed auth shared by a mixed fleet: a go-zero server and a zrpc server read
//! the same Redis hash (`Auth: true`, `Redis: {Host, Key}`), so one gz-client app/token is
//! accepted by both, and a wrong, missing or unknown one is rejected by both with the same code
//! and message.

use zrpc_tests::gozero::{
    CallLine, ClientYaml, Discovery, GzClient, GzServer, Programs, ServerYaml, start_zrpc,
    zrpc_conf,
};
use zrpc_tests::gozero_or_skip;
use zrpc_tests::redis::RedisServer;

const KEY: &str = "interop:apps";

/// (what, App/Token, expected code, expected message).
type Case<'a> = (&'a str, Option<(&'a str, &'a str)>, &'a str, &'a str);

async fn one_call(p: &Programs, addr: &str, cred: Option<(&str, &str)>) -> CallLine {
    let mut y = ClientYaml::new(Discovery::Endpoints(vec![addr.to_owned()])).timeout_ms(1500);
    if let Some((a, t)) = cred {
        y = y.credential(a, t);
    }
    let run = GzClient::new(p, &y)
        .n(1)
        .name("world")
        .verbose()
        .run()
        .await;
    assert_eq!(run.calls.len(), 1, "{}", run.explain());
    run.calls[0].clone()
}

/// Both servers on one Redis hash, with `StrictControl: strict`.
async fn both(
    p: &Programs,
    redis: &RedisServer,
    strict: bool,
) -> (GzServer, zrpc_tests::gozero::ZrpcServer) {
    let mut y = ServerYaml::new("gz-auth.rpc", &[], "");
    y.etcd = None;
    y.extra = format!(
        "Auth: true\nStrictControl: {strict}\nRedis:\n  Host: {}\n  Type: node\n  Key: {KEY}\n",
        redis.addr
    );
    let gz = GzServer::start(p, &y, &[]).await;
    let mut conf = zrpc_conf("zrpc-auth.rpc", None);
    conf.auth = true;
    conf.strict_control = strict;
    conf.redis = Some(zrpc::conf::RedisKeyConf::new(redis.addr.clone(), KEY));
    let zr = start_zrpc(conf).await;
    (gz, zr)
}

#[tokio::test]
async fn interop_auth_redis_one_hash_for_go_zero_and_zrpc() {
    let p = gozero_or_skip!();
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    redis.hset(KEY, "demo", "s3cret").await;
    let (gz, zr) = both(p, &redis, true).await;
    let zr_addr = zr.listen_on();
    let cases: [Case<'_>; 4] = [
        ("right token", Some(("demo", "s3cret")), "OK", "hello world"),
        (
            "wrong token",
            Some(("demo", "nope")),
            "Unauthenticated",
            "access denied",
        ),
        (
            "no app/token",
            None,
            "Unauthenticated",
            "app/token required",
        ),
        // go-zero: HGET of a missing field is redis.Nil, an error: Internal under StrictControl.
        (
            "unknown app",
            Some(("stranger", "s3cret")),
            "Internal",
            "redis: nil",
        ),
    ];
    for (what, cred, code, message) in cases {
        let (g, z) = tokio::join!(one_call(p, &gz.addr, cred), one_call(p, &zr_addr, cred));
        println!(
            "auth redis, {what}: go-zero server -> {} {:?}; zrpc server -> {} {:?}",
            g.code, g.message, z.code, z.message
        );
        for (side, c) in [("go-zero", &g), ("zrpc", &z)] {
            assert_eq!(
                (c.code.as_str(), c.message.as_str()),
                (code, message),
                "{what} on the {side} server: {c:?}"
            );
        }
    }
    let hgets = redis.calls("hget").await;
    println!("auth redis: {hgets} HGETs in all");
}

#[tokio::test]
async fn interop_auth_redis_unknown_app_allowed_by_both_without_strict_control() {
    let p = gozero_or_skip!();
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    redis.hset(KEY, "demo", "s3cret").await;
    let (gz, zr) = both(p, &redis, false).await;
    let zr_addr = zr.listen_on();
    let cred = Some(("stranger", "anything"));
    let (g, z) = tokio::join!(one_call(p, &gz.addr, cred), one_call(p, &zr_addr, cred));
    println!(
        "auth redis, unknown app, StrictControl false: go-zero -> {} {:?}; zrpc -> {} {:?}",
        g.code, g.message, z.code, z.message
    );
    for c in [&g, &z] {
        assert_eq!(
            (c.code.as_str(), c.message.as_str()),
            ("OK", "hello world"),
            "{c:?}"
        );
    }
}
