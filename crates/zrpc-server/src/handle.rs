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
    pause: watch::Sender<bool>,
    #[cfg(feature = "etcd")]
    registration: watch::Receiver<crate::registry::RegistrationState>,
}

pub(crate) struct HandleParts {
    pub(crate) state: watch::Sender<State>,
    pub(crate) shutdown: watch::Sender<bool>,
    /// Whether the registration is paused (see [`ServerHandle::pause_registration`]).
    pub(crate) pause: watch::Sender<bool>,
    /// Where the registration stands, written by the publisher.
    #[cfg(feature = "etcd")]
    pub(crate) registration: watch::Sender<crate::registry::RegistrationState>,
    /// When etcd last renewed the registration's lease (Unix ms; 0 = never), written by the
    /// publisher, read by the admin view.
    #[cfg(feature = "etcd")]
    pub(crate) renewed: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl HandleParts {
    pub(crate) fn new() -> Self {
        let (state, _) = watch::channel(State {
            phase: Phase::Starting,
            local_addr: None,
            dev_server_addr: None,
        });
        let (shutdown, _) = watch::channel(false);
        let (pause, _) = watch::channel(false);
        Self {
            state,
            shutdown,
            pause,
            #[cfg(feature = "etcd")]
            registration: watch::channel(crate::registry::RegistrationState::NotRegistered).0,
            #[cfg(feature = "etcd")]
            renewed: std::sync::Arc::default(),
        }
    }

    pub(crate) fn handle(&self) -> ServerHandle {
        ServerHandle {
            state: self.state.subscribe(),
            shutdown: self.shutdown.clone(),
            pause: self.pause.clone(),
            #[cfg(feature = "etcd")]
            registration: self.registration.subscribe(),
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

    /// Takes the server out of discovery without stopping it: its etcd key is deleted (its
    /// lease revoked), so go-zero's and zrpc's clients stop sending it new calls, while the
    /// connections and calls it has go on. It stays out, an etcd restart included, until
    /// [`resume_registration`](ServerHandle::resume_registration). Idempotent; before the server
    /// registers it keeps the server from registering. Without `Etcd` in the config, nothing is
    /// registered and this only records the wish.
    pub fn pause_registration(&self) {
        self.pause.send_replace(true);
    }

    /// Registers the server again after [`pause_registration`](ServerHandle::pause_registration),
    /// under a new lease. Idempotent.
    pub fn resume_registration(&self) {
        self.pause.send_replace(false);
    }

    /// Whether the registration is paused.
    pub fn registration_paused(&self) -> bool {
        *self.pause.borrow()
    }

    /// Where the server's etcd registration stands (`NotRegistered` without `Etcd`).
    #[cfg(feature = "etcd")]
    pub fn registration(&self) -> crate::registry::RegistrationState {
        self.registration.borrow().clone()
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
