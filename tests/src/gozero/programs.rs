//! Locating and building the Go programs of `interop/gozero/`, and skipping without Go.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

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

/// The repository root (the parent of the `tests` crate).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
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
    let p = PROGRAMS.get_or_init(build_programs).as_ref();
    if p.is_none() {
        eprintln!("SKIPPED: go not found, go-zero interop tests not run");
    }
    p
}

fn go_available() -> bool {
    Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
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
    build_go(
        &dir,
        &[
            &programs.server,
            &programs.client,
            &programs.ring,
            &programs.edge,
        ],
        "the go-zero interop tests",
    )?;
    Some(programs)
}

/// Builds the Go programs `bins` of `dir` with `bash <dir>/build.sh` unless every one is newer
/// than every source file of `dir` (`bin/` and `.bin/` excluded). Without Go: built binaries are
/// used as they are, else None, with a loud note naming `what` (the tests it skips); with
/// `CI=true` a missing Go is a panic.
///
/// # Panics
/// When the build fails or does not produce `bins`, or Go is missing and `CI=true`.
pub(crate) fn build_go(dir: &Path, bins: &[&Path], what: &str) -> Option<()> {
    let built = bins.iter().all(|b| b.is_file());
    let script = dir.join("build.sh");
    if !go_available() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        if built && !ci {
            eprintln!(
                "note: go not found; using the Go programs already built in {}",
                dir.display()
            );
            return Some(());
        }
        if ci {
            panic!(
                "go not found and CI=true: {what} must run in CI \
                 (install Go >= 1.24 and run `bash {}`)",
                script.display()
            );
        }
        eprintln!(
            "\n==================================================================\n\
             SKIPPED: go not found, {what} not run\n\
             (install Go and run `bash {}` to run them)\n\
             ==================================================================\n",
            script.display()
        );
        return None;
    }
    if built && fresh(dir, bins) {
        return Some(());
    }
    let started = Instant::now();
    eprintln!(
        "building the Go programs of {what} (bash {})...",
        script.display()
    );
    let out = Command::new("bash")
        .arg(&script)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("run bash {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed ({}):\n{}\n{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "built the Go programs of {what} in {:.1?}: {}",
        started.elapsed(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    for b in bins {
        assert!(
            b.is_file(),
            "{} did not produce {}",
            script.display(),
            b.display()
        );
    }
    Some(())
}

/// True when every one of `bins` is newer than every source file (`bin/` and `.bin/` excluded).
fn fresh(dir: &Path, bins: &[&Path]) -> bool {
    fn mtime(p: &Path) -> Option<SystemTime> {
        std::fs::metadata(p).and_then(|m| m.modified()).ok()
    }
    fn newest(dir: &Path, skip: &[&str]) -> Option<SystemTime> {
        let mut best = None;
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if skip.iter().any(|s| name == *s) {
                continue;
            }
            let t = if path.is_dir() {
                newest(&path, &[])
            } else {
                mtime(&path)
            };
            best = best.max(t);
        }
        best
    }
    let Some(oldest) = bins.iter().map(|b| mtime(b)).collect::<Option<Vec<_>>>() else {
        return false;
    };
    match (oldest.into_iter().min(), newest(dir, &["bin", ".bin"])) {
        (Some(bin), Some(src)) => bin >= src,
        _ => false,
    }
}
