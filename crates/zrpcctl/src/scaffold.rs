//! `zrpcctl new` and `zrpcctl proto`: a ready crate in goctl's layout, and regeneration of the
//! generated parts when RPCs are added (never touching the logic a user wrote).
//!
//! Which files are whose:
//!
//! | file | written by `new` | rewritten by `proto` |
//! |---|---|---|
//! | `Cargo.toml`, `build.rs`, `Dockerfile`, `etc/<name>.yaml`, `src/main.rs`, `src/lib.rs`, `src/svc.rs`, `tests/<name>.rs` | yes | never |
//! | `src/server.rs`, `src/logic/mod.rs` (generated glue) | yes | yes |
//! | `src/logic/<rpc>.rs` (your code) | yes | only created when missing |

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::proto::{self, Proto, Rpc, camel, snake};
use crate::templates;
use crate::{Result, fail};

/// What a scaffolding step wrote.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) written: Vec<PathBuf>,
    pub(crate) kept: Vec<PathBuf>,
    pub(crate) orphans: Vec<PathBuf>,
}

impl Report {
    pub(crate) fn print(&self, root: &Path) {
        let rel = |p: &PathBuf| p.strip_prefix(root).unwrap_or(p).display().to_string();
        for p in &self.written {
            println!("  wrote  {}", rel(p));
        }
        for p in &self.kept {
            println!("  kept   {} (your code)", rel(p));
        }
        for p in &self.orphans {
            println!(
                "  note   {} is no longer in the proto (not deleted)",
                rel(p)
            );
        }
    }
}

/// Where the zrpc crates come from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// crates.io, at this version.
    Published(&'static str),
    /// A local checkout (its root directory).
    Path(PathBuf),
}

/// `zrpcctl new <name>` in `parent`.
pub(crate) fn new(
    parent: &Path,
    name: &str,
    proto_file: Option<&Path>,
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
    let (proto_name, proto_text) = match proto_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
            let file = path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .ok_or_else(|| fail(format!("{} is not a file", path.display())))?;
            (file, text)
        }
        None => (
            format!("{ident}.proto"),
            templates::default_proto(&ident, &camel(&ident)),
        ),
    };
    let proto = parse(&proto_text, &proto_name)?;
    if proto.services.iter().all(|s| s.rpcs.is_empty()) {
        return Err(fail(format!(
            "{proto_name} declares no service with an rpc; nothing to serve"
        )));
    }
    let deps = dependencies(source)?;
    let mut report = Report::default();
    let files = [
        ("Cargo.toml", templates::cargo_toml(name, &deps)),
        ("build.rs", templates::build_rs(&proto_name)),
        ("Dockerfile", templates::dockerfile(name, &proto_name)),
        (".gitignore", "/target\n".to_owned()),
        (&format!("proto/{proto_name}") as &str, proto_text.clone()),
        (
            &format!("etc/{name}.yaml") as &str,
            templates::etc_yaml(name),
        ),
        ("src/main.rs", templates::main_rs(name, &ident)),
        (
            "src/lib.rs",
            templates::lib_rs(name, &proto_name, pb_package(&proto)),
        ),
        ("src/svc.rs", templates::svc_rs()),
        (
            &format!("tests/{ident}.rs") as &str,
            test_rs(name, &ident, &proto),
        ),
    ];
    for (rel, text) in files {
        write(&root.join(rel), &text, &mut report)?;
    }
    let regen = generate(&root, &proto, &proto_name)?;
    report.written.extend(regen.written);
    report.kept.extend(regen.kept);
    Ok((root, report))
}

/// `zrpcctl proto <file>` for the crate at `root`.
pub(crate) fn regenerate(root: &Path, proto_file: &Path) -> Result<Report> {
    if !root.join("src/lib.rs").exists() {
        return Err(fail(format!(
            "{} has no src/lib.rs: run `zrpcctl proto` in a crate made by `zrpcctl new` (or pass --dir)",
            root.display()
        )));
    }
    let text = std::fs::read_to_string(proto_file)
        .map_err(|e| fail(format!("cannot read {}: {e}", proto_file.display())))?;
    let name = proto_file
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let proto = parse(&text, &name)?;
    generate(root, &proto, &name)
}

