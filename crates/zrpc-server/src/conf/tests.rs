use std::time::Duration;

#[cfg(feature = "etcd")]
use zrpc_core::conf::EtcdConf;
use zrpc_core::conf::Validate;

use super::*;

#[test]
fn defaults_match_go_zero() {
    let c = RpcServerConf::new("greet.rpc", "0.0.0.0:8080");
    assert_eq!(c.mode, ServiceMode::Pro);
    assert_eq!(c.timeout, 2000);
    assert_eq!(c.timeout_duration(), Some(Duration::from_secs(2)));
    assert_eq!(c.cpu_threshold, 900);
    assert!(c.health);
    assert!(!c.auth && !c.strict_control && !c.reflection);
    let m = &c.middlewares;
    assert!(m.trace && m.recover && m.stat && m.prometheus && m.breaker);
    assert_eq!(m.stat_conf.slow_threshold, Duration::from_millis(500));
    assert!(!m.stat_conf.log_request_content);
    assert_eq!(c.shutdown.wrap_up_time, Duration::from_secs(1));
    assert_eq!(c.shutdown.wait_time, Duration::from_millis(5500));
    assert!(c.dev_server.is_none() && c.telemetry.is_none());
    assert_eq!(c.log.level, "info");
    assert!(!c.has_etcd());
    assert!(c.ignored_keys().is_empty());
    c.validate().unwrap();
}

#[test]
fn dev_server_defaults() {
    let d = DevServerConf::default();
    assert!(d.enabled && d.enable_metrics);
    assert_eq!(d.port, 6060);
    assert_eq!(d.metrics_path, "/metrics");
    assert_eq!(d.health_path, "/healthz");
    assert_eq!(d.health_response, "OK");
    assert_eq!(d.bind_addr(), "0.0.0.0:6060");
    assert_eq!(DevServerConf::new("::1", 7).bind_addr(), "[::1]:7");
}

#[test]
fn required_keys() {
    let e = RpcServerConf::new("", "0.0.0.0:8080")
        .validate()
        .unwrap_err();
    assert_eq!(e.to_string(), "field `Name` is not set");
    let e = RpcServerConf::new("a", "").validate().unwrap_err();
    assert_eq!(e.path(), Some("ListenOn"));
    let e = RpcServerConf::new("a", "localhost").validate().unwrap_err();
    assert_eq!(e.path(), Some("ListenOn"));
    for ok in [
        "0.0.0.0:8080",
        ":8080",
        "localhost:1",
        "[::]:80",
        "my-host.svc:9000",
    ] {
        RpcServerConf::new("a", ok).validate().unwrap();
    }
}

#[test]
fn cpu_threshold_range_is_half_open() {
    RpcServerConf::new("a", ":1")
        .with_cpu_threshold(999)
        .validate()
        .unwrap();
    RpcServerConf::new("a", ":1")
        .with_cpu_threshold(0)
        .validate()
        .unwrap();
    let e = RpcServerConf::new("a", ":1")
        .with_cpu_threshold(1000)
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("out of range [0:1000)"), "{e}");
}

#[test]
fn method_timeouts_need_full_method_shape() {
    let ok = RpcServerConf::new("a", ":1")
        .with_method_timeout("/greet.Greeter/SayHello", Duration::from_secs(1));
    ok.validate().unwrap();
    for bad in [
        "greet.Greeter/SayHello",
        "/greet.Greeter",
        "/greet.Greeter/",
        "//x",
        "/a..b/M",
    ] {
        let e = RpcServerConf::new("a", ":1")
            .with_method_timeout(bad, Duration::from_secs(1))
            .validate()
            .unwrap_err();
        assert_eq!(e.path(), Some("MethodTimeouts[0].FullMethod"), "{bad}");
    }
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_checked_only_when_configured() {
    let mut c = RpcServerConf::new("a", ":1");
    c.etcd.key = "greet.rpc".into();
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .contains("empty etcd hosts")
    );
    let c = RpcServerConf::new("a", ":1").with_etcd(EtcdConf::new(["127.0.0.1:2379"], "greet.rpc"));
    c.validate().unwrap();
    assert!(c.has_etcd());
}

