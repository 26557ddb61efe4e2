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
    };
    let built = programs.server.is_file() && programs.client.is_file() && programs.ring.is_file();
    if !go_available() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        if built && !ci {
            eprintln!(
                "note: go not found; using the go-zero programs already built in {}",
                bin.display()
            );
            return Some(programs);
        }
        if ci {
            panic!(
                "go not found and CI=true: the go-zero interop tests must run in CI \
                 (install Go >= 1.24 and run `bash interop/gozero/build.sh`)"
            );
        }
        eprintln!(
            "\n==================================================================\n\
             SKIPPED: go not found, go-zero interop tests not run\n\
             (install Go and run `bash interop/gozero/build.sh` to run them)\n\
             ==================================================================\n"
        );
        return None;
    }
    if built && fresh(&dir, &programs) {
        return Some(programs);
    }
    let started = Instant::now();
    eprintln!("building the go-zero programs (bash interop/gozero/build.sh)...");
    let out = Command::new("bash")
        .arg(dir.join("build.sh"))
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("run bash {}/build.sh: {e}", dir.display()));
    assert!(
        out.status.success(),
        "interop/gozero/build.sh failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "built the go-zero programs in {:.1?}: {}",
        started.elapsed(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    assert!(
        programs.server.is_file() && programs.client.is_file() && programs.ring.is_file(),
        "build.sh did not produce {}, {} and {}",
        programs.server.display(),
        programs.client.display(),
        programs.ring.display()
    );
    Some(programs)
}

/// True when both binaries are newer than every source file (`bin/` and `.bin/` excluded).
fn fresh(dir: &Path, programs: &Programs) -> bool {
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
    let (Some(s), Some(c), Some(r)) = (
        mtime(&programs.server),
        mtime(&programs.client),
        mtime(&programs.ring),
    ) else {
        return false;
    };
    match newest(dir, &["bin", ".bin"]) {
        Some(src) => s.min(c).min(r) >= src,
        None => false,
    }
}
