//! # zrpc-build
//!
//! Compiles `.proto` files for [zrpc] in `build.rs`, with one call:
//!
//! ```no_run
//! // build.rs
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     zrpc_build::compile_protos(&["proto/calculator.proto"], &["proto"])?;
//!     Ok(())
//! }
//! ```
//!
//! and in the crate, `pub mod pb { zrpc::include_proto!("calculator"); }`.
//!
//! What it does on top of `tonic-prost-build` (which it runs, at the version zrpc uses):
//!
//! - the generated code names only `::zrpc::...` paths (`::zrpc::tonic`,
//!   `::zrpc::codegen::prost`, `::zrpc::codegen::tonic_prost::ProstCodec`), so the
//!   application's `[dependencies]` need only `zrpc`, never a matching `tonic`, `tonic-prost`
//!   and `prost` trio;
//! - it writes the protos' file descriptor set to `OUT_DIR` and each generated file registers
//!   it with zrpc's server at link time, so [`zrpc::Server`] knows which methods stream (a
//!   streaming call is never cut at `Timeout` nor shed) and serves reflection, with no
//!   `reflection_descriptor` or `streaming_method` call.
//!
//! The protos are read by the system's `protoc` when one is installed (`PROTOC`, else `protoc`
//! on `PATH`, as for tonic-prost-build), else by [protox], a protobuf compiler written in Rust
//! that zrpc-build carries (the default `protox` feature): a build needs nothing but cargo.
//! `default-features = false` drops protox (10 crates fewer) and requires protoc.
//!
//! Comments in the protos become doc comments as they are, as prost-build's defaults write them.
//! A library whose protos' comments hold indented or fenced code (googleapis' do) would have
//! rustdoc run those blocks as Rust doc tests; the `cleanup-markdown` feature (tonic-prost-build's
//! default, off here: 3 crates a service without such comments never needs) marks them as text.
//!
//! [protox]: https://docs.rs/protox
//!
//! [zrpc]: https://github.com/zrpc-rs/zrpc
//! [`zrpc::Server`]: https://github.com/zrpc-rs/zrpc/blob/main/crates/zrpc-server/src/server.rs

mod compiler;
mod rewrite;

use std::fmt;
use std::path::{Path, PathBuf};

use prost::Message;
pub use prost_types::FileDescriptorSet;

use compiler::Compiler;

/// Compiles `protos` (searched in `includes`) with the default settings: client and server
/// code, paths under `::zrpc`. See [`configure`] to change them.
///
/// # Errors
///
/// [`Error`] naming the step that failed: `OUT_DIR` unset (not run from `build.rs`), the
/// compiler rejecting a file (its message names the file and line), or an I/O error on a
/// generated file.
pub fn compile_protos(
    protos: &[impl AsRef<Path>],
    includes: &[impl AsRef<Path>],
) -> Result<(), Error> {
    configure().compile_protos(protos, includes)
}

/// Reads `protos` (searched in `includes`) into one descriptor set, with their imports and
/// comments, as `protoc --include_imports --include_source_info -o` writes it, with the same
/// compiler as [`compile_protos`] (the system's protoc, else protox). For a `build.rs` that runs
/// tonic-prost-build itself: `tonic_prost_build::configure().compile_fds(set)`.
///
/// # Errors
/// [`Error::Compile`] naming the file and line the compiler rejected.
pub fn file_descriptor_set(
    protos: &[impl AsRef<Path>],
    includes: &[impl AsRef<Path>],
) -> Result<FileDescriptorSet, Error> {
    compiler::load(&Compiler::from_env(), &paths(protos), &paths(includes))
}

/// A [`Builder`] with the defaults: client and server code, generated paths under `::zrpc`.
pub fn configure() -> Builder {
    Builder {
        client: true,
        server: true,
        zrpc_path: "::zrpc".to_owned(),
        out_dir: None,
    }
}

/// Settings for [`Builder::compile_protos`]; start from [`configure`].
#[derive(Debug, Clone)]
pub struct Builder {
    client: bool,
    server: bool,
    zrpc_path: String,
    out_dir: Option<PathBuf>,
}

impl Builder {
    /// Generate client code (`<service>_client` modules). Default: true.
    #[must_use]
    pub fn build_client(mut self, enable: bool) -> Self {
        self.client = enable;
        self
    }

