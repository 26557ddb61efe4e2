use super::*;

fn rust_type(p: &proto::Proto, ty: &str) -> String {
    Catalog::single(p.clone()).rust_type(ty).unwrap()
}

#[test]
fn maps_proto_types_to_rust_paths() {
    let p = proto::parse("package calc.v1;").unwrap();
    assert_eq!(rust_type(&p, "AddRequest"), "pb::AddRequest");
    assert_eq!(rust_type(&p, "calc.v1.AddRequest"), "pb::AddRequest");
    assert_eq!(rust_type(&p, "Outer.Inner"), "pb::outer::Inner");
    assert_eq!(rust_type(&p, "google.protobuf.Empty"), "()");
    assert_eq!(
        rust_type(&p, "google.protobuf.Timestamp"),
        "zrpc::prost_types::Timestamp"
    );
}

#[test]
fn rejects_bad_names_and_existing_dirs() {
    let dir = std::env::temp_dir();
    let source = Source::Published("0.1");
    let e = new(&dir, "9lives", None, &[], &source).unwrap_err();
    assert!(e.to_string().contains("not a valid crate name"), "{e}");
    let e = new(
        dir.parent().unwrap(),
        dir.file_name().unwrap().to_str().unwrap(),
        None,
        &[],
        &source,
    )
    .unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
}

#[test]
fn regeneration_keeps_user_logic_and_adds_new_rpcs() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, _) = new(tmp.path(), "calc", None, &[], &Source::Published("0.1")).unwrap();
    let ping = root.join("src/logic/ping.rs");
    std::fs::write(&ping, "// mine\n").unwrap();
    // The files `new` writes once are the user's: config, context, entry point, crate root.
    let mine = [
        "src/config.rs",
        "src/svc.rs",
        "src/main.rs",
        "src/lib.rs",
        "etc/calc.yaml",
    ];
    let before: Vec<String> = mine
        .iter()
        .map(|f| std::fs::read_to_string(root.join(f)).unwrap())
        .collect();
    let config = root.join("src/config.rs");
    let edited = before[0].replace("// pub data_source: String,", "pub data_source: String,");
    assert_ne!(edited, before[0], "no commented service key in config.rs");
    std::fs::write(&config, &edited).unwrap();
    let proto = root.join("proto/calc.proto");
    let text = std::fs::read_to_string(&proto).unwrap().replace(
        "rpc Ping(Request) returns (Response);",
        "rpc Ping(Request) returns (Response);\n  rpc Watch(Request) returns (stream Response);",
    );
    std::fs::write(&proto, text).unwrap();
    let report = regenerate(&root, &proto, &[]).unwrap();
    assert_eq!(std::fs::read_to_string(&ping).unwrap(), "// mine\n");
    assert!(report.kept.contains(&ping));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);
    for (f, text) in mine.iter().zip(&before).skip(1) {
        assert_eq!(&std::fs::read_to_string(root.join(f)).unwrap(), text, "{f}");
    }
    let watch = std::fs::read_to_string(root.join("src/logic/watch.rs")).unwrap();
    assert!(watch.contains("BoxStream<pb::Response>"), "{watch}");
    let server = std::fs::read_to_string(root.join("src/server.rs")).unwrap();
    assert!(
        server.contains("type WatchStream = BoxStream<pb::Response>;"),
        "{server}"
    );
    assert!(
        server.contains("logic::watch::watch(&self.ctx, request)"),
        "{server}"
    );
}

const MESSAGES: &str = "syntax = \"proto3\";\npackage acme.inventory;\n\
                        message Req { string id = 1; }\nmessage Resp { string id = 1; }\n";

fn service(name: &str, rpcs: &[&str]) -> String {
    let mut s = format!("service {name} {{\n");
    for r in rpcs {
        s.push_str(&format!("  rpc {r}(Req) returns (Resp);\n"));
    }
    s.push_str("}\n");
    s
}