#[test]
fn redis_token_store_needs_the_redis_auth_feature_only_with_auth() {
    let mut c = RpcServerConf::new("a", ":1");
    c.redis = Some(RedisKeyConf::new("127.0.0.1:6379", "apps"));
    // a Redis block without Auth (go-zero YAMLs carry one) loads in every build
    c.validate().unwrap();
    c.auth = true;
    let res = c.validate();
    if cfg!(feature = "redis-auth") {
        res.unwrap();
    } else {
        let err = res.unwrap_err();
        assert_eq!(err.path(), Some("Redis.Host"));
        assert!(
            err.to_string().contains("`redis-auth` cargo feature"),
            "{err}"
        );
    }
}

#[test]
fn reflection_on_in_dev_and_test() {
    assert!(!RpcServerConf::new("a", ":1").reflection_enabled());
    assert!(
        RpcServerConf::new("a", ":1")
            .with_mode(ServiceMode::Dev)
            .reflection_enabled()
    );
    assert!(
        RpcServerConf::new("a", ":1")
            .with_mode(ServiceMode::Test)
            .reflection_enabled()
    );
    assert!(
        RpcServerConf::new("a", ":1")
            .with_reflection(true)
            .reflection_enabled()
    );
}

#[test]
fn ignored_keys_are_listed() {
    let mut c = RpcServerConf::new("a", ":1");
    c.redis = Some(RedisKeyConf::default());
    c.metrics_url = "http://x".into();
    c.profiling = Some(ProfilingConf::default());
    let keys: Vec<&str> = c.ignored_keys().iter().map(|k| k.key).collect();
    assert_eq!(keys, ["Profiling", "MetricsUrl"]);
}

#[test]
fn auth_tokens_builder() {
    let c = RpcServerConf::new("a", ":1").with_auth_tokens([("app", "secret")]);
    assert!(c.auth);
    assert_eq!(c.auth_tokens, [AuthTokenConf::new("app", "secret")]);
    c.validate().unwrap();
}

#[test]
fn log_options_are_checked() {
    let mut c = RpcServerConf::new("a", ":1");
    c.log.level = "verbose".into();
    let e = c.validate().unwrap_err();
    assert_eq!(e.path(), Some("Log.Level"));
}

fn yaml(text: &str) -> Result<RpcServerConf, zrpc_core::conf::ConfError> {
    zrpc_core::conf::from_str_with_env(text, zrpc_core::conf::Format::Yaml, "greet.yaml", |_| None)
}

#[cfg(feature = "etcd")]
#[test]
fn loads_goctl_yaml() {
    let c = yaml("Name: greet.rpc\nListenOn: 0.0.0.0:8080\nEtcd:\n  Hosts:\n  - 127.0.0.1:2379\n  Key: greet.rpc\n").unwrap();
    assert_eq!(c.name, "greet.rpc");
    assert_eq!(c.etcd.hosts, ["127.0.0.1:2379"]);
    assert!(c.has_etcd());
    assert_eq!(c.timeout, 2000);
}

#[test]
fn stat_conf_sits_in_middlewares() {
    let c = yaml(
        "Name: a\nListenOn: :1\nMiddlewares:\n  Stat: false\n  StatConf:\n    SlowThreshold: 1s\n    IgnoreContentMethods: [/a.B/C]\n",
    )
    .unwrap();
    assert!(!c.middlewares.stat && c.middlewares.trace);
    assert_eq!(
        c.middlewares.stat_conf.slow_threshold,
        Duration::from_secs(1)
    );
    assert_eq!(c.middlewares.stat_conf.ignore_content_methods, ["/a.B/C"]);
    let e = yaml("Name: a\nListenOn: :1\nMiddlewares:\n  Tiemout: true\n").unwrap_err();
    assert_eq!(e.path(), Some("Middlewares.Tiemout"));
}

