//! Locating and building the Go programs of `interop/gozero/`, and skipping without Go.

use std::path::PathBuf;
use std::sync::OnceLock;

pub use crate::gobuild::repo_root;

/// The built Go programs.
#[derive(Debug, Clone)]
pub struct Programs {
    /// `interop/gozero/bin/gz-server`.
    pub server: PathBuf,
    /// `interop/gozero/bin/gz-client`.
    pub client: PathBuf,
    /// `interop/gozero/bin/gz-ring`: go-zero's `consistent_hash` ring, no network.
    pub ring: PathBuf,
    /// `interop/gozero/bin/grpc-edge`: a plain grpc-go server answering at gRPC's edges.
    pub edge: PathBuf,
}

/// `interop/gozero/` in the repository.
pub fn gozero_dir() -> PathBuf {
    repo_root().join("interop").join("gozero")
}

/// Returns `Some(programs)`, or from the enclosing test when the go-zero programs are not
/// available (see [`programs`]).
#[macro_export]
macro_rules! gozero_or_skip {
    () => {
        match $crate::gozero::programs() {
            Some(p) => p,
            None => return,
        }
    };
}

/// The Go programs, built once per test process (see the module docs). None when Go is missing
/// (the skip is printed to stderr once per test).
///
/// # Panics
/// When the build fails, or Go is missing and `CI=true`.
pub fn programs() -> Option<&'static Programs> {
    static PROGRAMS: OnceLock<Option<Programs>> = OnceLock::new();
    crate::gobuild::once(&PROGRAMS, "go-zero", build_programs)
}

fn build_programs() -> Option<Programs> {
    let dir = gozero_dir();
    let bin = dir.join("bin");
    let programs = Programs {
        server: bin.join("gz-server"),
        client: bin.join("gz-client"),
        ring: bin.join("gz-ring"),
        edge: bin.join("grpc-edge"),
    };
    let bins = [
        programs.server.clone(),
        programs.client.clone(),
        programs.ring.clone(),
        programs.edge.clone(),
    ];
    crate::gobuild::build("go-zero", &dir, &bins).then_some(programs)
}
