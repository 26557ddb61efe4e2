//! The Rust code checked in under `src/rpc/pb/` is exactly what etcd-client 0.21.1's build script
//! generates from the protos kept in `proto/` (etcd v3.7.2's, as etcd-client 0.21.1 bundles
//! them): this test runs the same generator (tonic-prost-build, client code only) on the same
//! protos, compiled by protox instead of protoc, into a temporary directory, and fails on any
//! difference, naming the file and the first line that differs.
//!
//! After a deliberate change (a new etcd-client or tonic-prost-build version), regenerate the
//! checked-in files with `ZRPC_ETCD_REGENERATE=1 cargo test -p zrpc-etcd-client --test
//! generated_code`, then review the diff.

use std::path::{Path, PathBuf};

/// etcd-client's build script compiles these (its `build.rs`), with `proto/` as include path.
const PROTOS: &[&str] = &[
    "proto/etcd/api/authpb/auth.proto",
    "proto/etcd/api/etcdserverpb/rpc.proto",
    "proto/etcd/api/mvccpb/kv.proto",
];

/// The generated files the crate includes (`src/rpc/pb/mod.rs`), one per proto package. The
/// generator also writes the imported packages (`google.api`, ...), which etcd-client never
/// included.
const PACKAGES: &[&str] = &["authpb", "etcdserverpb", "mvccpb"];

#[test]
fn checked_in_code_is_what_the_protos_generate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = scratch_dir();

    let mut compiler = protox::Compiler::new([root.join("proto")]).expect("include path proto/");
    // As prost-build runs protoc: imports included, comments kept (they become doc comments).
    compiler.include_imports(true).include_source_info(true);
    compiler
        .open_files(PROTOS.iter().map(|p| root.join(p)))
        .unwrap_or_else(|e| panic!("protox: {e:?}"));
    tonic_prost_build::configure()
        .build_server(false)
        .emit_rerun_if_changed(false)
        .out_dir(&out)
        .compile_fds(compiler.file_descriptor_set())
        .expect("tonic-prost-build");

    let regenerate = std::env::var_os("ZRPC_ETCD_REGENERATE").is_some();
    let mut differences = Vec::new();
    for package in PACKAGES {
        let generated_path = out.join(format!("{package}.rs"));
        let generated = std::fs::read_to_string(&generated_path)
            .unwrap_or_else(|e| panic!("{}: {e}", generated_path.display()));
        let checked_in_path = root.join("src/rpc/pb").join(format!("{package}.rs"));
        let checked_in = std::fs::read_to_string(&checked_in_path).unwrap_or_default();
        if generated == checked_in {
            continue;
        }
        if regenerate {
            std::fs::write(&checked_in_path, &generated)
                .unwrap_or_else(|e| panic!("{}: {e}", checked_in_path.display()));
            eprintln!("rewrote {}", checked_in_path.display());
        } else {
            differences.push(first_difference(&checked_in_path, &checked_in, &generated));
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(
        differences.is_empty(),
        "the checked-in generated code differs from what proto/ generates:\n{}\n\
         (if the change is deliberate: ZRPC_ETCD_REGENERATE=1 cargo test -p zrpc-etcd-client \
         --test generated_code, then review the diff)",
        differences.join("\n")
    );
}

/// `file:line: checked in: ... / generated: ...` for the first line that differs.
fn first_difference(path: &Path, checked_in: &str, generated: &str) -> String {
    let mut old = checked_in.lines();
    let mut new = generated.lines();
    let mut line = 1;
    loop {
        match (old.next(), new.next()) {
            (Some(a), Some(b)) if a == b => line += 1,
            (a, b) => {
                return format!(
                    "{}:{line}:\n  checked in: {}\n  generated:  {}",
                    path.display(),
                    a.unwrap_or("<end of file>"),
                    b.unwrap_or("<end of file>"),
                );
            }
        }
    }
}

/// A fresh directory under the system's temp dir, unique to this process.
fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zrpc-etcd-pb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
