//! `zrpcctl new` and `zrpcctl proto`: a ready crate in goctl's layout, and regeneration of the
//! generated parts when the proto changes (never touching the logic a user wrote, never moving
//! an RPC to another module).
//!
//! Which files are whose:
//!
//! | file | written by `new` | rewritten by `proto` |
//! |---|---|---|
//! | `Cargo.toml`, `build.rs`, `Dockerfile`, `etc/<name>.yaml`, `src/main.rs`, `src/lib.rs`, `src/config.rs`, `src/svc.rs`, `tests/<name>.rs` | yes | never |
//! | `proto/<file>.proto` and the files it imports (copies) | yes | when they changed |
//! | `src/server.rs`, `src/pb.rs`, `src/logic/mod.rs` (generated glue) | yes | yes |
//! | `src/logic/<rpc>.rs` (your code) | yes | only created when missing |
//!
//! [`wiring`] decides which module each RPC calls, [`catalog`] finds the imported files and the
//! Rust path of every proto type, [`glue`] writes the Rust text.

mod catalog;
mod glue;
#[cfg(test)]
mod tests;
mod wiring;
mod write;

use std::path::{Path, PathBuf};

use self::catalog::Catalog;
use self::glue::Method;
use self::wiring::RpcName;
pub(crate) use self::write::Report;
use self::write::write;
use crate::proto::{self, camel, file_stem};
use crate::templates::{self, Deps};
use crate::{Result, fail};

/// Where the zrpc crates come from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// The git repository at this URL (the default until zrpc is on crates.io).
    Git(&'static str),
    /// crates.io, at this version.
    Published(&'static str),
    /// A local checkout (its root directory).
    Path(PathBuf),
}

/// `zrpcctl new <name>` in `parent`. Imports of `proto_file` are searched in `includes`, then
/// in the proto's own directory.
pub(crate) fn new(
    parent: &Path,
    name: &str,
    proto_file: Option<&Path>,
    includes: &[PathBuf],
    source: &Source,
) -> Result<(PathBuf, Report)> {
    check_name(name)?;
    let root = parent.join(name);
    if root.exists() {
        return Err(fail(format!(
            "{} already exists; pick another name or remove it",
            root.display()
        )));
    }
    let ident = name.replace('-', "_");
    let mut search = includes.to_vec();
    let (proto_name, proto_text) = match proto_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
            let file = path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .ok_or_else(|| fail(format!("{} is not a file", path.display())))?;
            search.push(parent_dir(path));
            (file, text)
        }
        None => (
            format!("{ident}.proto"),
            templates::default_proto(&ident, &camel(&ident)),
        ),
    };
    let main = parse(&proto_text, &proto_name)?;
    if main.services.iter().all(|s| s.rpcs.is_empty()) {
        return Err(fail(format!(
            "{proto_name} declares no service with an rpc; nothing to serve"
        )));
    }
    let catalog = Catalog::load(main, &proto_name, &search)?;
    let deps = dependencies(source)?;
    // Everything that can fail is decided before the first file is written.
    let test = glue::test_rs(name, &ident, &catalog)?;
    let glue = plan(&root, &catalog, &proto_name, true)?;
    let mut report = Report::default();
    let files = [
        ("Cargo.toml", templates::cargo_toml(name, &deps)),
        ("build.rs", templates::build_rs(&proto_name)),
        ("Dockerfile", templates::dockerfile(name, &proto_name)),
        (".gitignore", "/target\n".to_owned()),
        (
            &format!("etc/{name}.yaml") as &str,
            templates::etc_yaml(name),
        ),
        ("src/main.rs", templates::main_rs(name, &ident)),
        ("src/lib.rs", templates::lib_rs(name, &proto_name)),
        ("src/config.rs", templates::config_rs(name)),
        ("src/svc.rs", templates::svc_rs()),
        (&format!("tests/{ident}.rs") as &str, test),
    ];
    for (rel, text) in files {
        write(&root.join(rel), &text, &mut report)?;
    }
    write(
        &root.join("proto").join(&proto_name),
        &proto_text,
        &mut report,
    )?;
    glue.apply(&catalog, &root, &mut report)?;
    Ok((root, report))
}

