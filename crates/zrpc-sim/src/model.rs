//! What is simulated: servers, load, the scenario and its report.

use std::time::Duration;

/// A window of simulated time `[start, end)`.
pub type Window = (Duration, Duration);

/// One simulated server.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ServerSpec {
    /// Service time of a call.
    pub latency: Duration,
    /// Uniform extra service time in `[0, jitter)` (loopback and scheduling noise).
    pub jitter: Duration,
    /// Frozen (SIGSTOP): calls in progress or arriving are answered only after the window ends.
    pub freeze: Option<Window>,
    /// Failing: calls arriving in the window are answered `Unavailable` after 1 ms.
    pub fail: Option<Window>,
    /// Down (connection refused): calls arriving in the window never reach it (transport failure).
    pub down: Option<Window>,
    /// Slow: calls arriving before the first time take the second latency instead.
    pub slow_until: Option<(Duration, Duration)>,
}

impl ServerSpec {
    /// A server answering every call after `latency` plus up to 0.5 ms of jitter.
    #[must_use]
    pub fn new(latency: Duration) -> Self {
        ServerSpec {
            latency,
            jitter: Duration::from_micros(500),
            ..ServerSpec::default()
        }
    }

    /// Frozen during `window`.
    #[must_use]
    pub fn frozen(mut self, window: Window) -> Self {
        self.freeze = Some(window);
        self
    }

    /// Failing every call during `window`.
    #[must_use]
    pub fn failing(mut self, window: Window) -> Self {
        self.fail = Some(window);
        self
    }

    /// Answering after `latency` (plus jitter) until `until`.
    #[must_use]
    pub fn slow_until(mut self, until: Duration, latency: Duration) -> Self {
        self.slow_until = Some((until, latency));
        self
    }

    /// Refusing connections during `window`.
    #[must_use]
    pub fn down(mut self, window: Window) -> Self {
        self.down = Some(window);
        self
    }
}

/// How calls arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Load {
    /// Open loop: calls start at a fixed rate whatever the servers do.
    Open {
        /// Calls per second.
        rps: f64,
    },
    /// Closed loop: `clients` callers, each starting its next call when the previous one ends.
    Closed {
        /// Concurrent callers.
        clients: u32,
    },
}

/// A scenario: servers, load, duration, client timeout and seed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Scenario {
    /// The servers.
    pub servers: Vec<ServerSpec>,
    /// The load.
    pub load: Load,
    /// Simulated time.
    pub duration: Duration,
    /// The client's call timeout (go-zero's default 2 s).
    pub timeout: Duration,
    /// The seed of every random choice.
    pub seed: u64,
    /// The server whose share is reported as [`Report::slow_share`].
    pub watched: usize,
}

impl Scenario {
    /// The slow-node scenario (the "seed example" of the tables): two servers at 10 ms, one
    /// (watched) at 1000 ms.
    #[must_use]
    pub fn seed_example(load: Load, duration: Duration, seed: u64) -> Self {
        Scenario {
            servers: vec![
                ServerSpec::new(Duration::from_millis(10)),
                ServerSpec::new(Duration::from_millis(10)),
                ServerSpec::new(Duration::from_millis(1000)),
            ],
            load,
            duration,
            timeout: Duration::from_secs(2),
            seed,
            watched: 2,
        }
    }

    /// Three servers of the same speed (0.3 ms plus up to 0.5 ms of jitter, loopback-like):
    /// every server should take a third of the calls.
    #[must_use]
    pub fn equal(load: Load, duration: Duration, seed: u64) -> Self {
        Scenario {
            servers: vec![ServerSpec::new(Duration::from_micros(300)); 3],
            load,
            duration,
            timeout: Duration::from_secs(2),
            seed,
            watched: 2,
        }
    }

    /// Three servers at 10 ms; the watched one is frozen during `freeze`.
    #[must_use]
    pub fn freeze(load: Load, duration: Duration, freeze: Window, seed: u64) -> Self {
        Scenario {
            servers: vec![
                ServerSpec::new(Duration::from_millis(10)),
                ServerSpec::new(Duration::from_millis(10)),
                ServerSpec::new(Duration::from_millis(10)).frozen(freeze),
            ],
            load,
            duration,
            timeout: Duration::from_secs(2),
            seed,
            watched: 2,
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Report {
    /// Calls started.
    pub calls: u64,
    /// Calls sent to each server (attempts, including transparent retries).
    pub per_server: Vec<u64>,
    /// Share of calls sent to the watched server, in percent.
    pub slow_share: f64,
    /// Median call latency.
    pub p50: Duration,
    /// 99th percentile call latency.
    pub p99: Duration,
    /// Calls that ended with a failure code (including timeouts).
    pub failed: u64,
    /// Calls sent to the watched server while it was frozen.
    pub sent_while_frozen: u64,
    /// From the start of the watched server's freeze to the last call sent to it while frozen
    /// (including single trial calls after ejections).
    pub last_sent_into_freeze: Option<Duration>,
    /// From the start of the freeze to the end of the stream of calls into it: the last call sent
    /// less than a second after the previous one (later calls are spaced trial calls).
    pub stream_into_freeze: Option<Duration>,
}
