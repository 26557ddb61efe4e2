//! `zrpcctl conf check` checks a config as a build with given zrpc features would load and
//! start it: zrpc's default features unless `--features`, `--no-default-features` or
//! `--all-features` say otherwise, though zrpcctl itself is built with every feature.
// clippy.toml lets tests unwrap, but only inside `#[test]` fns and `cfg(test)` modules: a test
// crate's helpers are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Output;

use common::{text, workspace_root, zrpcctl};

const BASE: &str = "Name: a.rpc\nListenOn: 127.0.0.1:0\n";

/// Writes `body` to `dir/name` and runs `conf check name` with `flags`.
fn check(dir: &Path, name: &str, body: &str, flags: &[&str]) -> Output {
    std::fs::write(dir.join(name), body).unwrap();
    let mut args = vec!["conf", "check", name];
    args.extend_from_slice(flags);
    zrpcctl(&args, dir)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_tls_block_is_refused_by_default_and_its_files_checked_with_the_tls_feature() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.pem");
    let yaml = format!(
        "{BASE}Tls: {{CertFile: {}, KeyFile: {}}}\n",
        missing.display(),
        tmp.path().join("missing.key").display()
    );

    let out = check(tmp.path(), "tls.yaml", &yaml, &[]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        err.contains("Tls.CertFile") && err.contains("`tls` cargo feature"),
        "{}",
        text(&out)
    );
    assert!(!err.contains("cannot read"), "{}", text(&out));
    assert!(
        err.contains("checked as a build with zrpc features: etcd, devserver"),
        "{}",
        text(&out)
    );

    let out = check(tmp.path(), "tls.yaml", &yaml, &["--features", "tls"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        err.contains("Tls.CertFile") && err.contains("missing.pem\": cannot read"),
        "{}",
        text(&out)
    );
    assert!(!err.contains("cargo feature"), "{}", text(&out));
    assert!(
        err.contains("checked as a build with zrpc features: etcd, devserver, tls, gzip"),
        "{}",
        text(&out)
    );
}

#[test]
fn reflection_and_trace_export_need_their_features() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = format!("{BASE}Reflection: true\n");
    let out = check(tmp.path(), "r.yaml", &yaml, &[]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains("`Reflection`")
            && stderr(&out).contains("`reflection` cargo feature"),
        "{}",
        text(&out)
    );
    let out = check(tmp.path(), "r.yaml", &yaml, &["--features", "reflection"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out)
            .contains("checked as a build with zrpc features: etcd, devserver, reflection, gzip"),
        "{}",
        text(&out)
    );

    let yaml = format!("{BASE}Telemetry: {{Endpoint: 127.0.0.1:4317}}\n");
    let out = check(tmp.path(), "t.yaml", &yaml, &[]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains("Telemetry.Endpoint")
            && stderr(&out).contains("`otel` cargo feature"),
        "{}",
        text(&out)
    );
    // cargo's spellings: repeated, space-separated
    let out = check(
        tmp.path(),
        "t.yaml",
        &yaml,
        &["--features", "reflection otel", "-F", "toml"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains("zrpc features: etcd, devserver, otel, reflection, toml, gzip"),
        "{}",
        text(&out)
    );
}

#[test]
fn the_defaults_are_said_and_can_be_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = format!("{BASE}Etcd: {{Hosts: [127.0.0.1:2379], Key: a.rpc}}\n");
    let out = check(tmp.path(), "e.yaml", &yaml, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains(
            "checked as a build with zrpc features: etcd, devserver, gzip, client (zrpc's defaults"
        ),
        "{}",
        text(&out)
    );
    let out = check(tmp.path(), "e.yaml", &yaml, &["--no-default-features"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains("Etcd.Hosts") && stderr(&out).contains("`etcd` cargo feature"),
        "{}",
        text(&out)
    );
    assert!(
        stderr(&out).contains("checked as a build with zrpc features: none"),
        "{}",
        text(&out)
    );
    let out = check(
        tmp.path(),
        "e.yaml",
        &yaml,
        &["--no-default-features", "--features", "etcd"],
    );
    assert!(out.status.success(), "{}", text(&out));

    // a TOML file needs the `toml` feature, a client config is checked the same way
    let out = check(
        tmp.path(),
        "c.toml",
        "Target = \"direct:///127.0.0.1:1\"\n",
        &[],
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains("`toml` cargo feature"),
        "{}",
        text(&out)
    );
    let out = check(
        tmp.path(),
        "c.toml",
        "Target = \"direct:///127.0.0.1:1\"\n",
        &["--features=toml"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout(&out).contains("Client config"), "{}", text(&out));
    let client = "Target: direct:///127.0.0.1:1\nTls: {CaFile: ca.pem}\n";
    let out = check(tmp.path(), "c.yaml", client, &[]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains("Tls.CaFile") && stderr(&out).contains("`tls` cargo feature"),
        "{}",
        text(&out)
    );

    // a build without `client` (a server that calls no other service) has no client config
    let client = "Target: direct:///127.0.0.1:1\n";
    let server_only = ["--no-default-features", "--features", "etcd,devserver,gzip"];
    let out = check(tmp.path(), "c.yaml", client, &server_only);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        stderr(&out).contains("`client` cargo feature"),
        "{}",
        text(&out)
    );
    let with_client = ["--no-default-features", "--features", "etcd,client"];
    let out = check(tmp.path(), "c.yaml", client, &with_client);
    assert!(out.status.success(), "{}", text(&out));
}

/// With `--all-features` zrpcctl accepts what a build with every feature (this test's, through
/// zrpcctl's dependency) loads and preflights without an error, and the default check refuses it.
#[test]
fn all_features_accepts_what_a_full_build_accepts() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = zrpc_tests::certs::TestCa::new("conf-features");
    let server = ca.issue("conf-features", &["DNS:localhost"]);
    let yaml = format!(
        "{BASE}Reflection: true\nTelemetry: {{Endpoint: 127.0.0.1:4317}}\n\
         Tls: {{CertFile: {}, KeyFile: {}}}\nAuth: true\nRedis: {{Host: 127.0.0.1:1, Key: apps}}\n\
         Etcd: {{Hosts: [127.0.0.1:2379], Key: a.rpc}}\n",
        server.cert_str(),
        server.key_str()
    );
    let file = tmp.path().join("full.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let conf: zrpc::RpcServerConf = zrpc::conf::load(&file).unwrap();
    let errors: Vec<String> = zrpc::preflight(&conf)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");

    let out = check(tmp.path(), "full.yaml", &yaml, &["--all-features"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains(
            "zrpc features: etcd, devserver, otel, reflection, env-filter, toml, json5, redis-auth, tls, \
             gzip, deflate, zstd, client"
        ),
        "{}",
        text(&out)
    );
    let out = check(tmp.path(), "full.yaml", &yaml, &[]);
    assert!(!out.status.success(), "{}", text(&out));
}

#[test]
fn an_unknown_feature_is_an_error_naming_the_valid_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let out = check(tmp.path(), "a.yaml", BASE, &["--features", "tls,tsl"]);
    assert!(!out.status.success(), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("unknown zrpc feature `tsl`"), "{}", text(&out));
    for name in zrpc::conf::FEATURES {
        assert!(err.contains(name), "{name} not listed: {}", text(&out));
    }
}

/// zrpc-core's list of feature names (what `--features` accepts) is the `[features]` of the
/// zrpc crate, and its default ones are `default`.
#[test]
fn the_feature_names_are_the_zrpc_crates() {
    let manifest =
        std::fs::read_to_string(workspace_root().join("crates/zrpc/Cargo.toml")).unwrap();
    let section = manifest
        .split("\n[features]\n")
        .nth(1)
        .and_then(|s| s.split("\n[").next())
        .unwrap();
    let mut names = Vec::new();
    let mut default = "";
    for line in section.lines().filter(|l| !l.starts_with('#')) {
        if let Some((name, value)) = line.split_once(" = ") {
            if name == "default" {
                default = value;
            } else {
                names.push(name);
            }
        }
    }
    assert_eq!(names, zrpc::conf::FEATURES, "{section}");
    let defaults: Vec<String> = zrpc::conf::DEFAULT_FEATURES
        .iter()
        .map(|f| format!("\"{f}\""))
        .collect();
    assert_eq!(default, format!("[{}]", defaults.join(", ")), "{section}");
    // zrpcctl is built with every one
    assert_eq!(
        zrpc::conf::compiled_features(),
        zrpc::conf::FeatureSet::all()
    );
}

/// A go-zero (v1.9.3+) client config routing by key, `BalancerName: consistent_hash`, is a
/// client config zrpc runs: `conf check` accepts the file as it is.
#[test]
fn a_go_zero_consistent_hash_client_config_checks_clean() {
    let fixture = workspace_root().join("tests/fixtures/conf/client-consistent-hash.yaml");
    let tmp = tempfile::tempdir().unwrap();
    let body = std::fs::read_to_string(fixture).unwrap();
    assert!(body.contains("BalancerName: consistent_hash"), "{body}");
    let out = check(tmp.path(), "user-client.yaml", &body, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout(&out).contains("Client config"), "{}", text(&out));
}
