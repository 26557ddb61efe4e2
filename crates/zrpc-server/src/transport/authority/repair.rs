//! [`Repair`]: one connection's `:authority` repair, driven by the connection's frame scanner
//! ([`FrameGuard`]): it watches the connection until the first header block shows whether the
//! client needs it, and from then on walks every header block or none.

use crate::transport::frames::{FrameGuard, Violation};

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use super::block::{self, Block};
use super::hpack::{BlockReport, Walker};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One connection's `:authority` repair (see the [module docs](super)).
#[derive(Debug)]
pub(crate) struct Repair {
    state: State,
    /// The client's address, for the log line.
    peer: Option<SocketAddr>,
    /// What the client sent, once repaired: shared with the connection's `ConnInfo`, read back
    /// by [`original_authority`](super::original_authority).
    original: Arc<OnceLock<Arc<str>>>,
    /// The connection's first repair was logged and recorded.
    noted: bool,
}

#[derive(Debug)]
enum State {
    /// Nothing to do: the repair is off, or the connection does not need it.
    Off,
    /// No header block seen yet; so many preface octets checked.
    Watching(u8),
    /// The connection needed a repair: every header block is walked, with the client's HPACK
    /// table followed.
    Repairing(Box<Walker>),
}

impl Repair {
    /// The repair of a new connection from `peer`; `on`: the server repairs.
    pub(crate) fn new(on: bool, peer: Option<SocketAddr>) -> Self {
        Repair {
            state: if on { State::Watching(0) } else { State::Off },
            peer,
            original: Arc::default(),
            noted: false,
        }
    }

    /// Where the connection's original authority will be, for its `ConnInfo`.
    pub(crate) fn original(&self) -> Arc<OnceLock<Arc<str>>> {
        Arc::clone(&self.original)
    }

    /// True while header blocks are held until complete: before the first one, and on a
    /// connection that needed a repair.
    pub(crate) fn holds(&self) -> bool {
        !matches!(self.state, State::Off)
    }

    /// Scans `data`, octets read from the client from where the last call stopped, with
    /// `frames`, and repairs the complete header blocks in it in place while [`holds`](Self::holds).
    /// Returns how many leading octets may go to `h2`; the rest (an incomplete header block and
    /// what follows) is to be given again with more octets behind it.
    pub(crate) fn scan(
        &mut self,
        frames: &mut FrameGuard,
        data: &mut [u8],
    ) -> Result<usize, Violation> {
        let mut at = 0;
        if let State::Watching(checked) = &mut self.state {
            let from = usize::from(*checked);
            let n = (PREFACE.len() - from).min(data.len());
            if data[..n] == PREFACE[from..from + n] {
                *checked += n as u8;
            } else {
                // Not HTTP/2 with prior knowledge: h2 will refuse it.
                self.state = State::Off;
            }
        }
        while self.holds() {
            at += frames.read_to_block(&data[at..])?;
            let mut first = Walker::default();
            let walker = match &mut self.state {
                State::Repairing(walker) => walker,
                _ => &mut first,
            };
            match block::walk(&mut data[at..], walker) {
                Block::Incomplete => return Ok(at),
                Block::Unfollowable => self.state = State::Off,
                Block::Done { len, report } => {
                    if let Some(v) = frames.read(&data[at..at + len]) {
                        return Err(v);
                    }
                    at += len;
                    self.after_block(report, first);
                }
            }
        }
        match frames.read(&data[at..]) {
            Some(v) => Err(v),
            None => Ok(data.len()),
        }
    }

    /// Decides, after a header block, whether the connection still needs the repair; `first`:
    /// the walker of a first block.
    fn after_block(&mut self, report: BlockReport, first: Walker) {
        if let State::Watching(_) = self.state {
            // The first header block carried a valid authority (or none, or one that cannot
            // be repaired): this client needs nothing from us.
            self.state = match report.repaired {
                0 => State::Off,
                _ => State::Repairing(Box::new(first)),
            };
        }
        if let Some((original, repaired)) = report.first_repair
            && !self.noted
        {
            self.note(original, repaired);
        }
    }

    /// Logs the connection's first repair and records what the client sent.
    fn note(&mut self, original: String, repaired: String) {
        let peer = self.peer;
        tracing::debug!(
            target: "zrpc::server::authority",
            ?peer,
            original = %original,
            repaired = %repaired,
            "rewrote an :authority that h2 would reject (a grpc-go client with several etcd hosts \
             or endpoints in its target); later requests on this connection are repaired too"
        );
        let _ = self.original.set(Arc::from(original));
        self.noted = true;
    }

    /// Whether the repair still watches or repairs the connection (for tests).
    #[cfg(test)]
    pub(crate) fn is_inspecting(&self) -> bool {
        self.holds()
    }

    /// Whether a repair was made on the connection (for tests).
    #[cfg(test)]
    pub(crate) fn repaired(&self) -> bool {
        self.noted
    }
}
