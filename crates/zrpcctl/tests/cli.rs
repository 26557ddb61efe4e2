//! zrpcctl end to end: a scaffolded crate builds and serves (its own test and a client-streaming
//! call longer than `Timeout`), `proto` keeps user logic, `etcd ls`/`watch` read a real etcd
//! with a zrpc and a go-zero server registered, `conf check` gives the start-up errors.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{text, workspace_root, zrpcctl};
use std::time::{Duration, Instant};

use zrpc_tests::etcd::{EtcdServer, keys_under, unique_key};
use zrpc_tests::gozero::{GzServer, ServerYaml, start_zrpc, zrpc_conf};

/// `zrpcctl new` into a temp dir on this checkout, then `cargo test --offline` in it, with the
/// workspace's target dir and lock file so the dependencies built for the workspace are reused.
#[test]
fn scaffolded_crate_builds_serves_and_streams_past_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let root = workspace_root();
    let started = Instant::now();
    let out = zrpcctl(
        &[
            "new",
            "calc",
            "--proto",
            fixtures.join("calc.proto").to_str().unwrap(),
            "--zrpc-path",
            root.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let scaffold_time = started.elapsed();
    let krate = tmp.path().join("calc");
    for f in [
        "Cargo.toml",
        "build.rs",
        "Dockerfile",
        "proto/calc.proto",
        "etc/calc.yaml",
        "src/main.rs",
        "src/server.rs",
        "src/logic/add.rs",
        "src/logic/sum.rs",
        "src/logic/count.rs",
        "src/logic/chat.rs",
        "src/logic/ping.rs",
        "tests/calc.rs",
    ] {
        assert!(krate.join(f).exists(), "{f} missing:\n{}", text(&out));
    }
    // The user writes Sum, then a test of the streaming behaviour.
    std::fs::copy(fixtures.join("sum.rs"), krate.join("src/logic/sum.rs")).unwrap();
    std::fs::copy(
        fixtures.join("streaming.rs"),
        krate.join("tests/streaming.rs"),
    )
    .unwrap();
    // `zrpcctl proto` after the user's edit keeps it.
    let out = zrpcctl(&["proto", "proto/calc.proto"], &krate);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        std::fs::read_to_string(krate.join("src/logic/sum.rs"))
            .unwrap()
            .contains("n += m.n"),
        "zrpcctl proto overwrote user logic"
    );
    // The config the scaffold wrote passes `conf check`.
    let out = zrpcctl(&["conf", "check", "etc/calc.yaml"], &krate);
    assert!(out.status.success(), "{}", text(&out));

    std::fs::copy(root.join("Cargo.lock"), krate.join("Cargo.lock")).unwrap();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let started = Instant::now();
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["test", "--offline"])
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", target)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("serves_and_answers_a_call ... ok"), "{log}");
    assert!(
        log.contains("client_stream_longer_than_timeout_completes ... ok"),
        "{log}"
    );
    let test_time = started.elapsed();
    // The tests call the service through zrpc's client; the service's own build (`cargo build`,
    // the release binary) leaves it out: only the dev-dependency turns `client` on.
    let tree = |edges: &str| {
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["tree", "--offline", "--prefix", "none", "-e", edges])
            .current_dir(&krate)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let has_client = |tree: &str| tree.lines().any(|l| l.starts_with("zrpc-client "));
    let built = tree("normal,build");
    assert!(built.contains("zrpc-server "), "{built}");
    assert!(!has_client(&built), "{built}");
    assert!(has_client(&tree("normal,build,dev")));
    println!(
        "zrpcctl new: {scaffold_time:?}; cargo test of the scaffold (build + run): {test_time:?}"
    );
}

#[test]
fn conf_check_names_the_bad_key_and_suggests_the_right_one() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("bad.yaml");
    std::fs::write(
        &file,
        "Name: a.rpc\nListenOn: 127.0.0.1:8080\nMiddlewares:\n  Breakr: false\n",
    )
    .unwrap();
    let out = zrpcctl(&["conf", "check", "bad.yaml"], tmp.path());
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.yaml"), "{log}");
    assert!(stderr.contains("Middlewares.Breakr"), "{log}");
    assert!(stderr.contains("Breaker"), "{log}");
    assert!(!stderr.contains("UnknownKey"), "{log}");

    std::fs::write(&file, "Target: direct:///127.0.0.1:1\nTimeout: 500\n").unwrap();
    let out = zrpcctl(&["conf", "check", "bad.yaml"], tmp.path());
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Client config"));
}

