//! Round robin: the comparison baseline (`BalancerName: round_robin`).
//!
//! Each pick takes the next endpoint in order, skipping those in transport-failure back-off (all
//! down: the plain next one). It records the same per-endpoint stats as P2C, so the gauges and
//! completion path are shared, but never looks at them to choose.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::stats::{Clock, EndpointStats};

/// A lock-free round-robin picker.
#[derive(Debug)]
pub struct RoundRobin {
    clock: Clock,
    next: AtomicUsize,
}

impl RoundRobin {
    /// A picker whose times count from `epoch`.
    #[must_use]
    pub fn new(epoch: Instant) -> Self {
        RoundRobin {
            clock: Clock::new(epoch),
            next: AtomicUsize::new(0),
        }
    }

    /// Picks the next usable endpoint, marks it in flight and returns its index (`None` if empty).
    pub fn pick<E: AsRef<EndpointStats>>(&self, set: &[E], now: Instant) -> Option<usize> {
        self.pick_at(set, self.clock.nanos(now))
    }

    /// [`RoundRobin::pick`] at `now` in nanoseconds since the epoch.
    pub fn pick_at<E: AsRef<EndpointStats>>(&self, set: &[E], now: u64) -> Option<usize> {
        let n = set.len();
        if n == 0 {
            return None;
        }
        let first = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let chosen = (0..n)
            .map(|k| (first + k) % n)
            .find(|&i| !set[i].as_ref().is_down(now))
            .unwrap_or(first);
        set[chosen].as_ref().on_pick();
        Some(chosen)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn cycles_and_skips_down_endpoints() {
        let t0 = Instant::now();
        let rr = RoundRobin::new(t0);
        let set: Vec<Arc<EndpointStats>> = (0..3).map(|_| Arc::new(EndpointStats::new())).collect();
        let picks: Vec<usize> = (0..6).filter_map(|_| rr.pick(&set, t0)).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
        set[1].on_transport_failure(0, 0);
        let picks: Vec<usize> = (0..4).filter_map(|_| rr.pick(&set, t0)).collect();
        assert_eq!(picks, vec![0, 2, 2, 0]);
        let later = t0 + Duration::from_secs(10);
        let picks: Vec<usize> = (0..3).filter_map(|_| rr.pick(&set, later)).collect();
        assert_eq!(picks, vec![1, 2, 0]);
    }
}