fn parse(text: &str, file: &str) -> Result<Proto> {
    proto::parse(text).map_err(|e| fail(format!("{file}: {e}")))
}

fn pb_package(proto: &Proto) -> &str {
    if proto.package.is_empty() {
        "_"
    } else {
        &proto.package
    }
}

/// One RPC with the names the generated code uses.
struct Method<'a> {
    service: &'a str,
    rpc: &'a Rpc,
    /// Logic module (file) name.
    module: String,
}

fn methods(proto: &Proto) -> Vec<Method<'_>> {
    let mut out: Vec<Method<'_>> = Vec::new();
    for s in &proto.services {
        for rpc in &s.rpcs {
            out.push(Method {
                service: &s.name,
                rpc,
                module: snake(&rpc.name),
            });
        }
    }
    // The same RPC name in two services: prefix the service.
    let clashes: Vec<String> = out
        .iter()
        .map(|m| m.module.clone())
        .filter(|m| out.iter().filter(|o| &o.module == m).count() > 1)
        .collect();
    for m in &mut out {
        if clashes.contains(&m.module) {
            m.module = format!("{}_{}", snake(m.service), m.module);
        }
    }
    out
}

/// The generated glue (`src/server.rs`, `src/logic/mod.rs`) and missing logic files.
fn generate(root: &Path, proto: &Proto, proto_name: &str) -> Result<Report> {
    let mut report = Report::default();
    let methods = methods(proto);
    write(
        &root.join("src/server.rs"),
        &server_rs(proto, proto_name, &methods),
        &mut report,
    )?;
    let mut modules = String::from(
        "//! One module per RPC: your code. Generated by zrpcctl (`zrpcctl proto` rewrites this\n\
         //! list; it never overwrites the modules themselves).\n\n",
    );
    for m in &methods {
        let _ = writeln!(modules, "pub mod {};", m.module);
    }
    write(&root.join("src/logic/mod.rs"), &modules, &mut report)?;
    for m in &methods {
        let path = root.join(format!("src/logic/{}.rs", m.module));
        if path.exists() {
            report.kept.push(path);
        } else {
            write(&path, &logic_rs(proto, m), &mut report)?;
        }
    }
    if let Ok(dir) = std::fs::read_dir(root.join("src/logic")) {
        for entry in dir.flatten() {
            let path = entry.path();
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if stem != "mod" && !methods.iter().any(|m| m.module == stem) {
                report.orphans.push(path);
            }
        }
    }
    Ok(report)
}

fn write(path: &Path, text: &str, report: &mut Report) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(path, text)
        .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
    if path.extension().is_some_and(|e| e == "rs") {
        // Best effort: the text is valid Rust either way, rustfmt only makes it read well.
        let _ = std::process::Command::new("rustfmt")
            .args(["--edition", "2024"])
            .arg(path)
            .stderr(std::process::Stdio::null())
            .status();
    }
    report.written.push(path.to_owned());
    Ok(())
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

/// The `[dependencies]` and `[build-dependencies]` lines for zrpc.
fn dependencies(source: &Source) -> Result<(String, String)> {
    match source {
        Source::Published(version) => Ok((
            format!("zrpc = {{ package = \"zrpc-rs\", version = \"{version}\" }}"),
            format!("zrpc-build = \"{version}\""),
        )),
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
            Ok((
                format!("zrpc = {{ package = \"zrpc-rs\", path = \"{r}/crates/zrpc\" }}"),
                format!("zrpc-build = {{ path = \"{r}/crates/zrpc-build\" }}"),
            ))
        }
    }
}

/// The Rust path of a proto message type, from inside the crate (`pb::...`).
fn rust_type(proto: &Proto, ty: &str) -> String {
    if let Some(wkt) = ty.strip_prefix("google.protobuf.") {
        // prost-build maps these to Rust types (its `ExternPaths` defaults).
        let mapped = match wkt {
            "Empty" => "()",
            "BoolValue" => "bool",
            "BytesValue" => "Vec<u8>",
            "DoubleValue" => "f64",
            "FloatValue" => "f32",
            "Int32Value" => "i32",
            "Int64Value" => "i64",
            "UInt32Value" => "u32",
            "UInt64Value" => "u64",
            "StringValue" => "String",
            other => return format!("zrpc::codegen::prost_types::{other}"),
        };
        return mapped.to_owned();
    }
    let local = if !proto.package.is_empty() {
        ty.strip_prefix(&format!("{}.", proto.package))
            .unwrap_or(ty)
    } else {
        ty
    };
    let parts: Vec<&str> = local.split('.').collect();
    let (last, outer) = parts.split_last().unwrap_or((&local, &[]));
    let mut path = String::from("pb::");
    for o in outer {
        path.push_str(&snake(o));
        path.push_str("::");
    }
    path.push_str(&camel(last));
    path
}