/// `conf check` on configs that load but that a start refuses (Redis `Type: cluster` for the
/// token store, a missing TLS file, a missing client CA, a log path that cannot be a
/// directory) reports the error a real start gives, naming the file and key, and all of them
/// at once when a config has several.
#[tokio::test(flavor = "multi_thread")]
async fn conf_check_reports_what_a_start_would_refuse() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = zrpc_tests::certs::TestCa::new("conf-check");
    let server = ca.issue("conf-check", &["DNS:localhost"]);
    let a_file = tmp.path().join("a-file");
    std::fs::write(&a_file, "x").unwrap();
    let missing = tmp
        .path()
        .join("missing.pem")
        .to_string_lossy()
        .into_owned();
    let base = "Name: a.rpc\nListenOn: 127.0.0.1:0\n";
    let cases = [
        (
            "redis.yaml",
            format!("{base}Auth: true\nRedis: {{Host: 127.0.0.1:1, Type: cluster, Key: apps}}\n"),
            "Redis.Type",
        ),
        (
            "tls.yaml",
            format!(
                "{base}Tls: {{CertFile: {missing}, KeyFile: {}}}\n",
                server.key_str()
            ),
            "Tls.CertFile",
        ),
        (
            "ca.yaml",
            format!(
                "{base}Tls: {{CertFile: {}, KeyFile: {}, ClientCaFile: {missing}}}\n",
                server.cert_str(),
                server.key_str()
            ),
            "Tls.ClientCaFile",
        ),
        (
            "log.yaml",
            format!(
                "{base}Log: {{Mode: file, Path: {}}}\n",
                a_file.join("logs").display()
            ),
            "Log.Path",
        ),
    ];
    for (name, yaml, key) in &cases {
        let file = tmp.path().join(name);
        std::fs::write(&file, yaml).unwrap();
        // compared with a start of this test's build, which has every feature
        let out = zrpcctl(&["conf", "check", name, "--all-features"], tmp.path());
        let log = text(&out);
        assert!(!out.status.success(), "{name}: {log}");
        assert!(log.contains(key) && log.contains(name), "{name}: {log}");
        // the error of a real start of the same file
        let conf: zrpc::RpcServerConf = zrpc::conf::load(&file).unwrap();
        let started = match zrpc::Server::new(conf.clone()) {
            Err(e) => e.to_string(),
            Ok(server) if *key == "Log.Path" => {
                drop(server);
                zrpc::telemetry::init(&conf).unwrap_err().to_string()
            }
            Ok(server) => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                server
                    .serve_with_listener(listener, std::future::pending())
                    .await
                    .unwrap_err()
                    .to_string()
            }
        };
        assert!(started.contains(key), "{name}: a start says {started}");
        // both name the file: the start as it was loaded here, conf check as it was given
        let started = started.replace(&file.display().to_string(), name);
        if *key == "Log.Path" {
            // the start reports the OS error of creating the directory; both name the path
            let dir = a_file.join("logs").display().to_string();
            assert!(
                started.contains(&dir) && log.contains(&dir),
                "{log}\n{started}"
            );
        } else {
            assert!(
                started.contains(&format!("config file {name}: ")),
                "{name}: a start says {started}"
            );
            assert!(log.contains(&started), "{name}: {log}\nstart: {started}");
        }
    }
    // all of them in one file: every problem at once
    let all = format!(
        "{base}Auth: true\nRedis: {{Host: 127.0.0.1:1, Type: cluster, Key: apps}}\n\
         Tls: {{CertFile: {missing}, KeyFile: {}}}\nLog: {{Mode: file, Path: {}}}\n",
        server.key_str(),
        a_file.join("logs").display()
    );
    std::fs::write(tmp.path().join("all.yaml"), all).unwrap();
    let out = zrpcctl(&["conf", "check", "all.yaml", "--all-features"], tmp.path());
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    for key in ["Redis.Type", "Tls.CertFile", "Log.Path"] {
        assert!(log.contains(key), "{key} missing: {log}");
    }
}

