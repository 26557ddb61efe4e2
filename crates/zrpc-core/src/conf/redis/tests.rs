use std::time::Duration;

use serde::Deserialize;

use super::*;
use crate::conf::{Format, from_str_with_env};

/// A go-zero service's config: its own keys next to the embedded server config's (`Name`
/// stands for those), with go-zero's `Cache` and `Redis` blocks.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct Service {
    name: String,
    data_source: String,
    cache: CacheConf,
    redis: RedisKeyConf,
    biz_redis: Option<RedisConf>,
}

impl Validate for Service {
    fn validate(&self) -> Result<(), ConfError> {
        self.cache.validate_at("Cache")?;
        self.redis.validate_at("Redis")?;
        if let Some(r) = &self.biz_redis {
            r.validate_at("BizRedis")?;
        }
        Ok(())
    }
}

fn load(text: &str) -> Result<Service, ConfError> {
    from_str_with_env(text, Format::Yaml, "user.yaml", |_| None)
}

/// The blocks as goctl's `rpc new` templates and go-zero's docs write them.
const GO_ZERO_YAML: &str = "\
Name: user.rpc
DataSource: root:pw@tcp(127.0.0.1:3306)/user
Cache:
  - Host: 127.0.0.1:6379
    Pass: secret
  - Host: 127.0.0.1:6380
    Type: node
    Weight: 50
    NonBlock: false
    PingTimeout: 500ms
Redis:
  Host: 127.0.0.1:6379
  Type: node
  Key: rpc:auth
";

#[test]
fn a_go_zero_cache_and_redis_block_load_unchanged() {
    let c = load(GO_ZERO_YAML).unwrap();
    assert_eq!(c.name, "user.rpc");
    assert_eq!(c.cache.len(), 2);
    let first = &c.cache[0];
    assert_eq!(first.redis.host, "127.0.0.1:6379");
    assert_eq!(first.redis.pass, "secret");
    assert_eq!(first.weight, 100, "go-zero's NodeConf.Weight default");
    let second = &c.cache[1];
    assert_eq!(second.weight, 50);
    assert!(!second.redis.non_block);
    assert_eq!(second.redis.ping_timeout, Duration::from_millis(500));
    assert_eq!(c.redis, RedisKeyConf::new("127.0.0.1:6379", "rpc:auth"));
    assert!(c.biz_redis.is_none());
}

#[test]
fn defaults_match_go_zero_v1_10_3() {
    // core/stores/redis/conf.go and core/stores/cache/config.go
    let r = RedisConf::default();
    assert_eq!(r.kind, "node");
    assert!(r.non_block && !r.tls && !r.disable_identity);
    assert_eq!(r.protocol, 3);
    assert_eq!(r.maint_notifications, "disabled");
    assert_eq!(r.ping_timeout, Duration::from_secs(1));
    assert_eq!(NodeConf::default().weight, 100);
    assert_eq!(NodeConf::new("h:1").redis, RedisConf::new("h:1"));
    // a node written with its host alone takes every default
    let c = load("Cache: [{host: h:1}]\n").unwrap();
    assert_eq!(c.cache, [NodeConf::new("h:1")]);
}

#[test]
fn keys_are_case_insensitive_in_the_embedded_block() {
    let c = load("cache: [{HOST: h:1, weight: 7, pingtimeout: 2s}]\nredis: {host: r:1, KEY: k}\n")
        .unwrap();
    assert_eq!(c.cache[0].redis.host, "h:1");
    assert_eq!(c.cache[0].weight, 7);
    assert_eq!(c.cache[0].redis.ping_timeout, Duration::from_secs(2));
    assert_eq!(c.redis.key, "k");
}

#[test]
fn an_unknown_key_names_its_path_and_the_closest_key() {
    let e = load("Cache:\n  - Host: h:1\n  - Host: h:2\n    Wieght: 5\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file user.yaml: unknown key `Cache[1].Wieght` (did you mean `Weight`?)"
    );
    let e = load("Redis: {Hots: r:1, Key: k}\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file user.yaml: unknown key `Redis.Hots` (did you mean `Host`?)"
    );
    let e = load("BizRedis: {Host: r:1, Kye: k}\n").unwrap_err();
    assert_eq!(e.path(), Some("BizRedis.Kye"), "{e}");
}

#[test]
fn a_bad_value_names_its_path() {
    let e = load("Cache: [{Host: h:1, PingTimeout: soon}]\n").unwrap_err();
    assert_eq!(e.path(), Some("Cache[0].PingTimeout"), "{e}");
    assert!(e.to_string().starts_with("config file user.yaml: "), "{e}");
    let e = load("Cache: [{Host: h:1, Weight: heavy}]\n").unwrap_err();
    assert_eq!(e.path(), Some("Cache[0].Weight"), "{e}");
    let e = load("Redis: {Host: r:1, NonBlock: maybe}\n").unwrap_err();
    assert_eq!(e.path(), Some("Redis.NonBlock"), "{e}");
}

#[test]
fn validation_names_the_full_key_path() {
    let e = load("Cache: [{Host: h:1}, {Pass: x}]\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file user.yaml: field `Cache[1].Host` is not set"
    );
    let e = load("Cache: [{Host: h:1, Type: sentinel}]\n").unwrap_err();
    assert_eq!(e.path(), Some("Cache[0].Type"), "{e}");
    let e = load("Redis: {Host: r:1, MaintNotifications: sometimes}\n").unwrap_err();
    assert_eq!(e.path(), Some("Redis.MaintNotifications"), "{e}");
    // the server's Redis block is used only with Auth: no Host needed to load
    load("Redis: {Key: k}\n").unwrap();
    let e = load("BizRedis: {Type: node}\n").unwrap_err();
    assert_eq!(e.path(), Some("BizRedis.Host"), "{e}");
}

#[test]
fn serializes_flat_as_go_zero_writes_it() {
    let node = serde_json::to_value(NodeConf::new("h:1")).unwrap();
    assert_eq!(node["Host"], "h:1");
    assert_eq!(node["Weight"], 100);
    assert_eq!(node["PingTimeout"], "1s");
    let key = serde_json::to_value(RedisKeyConf::new("r:1", "k")).unwrap();
    assert_eq!(key["Host"], "r:1");
    assert_eq!(key["Key"], "k");
    let back: RedisKeyConf =
        from_str_with_env(&key.to_string(), Format::Json, "", |_| None).unwrap();
    assert_eq!(back, RedisKeyConf::new("r:1", "k"));
}