/// The `impl` block of `service`'s trait in server.rs.
fn handler_block<'a>(server: &'a str, module: &str) -> &'a str {
    let start = server
        .find(&format!("impl pb::{module}_server::"))
        .unwrap_or_else(|| panic!("no impl for {module}:\n{server}"));
    let rest = &server[start..];
    let end = rest.find("\n}\n").unwrap();
    &rest[..end]
}

const MINE: &str =
    "    let _ = (ctx, request);\n    Ok(Response::new(pb::Resp { id: \"mine\".into() }))\n}\n";

/// A crate from `proto`, with `InventoryService.Ping` written by the user.
fn implemented_crate(tmp: &Path, proto: &str) -> (PathBuf, PathBuf, String) {
    let file = tmp.join("inv.proto");
    std::fs::write(&file, proto).unwrap();
    let (root, _) = new(tmp, "inv", Some(&file), &[], &Source::Published("0.1")).unwrap();
    let ping = root.join("src/logic/ping.rs");
    let stub = std::fs::read_to_string(&ping).unwrap();
    let body = stub.find("    let _ = (ctx, request);").unwrap();
    let mine = format!("{}{MINE}", &stub[..body]);
    std::fs::write(&ping, &mine).unwrap();
    (root, ping, mine)
}

fn assert_wired(root: &Path, module: &str, service: &str, fn_name: &str, logic: &str) {
    let server = std::fs::read_to_string(root.join("src/server.rs")).unwrap();
    let block = handler_block(&server, module);
    assert!(
        block.contains(&format!("logic::{logic}::{fn_name}(&self.ctx, request)")),
        "{service} does not call logic::{logic}:\n{server}"
    );
    let mods = std::fs::read_to_string(root.join("src/logic/mod.rs")).unwrap();
    let rpc = fn_name.trim_start_matches("r#");
    assert!(
        mods.lines().any(
            |l| l.starts_with(&format!("pub mod {logic}; // {service}."))
                && l.to_lowercase().ends_with(rpc)
        ),
        "{mods}"
    );
}

#[test]
fn an_implemented_rpc_stays_wired_through_every_proto_run() {
    let tmp = tempfile::tempdir().unwrap();
    let first = format!(
        "{MESSAGES}{}",
        service("InventoryService", &["Ping", "Get"])
    );
    let (root, ping, mine) = implemented_crate(tmp.path(), &first);
    let proto = root.join("proto/inv.proto");
    let steps = [
        // An RPC added to the same service.
        format!(
            "{MESSAGES}{}",
            service("InventoryService", &["Ping", "Get", "List"])
        ),
        // A second service with an RPC of the same name.
        format!(
            "{MESSAGES}{}{}",
            service("InventoryService", &["Ping", "Get", "List"]),
            service("AuditService", &["Ping"])
        ),
        // A third one, declared first, with Ping and Get; RPCs reordered.
        format!(
            "{MESSAGES}{}{}{}",
            service("ReportService", &["Get", "Ping"]),
            service("InventoryService", &["List", "Get", "Ping"]),
            service("AuditService", &["Ping"])
        ),
        // A service removed, then the proto as it was.
        format!(
            "{MESSAGES}{}{}",
            service("InventoryService", &["Ping", "Get", "List"]),
            service("ReportService", &["Get", "Ping"])
        ),
        format!(
            "{MESSAGES}{}{}{}",
            service("InventoryService", &["Ping", "Get", "List"]),
            service("ReportService", &["Get", "Ping"]),
            service("AuditService", &["Ping"])
        ),
    ];
    for (i, text) in steps.iter().enumerate() {
        std::fs::write(&proto, text).unwrap();
        let report = regenerate(&root, &proto, &[]).unwrap();
        assert_eq!(std::fs::read_to_string(&ping).unwrap(), mine, "step {i}");
        assert!(report.kept.contains(&ping), "step {i}: {report:?}");
        assert_wired(
            &root,
            "inventory_service",
            "InventoryService",
            "ping",
            "ping",
        );
        assert_wired(&root, "inventory_service", "InventoryService", "get", "get");
        // Nothing claims a file of an RPC still in the proto is gone.
        for (path, rpc) in &report.orphans {
            assert_ne!(rpc.as_deref(), Some("InventoryService.Ping"), "{path:?}");
        }
    }
    // The newcomers took new names; the first holder of each name kept it.
    assert_wired(
        &root,
        "audit_service",
        "AuditService",
        "ping",
        "audit_service_ping",
    );
    assert_wired(
        &root,
        "report_service",
        "ReportService",
        "ping",
        "report_service_ping",
    );
    assert_wired(
        &root,
        "report_service",
        "ReportService",
        "get",
        "report_service_get",
    );
}