fn request_type(proto: &Proto, rpc: &Rpc) -> String {
    let ty = rust_type(proto, &rpc.request);
    if rpc.client_streaming {
        format!("Request<Streaming<{ty}>>")
    } else {
        format!("Request<{ty}>")
    }
}

fn response_type(proto: &Proto, rpc: &Rpc) -> String {
    let ty = rust_type(proto, &rpc.response);
    if rpc.server_streaming {
        format!("Result<Response<BoxStream<{ty}>>, Status>")
    } else {
        format!("Result<Response<{ty}>, Status>")
    }
}

fn server_rs(proto: &Proto, proto_name: &str, methods: &[Method<'_>]) -> String {
    let mut out = format!(
        "//! Generated by zrpcctl from proto/{proto_name}. Do not edit: `zrpcctl proto proto/{proto_name}`\n\
         //! rewrites it. Your code goes in `src/logic/` (one file per RPC) and `src/svc.rs`.\n\n\
         #![allow(unused_imports)]\n\n\
         use std::sync::Arc;\n\n\
         use zrpc::tonic::codegen::BoxStream;\n\
         use zrpc::tonic::{{Request, Response, Status, Streaming}};\n\n\
         use crate::{{logic, pb, svc::ServiceContext}};\n"
    );
    for s in &proto.services {
        let svc = camel(&s.name);
        let module = snake(&s.name);
        let _ = write!(
            out,
            "\n/// `{name}`: each RPC calls its function in `src/logic`.\n\
             #[derive(Debug, Clone)]\n\
             pub struct {svc}Handler {{\n    ctx: Arc<ServiceContext>,\n}}\n\n\
             impl {svc}Handler {{\n    \
             /// A handler sharing `ctx` with the other services.\n    \
             pub fn new(ctx: Arc<ServiceContext>) -> Self {{\n        Self {{ ctx }}\n    }}\n}}\n\n\
             #[zrpc::tonic::async_trait]\n\
             impl pb::{module}_server::{svc} for {svc}Handler {{\n",
            name = s.name
        );
        for m in methods.iter().filter(|m| m.service == s.name) {
            let rpc = m.rpc;
            let f = snake(&rpc.name);
            let req = request_type(proto, rpc);
            let resp = if rpc.server_streaming {
                let stream = format!("{}Stream", camel(&rpc.name));
                let item = rust_type(proto, &rpc.response);
                let _ = writeln!(out, "    type {stream} = BoxStream<{item}>;\n");
                format!("Result<Response<Self::{stream}>, Status>")
            } else {
                response_type(proto, rpc)
            };
            let _ = write!(
                out,
                "    async fn {f}(&self, request: {req}) -> {resp} {{\n        \
                 logic::{module_name}::{f}(&self.ctx, request).await\n    }}\n\n",
                module_name = m.module
            );
        }
        out.truncate(out.trim_end().len());
        out.push_str("\n}\n");
    }
    out.push_str(
        "\n/// Adds every service of the proto to `server`, sharing one [`ServiceContext`].\n\
         pub fn add_services(server: zrpc::Server, ctx: Arc<ServiceContext>) -> zrpc::Server {\n    server",
    );
    for s in &proto.services {
        let svc = camel(&s.name);
        let module = snake(&s.name);
        let _ = write!(
            out,
            "\n        .add_service(pb::{module}_server::{svc}Server::new({svc}Handler::new(ctx.clone())))"
        );
    }
    out.push_str("\n}\n");
    out
}

fn logic_rs(proto: &Proto, m: &Method<'_>) -> String {
    let rpc = m.rpc;
    let full = format!("{}.{}", m.service, rpc.name);
    let streams = if rpc.server_streaming {
        "use zrpc::tonic::codegen::BoxStream;\n"
    } else {
        ""
    };
    let streaming_in = if rpc.client_streaming {
        ", Streaming"
    } else {
        ""
    };
    let req = request_type(proto, rpc);
    let resp = response_type(proto, rpc);
    format!(
        "//! `{full}` ({kind}): your code. zrpcctl wrote this file once and never overwrites it.\n\n\
         {streams}use zrpc::tonic::{{Request, Response, Status{streaming_in}}};\n\n\
         {pb}use crate::svc::ServiceContext;\n\n\
         /// Handles `{full}`.\n\
         pub async fn {f}(ctx: &ServiceContext, request: {req}) -> {resp} {{\n    \
         let _ = (ctx, request);\n    \
         // TODO: implement {full}.\n    \
         Err(Status::unimplemented(\"{full} is not implemented yet\"))\n}}\n",
        kind = rpc.kind(),
        pb = if req.contains("pb::") || resp.contains("pb::") {
            "use crate::pb;\n"
        } else {
            ""
        },
        f = snake(&rpc.name),
    )
}

/// The generated test: start the server on a free port, call the first RPC through a zrpc
/// client, expect an answer (Unimplemented until the logic is written).
fn test_rs(name: &str, ident: &str, proto: &Proto) -> String {
    let (svc, rpc) = proto
        .services
        .iter()
        .find_map(|s| s.rpcs.first().map(|r| (s, r)))
        .map(|(s, r)| (s.name.as_str(), r))
        .unwrap_or(("", &EMPTY_RPC));
    let client = format!("pb::{}_client::{}Client", snake(svc), camel(svc));
    let req_ty = rust_type(proto, &rpc.request).replace("pb::", &format!("{ident}::pb::"));
    let request = if rpc.client_streaming {
        format!("zrpc::tonic::codegen::tokio_stream::iter(vec![<{req_ty}>::default()])")
    } else {
        format!("<{req_ty}>::default()")
    };
    templates::test_rs(
        name,
        ident,
        &client,
        &snake(&rpc.name),
        &request,
        &format!("{svc}.{}", rpc.name),
    )
}

static EMPTY_RPC: Rpc = Rpc {
    name: String::new(),
    request: String::new(),
    response: String::new(),
    client_streaming: false,
    server_streaming: false,
};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn maps_proto_types_to_rust_paths() {
        let p = proto::parse("package calc.v1;").unwrap();
        assert_eq!(rust_type(&p, "AddRequest"), "pb::AddRequest");
        assert_eq!(rust_type(&p, "calc.v1.AddRequest"), "pb::AddRequest");
        assert_eq!(rust_type(&p, "Outer.Inner"), "pb::outer::Inner");
        assert_eq!(rust_type(&p, "google.protobuf.Empty"), "()");
        assert_eq!(
            rust_type(&p, "google.protobuf.Timestamp"),
            "zrpc::codegen::prost_types::Timestamp"
        );
    }

    #[test]
    fn rejects_bad_names_and_existing_dirs() {
        let dir = std::env::temp_dir();
        let source = Source::Published("0.1");
        let e = new(&dir, "9lives", None, &source).unwrap_err();
        assert!(e.to_string().contains("not a valid crate name"), "{e}");
        let e = new(
            dir.parent().unwrap(),
            dir.file_name().unwrap().to_str().unwrap(),
            None,
            &source,
        )
        .unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
    }

    #[test]
    fn regeneration_keeps_user_logic_and_adds_new_rpcs() {
        let tmp = std::env::temp_dir().join(format!("zrpcctl-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let (root, _) = new(&tmp, "calc", None, &Source::Published("0.1")).unwrap();
        let ping = root.join("src/logic/ping.rs");
        std::fs::write(&ping, "// mine\n").unwrap();
        let proto = root.join("proto/calc.proto");
        let text = std::fs::read_to_string(&proto).unwrap().replace(
            "rpc Ping(Request) returns (Response);",
            "rpc Ping(Request) returns (Response);\n  rpc Watch(Request) returns (stream Response);",
        );
        std::fs::write(&proto, text).unwrap();
        let report = regenerate(&root, &proto).unwrap();
        assert_eq!(std::fs::read_to_string(&ping).unwrap(), "// mine\n");
        assert!(report.kept.contains(&ping));
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
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