#[cfg(feature = "otel")]
#[test]
fn accepts_go_zero_service_conf_keys() {
    let text = "Name: a\nListenOn: :1\nMode: dev\nMetricsUrl: http://m\n\
         Log: {ServiceName: a, Mode: file, Encoding: plain, Path: /var/log, Level: error, Stat: false, KeepDays: 7, \
         Rotation: size, MaxSize: 10, MaxBackups: 3, Compress: true, StackCooldownMillis: 50, TimeFormat: x, \
         FieldKeys: {TimestampKey: ts}}\n\
         Telemetry: {Name: t, Endpoint: http://j:4317, Sampler: 0.5, Batcher: otlphttp, OtlpHeaders: {a: b}}\n\
         Prometheus: {Host: 0.0.0.0, Port: 9091, Path: /m}\n\
         Redis: {Host: r:6379, Type: node, Key: tokens}\nAuth: true\n\
         Profiling: {ServerAddr: http://p, ProfileType: {CPU: false}}\n\
         Shutdown: {WrapUpTime: 2s, WaitTime: 10s}\n";
    // Auth with Redis.Host needs the redis-auth feature; without it the file is refused,
    // naming it, and loads with Auth off.
    let c = if cfg!(feature = "redis-auth") {
        yaml(text).unwrap()
    } else {
        let err = yaml(text).unwrap_err();
        assert!(err.to_string().contains("redis-auth"), "{err}");
        yaml(&text.replace("Auth: true", "Auth: false")).unwrap()
    };
    assert_eq!(c.mode, ServiceMode::Dev);
    assert_eq!(c.log.field_keys.timestamp_key, "ts");
    assert_eq!(c.log.field_keys.level_key, "level");
    assert_eq!(c.telemetry_name(), "t");
    assert!((c.telemetry.as_ref().unwrap().sampler - 0.5).abs() < f64::EPSILON);
    assert_eq!(c.prometheus.as_ref().unwrap().port, 9091);
    assert!(!c.profiling.as_ref().unwrap().profile_type.cpu);
    assert_eq!(c.shutdown.wait_time, Duration::from_secs(10));
    let keys: Vec<&str> = c.ignored_keys().iter().map(|k| k.key).collect();
    assert_eq!(
        keys,
        [
            "Profiling",
            "MetricsUrl",
            "Prometheus",
            "Log.TimeFormat",
            "Log.StackCooldownMillis",
            "Log.FieldKeys",
            "Log.Rotation",
            "Log.KeepDays",
            "Log.MaxBackups",
            "Log.MaxSize",
            "Log.Compress",
        ]
    );
}

#[test]
fn accepts_go_zero_v1_10_3_redis_keys() {
    let c = yaml(
        "Name: a\nListenOn: :1\nRedis:\n  Host: r:6379\n  Type: cluster\n  User: u\n  Pass: p\n  Tls: true\n  \
         NonBlock: false\n  DisableIdentity: true\n  Protocol: 2\n  MaintNotifications: auto\n  \
         PingTimeout: 500ms\n  Key: rpc:tokens\n",
    )
    .unwrap();
    let r = c.redis.as_ref().unwrap();
    assert_eq!(r.redis.kind, "cluster");
    assert!(r.redis.disable_identity && r.redis.tls && !r.redis.non_block);
    assert_eq!(r.redis.protocol, 2);
    assert_eq!(r.redis.maint_notifications, "auto");
    assert_eq!(r.redis.ping_timeout, Duration::from_millis(500));
    assert_eq!(r.key, "rpc:tokens");

    let r = yaml("Name: a\nListenOn: :1\nRedis: {Host: r:6379, Key: k}\n")
        .unwrap()
        .redis
        .unwrap();
    assert_eq!(r, RedisKeyConf::new("r:6379", "k"));
    assert!(r.redis.non_block, "go-zero v1.10.3 default");
    assert_eq!(r.redis.ping_timeout, Duration::from_secs(1));

    let e = yaml("Name: a\nListenOn: :1\nRedis: {Host: r, MaintNotification: auto}\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file greet.yaml: unknown key `Redis.MaintNotification` (did you mean `MaintNotifications`?)"
    );
    let e = yaml("Name: a\nListenOn: :1\nRedis: {Host: r, MaintNotifications: on}\n").unwrap_err();
    assert_eq!(e.path(), Some("Redis.MaintNotifications"));
    let e = yaml("Name: a\nListenOn: :1\nRedis: {Host: r, Protocol: three}\n").unwrap_err();
    assert_eq!(e.path(), Some("Redis.Protocol"));
}

