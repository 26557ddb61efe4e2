//! Re-reading the TLS files: [`WatchedFile`] notices a file's changes, [`watch`] runs every
//! reloader of a server every `Tls.ReloadInterval` and at once on SIGHUP.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::ServerTls;
use super::TlsError;
use super::certs::read;

/// A file whose bytes are compared with those of the last try (loaded or refused), so that
/// a reload acts on changes only and a broken file is logged once, not at every tick.
#[derive(Debug)]
pub(crate) struct WatchedFile {
    key: &'static str,
    path: String,
    seen: Mutex<Vec<u8>>,
}

impl WatchedFile {
    /// Reads `path` (the value of config key `key`) for the first time.
    pub(crate) fn open(key: &'static str, path: &str) -> Result<(WatchedFile, Vec<u8>), TlsError> {
        let bytes = read(key, path)?;
        let file = WatchedFile {
            key,
            path: path.to_owned(),
            seen: Mutex::new(bytes.clone()),
        };
        Ok((file, bytes))
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The file's bytes if they changed since the last call (always, with `force`); an
    /// unreadable file counts as empty, so it is reported once.
    pub(crate) fn changed(&self, force: bool) -> Option<Result<Vec<u8>, TlsError>> {
        let now = read(self.key, &self.path);
        let bytes = now.as_ref().map(Vec::as_slice).unwrap_or_default();
        let mut seen = self.seen.lock();
        if !force && *seen == bytes {
            return None;
        }
        bytes.clone_into(&mut seen);
        Some(now)
    }
}

/// Runs the reloaders of `tls` until the returned task is aborted: every `ReloadInterval`
/// (never when it is zero) and on SIGHUP, which also retries files that did not change.
pub(crate) fn watch(tls: Arc<ServerTls>, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        #[cfg(unix)]
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        loop {
            let tick = async {
                if interval.is_zero() {
                    std::future::pending::<()>().await;
                } else {
                    tokio::time::sleep(interval).await;
                }
            };
            #[cfg(unix)]
            let hup_recv = async {
                match hup.as_mut() {
                    Some(h) => {
                        h.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            #[cfg(not(unix))]
            let hup_recv = std::future::pending::<()>();
            let forced = tokio::select! {
                () = tick => false,
                () = hup_recv => true,
            };
            let tls = tls.clone();
            // file reads off the runtime threads
            let _ = tokio::task::spawn_blocking(move || tls.reload(forced)).await;
        }
    })
}