/// `zrpcctl proto <file>` for the crate at `root`. Imports are searched in `includes`, then in
/// the crate's `proto/`, then beside `proto_file`.
pub(crate) fn regenerate(root: &Path, proto_file: &Path, includes: &[PathBuf]) -> Result<Report> {
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).map_err(|_| {
        fail(format!(
            "{} has no src/lib.rs: run `zrpcctl proto` in a crate made by `zrpcctl new` (or pass --dir)",
            root.display()
        ))
    })?;
    let text = std::fs::read_to_string(proto_file)
        .map_err(|e| fail(format!("cannot read {}: {e}", proto_file.display())))?;
    let name = proto_file
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let main = parse(&text, &name)?;
    let mut search = includes.to_vec();
    search.push(root.join("proto"));
    search.push(parent_dir(proto_file));
    let catalog = Catalog::load(main, &name, &search)?;
    let pb_file = lib.lines().any(|l| l.trim() == "pub mod pb;");
    if !pb_file && lib.contains("pub mod pb {") && catalog.needs_tree() {
        return Err(fail(format!(
            "{name} imports another package, whose types the code generated for {name} names by relative paths; \
             src/lib.rs declares `pb` inline (an older zrpcctl wrote it), where those paths cannot resolve. \
             Replace the `pub mod pb {{ ... }}` block in src/lib.rs with `pub mod pb;` and run `zrpcctl proto` again: \
             zrpcctl then writes src/pb.rs with the package modules"
        )));
    }
    built_by_build_rs(root, &name)?;
    let glue = plan(root, &catalog, &name, pb_file)?;
    let mut report = Report::default();
    let target = root.join("proto").join(&name);
    if !same_file(proto_file, &target) {
        write(&target, &text, &mut report)?;
    }
    glue.apply(&catalog, root, &mut report)?;
    Ok(report)
}

/// Refuses a proto that the crate's `build.rs` does not compile: the glue would follow the new
/// file while the build compiles the old one, and the build would then fail far from the cause.
/// build.rs is the user's file, so it is not edited here. No build.rs, or one that names no
/// `proto/*.proto` file, is not judged.
fn built_by_build_rs(root: &Path, name: &str) -> Result<()> {
    let Ok(build) = std::fs::read_to_string(root.join("build.rs")) else {
        return Ok(());
    };
    let compiled: Vec<&str> = build
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("proto/") && s.ends_with(".proto"))
        .collect();
    let wanted = format!("proto/{name}");
    if compiled.is_empty() || compiled.contains(&wanted.as_str()) {
        return Ok(());
    }
    Err(fail(format!(
        "build.rs compiles {} but not {wanted}: src/server.rs would follow {name} while the build \
         compiles the other, and the build would fail. Run `zrpcctl proto {}` for the proto the \
         crate builds, or, to switch the crate to {name}, change the file in build.rs's \
         `compile_protos` to \"{wanted}\" and run this again",
        compiled.join(", "),
        compiled[0],
    )))
}

fn parse(text: &str, file: &str) -> Result<proto::Proto> {
    proto::parse(text).map_err(|e| fail(format!("{file}: {e}")))
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b)
}

/// The generated glue of one run, decided before anything is written.
#[derive(Debug)]
struct Glue {
    /// (path, text) of the files zrpcctl owns.
    generated: Vec<(PathBuf, String)>,
    /// Stubs for RPCs whose module has no file yet.
    stubs: Vec<(PathBuf, String)>,
    /// Logic files kept as they are.
    kept: Vec<PathBuf>,
    orphans: Vec<(PathBuf, Option<String>)>,
}

