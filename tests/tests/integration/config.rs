//! Config loading: go-zero sample files (YAML as goctl writes them, JSON and TOML equivalents),
//! `${VAR}` expansion, case-insensitive keys, and the error messages for bad files.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use zrpc_client::conf::{BalancerName, RpcClientConf};
use zrpc_core::conf::{self, ConfError};
use zrpc_server::conf::{RpcServerConf, ServiceMode};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/conf")
        .join(name)
}

fn load_server(name: &str) -> Result<RpcServerConf, ConfError> {
    conf::load(fixture(name))
}

fn load_err(name: &str) -> (ConfError, String) {
    let e = load_server(name).expect_err("the fixture must fail to load");
    let msg = e.to_string();
    (e, msg)
}

/// The values every `server.*` fixture holds.
fn assert_sample_server(c: &RpcServerConf) {
    assert_eq!(c.name, "greet.rpc");
    assert_eq!(c.listen_on, "0.0.0.0:8080");
    assert_eq!(c.etcd.hosts, ["127.0.0.1:2379"]);
    assert_eq!(c.etcd.key, "greet.rpc");
    assert!(c.has_etcd());
    assert_eq!(c.mode, ServiceMode::Dev);
    assert!(c.reflection_enabled(), "dev mode turns reflection on");
    assert_eq!(c.timeout, 3000);
    assert_eq!(c.cpu_threshold, 800);
    assert_eq!(c.log.level, "error");
    assert_eq!(c.log.encoding, "plain");
    assert_eq!(c.log.mode, "console", "default kept");
    let m = &c.middlewares;
    assert!(!m.breaker);
    assert!(
        m.trace && m.recover && m.stat && m.prometheus,
        "unset switches default to true"
    );
    assert_eq!(m.stat_conf.slow_threshold, Duration::from_millis(250));
    assert_eq!(m.stat_conf.ignore_content_methods, ["/greet.Greeter/Login"]);
    assert_eq!(c.method_timeouts.len(), 2);
    assert_eq!(c.method_timeouts[0].full_method, "/greet.Greeter/SayHello");
    assert_eq!(c.method_timeouts[0].timeout, Duration::from_millis(5500));
    assert_eq!(c.method_timeouts[1].timeout, Duration::from_secs(90));
    let dev = c.dev_server.as_ref().expect("DevServer present");
    assert_eq!(dev.port, 6470);
    assert!(dev.enabled && dev.enable_metrics);
    assert_eq!(dev.metrics_path, "/metrics");
    assert_eq!(dev.health_path, "/healthz");
    assert_eq!(c.shutdown.wrap_up_time, Duration::from_secs(2));
    assert_eq!(
        c.shutdown.wait_time,
        Duration::from_millis(5500),
        "default kept"
    );
    assert!(c.health);
    assert!(c.telemetry.is_none());
}

#[test]
fn goctl_server_yaml_loads() {
    let c = load_server("server.yaml").unwrap();
    assert_sample_server(&c);
}

#[test]
fn json_and_toml_load_the_same_values() {
    let yaml = load_server("server.yaml").unwrap();
    let json = load_server("server.json").unwrap();
    let toml = load_server("server.toml").unwrap();
    assert_sample_server(&json);
    assert_sample_server(&toml);
    assert_eq!(yaml, json);
    assert_eq!(yaml, toml);
}

#[test]
fn mixed_case_keys_load_the_same_values() {
    let mixed = load_server("server-mixed-case.yaml").unwrap();
    assert_sample_server(&mixed);
    assert_eq!(mixed, load_server("server.yaml").unwrap());
}

#[test]
fn env_vars_are_expanded() {
    let vars: HashMap<&str, &str> = [
        ("ZRPC_CONF_TEST_NAME", "env.rpc"),
        ("ZRPC_CONF_TEST_HOST", "10.1.2.3"),
        ("ZRPC_CONF_TEST_PORT", "9090"),
        ("ZRPC_CONF_TEST_ETCD", "etcd:2379"),
        ("ZRPC_CONF_TEST_TIMEOUT", "1234"),
    ]
    .into_iter()
    .collect();
    let c: RpcServerConf = conf::load_with_env(fixture("server-env.yaml"), |k| {
        vars.get(k).map(|v| (*v).to_owned())
    })
    .unwrap();
    assert_eq!(c.name, "env.rpc");
    assert_eq!(c.listen_on, "10.1.2.3:9090");
    assert_eq!(c.etcd.hosts, ["etcd:2379"]);
    assert_eq!(c.etcd.key, "env.rpc");
    assert_eq!(c.timeout, 1234, "an expanded number is a number");
    assert_eq!(
        c.log.service_name, "fallback",
        "an unset variable expands to the empty string"
    );
}