    /// Generate server code (`<service>_server` modules). Default: true.
    #[must_use]
    pub fn build_server(mut self, enable: bool) -> Self {
        self.server = enable;
        self
    }

    /// The path the generated code uses for the zrpc facade. Default: `::zrpc` (the library
    /// name of the `zrpc-rs` package); change it when you rename the dependency.
    #[must_use]
    pub fn zrpc_path(mut self, path: impl Into<String>) -> Self {
        self.zrpc_path = path.into();
        self
    }

    /// Where to write the generated files. Default: `OUT_DIR` (what
    /// `zrpc::include_proto!` reads).
    #[must_use]
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Compiles `protos`, searched in `includes` (the build script reruns when a file of the
    /// crate changes, cargo's default).
    ///
    /// # Errors
    ///
    /// As [`compile_protos`].
    pub fn compile_protos(
        self,
        protos: &[impl AsRef<Path>],
        includes: &[impl AsRef<Path>],
    ) -> Result<(), Error> {
        let out_dir = match self.out_dir {
            Some(dir) => dir,
            None => std::env::var_os("OUT_DIR")
                .map(PathBuf::from)
                .ok_or(Error::NoOutDir)?,
        };
        let first = protos.first().ok_or(Error::NoProtos)?;
        let stem = first
            .as_ref()
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "protos".to_owned());
        let descriptor_name = format!("{stem}.zrpc-descriptor.bin");
        let include_name = format!("{stem}.zrpc-include.rs");
        let zrpc = self.zrpc_path.trim_end_matches("::");

        let set = file_descriptor_set(protos, includes)?;
        let descriptor_path = out_dir.join(&descriptor_name);
        std::fs::write(&descriptor_path, set.encode_to_vec()).map_err(|source| Error::Io {
            path: descriptor_path,
            source,
        })?;
        let mut config = prost_build::Config::new();
        config.prost_path(format!("{zrpc}::codegen::prost"));
        config.prost_types_path(format!("{zrpc}::prost_types"));
        tonic_prost_build::configure()
            .build_client(self.client)
            .build_server(self.server)
            .build_transport(false)
            .codec_path(format!("{zrpc}::codegen::tonic_prost::ProstCodec"))
            .out_dir(&out_dir)
            .include_file(&include_name)
            .compile_fds_with_config(set, config)
            .map_err(Error::Compile)?;

        // The include file lists every generated file (`include!("pkg.rs");`).
        let include_path = out_dir.join(&include_name);
        let listing = read(&include_path)?;
        for file in rewrite::included_files(&listing) {
            let path = out_dir.join(file);
            let code = read(&path)?;
            let code = rewrite::finish(&code, zrpc, &descriptor_name);
            std::fs::write(&path, code).map_err(|source| Error::Io { path, source })?;
        }
        Ok(())
    }
}

fn paths(list: &[impl AsRef<Path>]) -> Vec<PathBuf> {
    list.iter().map(|p| p.as_ref().to_owned()).collect()
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })
}

/// Why the protos could not be compiled.
#[non_exhaustive]
pub enum Error {
    /// `OUT_DIR` is not set: call zrpc-build from `build.rs`, or set [`Builder::out_dir`].
    NoOutDir,
    /// The list of protos is empty.
    NoProtos,
    /// The compiler (protoc or protox) or tonic-prost-build failed; the message names the file
    /// and line.
    Compile(std::io::Error),
    /// No `protoc` is installed (`PROTOC` unset, none on `PATH`) and this zrpc-build was built
    /// without its `protox` feature.
    NoProtoc,
    /// A generated file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoOutDir => f.write_str(
                "zrpc-build: OUT_DIR is not set; call it from build.rs or set Builder::out_dir",
            ),
            Error::NoProtos => f.write_str("zrpc-build: no .proto file given"),
            Error::Compile(e) => write!(f, "zrpc-build: compiling the protos failed: {e}"),
            Error::NoProtoc => f.write_str(
                "zrpc-build: no protoc found (PROTOC is unset and no protoc is on PATH), and \
                 zrpc-build was built without its `protox` feature: install protoc \
                 (`apt install protobuf-compiler`), set PROTOC, or enable the feature",
            ),
            Error::Io { path, source } => {
                write!(f, "zrpc-build: {}: {source}", path.display())
            }
        }
    }
}

/// Debug prints the message too, so `build.rs` returning the error reads well.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Compile(e) | Error::Io { source: e, .. } => Some(e),
            _ => None,
        }
    }
}