#[test]
fn new_prefixes_every_rpc_sharing_a_name() {
    let tmp = tempfile::tempdir().unwrap();
    let text = format!(
        "{MESSAGES}{}{}",
        service("InventoryService", &["Ping"]),
        service("AuditService", &["Ping"])
    );
    let file = tmp.path().join("two.proto");
    std::fs::write(&file, text).unwrap();
    let (root, _) = new(
        tmp.path(),
        "two",
        Some(&file),
        &[],
        &Source::Published("0.1"),
    )
    .unwrap();
    assert_wired(
        &root,
        "inventory_service",
        "InventoryService",
        "ping",
        "inventory_service_ping",
    );
    assert_wired(
        &root,
        "audit_service",
        "AuditService",
        "ping",
        "audit_service_ping",
    );
    assert!(!root.join("src/logic/ping.rs").exists());
}

/// A crate from a zrpcctl that wrote no records in mod.rs: the stub headers say which RPC
/// each file serves.
#[test]
fn a_crate_without_records_keeps_its_modules_by_their_headers() {
    let tmp = tempfile::tempdir().unwrap();
    let first = format!("{MESSAGES}{}", service("InventoryService", &["Ping"]));
    let (root, ping, mine) = implemented_crate(tmp.path(), &first);
    std::fs::write(root.join("src/logic/mod.rs"), "pub mod ping;\n").unwrap();
    let proto = root.join("proto/inv.proto");
    let text = format!(
        "{MESSAGES}{}{}",
        service("InventoryService", &["Ping"]),
        service("AuditService", &["Ping"])
    );
    std::fs::write(&proto, text).unwrap();
    let report = regenerate(&root, &proto, &[]).unwrap();
    assert!(report.orphans.is_empty(), "{report:?}");
    assert_eq!(std::fs::read_to_string(&ping).unwrap(), mine);
    assert_wired(
        &root,
        "inventory_service",
        "InventoryService",
        "ping",
        "ping",
    );
    assert_wired(
        &root,
        "audit_service",
        "AuditService",
        "ping",
        "audit_service_ping",
    );
}

/// The state an older zrpcctl left: the user's `ping.rs` unwired and a second stub for the
/// same RPC. Picking either silently could lose the user's code: an error names both.
#[test]
fn two_files_claiming_one_rpc_is_an_error_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    let first = format!("{MESSAGES}{}", service("InventoryService", &["Ping"]));
    let (root, ping, mine) = implemented_crate(tmp.path(), &first);
    let stub = root.join("src/logic/inventory_service_ping.rs");
    let stub_text = mine.replace(
        MINE,
        "    Err(Status::unimplemented(\"InventoryService.Ping is not implemented yet\"))\n}\n",
    );
    std::fs::write(&stub, stub_text).unwrap();
    std::fs::write(
        root.join("src/logic/mod.rs"),
        "pub mod inventory_service_ping;\n",
    )
    .unwrap();
    let server_before = std::fs::read_to_string(root.join("src/server.rs")).unwrap();
    let e = regenerate(&root, &root.join("proto/inv.proto"), &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ping.rs") && e.contains("inventory_service_ping.rs"),
        "{e}"
    );
    assert!(e.contains("still the Unimplemented stub"), "{e}");
    assert!(e.contains("delete"), "{e}");
    // Nothing was written.
    assert_eq!(
        std::fs::read_to_string(root.join("src/server.rs")).unwrap(),
        server_before
    );
    assert_eq!(std::fs::read_to_string(&ping).unwrap(), mine);
}