#[test]
fn process_environment_is_used_by_load() {
    let Ok(path) = std::env::var("PATH") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("env.yaml");
    std::fs::write(
        &file,
        "Name: a\nListenOn: 127.0.0.1:1\nMetricsUrl: '${PATH}'\n",
    )
    .unwrap();
    let c: RpcServerConf = conf::load(&file).unwrap();
    assert_eq!(c.metrics_url, path);
}

#[test]
fn client_yaml_with_etcd_loads() {
    let c: RpcClientConf = conf::load(fixture("client-etcd.yaml")).unwrap();
    assert_eq!(c.etcd.hosts, ["127.0.0.1:2379", "127.0.0.2:2379"]);
    assert_eq!(c.etcd.key, "greet.rpc");
    assert!(c.has_credential());
    assert_eq!((c.app.as_str(), c.token.as_str()), ("gateway", "s3cret"));
    assert_eq!(c.timeout, 1500);
    assert_eq!(c.keepalive(), Some(Duration::from_secs(20)));
    assert!(!c.middlewares.duration);
    assert!(c.middlewares.trace && c.middlewares.breaker && c.middlewares.timeout);
    assert!(c.non_block, "default true");
    assert_eq!(c.balancer_name, BalancerName::P2cEwma);
    assert_eq!(
        c.build_target().unwrap(),
        "etcd:///127.0.0.1:2379,127.0.0.2:2379?key=greet.rpc"
    );
}

#[test]
fn client_yaml_with_endpoints_loads() {
    let c: RpcClientConf = conf::load(fixture("client-endpoints.yaml")).unwrap();
    assert_eq!(c.endpoints, ["127.0.0.1:8080", "127.0.0.1:8081"]);
    assert!(!c.non_block);
    assert_eq!(c.balancer_name, BalancerName::RoundRobin);
    assert_eq!(c.timeout, 2000);
    assert_eq!(
        c.build_target().unwrap(),
        "direct:///127.0.0.1:8080,127.0.0.1:8081"
    );
}

#[test]
fn a_go_zero_consistent_hash_client_loads_unchanged() {
    let c = conf::load::<RpcClientConf>(fixture("client-consistent-hash.yaml")).unwrap();
    assert_eq!(c.balancer_name, BalancerName::ConsistentHash);
    assert_eq!(c.balancer_name.to_string(), "consistent_hash");
    assert_eq!(c.timeout, 2000);
}

#[test]
fn misspelt_key_names_file_path_and_suggestion() {
    let (e, msg) = load_err("bad-misspelt.yaml");
    assert!(matches!(e, ConfError::UnknownKey { .. }), "{msg}");
    assert_eq!(e.path(), Some("Middlewares.Breakr"));
    assert_eq!(
        msg,
        format!(
            "config file {}: unknown key `Middlewares.Breakr` (did you mean `Breaker`?)",
            fixture("bad-misspelt.yaml").display()
        )
    );

    let e = conf::load::<RpcClientConf>(fixture("client-misspelt.yaml")).unwrap_err();
    let msg = e.to_string();
    assert_eq!(e.path(), Some("Middlewares.Tiemout"));
    assert!(
        msg.ends_with("unknown key `Middlewares.Tiemout` (did you mean `Timeout`?)"),
        "{msg}"
    );
    assert!(msg.contains("client-misspelt.yaml"), "{msg}");
}

#[test]
fn wrong_type_names_path_and_value() {
    let (e, msg) = load_err("bad-type.yaml");
    assert!(matches!(e, ConfError::InvalidValue { .. }), "{msg}");
    assert_eq!(e.path(), Some("Timeout"));
    assert!(msg.contains("bad-type.yaml"), "{msg}");
    assert!(msg.contains("\"two seconds\""), "{msg}");
}

#[test]
fn bad_duration_names_path_and_value() {
    let (e, msg) = load_err("bad-duration.yaml");
    assert_eq!(e.path(), Some("Middlewares.StatConf.SlowThreshold"));
    assert!(msg.contains("invalid duration \"5 sec\""), "{msg}");
    assert!(msg.contains("bad-duration.yaml"), "{msg}");
}

