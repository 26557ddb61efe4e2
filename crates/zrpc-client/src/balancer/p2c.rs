//! Power of two choices on EWMA load: go-zero's `p2c_ewma` (`zrpc/internal/balancer/p2c/p2c.go`),
//! itself after Finagle's `P2CPeakEwma`.
//!
//! Each pick draws two distinct endpoints at random (up to three draws, stopping at the first pair
//! where both are healthy) and sends to the one with the lower load `sqrt(lag + 1) * (inflight + 1)`,
//! unless the other one has not been picked for a second (`forcePick`), in which case it gets the
//! request, so that every endpoint keeps being measured.
//!
//! Differences from go-zero (see [`EndpointStats`] for the completion side):
//! - `&self` and lock-free: the set is a slice of shared stats; go-zero takes a mutex per pick;
//! - an endpoint in transport-failure back-off is never drawn while another one is usable;
//! - a cold endpoint gets one probe at a time until it answers (go-zero's lag of 0 floods it);
//! - forcePick never sends to an endpoint that is down or already probing.
//!
//! Time is passed in and the random source is a parameter, so every pick is reproducible.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::rng::RandomSource;
use super::stats::{Clock, EndpointStats, PENALTY, THROTTLE_SUCCESS};

/// go-zero `forcePick`: an endpoint not picked for this long gets the next request of its pair.
pub const FORCE_PICK: Duration = Duration::from_secs(1);
/// go-zero `pickTimes`: draws to find a pair of healthy endpoints.
pub const PICK_TIMES: usize = 3;

const FORCE_PICK_NANOS: u64 = 1_000_000_000;

/// The P2C+EWMA picker. Stateless apart from its clock epoch: all state lives in the endpoints'
/// [`EndpointStats`].
#[derive(Debug, Clone, Copy)]
pub struct P2cPicker {
    clock: Clock,
}

impl P2cPicker {
    /// A picker whose times count from `epoch` (any instant not after the first pick).
    #[must_use]
    pub fn new(epoch: Instant) -> Self {
        P2cPicker {
            clock: Clock::new(epoch),
        }
    }

    /// The clock converting instants for [`EndpointStats`].
    #[must_use]
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Picks an endpoint of `set` at `now`, marks it in flight and returns its index; `None` for
    /// an empty set. When every endpoint is down, the one whose back-off ends first is returned (a
    /// reconnection attempt beats failing without trying).
    ///
    /// No allocation, no lock; one compare-and-swap at most.
    pub fn pick<E, R>(&self, set: &[E], now: Instant, rng: &mut R) -> Option<usize>
    where
        E: AsRef<EndpointStats>,
        R: RandomSource + ?Sized,
    {
        let now = self.clock.nanos(now);
        let n = set.len();
        let chosen = match n {
            0 => return None,
            1 => 0,
            2 => {
                let (la, lb) = (set[0].as_ref().load(now), set[1].as_ref().load(now));
                choose(set, (0, la), (1, lb), now, rng)
            }
            _ => {
                let mut pair = ((0, 0.0), (1, 0.0));
                for _ in 0..PICK_TIMES {
                    let a = rng.below(n);
                    let mut b = rng.below(n - 1);
                    if b >= a {
                        b += 1;
                    }
                    let (sa, sb) = (set[a].as_ref(), set[b].as_ref());
                    let (la, lb) = (sa.load(now), sb.load(now));
                    pair = ((a, la), (b, lb));
                    // healthy: success > 500, not down, not a probe already in flight
                    if la < PENALTY
                        && lb < PENALTY
                        && sa.success() > THROTTLE_SUCCESS
                        && sb.success() > THROTTLE_SUCCESS
                    {
                        break;
                    }
                }
                choose(set, pair.0, pair.1, now, rng)
            }
        };
        let stats = set[chosen].as_ref();
        stats.touch(now);
        stats.on_pick();
        Some(chosen)
    }
}

/// go-zero's `choose`: the lower load wins, unless the other one is due for a forced pick.
fn choose<E, R>(
    set: &[E],
    (a, la): (usize, f64),
    (b, lb): (usize, f64),
    now: u64,
    rng: &mut R,
) -> usize
where
    E: AsRef<EndpointStats>,
    R: RandomSource + ?Sized,
{
    let (c1, c2, l1, l2) = if la > lb {
        (b, a, lb, la)
    } else {
        (a, b, la, lb)
    };
    if l1 == f64::INFINITY {
        return fallback(set, now, rng);
    }
    if l2 < PENALTY {
        let s2 = set[c2].as_ref();
        let last = s2.last_pick.load(Ordering::Relaxed);
        if now.saturating_sub(last) > FORCE_PICK_NANOS
            && s2
                .last_pick
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return c2;
        }
    }
    c1
}

/// Both drawn endpoints are down: scan from a random offset for one that is not; if all are down,
/// the one whose back-off ends first.
fn fallback<E, R>(set: &[E], now: u64, rng: &mut R) -> usize
where
    E: AsRef<EndpointStats>,
    R: RandomSource + ?Sized,
{
    let n = set.len();
    let start = rng.below(n);
    let mut best = start;
    let mut best_until = u64::MAX;
    for k in 0..n {
        let i = (start + k) % n;
        let s = set[i].as_ref();
        if !s.is_down(now) {
            return i;
        }
        if s.down_until() < best_until {
            best_until = s.down_until();
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests;