/// Waits until `n` keys are under `prefix`.
async fn registered(etcd: &EtcdServer, prefix: &str, n: usize) -> Vec<(String, String)> {
    let mut client = etcd.client().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let keys = keys_under(&mut client, prefix).await;
        if keys.len() >= n || Instant::now() > deadline {
            return keys;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn etcd_ls_and_watch_show_zrpc_and_gozero_registrations() {
    let etcd = EtcdServer::start().await;
    let hosts = etcd.endpoints();
    let zrpc_key = unique_key("ctl-zrpc.rpc");
    let gz_key = unique_key("ctl-gozero.rpc");
    let zrpc_server = start_zrpc(zrpc_conf("ctl-zrpc.rpc", Some(etcd.etcd_conf(&zrpc_key)))).await;
    let zrpc_keys = registered(&etcd, &zrpc_key, 1).await;
    assert_eq!(zrpc_keys.len(), 1, "{zrpc_keys:?}");

    // A real go-zero server when Go is available, else the same layout written by hand
    // (go-zero: key `<Key>/<leaseID>`, value `host:port`, lease TTL 10 s).
    let gz = match zrpc_tests::gozero::programs() {
        Some(p) => {
            Some(GzServer::start(p, &ServerYaml::new("ctl-gozero.rpc", &hosts, &gz_key), &[]).await)
        }
        None => {
            let mut c = etcd.client().await;
            let lease = c.lease_grant(10, None).await.unwrap().id();
            let opts = etcd_client::PutOptions::new().with_lease(lease);
            c.put(format!("{gz_key}/{lease}"), "127.0.0.1:9", Some(opts))
                .await
                .unwrap();
            None
        }
    };
    let gz_keys = registered(&etcd, &gz_key, 1).await;
    assert_eq!(gz_keys.len(), 1, "{gz_keys:?}");

    let etcd_arg = hosts.join(",");
    let dir = std::env::temp_dir();
    let out =
        tokio::task::spawn_blocking(move || zrpcctl(&["etcd", "ls", "--etcd", &etcd_arg], &dir))
            .await
            .unwrap();
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}");
    assert!(
        stdout.contains(&format!("{zrpc_key}  (1 endpoint)")),
        "{log}"
    );
    assert!(stdout.contains(&zrpc_server.addr.to_string()), "{log}");
    assert!(stdout.contains(&format!("{gz_key}  (1 endpoint)")), "{log}");
    if let Some(gz) = &gz {
        assert!(stdout.contains(&gz.addr), "{log}");
    }
    assert_eq!(
        stdout.matches("ttl ").count(),
        2,
        "both keys under a live lease: {log}"
    );
    for (key, value) in zrpc_keys.iter().chain(&gz_keys) {
        assert!(
            stdout.contains(key) && stdout.contains(value),
            "{key} = {value}: {log}"
        );
    }

    // watch: the current endpoint, then a change.
    let etcd_arg = hosts.join(",");
    let key = zrpc_key.clone();
    let watcher = std::process::Command::new(env!("CARGO_BIN_EXE_zrpcctl"))
        .args(["etcd", "watch", &key, "--count", "1", "--etcd", &etcd_arg])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Give it time to list and start watching, then register a second endpoint.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut c = etcd.client().await;
    c.put(format!("{zrpc_key}/42"), "127.0.0.1:4242", None)
        .await
        .unwrap();
    let out = tokio::task::spawn_blocking(move || watcher.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&zrpc_server.addr.to_string()), "{log}");
    assert!(
        stdout.contains(&format!("PUT    {zrpc_key}/42 = 127.0.0.1:4242")),
        "{log}"
    );
    drop(gz);
    drop(zrpc_server);
}

#[test]
fn etcd_ls_says_when_etcd_is_unreachable() {
    let out = zrpcctl(
        &["etcd", "ls", "--etcd", "127.0.0.1:1"],
        &std::env::temp_dir(),
    );
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("etcd at 127.0.0.1:1 is unreachable"),
        "{log}"
    );
}
