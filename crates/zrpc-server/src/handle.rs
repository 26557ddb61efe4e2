//! [`ServerHandle`]: watch a running server's lifecycle and trigger its shutdown.

use std::net::SocketAddr;

use tokio::sync::watch;

/// Where a server is in its lifecycle. Phases only move forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Built, not yet listening.
    Starting,
    /// Accepting and serving calls; health is SERVING.
    Serving,
    /// Shutdown started: deregistered, health NOT_SERVING, still accepting during WrapUpTime.
    WrappingUp,
    /// The listener is closed; in-flight calls are draining.
    Draining,
    /// Done (drained, or cut at WaitTime).
    Stopped,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct State {
    pub(crate) phase: Phase,
    pub(crate) local_addr: Option<SocketAddr>,
    pub(crate) dev_server_addr: Option<SocketAddr>,
}

/// A cheap, clonable handle on a [`Server`](crate::Server): its bound addresses, its phase,
/// and a way to start its graceful shutdown (the same sequence as SIGTERM).
///
/// Get it with [`Server::handle`](crate::Server::handle) before serving.
#[derive(Debug, Clone)]
pub struct ServerHandle {
    state: watch::Receiver<State>,
    shutdown: watch::Sender<bool>,
}

pub(crate) struct HandleParts {
    pub(crate) state: watch::Sender<State>,
    pub(crate) shutdown: watch::Sender<bool>,
}

impl HandleParts {
    pub(crate) fn new() -> Self {
        let (state, _) = watch::channel(State {
            phase: Phase::Starting,
            local_addr: None,
            dev_server_addr: None,
        });
        let (shutdown, _) = watch::channel(false);
        Self { state, shutdown }
    }

    pub(crate) fn handle(&self) -> ServerHandle {
        ServerHandle {
            state: self.state.subscribe(),
            shutdown: self.shutdown.clone(),
        }
    }

    pub(crate) fn set_phase(&self, phase: Phase) {
        self.state.send_modify(|s| {
            if phase > s.phase {
                s.phase = phase;
            }
        });
    }

    /// Resolves when [`ServerHandle::shutdown`] is called.
    pub(crate) async fn shutdown_requested(&self) {
        let mut rx = self.shutdown.subscribe();
        let _ = rx.wait_for(|requested| *requested).await;
    }
}

impl std::fmt::Debug for HandleParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandleParts").finish_non_exhaustive()
    }
}

impl ServerHandle {
    /// Starts the graceful shutdown (idempotent).
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.state.borrow().phase
    }

    /// The address the gRPC listener is bound to, once known.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.state.borrow().local_addr
    }

    /// The address the DevServer is bound to, if it runs.
    pub fn dev_server_addr(&self) -> Option<SocketAddr> {
        self.state.borrow().dev_server_addr
    }

    /// Waits until the server reaches `phase` (or a later one) and returns the phase reached.
    pub async fn wait_for(&self, phase: Phase) -> Phase {
        let mut rx = self.state.clone();
        match rx.wait_for(|s| s.phase >= phase).await {
            Ok(s) => s.phase,
            // The server was dropped without running.
            Err(_) => Phase::Stopped,
        }
    }

    /// Waits until the server serves, and returns its address (`None` if it stopped first).
    pub async fn serving(&self) -> Option<SocketAddr> {
        match self.wait_for(Phase::Serving).await {
            Phase::Serving => self.local_addr(),
            _ => None,
        }
    }

    /// Waits until the server has stopped.
    pub async fn stopped(&self) {
        self.wait_for(Phase::Stopped).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static_assertions::assert_impl_all!(ServerHandle: Send, Sync, Clone);

    #[tokio::test]
    async fn phases_only_move_forward() {
        let parts = HandleParts::new();
        let h = parts.handle();
        assert_eq!(h.phase(), Phase::Starting);
        parts.set_phase(Phase::Draining);
        parts.set_phase(Phase::Serving);
        assert_eq!(h.phase(), Phase::Draining);
        assert_eq!(h.wait_for(Phase::WrappingUp).await, Phase::Draining);
        h.shutdown();
        parts.shutdown_requested().await;
        drop(parts);
        assert_eq!(h.serving().await, None);
    }
}
