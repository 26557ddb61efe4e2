//! `Tls.AllowedClients` and `Tls.AllowedClientsFile`: the identities a server serves.
//!
//! The list is behind an `ArcSwap` read once per call by
//! [`Front`](crate::transport::front::Front), so a reload applies from each client's next call,
//! on connections already open too. A new file that cannot be used (unreadable, not UTF-8, a
//! name with spaces, no name at all: an empty list would admit every client the CA signed) is
//! logged as an error naming the file and line, and the old list stays.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::TlsError;
use super::identity::PeerIdentity;
use super::watch::WatchedFile;
use crate::conf::ServerTlsConf;

/// The allowed client identities (subject CN, SAN DNS name or SAN URI).
#[derive(Debug)]
pub(crate) struct AllowList {
    /// `Tls.AllowedClients`.
    fixed: Vec<String>,
    /// `Tls.AllowedClientsFile`.
    file: Option<WatchedFile>,
    /// `fixed` and the file's names.
    current: ArcSwap<Vec<String>>,
}

impl AllowList {
    /// The allow-list of `conf`, None when it has none (any client the CA signed is served).
    pub(crate) fn load(conf: &ServerTlsConf) -> Result<Option<AllowList>, TlsError> {
        let fixed = conf.allowed_clients.clone();
        let (file, names) = if conf.allowed_clients_file.is_empty() {
            (None, Vec::new())
        } else {
            let (file, bytes) =
                WatchedFile::open("Tls.AllowedClientsFile", &conf.allowed_clients_file)?;
            let names = parse(file.path(), &bytes)?;
            (Some(file), names)
        };
        if fixed.is_empty() && file.is_none() {
            return Ok(None);
        }
        let current = ArcSwap::from_pointee([fixed.as_slice(), &names].concat());
        Ok(Some(AllowList {
            fixed,
            file,
            current,
        }))
    }

    /// Whether `id` carries one of the allowed names.
    pub(crate) fn allows(&self, id: &PeerIdentity) -> bool {
        self.current.load().iter().any(|name| id.matches(name))
    }

    /// Re-reads the file if it changed (always, with `force`); whether a new list is in use.
    pub(crate) fn reload(&self, force: bool) -> bool {
        let Some(file) = &self.file else {
            return false;
        };
        let Some(read) = file.changed(force) else {
            return false;
        };
        match read.and_then(|bytes| parse(file.path(), &bytes)) {
            Ok(names) => {
                let n = names.len();
                self.current
                    .store(Arc::new([self.fixed.as_slice(), &names].concat()));
                tracing::info!(
                    target: "zrpc::server",
                    "Tls.AllowedClientsFile {:?} reloaded ({n} names); it applies from each client's next call",
                    file.path()
                );
                true
            }
            Err(e) => {
                tracing::error!(
                    target: "zrpc::server",
                    "TLS allow-list reload refused, keeping the current list: {e}"
                );
                false
            }
        }
    }
}

/// The names of an allow-list file: one per line, blank lines and `#` comments skipped.
fn parse(file: &str, bytes: &[u8]) -> Result<Vec<String>, TlsError> {
    let err = |reason: String| TlsError::AllowList {
        file: file.to_owned(),
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| err(format!("not UTF-8 text: {e}")))?;
    let mut names = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let name = line.split('#').next().unwrap_or_default().trim();
        if name.is_empty() {
            continue;
        }
        if name.contains(char::is_whitespace) {
            return Err(err(format!(
                "line {}: {name:?} is not one name (one identity per line)",
                i + 1
            )));
        }
        names.push(name.to_owned());
    }
    if names.is_empty() {
        return Err(err(
            "no name in the file; an empty allow-list would admit every client the CA signed \
             (remove the key to allow them all)"
                .to_owned(),
        ));
    }
    Ok(names)
}

/// Why `allowed` refuses the client `peer` (`None`: it is served, or there is no list).
pub(crate) fn denied(allowed: Option<&AllowList>, peer: Option<&PeerIdentity>) -> Option<String> {
    let allowed = allowed?;
    match peer {
        None => Some("a client certificate is required (Tls.AllowedClients)".to_owned()),
        Some(id) if allowed.allows(id) => None,
        Some(id) => Some(format!(
            "client certificate ({}) is not in Tls.AllowedClients",
            id.describe()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_skips_blanks_and_comments() {
        let names = parse(
            "f",
            b"# billing team\nbilling\n\n  spiffe://x/y  # the mesh id\n",
        )
        .unwrap();
        assert_eq!(names, ["billing", "spiffe://x/y"]);
    }

    #[test]
    fn parse_refuses_empty_lists_spaces_and_binary() {
        let e = parse("f", b"# nobody\n\n").unwrap_err().to_string();
        assert!(
            e.starts_with("Tls.AllowedClientsFile \"f\": no name"),
            "{e}"
        );
        let e = parse("f", b"a\nb c\n").unwrap_err().to_string();
        assert!(e.contains("line 2: \"b c\""), "{e}");
        let e = parse("f", b"\xff\xfe").unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
    }
}
