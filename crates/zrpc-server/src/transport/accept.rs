//! The accept loop: the stream of connections handed to tonic, replacing `TcpIncoming`.
//!
//! - accept errors (EMFILE, ENFILE, ENOBUFS, ...) back off 5 ms .. 1 s and are logged at most
//!   once per second, instead of being retried in a hot loop;
//! - errors of one aborted connection (ECONNABORTED, ECONNRESET) are skipped at once;
//! - over `MaxConnections` a connection is accepted and closed at once (logged once per second);
//! - TCP_NODELAY on, then `AuthorityFix` (innermost) and [`Guarded`] around the stream.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::backoff::{AcceptBackoff, LogGate};
use super::conn::{ConnLimits, Guarded};
use super::streams::ConnTable;
use crate::authority::AuthorityFix;

/// What the accept loop needs to know.
#[derive(Debug, Clone)]
pub(crate) struct AcceptSettings {
    pub(crate) limits: ConnLimits,
    pub(crate) max_connections: Option<usize>,
    pub(crate) authority_repair: bool,
    /// Present when `MaxConnectionIdle` is set.
    pub(crate) table: Option<Arc<ConnTable>>,
}

/// A connection as tonic receives it.
pub(crate) type Accepted = Guarded<AuthorityFix<TcpStream>>;

struct Acceptor {
    listener: TcpListener,
    settings: AcceptSettings,
    cap: Option<Arc<Semaphore>>,
    backoff: AcceptBackoff,
    error_log: LogGate,
    cap_log: LogGate,
}

/// The connections accepted on `listener`; the listener closes when the stream is dropped.
/// The stream never yields an error: accept errors are handled here.
pub(crate) fn incoming(
    listener: TcpListener,
    settings: AcceptSettings,
) -> impl Stream<Item = Result<Accepted, io::Error>> + Send {
    let acceptor = Acceptor {
        listener,
        cap: settings
            .max_connections
            .map(|n| Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS)))),
        settings,
        backoff: AcceptBackoff::default(),
        error_log: LogGate::new(Duration::from_secs(1)),
        cap_log: LogGate::new(Duration::from_secs(1)),
    };
    futures_util::stream::unfold(acceptor, |mut a| async move {
        let conn = a.next().await;
        Some((Ok(conn), a))
    })
}

/// Errors that concern one connection, not the listener: skip it and accept the next.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

impl Acceptor {
    async fn next(&mut self) -> Accepted {
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    let delay = self.backoff.fail();
                    if let Some(held) = self.error_log.allow(Instant::now()) {
                        tracing::error!(
                            target: "zrpc::server",
                            "accepting a connection failed: {e}; retrying in {delay:?} \
                             ({held} more accept errors since the last message)"
                        );
                    }
                    tokio::time::sleep(delay).await;
                    continue;
                }
            };
            self.backoff.succeed();
            let permit = match &self.cap {
                None => None,
                Some(cap) => match cap.clone().try_acquire_owned() {
                    Ok(permit) => Some(permit),
                    Err(_) => {
                        if let Some(held) = self.cap_log.allow(Instant::now()) {
                            tracing::warn!(
                                target: "zrpc::server",
                                "closing connection from {peer}: Transport.MaxConnections ({}) \
                                 reached ({held} more closed since the last message)",
                                self.settings.max_connections.unwrap_or_default()
                            );
                        }
                        drop(stream);
                        continue;
                    }
                },
            };
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(target: "zrpc::server", "TCP_NODELAY on {peer}: {e}");
            }
            let addrs = stream.local_addr().ok().map(|local| (local, peer));
            let entry = self
                .settings
                .table
                .as_ref()
                .zip(addrs)
                .map(|(table, addrs)| table.register(addrs));
            let io = AuthorityFix::new(stream, addrs, self.settings.authority_repair);
            return Guarded::new(io, self.settings.limits, permit, entry);
        }
    }
}
