//! A newcomer's first hour with zrpcctl, scripted: `zrpcctl new` on a proto with two services
//! sharing an RPC name, RPCs named after Rust keywords, an import of another package and
//! well-known types; one RPC implemented; RPCs added (one more service with the implemented
//! RPC's name) and `zrpcctl proto` run; a key of the service's own added to its config next to
//! zrpc's (go-zero's `DataSource`); then the crate builds, is `cargo fmt` clean after every
//! step, answers the implemented RPC with its implementation, and its binary and tests load the
//! config with the service's key.
//!
//! The crate builds `--offline` against this checkout with the workspace's lock file and target
//! dir, so only the scaffold itself is compiled, with `protoc` hidden from its build (a PATH
//! without it, `PROTOC` unset: `scripts/without_protoc.sh`), as on a machine that never installed
//! it. Where that cannot work (no rustfmt, crates missing from the local registry) the test says
//! so loudly and skips. `scripts/test.sh` hides protoc the same way from all of its builds;
//! `scripts/readme_without_protoc.sh` runs the README's commands so on a fresh target dir.
// clippy.toml lets tests unwrap, but only inside `#[test]` fns and `cfg(test)` modules: a test
// crate's helpers are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{text, workspace_root, zrpcctl};
use std::time::Instant;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/newcomer")
}

/// zrpcctl with `args` in `dir`, which must succeed; its output.
fn zrpcctl_ok(args: &[&str], dir: &Path) -> String {
    let out = zrpcctl(args, dir);
    let log = text(&out);
    assert!(out.status.success(), "zrpcctl {args:?}: {log}");
    log
}