#[test]
fn cpu_threshold_1000_is_out_of_range() {
    let (e, msg) = load_err("bad-cpu.yaml");
    assert_eq!(e.path(), Some("CpuThreshold"));
    assert!(msg.contains("1000 is out of range [0:1000)"), "{msg}");
    assert!(msg.contains("bad-cpu.yaml"), "{msg}");
}

#[test]
fn partial_tls_names_the_missing_key() {
    let (e, msg) = load_err("bad-tls.yaml");
    assert_eq!(e.path(), Some("Etcd.CertKeyFile"));
    assert!(msg.contains("Etcd.CertKeyFile missing"), "{msg}");
    assert!(msg.contains("bad-tls.yaml"), "{msg}");
}

#[test]
fn unknown_extension_is_an_error() {
    let (e, msg) = load_err("server.ini");
    assert!(matches!(e, ConfError::Format { .. }), "{msg}");
    assert!(msg.contains("`.ini`"), "{msg}");
}

#[test]
fn missing_file_is_an_error() {
    let (e, msg) = load_err("no-such-file.yaml");
    assert!(matches!(e, ConfError::Io { .. }), "{msg}");
    assert!(msg.contains("no-such-file.yaml"), "{msg}");
}

#[test]
fn every_go_zero_server_key_is_accepted() {
    let c = load_server("server-all-keys.yaml").unwrap();
    assert_eq!(c.mode, ServiceMode::Test);
    assert_eq!(c.etcd.id, 42);
    assert!(c.etcd.has_tls() && c.etcd.has_account() && c.etcd.insecure_skip_verify);
    assert_eq!(c.advertise_addr.as_deref(), Some("10.0.0.7:8080"));
    assert_eq!(c.auth_tokens.len(), 1);
    assert_eq!(
        c.redis.as_ref().unwrap().ping_timeout,
        Duration::from_secs(1)
    );
    assert_eq!(
        c.profiling.as_ref().unwrap().profiling_duration,
        Duration::from_secs(120)
    );
    assert_eq!(c.log.field_keys.timestamp_key, "@timestamp");
    assert_eq!(c.telemetry_name(), "greet");
    let ignored: Vec<&str> = c.ignored_keys().iter().map(|k| k.key).collect();
    assert_eq!(
        ignored,
        // `Redis` is used (the token store of `Auth: true`), so it is not ignored.
        [
            "Profiling",
            "MetricsUrl",
            "Prometheus",
            "Log.TimeFormat",
            "Log.MaxContentLength"
        ]
    );
}

