//! Helpers shared by zrpcctl's end-to-end tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the zrpcctl binary under test with `args` in `dir`.
pub(crate) fn zrpcctl(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zrpcctl"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the zrpcctl binary runs")
}

/// A command's status and output, for assertion messages.
pub(crate) fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The root of this checkout.
#[allow(dead_code)] // not every test binary needs it
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/zrpcctl is two levels below the root")
        .to_owned()
}
