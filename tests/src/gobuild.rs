//! Building the Go programs of an `interop/<dir>/` (its `build.sh`) once per test process, and
//! skipping without Go.
//!
//! Binaries newer than every source file of the directory (`bin/` and `.bin/` excluded) are
//! reused. Without `go` on `PATH`, already built binaries are used (with a note); with none, the
//! caller's tests print `SKIPPED: go not found, the tests of the <what> programs not run` and return, unless
//! `CI=true`, where a missing Go is a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

/// The repository root (the parent of the `tests` crate).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The programs `init` finds or builds, once per process in `cell`. None when Go is missing
/// (`init` says so); the skip is then printed for each test that asks, naming `what`.
pub fn once<P>(
    cell: &'static OnceLock<Option<P>>,
    what: &str,
    init: impl FnOnce() -> Option<P>,
) -> Option<&'static P> {
    let p = cell.get_or_init(init).as_ref();
    if p.is_none() {
        eprintln!("SKIPPED: go not found, the tests of the {what} programs not run");
    }
    p
}

/// Makes `bins` (paths under `dir`) with `bash dir/build.sh` unless they are fresh. `what`
/// names the programs in messages (`go-zero`, `grpc-go`). False: Go is missing, skip.
///
/// # Panics
/// When the build fails or leaves a binary out, or Go is missing and `CI=true`.
pub fn build(what: &str, dir: &Path, bins: &[PathBuf]) -> bool {
    let built = bins.iter().all(|b| b.is_file());
    if !go_available() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        if built && !ci {
            eprintln!(
                "note: go not found; using the {what} programs already built in {}",
                dir.join("bin").display()
            );
            return true;
        }
        if ci {
            panic!(
                "go not found and CI=true: the tests of the {what} programs must run in CI \
                 (install Go >= 1.24 and run `bash {}/build.sh`)",
                dir.display()
            );
        }
        eprintln!(
            "\n==================================================================\n\
             SKIPPED: go not found, the tests of the {what} programs not run\n\
             (install Go and run `bash {}/build.sh` to run them)\n\
             ==================================================================\n",
            dir.display()
        );
        return false;
    }
    if built && fresh(dir, bins) {
        return true;
    }
    let started = Instant::now();
    eprintln!(
        "building the {what} programs (bash {}/build.sh)...",
        dir.display()
    );
    let out = Command::new("bash")
        .arg(dir.join("build.sh"))
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("run bash {}/build.sh: {e}", dir.display()));
    assert!(
        out.status.success(),
        "{}/build.sh failed ({}):\n{}\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "built the {what} programs in {:.1?}: {}",
        started.elapsed(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    for b in bins {
        assert!(b.is_file(), "build.sh did not produce {}", b.display());
    }
    true
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

/// True when every binary is newer than every source file (`bin/` and `.bin/` excluded).
fn fresh(dir: &Path, bins: &[PathBuf]) -> bool {
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
    let Some(oldest_bin) = bins.iter().map(|b| mtime(b)).min().flatten() else {
        return false;
    };
    match newest(dir, &["bin", ".bin"]) {
        Some(src) => oldest_bin >= src,
        None => false,
    }
}