#[test]
fn a_removed_rpc_is_reported_truthfully_and_comes_back_to_its_file() {
    let tmp = tempfile::tempdir().unwrap();
    let both = format!(
        "{MESSAGES}{}",
        service("InventoryService", &["Ping", "Get"])
    );
    let (root, ping, mine) = implemented_crate(tmp.path(), &both);
    std::fs::write(root.join("src/logic/util.rs"), "// helpers\n").unwrap();
    let proto = root.join("proto/inv.proto");
    std::fs::write(
        &proto,
        format!("{MESSAGES}{}", service("InventoryService", &["Get"])),
    )
    .unwrap();
    let report = regenerate(&root, &proto, &[]).unwrap();
    let mut orphans = report.orphans.clone();
    orphans.sort();
    assert_eq!(
        orphans,
        [
            (ping.clone(), Some("InventoryService.Ping".to_owned())),
            (root.join("src/logic/util.rs"), None)
        ]
    );
    std::fs::write(&proto, &both).unwrap();
    regenerate(&root, &proto, &[]).unwrap();
    assert_eq!(std::fs::read_to_string(&ping).unwrap(), mine);
    assert_wired(
        &root,
        "inventory_service",
        "InventoryService",
        "ping",
        "ping",
    );
}

#[test]
fn keyword_rpcs_get_prost_names_and_files_beside_mod_rs() {
    let tmp = tempfile::tempdir().unwrap();
    let text = format!(
        "{MESSAGES}{}",
        service("Game", &["Match", "Type", "Self", "Super", "Mod", "Ping"])
    );
    let file = tmp.path().join("game.proto");
    std::fs::write(&file, text).unwrap();
    let (root, _) = new(
        tmp.path(),
        "game",
        Some(&file),
        &[],
        &Source::Published("0.1"),
    )
    .unwrap();
    let server = std::fs::read_to_string(root.join("src/server.rs")).unwrap();
    for call in [
        "async fn r#match(",
        "logic::r#match::r#match(&self.ctx, request)",
        "logic::r#type::r#type(&self.ctx, request)",
        "logic::self_::self_(&self.ctx, request)",
        "logic::super_::super_(&self.ctx, request)",
        // `mod.rs` is the module list itself.
        "logic::game_mod::r#mod(&self.ctx, request)",
    ] {
        assert!(server.contains(call), "{call}:\n{server}");
    }
    for f in [
        "match.rs",
        "type.rs",
        "self_.rs",
        "super_.rs",
        "game_mod.rs",
    ] {
        assert!(root.join("src/logic").join(f).exists(), "{f}");
    }
    let mods = std::fs::read_to_string(root.join("src/logic/mod.rs")).unwrap();
    let lines: Vec<&str> = mods.lines().filter(|l| l.starts_with("pub mod")).collect();
    assert_eq!(
        lines,
        [
            "pub mod game_mod; // Game.Mod",
            "pub mod r#match; // Game.Match",
            "pub mod ping; // Game.Ping",
            "pub mod self_; // Game.Self",
            "pub mod super_; // Game.Super",
            "pub mod r#type; // Game.Type",
        ]
    );
}

