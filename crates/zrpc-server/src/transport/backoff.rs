//! Accept-error back-off and a once-per-second log gate.
//!
//! When `accept(2)` fails with EMFILE/ENFILE (no file descriptors left) the pending
//! connection stays in the backlog and the next `accept` fails again at once: retrying in a
//! loop burns a core and logs nothing useful. Like Go's `net/http` (`srv.Serve`: 5 ms
//! doubling to 1 s), the accept loop sleeps after each error, doubling from 5 ms to 1 s, and
//! starts over after a success.

use std::time::Duration;

use tokio::time::Instant;

/// First sleep after an accept error.
pub(crate) const MIN_BACKOFF: Duration = Duration::from_millis(5);
/// Longest sleep between accept attempts while errors persist.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Exponential back-off for accept errors: 5 ms, 10 ms, ... 1 s; reset on success.
#[derive(Debug, Default)]
pub(crate) struct AcceptBackoff {
    next: Option<Duration>,
}

impl AcceptBackoff {
    /// The sleep before the next attempt, after a failed one.
    pub(crate) fn fail(&mut self) -> Duration {
        let delay = self.next.unwrap_or(MIN_BACKOFF);
        self.next = Some((delay * 2).min(MAX_BACKOFF));
        delay
    }

    /// An accept succeeded: the next error starts at 5 ms again.
    pub(crate) fn succeed(&mut self) {
        self.next = None;
    }
}

/// Lets one event through per period and counts the ones it held back.
#[derive(Debug)]
pub(crate) struct LogGate {
    period: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl LogGate {
    /// A gate letting one event through per `period`.
    pub(crate) fn new(period: Duration) -> Self {
        LogGate {
            period,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(n)` when this event should be logged, `n` being the events held back since the
    /// last one logged; `None` when it should not.
    pub(crate) fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.period => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_one_second_and_resets_on_success() {
        let mut b = AcceptBackoff::default();
        let delays: Vec<_> = (0..10).map(|_| b.fail().as_millis()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.succeed();
        assert_eq!(b.fail(), MIN_BACKOFF);
    }

    #[tokio::test(start_paused = true)]
    async fn log_gate_lets_one_event_per_second_through() {
        let mut g = LogGate::new(Duration::from_secs(1));
        assert_eq!(g.allow(Instant::now()), Some(0));
        for _ in 0..99 {
            assert_eq!(g.allow(Instant::now()), None);
        }
        tokio::time::advance(Duration::from_millis(999)).await;
        assert_eq!(g.allow(Instant::now()), None);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(g.allow(Instant::now()), Some(100));
    }
}
