//! Which protobuf compiler reads the `.proto` files: the system's `protoc` when there is one
//! (`PROTOC`, else `protoc` on `PATH`, as prost-build looks for it), else protox, a protobuf
//! compiler written in Rust (the default `protox` feature), so that a build needs only cargo.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use prost_types::FileDescriptorSet;

use crate::Error;

/// The compiler [`load`] uses, for messages and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Compiler {
    /// A `protoc` executable: `PROTOC`, or the first `protoc` on `PATH`.
    Protoc(PathBuf),
    /// protox, built into zrpc-build.
    Protox,
    /// Neither: no protoc and a build without the `protox` feature.
    None,
}

impl Compiler {
    /// The compiler for this process's environment.
    pub(crate) fn from_env() -> Self {
        Self::choose(std::env::var_os("PROTOC"), std::env::var_os("PATH"))
    }

    /// `PROTOC` (when set and not empty) wins, then a `protoc` file on `path`, then protox.
    pub(crate) fn choose(protoc: Option<OsString>, path: Option<OsString>) -> Self {
        if let Some(p) = protoc.filter(|p| !p.is_empty()) {
            return Compiler::Protoc(PathBuf::from(p));
        }
        let name = if cfg!(windows) {
            "protoc.exe"
        } else {
            "protoc"
        };
        let found = path
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file());
        match found {
            Some(p) => Compiler::Protoc(p),
            None if cfg!(feature = "protox") => Compiler::Protox,
            None => Compiler::None,
        }
    }
}

/// Compiles `protos` (searched in `includes`) into one descriptor set, with every import and
/// the source info (comments for the generated docs), as `protoc -o --include_imports
/// --include_source_info` writes it.
pub(crate) fn load(
    compiler: &Compiler,
    protos: &[PathBuf],
    includes: &[PathBuf],
) -> Result<FileDescriptorSet, Error> {
    match compiler {
        Compiler::Protoc(protoc) => {
            let mut config = prost_build::Config::new();
            config.protoc_executable(protoc);
            config
                .load_fds(protos, includes)
                .map_err(|e| Error::Compile(with_protoc(e, protoc)))
        }
        Compiler::Protox => protox(protos, includes),
        Compiler::None => Err(Error::NoProtoc),
    }
}

/// The protoc error with the executable's path, when prost-build's message lacks it.
fn with_protoc(e: std::io::Error, protoc: &Path) -> std::io::Error {
    let text = e.to_string();
    if text.contains(&*protoc.to_string_lossy()) {
        return e;
    }
    std::io::Error::new(e.kind(), format!("{text} (protoc: {})", protoc.display()))
}

#[cfg(feature = "protox")]
fn protox(protos: &[PathBuf], includes: &[PathBuf]) -> Result<FileDescriptorSet, Error> {
    let mut compiler = protox::Compiler::new(includes).map_err(protox_error)?;
    compiler.include_imports(true).include_source_info(true);
    compiler.open_files(protos).map_err(protox_error)?;
    Ok(compiler.file_descriptor_set())
}

#[cfg(not(feature = "protox"))]
fn protox(_: &[PathBuf], _: &[PathBuf]) -> Result<FileDescriptorSet, Error> {
    Err(Error::NoProtoc)
}

/// protox's error as protoc words it: `file:line:column: message` (its `Display` has only the
/// message; the place is in its miette label).
#[cfg(feature = "protox")]
fn protox_error(e: protox::Error) -> Error {
    use miette::Diagnostic;
    let line_col = e
        .labels()
        .and_then(|mut labels| labels.next())
        .and_then(|label| {
            let contents = e.source_code()?.read_span(label.inner(), 0, 0).ok()?;
            Some(format!(
                "{}:{}: ",
                contents.line() + 1,
                contents.column() + 1
            ))
        })
        .unwrap_or_default();
    let file = e.file().map(|f| format!("{f}:")).unwrap_or_default();
    Error::Compile(std::io::Error::other(format!(
        "protox (no protoc installed): {file}{line_col}{e}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// protoc and protox read the same protos into the same descriptor set (comments and
    /// source positions included), so a build's generated code does not depend on which one
    /// the machine has: the greeter and the newcomer's shop proto (an import of another
    /// package, well-known types, map, oneof, optional, nested messages, all four RPC kinds).
    /// Needs a protoc: `ZRPC_TEST_PROTOC` (scripts/test.sh sets it before it hides protoc
    /// from the builds), else the one on PATH; skips loudly without one.
    #[cfg(feature = "protox")]
    #[test]
    fn protoc_and_protox_read_protos_alike() {
        let protoc = std::env::var_os("ZRPC_TEST_PROTOC")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .or_else(|| match Compiler::choose(None, std::env::var_os("PATH")) {
                Compiler::Protoc(p) => Some(p),
                _ => None,
            });
        let Some(protoc) = protoc else {
            eprintln!("SKIPPED protoc_and_protox_read_protos_alike: no protoc installed");
            return;
        };
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let newcomer = root.join("crates/zrpcctl/tests/fixtures/newcomer/protos");
        for (protos, includes, files) in [
            (
                vec![root.join("proto/greeter.proto")],
                vec![root.join("proto")],
                1,
            ),
            // shop.proto, money.proto, empty.proto and timestamp.proto
            (
                vec![newcomer.join("shop/shop.proto")],
                vec![newcomer.clone()],
                4,
            ),
        ] {
            let by_protoc = load(&Compiler::Protoc(protoc.clone()), &protos, &includes).unwrap();
            let by_protox = load(&Compiler::Protox, &protos, &includes).unwrap();
            let names: Vec<&str> = by_protoc.file.iter().map(|f| f.name()).collect();
            assert_eq!(names.len(), files, "imports included: {names:?}");
            assert_eq!(sorted(by_protoc), sorted(by_protox), "{protos:?}");
        }
    }

    /// `set` with each file's source locations in one order (protoc lists them as declared,
    /// protox by path; the code generator looks them up by path), and none for the well-known
    /// types (protox carries them without; prost generates no code for them).
    #[cfg(feature = "protox")]
    fn sorted(mut set: FileDescriptorSet) -> FileDescriptorSet {
        for file in &mut set.file {
            if file.name().starts_with("google/protobuf/") {
                file.source_code_info = None;
            }
            if let Some(info) = &mut file.source_code_info {
                info.location
                    .sort_by(|a, b| (&a.path, &a.span).cmp(&(&b.path, &b.span)));
            }
        }
        set
    }

    #[test]
    fn protoc_env_wins_then_path_then_protox() {
        let dir = std::env::temp_dir().join(format!("zrpc-build-which-{}", std::process::id()));
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let protoc = bin.join(if cfg!(windows) {
            "protoc.exe"
        } else {
            "protoc"
        });
        std::fs::write(&protoc, b"").unwrap();
        let path = std::env::join_paths([dir.join("empty"), bin.clone()]).unwrap();

        assert_eq!(
            Compiler::choose(Some("/opt/protoc".into()), Some(path.clone())),
            Compiler::Protoc("/opt/protoc".into())
        );
        // an empty PROTOC is unset, as in a shell's `PROTOC= cargo build`
        assert_eq!(
            Compiler::choose(Some("".into()), Some(path)),
            Compiler::Protoc(protoc)
        );
        let without = Compiler::choose(None, Some(dir.join("empty").into_os_string()));
        let expected = if cfg!(feature = "protox") {
            Compiler::Protox
        } else {
            Compiler::None
        };
        assert_eq!(without, expected);
        assert_eq!(Compiler::choose(None, None), expected);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