#[test]
fn imports_of_other_packages_are_copied_and_mirrored_in_pb() {
    let tmp = tempfile::tempdir().unwrap();
    let protos = tmp.path().join("protos");
    std::fs::create_dir_all(protos.join("common")).unwrap();
    std::fs::create_dir_all(protos.join("inventory")).unwrap();
    std::fs::write(
        protos.join("common/money.proto"),
        "syntax = \"proto3\";\npackage acme.common;\nimport \"common/currency.proto\";\n\
         message Money { Currency currency = 1; int64 units = 2; }\n",
    )
    .unwrap();
    std::fs::write(
        protos.join("common/currency.proto"),
        "syntax = \"proto3\";\npackage acme.common;\nenum Currency { EUR = 0; }\n",
    )
    .unwrap();
    let file = protos.join("inventory/inventory.proto");
    std::fs::write(
        &file,
        "syntax = \"proto3\";\npackage acme.inventory;\nimport \"common/money.proto\";\n\
         import \"google/protobuf/timestamp.proto\";\nmessage Item { string id = 1; }\n\
         service InventoryService {\n  rpc Price(Item) returns (common.Money);\n  \
         rpc Cost(Item) returns (.acme.common.Money);\n  \
         rpc Stamp(google.protobuf.Timestamp) returns (Item);\n}\n",
    )
    .unwrap();
    // Without -I the import is not found, and the message says what to do.
    let e = new(
        tmp.path(),
        "inv",
        Some(&file),
        &[],
        &Source::Published("0.1"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("common/money.proto") && e.contains("-I"), "{e}");
    assert!(!tmp.path().join("inv").exists());

    let (root, _) = new(
        tmp.path(),
        "inv",
        Some(&file),
        std::slice::from_ref(&protos),
        &Source::Published("0.1"),
    )
    .unwrap();
    for f in [
        "proto/inventory.proto",
        "proto/common/money.proto",
        "proto/common/currency.proto",
    ] {
        assert!(root.join(f).exists(), "{f}");
    }
    let pb = std::fs::read_to_string(root.join("src/pb.rs")).unwrap();
    for line in [
        "pub use self::acme::inventory::*;",
        "zrpc::include_proto!(\"acme.common\");",
        "zrpc::include_proto!(\"acme.inventory\");",
    ] {
        assert!(pb.contains(line), "{line}:\n{pb}");
    }
    let server = std::fs::read_to_string(root.join("src/server.rs")).unwrap();
    assert!(
        server.contains("Result<Response<pb::acme::common::Money>, Status>"),
        "{server}"
    );
    assert!(
        server.contains("Request<zrpc::prost_types::Timestamp>"),
        "{server}"
    );
    // `proto` in the crate finds the copies under proto/ by itself.
    regenerate(&root, &root.join("proto/inventory.proto"), &[]).unwrap();
}

#[test]
fn scalar_wrappers_as_rpc_messages_are_refused_with_a_way_out() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("flag.proto");
    std::fs::write(
        &file,
        "syntax = \"proto3\";\nimport \"google/protobuf/wrappers.proto\";\n\
         service Flags { rpc Get(google.protobuf.StringValue) returns (google.protobuf.BoolValue); }\n",
    )
    .unwrap();
    let e = new(
        tmp.path(),
        "flag",
        Some(&file),
        &[],
        &Source::Published("0.1"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("google.protobuf.BoolValue") && e.contains("message of your own"),
        "{e}"
    );
}

#[test]
fn an_inline_pb_from_an_older_zrpcctl_is_kept_unless_imports_need_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, _) = new(tmp.path(), "calc", None, &[], &Source::Published("0.1")).unwrap();
    let old_lib = "pub mod pb {\n    zrpc::include_proto!(\"calc\");\n}\npub mod logic;\npub mod server;\npub mod svc;\n";
    std::fs::write(root.join("src/lib.rs"), old_lib).unwrap();
    std::fs::remove_file(root.join("src/pb.rs")).unwrap();
    let proto = root.join("proto/calc.proto");
    regenerate(&root, &proto, &[]).unwrap();
    assert!(!root.join("src/pb.rs").exists());

    std::fs::write(
        root.join("proto/other.proto"),
        "syntax = \"proto3\";\npackage other;\nmessage X {}\n",
    )
    .unwrap();
    let text = std::fs::read_to_string(&proto)
        .unwrap()
        .replace("package calc;", "package calc;\nimport \"other.proto\";");
    std::fs::write(&proto, text).unwrap();
    let e = regenerate(&root, &proto, &[]).unwrap_err().to_string();
    assert!(e.contains("pub mod pb;"), "{e}");
}

