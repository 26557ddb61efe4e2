//! Writing the scaffold's files: Rust through rustfmt, so the crate is `cargo fmt` clean as
//! written, and nothing rewritten that did not change (its mtime would rebuild the crate).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{Result, fail};

/// What a scaffolding step wrote.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) written: Vec<PathBuf>,
    pub(crate) unchanged: Vec<PathBuf>,
    pub(crate) kept: Vec<PathBuf>,
    /// Logic files no RPC calls any more, with the RPC they were written for.
    pub(crate) orphans: Vec<(PathBuf, Option<String>)>,
}

impl Report {
    pub(crate) fn print(&self, root: &Path) {
        let rel = |p: &PathBuf| p.strip_prefix(root).unwrap_or(p).display().to_string();
        for p in &self.written {
            println!("  wrote  {}", rel(p));
        }
        for p in &self.unchanged {
            println!("  same   {}", rel(p));
        }
        for p in &self.kept {
            println!("  kept   {} (your code)", rel(p));
        }
        for (p, rpc) in &self.orphans {
            match rpc {
                Some(rpc) => println!(
                    "  note   {} ({rpc}): {rpc} is no longer in the proto, so nothing calls this file; it is not compiled any more (not deleted). If the RPC was renamed or moved, move your code into its new module.",
                    rel(p)
                ),
                None => println!(
                    "  note   {}: not an RPC's module, so not listed in src/logic/mod.rs (which zrpcctl rewrites) and not compiled; keep shared code outside src/logic/",
                    rel(p)
                ),
            }
        }
    }
}

/// Writes `text` to `path` (Rust files formatted first), unless the file already holds it.
pub(crate) fn write(path: &Path, text: &str, report: &mut Report) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
    let text = if path.extension().is_some_and(|e| e == "rs") {
        rustfmt(text, dir)
    } else {
        text.to_owned()
    };
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        report.unchanged.push(path.to_owned());
        return Ok(());
    }
    std::fs::write(path, &text)
        .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
    report.written.push(path.to_owned());
    Ok(())
}

/// `text` as `cargo fmt` would leave it, best effort: without rustfmt the text is still valid
/// Rust, laid out by hand close to rustfmt's style. Formatting from stdin, rustfmt does not
/// follow `mod` lines into other files (formatting `src/logic/mod.rs` must not reformat the
/// user's logic), and run from the file's directory it finds the same `rustfmt.toml` as
/// `cargo fmt`.
fn rustfmt(text: &str, dir: &Path) -> String {
    let child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout"])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return text.to_owned();
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(text.as_bytes());
    }
    match child.wait_with_output() {
        Ok(out) if out.status.success() && !out.stdout.is_empty() => {
            String::from_utf8(out.stdout).unwrap_or_else(|_| text.to_owned())
        }
        _ => text.to_owned(),
    }
}
