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
//! `protoc` must be on `PATH` (or named by the `PROTOC` environment variable), as for
//! tonic-prost-build.
//!
//! [zrpc]: https://github.com/zrpc-rs/zrpc
//! [`zrpc::Server`]: https://github.com/zrpc-rs/zrpc/blob/main/crates/zrpc-server/src/server.rs

mod rewrite;

use std::fmt;
use std::path::{Path, PathBuf};

/// Compiles `protos` (searched in `includes`) with the default settings: client and server
/// code, paths under `::zrpc`. See [`configure`] to change them.
///
/// # Errors
///
/// [`Error`] naming the step that failed: `OUT_DIR` unset (not run from `build.rs`), `protoc`
/// missing or rejecting a file (its message names the file and line), or an I/O error on a
/// generated file.
pub fn compile_protos(
    protos: &[impl AsRef<Path>],
    includes: &[impl AsRef<Path>],
) -> Result<(), Error> {
    configure().compile_protos(protos, includes)
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

    /// Compiles `protos`, searched in `includes`, and prints the `cargo:rerun-if-changed`
    /// lines for them.
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

        let mut config = prost_build::Config::new();
        config.prost_path(format!("{zrpc}::codegen::prost"));
        config.prost_types_path(format!("{zrpc}::prost_types"));
        tonic_prost_build::configure()
            .build_client(self.client)
            .build_server(self.server)
            .build_transport(false)
            .codec_path(format!("{zrpc}::codegen::tonic_prost::ProstCodec"))
            .out_dir(&out_dir)
            .file_descriptor_set_path(out_dir.join(&descriptor_name))
            .include_file(&include_name)
            .compile_with_config(config, &paths(protos), &paths(includes))
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
    /// protoc or tonic-prost-build failed; the message names the file and line.
    Compile(std::io::Error),
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
            Error::Compile(e) => write!(
                f,
                "zrpc-build: compiling the protos failed: {e} (is protoc installed, or PROTOC set?)"
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