#[cfg(feature = "devserver")]
#[test]
fn defaults_ignore_nothing_and_console_mode_ignores_file_keys() {
    // go-zero applies KeepDays, Rotation, ... only to files; in console mode they do nothing
    // there either, so zrpc has nothing to warn about.
    let c = yaml(
        "Name: a\nListenOn: :1\nLog: {Mode: console, Rotation: size, KeepDays: 7, MaxSize: 10, \
         MaxBackups: 2, Compress: true, FileTimeFormat: '2006-01-02', Stat: false}\n\
         DevServer: {Port: 6061, EnablePprof: false}\nTelemetry: {Endpoint: '', Batcher: zipkin}\n",
    )
    .unwrap();
    assert!(c.ignored_keys().is_empty(), "{:?}", c.ignored_keys());

    // files with go-zero's defaults (daily rotation included): no key anybody wrote
    let mut c = RpcServerConf::new("a", ":1");
    c.log.mode = "volume".into();
    assert!(c.ignored_keys().is_empty(), "{:?}", c.ignored_keys());
    c.log.file_time_format = "2006-01-02".into();
    c.log.max_content_length = 10;
    let keys: Vec<&str> = c.ignored_keys().iter().map(|k| k.key).collect();
    assert_eq!(keys, ["Log.MaxContentLength", "Log.FileTimeFormat"]);
}

#[test]
fn telemetry_http_keys_are_ignored_only_when_exporting() {
    let mut c = RpcServerConf::new("a", ":1");
    c.telemetry = Some(TelemetryConf {
        otlp_http_path: "/v1/traces".into(),
        otlp_http_secure: true,
        ..TelemetryConf::default()
    });
    assert!(c.ignored_keys().is_empty(), "no Endpoint, nothing exported");
    if let Some(t) = &mut c.telemetry {
        t.endpoint = "127.0.0.1:4317".into();
    }
    let keys: Vec<&str> = c.ignored_keys().iter().map(|k| k.key).collect();
    assert_eq!(keys, ["Telemetry.OtlpHttpPath", "Telemetry.OtlpHttpSecure"]);
    let shown = c.ignored_keys()[0].to_string();
    assert!(
        shown.starts_with("config key `Telemetry.OtlpHttpPath` is ignored: "),
        "{shown}"
    );
    // the otlphttp batcher uses them
    if let Some(t) = &mut c.telemetry {
        t.batcher = "otlphttp".into();
    }
    assert!(c.ignored_keys().is_empty(), "{:?}", c.ignored_keys());
}

#[test]
fn profiling_cpu_threshold_range_is_go_zeros() {
    let e = yaml("Name: a\nListenOn: :1\nProfiling: {ServerAddr: http://p, CpuThreshold: 1000}\n")
        .unwrap_err();
    assert_eq!(e.path(), Some("Profiling.CpuThreshold"));
    assert!(e.to_string().contains("out of range [0:1000)"), "{e}");
}

#[test]
fn otlp_headers_must_be_valid_metadata() {
    let e = yaml("Name: a\nListenOn: :1\nTelemetry: {OtlpHeaders: {'a b': x}}\n").unwrap_err();
    assert_eq!(e.path(), Some("Telemetry.OtlpHeaders.a b"));
}

#[cfg(all(feature = "etcd", feature = "devserver"))]
#[test]
fn serialized_config_loads_back_equal() {
    let mut c = RpcServerConf::new("a", "127.0.0.1:1")
        .with_etcd(EtcdConf::new(["h:2379"], "k"))
        .with_method_timeout("/a.B/C", Duration::from_millis(1500))
        .with_dev_server(DevServerConf::new("", 7000))
        .with_auth_tokens([("app", "tok")]);
    c.telemetry = Some(TelemetryConf::default());
    c.redis = Some(RedisKeyConf::default());
    c.profiling = Some(ProfilingConf::default());
    c.prometheus = Some(PrometheusConf::default());
    let text = serde_yaml_ng::to_string(&c).unwrap();
    assert!(text.contains("SlowThreshold: 500ms"), "{text}");
    assert_eq!(yaml(&text).unwrap(), c);
}

#[test]
fn advertise_addr_is_host_port_or_host() {
    for ok in [
        "10.0.0.7:8080",
        "10.0.0.7",
        "svc.ns.svc",
        "[fd00::1]:80",
        "fd00::1",
        "",
    ] {
        RpcServerConf::new("a", ":1")
            .with_advertise_addr(ok)
            .validate()
            .unwrap();
    }
    for bad in ["10.0.0.7:port", "http://x:1", "a b"] {
        let e = RpcServerConf::new("a", ":1")
            .with_advertise_addr(bad)
            .validate()
            .unwrap_err();
        assert_eq!(e.path(), Some("AdvertiseAddr"), "{bad}");
    }
}