/// `gozero-v1.10.3-server-all-keys.yaml`: every key of go-zero v1.10.3's `RpcServerConf`, as
/// go-zero itself reads it.
#[test]
fn go_zero_v1_10_3_server_yaml_loads_unchanged() {
    let c = load_server("gozero-v1.10.3-server-all-keys.yaml").unwrap();
    // goctl's keys.
    assert_eq!(c.name, "greet.rpc");
    assert_eq!(c.listen_on, "127.0.0.1:8080");
    assert_eq!(c.etcd.hosts, ["127.0.0.1:2379"]);
    assert_eq!(c.etcd.key, "greet.rpc");
    assert_eq!(c.etcd.id, 7);
    assert!(c.etcd.has_account() && c.etcd.has_tls() && !c.etcd.insecure_skip_verify);
    // ServiceConf.
    assert_eq!(c.mode, ServiceMode::Pre);
    assert_eq!(c.log.encoding, "plain");
    assert_eq!(c.log.max_content_length, 4096);
    assert_eq!(c.log.field_keys.timestamp_key, "@timestamp");
    let t = c.telemetry.as_ref().unwrap();
    assert!((t.sampler - 0.5).abs() < f64::EPSILON);
    assert_eq!(
        t.otlp_headers.get("uptrace-dsn").map(String::as_str),
        Some("http://project2_secret_token@127.0.0.1:14317/2")
    );
    let dev = c.dev_server.as_ref().unwrap();
    assert_eq!(dev.bind_addr(), "127.0.0.1:6060");
    assert_eq!(c.shutdown.wrap_up_time, Duration::from_secs(2));
    assert_eq!(c.prometheus.as_ref().unwrap().port, 9101);
    let p = c.profiling.as_ref().unwrap();
    assert_eq!(p.profiling_duration, Duration::from_secs(120));
    assert!(p.profile_type.cpu && !p.profile_type.mutex);
    // The v1.10.3 Redis keys zrpc used to reject.
    let r = c.redis.as_ref().unwrap();
    assert!(r.disable_identity);
    assert_eq!(r.protocol, 2);
    assert_eq!(r.maint_notifications, "disabled");
    assert_eq!(r.ping_timeout, Duration::from_secs(1));
    assert_eq!(r.key, "rpc:greet:tokens");
    // RpcServerConf.
    assert!(c.auth && c.strict_control && c.health);
    assert_eq!((c.timeout, c.cpu_threshold), (3000, 800));
    let m = &c.middlewares;
    assert!(m.trace && m.recover && m.stat && m.prometheus && m.breaker);
    assert_eq!(m.stat_conf.slow_threshold, Duration::from_millis(250));
    assert_eq!(m.stat_conf.ignore_content_methods, ["/greet.Greeter/Login"]);
    assert_eq!(c.method_timeouts[1].full_method, "/greet.Greeter/Export");
    assert_eq!(c.method_timeouts[1].timeout, Duration::from_secs(90));
    // zrpc additions stay at their defaults: the file is go-zero's.
    assert!(c.advertise_addr.is_none() && c.auth_tokens.is_empty() && !c.reflection);

    let ignored: Vec<String> = c.ignored_keys().iter().map(ToString::to_string).collect();
    let keys: Vec<&str> = c.ignored_keys().iter().map(|k| k.key).collect();
    assert_eq!(
        keys,
        // `Redis` is used (the token store of `Auth: true`), so it is not ignored.
        [
            "Profiling",
            "MetricsUrl",
            "Prometheus",
            "DevServer.EnablePprof",
            "Telemetry.OtlpHttpPath",
            "Log.TimeFormat",
            "Log.MaxContentLength",
        ],
        "{ignored:#?}"
    );
    assert!(
        ignored[0].starts_with("config key `Profiling` is ignored: "),
        "{ignored:#?}"
    );
}