impl Glue {
    fn apply(self, catalog: &Catalog, root: &Path, report: &mut Report) -> Result<()> {
        for imported in &catalog.imports {
            write(
                &root.join("proto").join(&imported.path),
                &imported.text,
                report,
            )?;
        }
        for (path, text) in self.generated.iter().chain(&self.stubs) {
            write(path, text, report)?;
        }
        report.kept.extend(self.kept);
        report.orphans.extend(self.orphans);
        Ok(())
    }
}

/// `src/server.rs`, `src/pb.rs` (when `pb_file`), `src/logic/mod.rs` and the missing logic
/// files for the crate at `root`.
fn plan(root: &Path, catalog: &Catalog, proto_name: &str, pb_file: bool) -> Result<Glue> {
    let names: Vec<RpcName<'_>> = catalog
        .main
        .services
        .iter()
        .flat_map(|s| {
            s.rpcs.iter().map(|r| RpcName {
                service: &s.name,
                rpc: &r.name,
            })
        })
        .collect();
    let logic = root.join("src/logic");
    let wiring = wiring::plan(&logic, &names)?;
    let rpcs = catalog
        .main
        .services
        .iter()
        .flat_map(|s| s.rpcs.iter().map(move |r| (s, r)));
    let methods: Vec<Method<'_>> = rpcs
        .zip(wiring.modules)
        .map(|((s, rpc), module)| Method {
            service: &s.name,
            rpc,
            module,
        })
        .collect();
    let mut generated = vec![(
        root.join("src/server.rs"),
        glue::server_rs(catalog, proto_name, &methods)?,
    )];
    if pb_file {
        generated.push((root.join("src/pb.rs"), catalog.pb_rs(proto_name)));
    }
    let records: Vec<(String, String)> = methods
        .iter()
        .map(|m| (m.module.clone(), m.full()))
        .collect();
    generated.push((logic.join("mod.rs"), wiring::mod_rs(&records)));
    let mut stubs = Vec::new();
    let mut kept = Vec::new();
    for m in &methods {
        let path = logic.join(format!("{}.rs", file_stem(&m.module)));
        if path.exists() {
            kept.push(path);
        } else {
            stubs.push((path, glue::logic_rs(catalog, m)?));
        }
    }
    Ok(Glue {
        generated,
        stubs,
        kept,
        orphans: wiring.orphans,
    })
}

fn check_name(name: &str) -> Result<()> {
    let ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(fail(format!(
            "`{name}` is not a valid crate name: use ASCII letters, digits, `-` and `_`, starting with a letter"
        )))
    }
}

/// The features of a service that calls no other: zrpc's defaults without `client`.
const SERVER_FEATURES: &str = r#"features = ["etcd", "devserver", "gzip"]"#;

/// The zrpc lines for `source`.
fn dependencies(source: &Source) -> Result<Deps> {
    let (from, zrpc_build) = match source {
        Source::Git(url) => (
            format!("git = \"{url}\""),
            format!("zrpc-build = {{ git = \"{url}\" }}"),
        ),
        Source::Published(version) => (
            format!("version = \"{version}\""),
            format!("zrpc-build = \"{version}\""),
        ),
        Source::Path(root) => {
            let root = root
                .canonicalize()
                .map_err(|e| fail(format!("--zrpc-path {}: {e}", root.display())))?;
            for krate in ["crates/zrpc", "crates/zrpc-build"] {
                if !root.join(krate).join("Cargo.toml").exists() {
                    return Err(fail(format!(
                        "--zrpc-path {}: no {krate}/Cargo.toml there; give the root of a zrpc checkout",
                        root.display()
                    )));
                }
            }
            let r = root.display();
            (
                format!("path = \"{r}/crates/zrpc\""),
                format!("zrpc-build = {{ path = \"{r}/crates/zrpc-build\" }}"),
            )
        }
    };
    let zrpc = |features: &str| {
        format!("zrpc = {{ package = \"zrpc-rs\", {from}, default-features = false, {features} }}")
    };
    Ok(Deps {
        zrpc: zrpc(SERVER_FEATURES),
        zrpc_dev: zrpc(r#"features = ["client"]"#),
        zrpc_build,
    })
}