fn cargo(args: &[&str], krate: &Path) -> Output {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .current_dir(krate)
        .env("PATH", path_without_protoc(&target))
        .env("CARGO_TARGET_DIR", target)
        .env_remove("PROTOC")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// This PATH less `protoc` (`scripts/without_protoc.sh`, links kept in the target dir).
fn path_without_protoc(target: &Path) -> String {
    let out = Command::new("bash")
        .arg(workspace_root().join("scripts/without_protoc.sh"))
        .arg(target.join("newcomer-no-protoc-path"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn skip(why: &str) {
    eprintln!(
        "\n==================== SKIPPED: newcomer_scaffold_survives_proto_changes ====================\n\
         {why}\n\
         ==========================================================================================\n"
    );
}

/// Cargo failed for want of the network, not because of the scaffold.
fn offline_impossible(out: &Output) -> bool {
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr.contains("--offline was specified") || stderr.contains("offline mode")
}

fn fmt_check(krate: &Path, when: &str) {
    let out = cargo(&["fmt", "--check"], krate);
    assert!(
        out.status.success(),
        "the scaffold is not `cargo fmt` clean {when}: {}",
        text(&out)
    );
}

/// The module `src/logic/mod.rs` records for `rpc` (`Service.Rpc`).
fn module_of(krate: &Path, rpc: &str) -> String {
    let mods = std::fs::read_to_string(krate.join("src/logic/mod.rs")).unwrap();
    mods.lines()
        .find_map(|l| {
            let (module, comment) = l.strip_prefix("pub mod ")?.split_once(';')?;
            (comment.trim() == format!("// {rpc}")).then(|| module.to_owned())
        })
        .unwrap_or_else(|| panic!("{rpc} has no module in src/logic/mod.rs:\n{mods}"))
}

#[test]
fn newcomer_scaffold_survives_proto_changes() {
    let fmt = cargo(&["fmt", "--version"], Path::new(env!("CARGO_MANIFEST_DIR")));
    if !fmt.status.success() {
        skip("rustfmt is not installed: the scaffold's `cargo fmt --check` cannot run.");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = workspace_root();
    let protos = fixtures().join("protos");
    let started = Instant::now();

    // 1. `zrpcctl new`, with the import root given as to protoc.
    let log = zrpcctl_ok(
        &[
            "new",
            "shop",
            "--proto",
            protos.join("shop/shop.proto").to_str().unwrap(),
            "-I",
            protos.to_str().unwrap(),
            "--zrpc-path",
            root.to_str().unwrap(),
        ],
        tmp.path(),
    );
    let krate = tmp.path().join("shop");
    assert!(krate.join("proto/common/money.proto").exists(), "{log}");
    std::fs::copy(root.join("Cargo.lock"), krate.join("Cargo.lock")).unwrap();
    fmt_check(&krate, "after `zrpcctl new`");
    // Two services share `Ping`: both are prefixed. The keywords get prost's names.
    assert_eq!(
        module_of(&krate, "InventoryService.Ping"),
        "inventory_service_ping"
    );
    assert_eq!(module_of(&krate, "AuditService.Ping"), "audit_service_ping");
    assert_eq!(module_of(&krate, "InventoryService.Match"), "r#match");
    assert_eq!(module_of(&krate, "AuditService.Type"), "r#type");
    assert_eq!(module_of(&krate, "InventoryService.Get"), "get");

    // 2. The newcomer writes `InventoryService.Get`.
    let get = krate.join("src/logic/get.rs");
    let stub = std::fs::read_to_string(&get).unwrap();
    let body_at = stub
        .find("    let _ = (ctx, request);")
        .unwrap_or_else(|| panic!("unexpected stub:\n{stub}"));
    let body = std::fs::read_to_string(fixtures().join("get_body.rs")).unwrap();
    let mine = format!("{}{body}", &stub[..body_at]);
    std::fs::write(&get, &mine).unwrap();
    std::fs::copy(
        fixtures().join("implemented.rs"),
        krate.join("tests/implemented.rs"),
    )
    .unwrap();
    // The first RPC, which the generated test calls with an empty request, validates its input
    // and refuses it: the server answered, so the generated test still passes.
    let ping = krate.join("src/logic/inventory_service_ping.rs");
    let stub = std::fs::read_to_string(&ping).unwrap();
    let body_at = stub.find("    let _ = (ctx, request);").unwrap();
    std::fs::write(
        &ping,
        format!(
            "{}    let _ = (ctx, request);\n    Err(zrpc::tonic::Status::invalid_argument(\"a ping needs a body\"))\n}}\n",
            &stub[..body_at]
        ),
    )
    .unwrap();

    // The service gets a key of its own next to zrpc's, as in a go-zero config: the field the
    // generated config.rs shows commented out, and the key in the YAML.
    let config_rs = krate.join("src/config.rs");
    let example = "    // pub data_source: String,\n";
    let config_text = std::fs::read_to_string(&config_rs).unwrap();
    assert!(config_text.contains(example), "{config_text}");
    // and a client of another service, checked as the generated comment says
    let client = "    // pub user_rpc: zrpc::RpcClientConf,\n";
    let check = "    fn validate(&self) -> Result<(), ConfError> {\n        Ok(())";
    assert!(
        config_text.contains(client) && config_text.contains(check),
        "{config_text}"
    );
    let config_text = config_text
        .replace(example, "    pub data_source: String,\n")
        .replace(client, "    pub user_rpc: zrpc::RpcClientConf,\n")
        .replace(
            check,
            "    fn validate(&self) -> Result<(), ConfError> {\n        self.user_rpc.validate_at(\"UserRpc\")",
        );
    std::fs::write(&config_rs, &config_text).unwrap();
    // a client config needs zrpc's client, as the generated Cargo.toml says
    let manifest_path = krate.join("Cargo.toml");
    let manifest = std::fs::read_to_string(&manifest_path).unwrap();
    let server_only = r#"default-features = false, features = ["etcd", "devserver", "gzip"] }"#;
    assert!(
        manifest.contains("add \"client\" to its features") && manifest.contains(server_only),
        "{manifest}"
    );
    let with_client =
        r#"default-features = false, features = ["etcd", "devserver", "gzip", "client"] }"#;
    std::fs::write(
        &manifest_path,
        manifest.replacen(server_only, with_client, 1),
    )
    .unwrap();
    let yaml = krate.join("etc/shop.yaml");
    let yaml_text = std::fs::read_to_string(&yaml).unwrap()
        + "DataSource: root:secret@tcp(127.0.0.1:3306)/shop\n"
        + "UserRpc:\n  Etcd:\n    Hosts: [127.0.0.1:2379]\n    Key: user.rpc\n";
    std::fs::write(&yaml, &yaml_text).unwrap();
    // conf check reads the crate's Config: its keys pass, a key it lacks is refused
    zrpcctl_ok(&["conf", "check", "etc/shop.yaml"], &krate);
    let extra = krate.join("etc/extra.yaml");
    std::fs::write(&extra, yaml_text.clone() + "Cache: []\n").unwrap();
    let out = zrpcctl(&["conf", "check", "etc/extra.yaml"], &krate);
    let log = text(&out);
    assert!(
        !out.status.success() && log.contains("unknown key `Cache`") && log.contains("config.rs"),
        "{log}"
    );
    std::fs::remove_file(&extra).unwrap();

    // 3. RPCs added: one to InventoryService, and a service whose RPCs are named like the
    //    implemented `Get` and the shared `Ping`. Then `zrpcctl proto`.
    let proto = krate.join("proto/shop.proto");
    let text_v1 = std::fs::read_to_string(&proto).unwrap();
    let text_v2 = text_v1.replace(
        "  rpc Match(ItemId) returns (stream Item);\n",
        "  rpc Match(ItemId) returns (stream Item);\n  rpc List(google.protobuf.Empty) returns (stream Item);\n",
    ) + "\nservice ReportService {\n  rpc Get(ItemId) returns (Item);\n  rpc Ping(google.protobuf.Empty) returns (google.protobuf.Empty);\n}\n";
    assert_ne!(text_v1, text_v2);
    std::fs::write(&proto, &text_v2).unwrap();
    let log = zrpcctl_ok(&["proto", "proto/shop.proto"], &krate);
    assert!(!log.contains("no longer in the proto"), "{log}");
    assert_eq!(std::fs::read_to_string(&get).unwrap(), mine, "{log}");
    assert_eq!(
        std::fs::read_to_string(&config_rs).unwrap(),
        config_text,
        "{log}"
    );
    assert_eq!(std::fs::read_to_string(&yaml).unwrap(), yaml_text, "{log}");
    assert_eq!(module_of(&krate, "InventoryService.Get"), "get", "{log}");
    assert_eq!(module_of(&krate, "ReportService.Get"), "report_service_get");
    assert_eq!(
        module_of(&krate, "ReportService.Ping"),
        "report_service_ping"
    );
    assert_eq!(module_of(&krate, "InventoryService.List"), "list");
    fmt_check(&krate, "after `zrpcctl proto`");
    // A second run with nothing changed rewrites nothing.
    let log = zrpcctl_ok(&["proto", "proto/shop.proto"], &krate);
    assert!(!log.contains("wrote"), "{log}");
    let scaffold_time = started.elapsed();

    // 4. It builds, its tests pass (the generated one and the newcomer's), and the implemented
    //    RPC answers its implementation.
    let started = Instant::now();
    let out = cargo(&["test", "--offline"], &krate);
    let log = text(&out);
    if !out.status.success() && offline_impossible(&out) {
        skip(&format!(
            "the scaffold's dependencies are not all in the local cargo registry, so it cannot build \
             offline (run `cargo fetch` in the workspace first):\n{log}"
        ));
        return;
    }
    assert!(out.status.success(), "{log}");
    assert!(log.contains("serves_and_answers_a_call ... ok"), "{log}");
    assert!(
        log.contains("get_answers_its_implementation ... ok"),
        "{log}"
    );
    fmt_check(&krate, "after building");

    // 5. The binary loads its config through the same Config: a misspelt service key is refused
    //    with the key it meant, before anything is served.
    let bad = krate.join("etc/typo.yaml");
    std::fs::write(&bad, yaml_text.replace("DataSource:", "DataSorce:")).unwrap();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let out = Command::new(target.join("debug/shop"))
        .args(["-f", "etc/typo.yaml"])
        .current_dir(&krate)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("DataSorce")
            && stderr.contains("DataSource")
            && stderr.contains("src/config.rs"),
        "{log}"
    );
    // A nested client block without its key names the block's full path.
    std::fs::write(&bad, yaml_text.replace("    Key: user.rpc\n", "")).unwrap();
    let out = Command::new(target.join("debug/shop"))
        .args(["-f", "etc/typo.yaml"])
        .current_dir(&krate)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let log = text(&out);
    assert!(
        !out.status.success() && log.contains("`UserRpc.Etcd.Key`: empty etcd key"),
        "{log}"
    );
    println!(
        "zrpcctl new + proto + fmt checks: {scaffold_time:?}; cargo test of the scaffold (build + run): {:?}",
        started.elapsed()
    );
}
