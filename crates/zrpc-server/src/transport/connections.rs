//! The server's open connections, for the admin view: how many, and per client address how
//! many and how many calls they have open. Counted as connections open and close (a lock per
//! connection, never per call); read when the view is asked for.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::call::ConnState;

/// The open connections of one server.
#[derive(Debug, Default)]
pub(crate) struct Connections {
    open: AtomicUsize,
    peers: Mutex<HashMap<IpAddr, Peer>>,
    /// Whether the chain counts each connection's open calls (`Transport.MaxConnectionIdle`:
    /// see `transport::front_layer`); without it a connection's state has no call count.
    counts_calls: bool,
}

/// One client address's open connections.
#[derive(Debug, Default)]
struct Peer {
    connections: usize,
    /// The connections' call counts, where the server keeps them (`MaxConnectionIdle`).
    states: Vec<Weak<ConnState>>,
}

/// A client address's connections and calls open now, for the admin view.
#[cfg_attr(not(feature = "devserver"), allow(dead_code))] // read by the admin view only
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerView {
    pub(crate) addr: IpAddr,
    pub(crate) connections: usize,
    /// `None` where the server keeps no call count per connection.
    pub(crate) open_calls: Option<usize>,
}

impl Connections {
    /// The count of a server whose chain counts each connection's calls when `counts_calls`.
    pub(crate) fn new(counts_calls: bool) -> Self {
        Connections {
            counts_calls,
            ..Connections::default()
        }
    }
}

#[cfg_attr(not(feature = "devserver"), allow(dead_code))] // read by the admin view only
impl Connections {
    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// The client addresses with the most connections, at most `max`.
    pub(crate) fn peers(&self, max: usize) -> Vec<PeerView> {
        let mut list: Vec<PeerView> = self
            .peers
            .lock()
            .iter()
            .map(|(addr, p)| {
                let states: Vec<Arc<ConnState>> =
                    p.states.iter().filter_map(Weak::upgrade).collect();
                PeerView {
                    addr: *addr,
                    connections: p.connections,
                    open_calls: (!states.is_empty())
                        .then(|| states.iter().map(|s| s.open_calls()).sum()),
                }
            })
            .collect();
        list.sort_by(|a, b| b.connections.cmp(&a.connections).then(a.addr.cmp(&b.addr)));
        list.truncate(max);
        list
    }
}

impl Connections {
    /// Counts a connection from `peer` (its call count `state`, when kept) until the returned
    /// guard drops.
    pub(crate) fn opened(
        self: &Arc<Self>,
        peer: Option<IpAddr>,
        state: Option<&Arc<ConnState>>,
    ) -> OpenConnection {
        self.open.fetch_add(1, Ordering::Relaxed);
        if let Some(addr) = peer {
            let mut peers = self.peers.lock();
            let p = peers.entry(addr).or_default();
            p.connections += 1;
            if let Some(s) = state.filter(|_| self.counts_calls) {
                p.states.push(Arc::downgrade(s));
            }
        }
        OpenConnection {
            connections: Arc::clone(self),
            peer,
        }
    }
}

/// One open connection, counted until dropped.
#[derive(Debug)]
pub(crate) struct OpenConnection {
    connections: Arc<Connections>,
    peer: Option<IpAddr>,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let c = &self.connections;
        c.open.fetch_sub(1, Ordering::Relaxed);
        if let Some(addr) = self.peer {
            let mut peers = c.peers.lock();
            if let Some(p) = peers.get_mut(&addr) {
                p.connections = p.connections.saturating_sub(1);
                if p.connections == 0 {
                    peers.remove(&addr);
                } else {
                    p.states.retain(|w| w.strong_count() > 0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_connections_per_peer_and_their_open_calls() {
        let c = Arc::new(Connections::new(true));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let state = Arc::new(ConnState::new());
        let first = c.opened(Some(a), Some(&state));
        let second = c.opened(Some(a), None);
        let other = c.opened(Some(b), None);
        let _call = state.start();
        assert_eq!(c.open(), 3);
        let peers = c.peers(10);
        assert_eq!(
            peers[0],
            PeerView {
                addr: a,
                connections: 2,
                open_calls: Some(1)
            }
        );
        assert_eq!((peers[1].addr, peers[1].open_calls), (b, None));
        assert_eq!(c.peers(1).len(), 1);
        drop((first, second, other));
        assert_eq!(c.open(), 0);
        assert!(c.peers(10).is_empty(), "closed peers leave");
        // a chain that counts no calls: no call count shown, rather than a false 0
        let c = Arc::new(Connections::new(false));
        let _conn = c.opened(Some(a), Some(&state));
        assert_eq!(c.peers(1)[0].open_calls, None);
    }
}
