//! `load --watch <file>`: what the `fleet` run reads from a client while it runs. One line per
//! fact, written at once (the harness ends the generator with SIGKILL and reads the file):
//!
//! ```text
//! view <unix_ms> <addr,addr,...>    the endpoint set the client's etcd resolver published
//! fail <unix_ms> <code> <message>   a failed call
//! count <unix_ms> <calls> <failed>  calls completed so far, every second
//! ```
//!
//! The Go generator (`gzbench load -watch`) writes the same lines.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::scenarios::unix_ms;
use crate::stats::code_name;

struct WatchLog {
    file: Mutex<std::fs::File>,
    calls: AtomicU64,
    failed: AtomicU64,
}

static WATCH: OnceLock<WatchLog> = OnceLock::new();

impl WatchLog {
    fn line(&self, s: &str) {
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let _ = f.write_all(s.as_bytes());
    }
}

/// Opens the log and starts its per-second `count` lines (inside a tokio runtime).
pub(crate) fn open(path: &Path) -> Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    let log = WATCH.get_or_init(|| WatchLog {
        file: Mutex::new(file),
        calls: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    });
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            log.line(&format!(
                "count {:.3} {} {}\n",
                unix_ms(),
                log.calls.load(Ordering::Relaxed),
                log.failed.load(Ordering::Relaxed)
            ));
        }
    });
    Ok(())
}

/// Counts a completed call; logs it when it failed.
pub(crate) fn done(error: Option<&tonic::Status>) {
    let Some(log) = WATCH.get() else { return };
    log.calls.fetch_add(1, Ordering::Relaxed);
    if let Some(st) = error {
        log.failed.fetch_add(1, Ordering::Relaxed);
        log.line(&format!(
            "fail {:.3} {} {}\n",
            unix_ms(),
            code_name(st.code() as u32),
            st.message().replace('\n', " ")
        ));
    }
}

/// Logs every endpoint set `resolution` publishes, until the process ends.
pub(crate) fn views(resolution: zrpc::resolver::Resolution) {
    let Some(log) = WATCH.get() else { return };
    let mut rx = resolution.updates();
    tokio::spawn(async move {
        let _held = resolution;
        loop {
            let set = rx.borrow_and_update().clone();
            if let Some(set) = set {
                log.line(&format!("view {:.3} {}\n", unix_ms(), set.join(",")));
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
}