#[test]
fn the_default_dependency_is_the_git_line_the_readme_gives() {
    let tmp = tempfile::tempdir().unwrap();
    let url = env!("CARGO_PKG_REPOSITORY");
    let (root, _) = new(tmp.path(), "calc", None, &[], &Source::Git(url)).unwrap();
    let toml = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let lines = [
        format!(
            "zrpc = {{ package = \"zrpc-rs\", git = \"{url}\", default-features = false, \
             features = [\"etcd\", \"devserver\", \"gzip\"] }}"
        ),
        format!(
            "zrpc = {{ package = \"zrpc-rs\", git = \"{url}\", default-features = false, \
             features = [\"client\"] }}"
        ),
        format!("zrpc-build = {{ git = \"{url}\" }}"),
    ];
    for line in &lines {
        assert!(toml.contains(line), "{line} not in\n{toml}");
    }
    // The README of the repository (absent from a packaged crate) tells users the same lines.
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    if let Ok(readme) = std::fs::read_to_string(readme) {
        for line in &lines {
            assert!(readme.contains(line), "the README does not give {line}");
        }
    }
    let published = new(tmp.path(), "pub", None, &[], &Source::Published("0.1.0")).unwrap();
    let toml = std::fs::read_to_string(published.0.join("Cargo.toml")).unwrap();
    assert!(
        toml.contains(
            "zrpc = { package = \"zrpc-rs\", version = \"0.1.0\", default-features = false, \
             features = [\"etcd\", \"devserver\", \"gzip\"] }"
        ),
        "{toml}"
    );
}

/// The service depends on zrpc's default features but `client`, which only its test uses (a
/// dev-dependency: cargo builds the release binary without it), and says how to turn it on.
#[test]
fn the_service_builds_without_the_client_and_its_test_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, _) = new(tmp.path(), "calc", None, &[], &Source::Published("0.1.0")).unwrap();
    let toml = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let section = |name: &str| {
        let start = toml.find(&format!("\n[{name}]\n")).unwrap();
        let rest = &toml[start + 1..];
        rest[..rest[1..].find("\n[").map_or(rest.len(), |i| i + 1)].to_owned()
    };
    let defaults: Vec<String> = zrpc::conf::DEFAULT_FEATURES
        .iter()
        .filter(|f| **f != "client")
        .map(|f| format!("\"{f}\""))
        .collect();
    assert_eq!(defaults.len() + 1, zrpc::conf::DEFAULT_FEATURES.len());
    let server = format!(
        "default-features = false, features = [{}] }}",
        defaults.join(", ")
    );
    let deps = section("dependencies");
    assert!(deps.contains(&server), "{deps}");
    assert!(deps.contains("add \"client\" to its features"), "{deps}");
    let dev = section("dev-dependencies");
    assert!(
        dev.contains("default-features = false, features = [\"client\"] }"),
        "{dev}"
    );
    let test = std::fs::read_to_string(root.join("tests/calc.rs")).unwrap();
    assert!(test.contains("zrpc::client("), "{test}");
}

#[test]
fn a_proto_that_build_rs_does_not_compile_is_refused_with_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, _) = new(tmp.path(), "calc", None, &[], &Source::Published("0.1")).unwrap();
    let other = tmp.path().join("billing.proto");
    std::fs::write(
        &other,
        std::fs::read_to_string(root.join("proto/calc.proto")).unwrap(),
    )
    .unwrap();
    let server = std::fs::read_to_string(root.join("src/server.rs")).unwrap();
    let e = regenerate(&root, &other, &[]).unwrap_err().to_string();
    assert!(
        e.contains("build.rs compiles proto/calc.proto but not proto/billing.proto")
            && e.contains("zrpcctl proto proto/calc.proto"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("src/server.rs")).unwrap(),
        server,
        "nothing is rewritten"
    );
    assert!(!root.join("proto/billing.proto").exists());
    // once build.rs compiles it, the run goes through
    let build = std::fs::read_to_string(root.join("build.rs")).unwrap();
    std::fs::write(
        root.join("build.rs"),
        build.replace("proto/calc.proto", "proto/billing.proto"),
    )
    .unwrap();
    regenerate(&root, &other, &[]).unwrap();
    assert!(root.join("proto/billing.proto").exists());
}