/// A typo in a v1.10.3 key is still an error naming the file, the key path and the key meant.
#[test]
fn a_misspelt_v1_10_3_key_is_still_an_error() {
    let text = std::fs::read_to_string(fixture("gozero-v1.10.3-server-all-keys.yaml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("greet.yaml");
    std::fs::write(
        &file,
        text.replace("MaintNotifications:", "MaintNotification:"),
    )
    .unwrap();
    let e = conf::load::<RpcServerConf>(&file).unwrap_err();
    assert!(matches!(e, ConfError::UnknownKey { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "config file {}: unknown key `Redis.MaintNotification` (did you mean `MaintNotifications`?)",
            file.display()
        )
    );
}

/// goctl's shape: an application config with a `Greeter` client block.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct GreeterClientConfig {
    name: String,
    greeter: RpcClientConf,
}

impl conf::Validate for GreeterClientConfig {
    fn validate(&self) -> Result<(), ConfError> {
        self.greeter.validate()
    }
}

#[test]
fn go_zero_v1_10_3_client_yaml_loads_unchanged() {
    let c: GreeterClientConfig =
        conf::load(fixture("gozero-v1.10.3-client-all-keys.yaml")).unwrap();
    assert_eq!(c.name, "greeter.client");
    let g = &c.greeter;
    assert_eq!(g.etcd.hosts, ["127.0.0.1:2379", "127.0.0.1:22379"]);
    assert!(g.etcd.has_account() && g.etcd.has_tls());
    assert!(g.endpoints.is_empty() && g.target.is_empty());
    assert_eq!(
        (g.app.as_str(), g.token.as_str()),
        ("gateway", "gateway-token")
    );
    assert!(!g.non_block);
    assert_eq!(g.timeout, 3000);
    assert_eq!(g.keepalive(), Some(Duration::from_secs(20)));
    assert!(!g.middlewares.duration);
    assert!(g.middlewares.trace && g.middlewares.prometheus && g.middlewares.breaker);
    assert_eq!(g.balancer_name, BalancerName::P2cEwma);
    assert_eq!(
        g.build_target().unwrap(),
        "etcd:///127.0.0.1:2379,127.0.0.1:22379?key=greet.rpc"
    );

    let bare: RpcClientConf =
        conf::load(fixture("gozero-v1.10.3-client-bare-all-keys.yaml")).unwrap();
    assert_eq!(bare.endpoints, ["127.0.0.1:8080", "127.0.0.1:8081"]);
    assert_eq!(bare.target, "dns:///127.0.0.1:8080");
    assert_eq!(bare.etcd.key, "greet.rpc");
    assert_eq!(bare.keepalive(), Some(Duration::from_secs(60)));
    assert!(!bare.middlewares.trace && !bare.middlewares.breaker);
    assert_eq!(
        bare.build_target().unwrap(),
        "direct:///127.0.0.1:8080,127.0.0.1:8081",
        "Endpoints win, as in go-zero"
    );

    let e = conf::from_str_with_env::<GreeterClientConfig, _>(
        "Greeter:\n  Endpoints: [127.0.0.1:1]\n  KeepAliveTimes: 20s\n",
        conf::Format::Yaml,
        "client.yaml",
        |_| None,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file client.yaml: unknown key `Greeter.KeepAliveTimes` (did you mean `KeepaliveTime`?)"
    );
}

#[test]
fn every_go_zero_client_key_is_accepted() {
    let c: RpcClientConf = conf::load(fixture("client-all-keys.yaml")).unwrap();
    assert_eq!(c.keepalive(), None);
    assert_eq!(
        c.build_target().unwrap(),
        "etcd:///127.0.0.1:2379?key=greet.rpc"
    );
}

#[test]
fn embedded_app_config_loads_like_go_zero_struct_embedding() {
    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
    struct AppConf {
        data_source: String,
        greet_rpc: RpcClientConf,
    }
    impl conf::Validate for AppConf {
        fn validate(&self) -> Result<(), ConfError> {
            self.greet_rpc.validate()
        }
    }
    let text = "Name: gw\nlistenOn: 127.0.0.1:1\nDataSource: mysql://x\n\
                GreetRpc:\n  Endpoints: [127.0.0.1:2]\n  timeout: 700\n";
    let c: conf::Embed<RpcServerConf, AppConf> =
        conf::from_str_with_env(text, conf::Format::Yaml, "gw.yaml", |_| None).unwrap();
    assert_eq!(c.base.listen_on, "127.0.0.1:1");
    assert_eq!(c.extra.data_source, "mysql://x");
    assert_eq!(c.extra.greet_rpc.timeout, 700);
    let e = conf::from_str_with_env::<conf::Embed<RpcServerConf, AppConf>, _>(
        "Name: gw\nListenOn: 127.0.0.1:1\nDataSorce: x\n",
        conf::Format::Yaml,
        "gw.yaml",
        |_| None,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file gw.yaml: unknown key `DataSorce` (did you mean `DataSource`?)"
    );
}

#[test]
fn a_service_key_in_a_bare_server_config_points_at_embed() {
    // go-zero's `type Config struct { zrpc.RpcServerConf; DataSource string }` file, loaded as
    // the bare RpcServerConf
    let e = conf::from_str_with_env::<RpcServerConf, _>(
        "Name: greet.rpc\nListenOn: 127.0.0.1:8080\nDataSource: mysql://x\n",
        conf::Format::Yaml,
        "greet.yaml",
        |_| None,
    )
    .unwrap_err();
    assert!(matches!(e, ConfError::UnknownKey { .. }), "{e}");
    assert_eq!(e.path(), Some("DataSource"));
    assert_eq!(
        e.to_string(),
        "config file greet.yaml: unknown key `DataSource`; RpcServerConf holds only zrpc's server \
         keys: put your service's own keys (DataSource, Cache, UserRpc, ...) in your own config \
         struct and load `zrpc::conf::Embed<zrpc::RpcServerConf, YourConf>`, which reads the file \
         into both as go-zero's embedded `zrpc.RpcServerConf` does (docs/configuration.md, \
         \"Your own config struct\")"
    );
    // a misspelt key of a block RpcServerConf owns gets no such note
    let e = conf::from_str_with_env::<RpcServerConf, _>(
        "Name: greet.rpc\nListenOn: 127.0.0.1:8080\nMiddlewares: {Trac: false}\n",
        conf::Format::Yaml,
        "greet.yaml",
        |_| None,
    )
    .unwrap_err();
    assert!(!e.to_string().contains("Embed"), "{e}");
}
