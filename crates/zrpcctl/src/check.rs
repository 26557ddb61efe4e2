//! `zrpcctl conf check <file>`: loads a server or client config exactly as the server and
//! client do at start (`zrpc::conf::load`, then every start-up check that needs no network,
//! `zrpc::preflight`), so the errors are the same ones, naming the file, key and value, all of
//! them rather than the first.

use std::path::Path;

use crate::{Result, fail};

/// Which config a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Kind {
    /// `RpcServerConf` (has `ListenOn`).
    Server,
    /// `RpcClientConf`.
    Client,
}

/// The kind a file most likely holds: a server config has `ListenOn`.
pub(crate) fn guess(text: &str) -> Kind {
    if text.to_ascii_lowercase().contains("listenon") {
        Kind::Server
    } else {
        Kind::Client
    }
}

/// Checks `path`; returns the lines to print (warnings for keys accepted but not acted on).
pub(crate) fn check(path: &Path, kind: Option<Kind>) -> Result<(Kind, Vec<String>)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| fail(format!("{}: cannot read the file: {e}", path.display())))?;
    let kind = kind.unwrap_or_else(|| guess(&text));
    let mut notes = Vec::new();
    match kind {
        Kind::Server => {
            let conf: zrpc::RpcServerConf = zrpc::conf::load(path)?;
            // what a start would refuse before it needs the network, every problem at once
            let errors = zrpc::preflight(&conf);
            if !errors.is_empty() {
                let lines: Vec<String> = errors
                    .iter()
                    .map(|e| format!("{}: {e}", path.display()))
                    .collect();
                return Err(fail(lines.join("\n")));
            }
            notes.extend(conf.ignored_keys().iter().map(|k| format!("warning: {k}")));
        }
        Kind::Client => {
            let _conf: zrpc::RpcClientConf = zrpc::conf::load(path).map_err(|e| {
                fail(format!(
                    "{e}\n(checked as a client config; pass --server if it is a server's)"
                ))
            })?;
        }
    }
    Ok((kind, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guesses_the_kind_from_listen_on() {
        assert_eq!(guess("Name: a\nListenOn: :8080\n"), Kind::Server);
        assert_eq!(guess("{\"listenOn\": \":1\"}"), Kind::Server);
        assert_eq!(guess("Target: direct:///127.0.0.1:1\n"), Kind::Client);
    }
}