/// A go-zero config in JSON5 (comments, unquoted keys, trailing commas, single quotes), as
/// go-zero reads `.json5` files since v1.10.1, loads to the values of its YAML twin; without
/// the `json5` feature it is refused, naming the feature.
#[test]
fn a_json5_config_loads_as_its_yaml_twin() {
    use zrpc_core::conf::{Format, from_str};
    let yaml = "Name: greet.rpc\nListenOn: 0.0.0.0:8080\nTimeout: 3000\nCpuThreshold: 0\n\
                Log:\n  Level: error\n  Encoding: plain\nMiddlewares:\n  Stat: false\n\
                MethodTimeouts:\n  - FullMethod: /greet.Greet/Ping\n    Timeout: 1s\n";
    let json5 = "// goctl's keys, in JSON5\n{\n  Name: 'greet.rpc',\n  ListenOn: \"0.0.0.0:8080\",\n  \
                 Timeout: 3000, CpuThreshold: 0,\n  Log: { Level: 'error', Encoding: 'plain', },\n  \
                 /* the stat log off */ Middlewares: { Stat: false },\n  \
                 MethodTimeouts: [{ FullMethod: '/greet.Greet/Ping', Timeout: '1s' },],\n}\n";
    let from_yaml: RpcServerConf = from_str(yaml, Format::Yaml, "greet").unwrap();
    let loaded = from_str::<RpcServerConf>(json5, Format::Json5, "greet");
    if cfg!(feature = "json5") {
        let from_json5 = loaded.unwrap();
        assert_eq!(from_json5, from_yaml);
        assert_eq!(from_json5.timeout, 3000);
        assert!(!from_json5.middlewares.stat);
    } else {
        let e = loaded.unwrap_err().to_string();
        assert!(e.contains("json5"), "{e}");
    }
}

#[test]
fn debug_never_prints_a_secret() {
    // read without the checks (a build without `redis-auth` or `otel` refuses those keys)
    let conf: RpcServerConf = serde_yaml_ng::from_str(
        r#"
Name: s.rpc
ListenOn: 127.0.0.1:8080
Etcd: { Hosts: [127.0.0.1:2379], Key: s.rpc, User: root, Pass: etcd-pw }
Redis: { Host: 127.0.0.1:6379, Pass: redis-pw, Key: apps }
Auth: true
AuthTokens: [{ App: a, Token: static-token }]
DevServer: { AdminToken: admin-secret }
Telemetry: { Endpoint: http://collector:4317, OtlpHeaders: { api-key: otlp-secret } }
"#,
    )
    .unwrap();
    let shown = format!("{conf:?}");
    for secret in [
        "etcd-pw",
        "redis-pw",
        "static-token",
        "admin-secret",
        "otlp-secret",
    ] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert_eq!(shown.matches("<redacted>").count(), 5, "{shown}");
    // what is not secret stays
    for kept in ["root", "apps", "api-key", "collector:4317"] {
        assert!(shown.contains(kept), "{kept} missing from {shown}");
    }
}

/// DevServer paths that zrpc's own routes or each other would shadow are refused at load.
#[cfg(feature = "devserver")]
#[test]
fn dev_server_paths_that_would_be_shadowed_are_refused() {
    let dev = |extra: &str| {
        yaml(&format!(
            "Name: s\nListenOn: 0.0.0.0:8080\nDevServer:\n  Enabled: true\n{extra}"
        ))
    };
    for (extra, says) in [
        ("  HealthPath: /admin\n", "DevServer.HealthPath"),
        ("  HealthPath: /admin/state\n", "DevServer.HealthPath"),
        ("  MetricsPath: /\n", "DevServer.MetricsPath"),
        ("  MetricsPath: /healthz\n", "DevServer.MetricsPath"),
        ("  HealthPath: ping\n", "must start with `/`"),
    ] {
        let e = dev(extra).unwrap_err().to_string();
        assert!(e.contains(says), "{extra}: {e}");
    }
    assert!(dev("  HealthPath: /ping\n  MetricsPath: /prom\n").is_ok());
    // With metrics off, the same path is no clash.
    assert!(dev("  EnableMetrics: false\n  MetricsPath: /healthz\n").is_ok());
}
