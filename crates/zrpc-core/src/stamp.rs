//! A lock-free optional [`Instant`] (private helper for the breaker and the shedder).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// An `Option<Instant>` stored in an [`AtomicU64`]: nanoseconds since a base instant (fixed by the
/// first store), plus one, so that 0 means "never set". Instants earlier than the base saturate to
/// the base.
#[derive(Debug, Default)]
pub(crate) struct AtomicStamp {
    base: OnceLock<Instant>,
    nanos: AtomicU64,
}

impl AtomicStamp {
    /// Stores `now`.
    pub(crate) fn store(&self, now: Instant) {
        let base = *self.base.get_or_init(|| now);
        let n = u64::try_from(now.saturating_duration_since(base).as_nanos())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1);
        self.nanos.store(n, Ordering::Release);
    }

    /// The stored instant, if any.
    pub(crate) fn load(&self) -> Option<Instant> {
        match self.nanos.load(Ordering::Acquire) {
            0 => None,
            n => self
                .base
                .get()
                .map(|base| *base + Duration::from_nanos(n - 1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_and_loads() {
        let s = AtomicStamp::default();
        assert_eq!(s.load(), None);
        let t0 = Instant::now();
        s.store(t0);
        assert_eq!(s.load(), Some(t0));
        s.store(t0 + Duration::from_millis(1500));
        assert_eq!(s.load(), Some(t0 + Duration::from_millis(1500)));
        // Earlier than the base: saturates to the base.
        s.store(t0 - Duration::from_secs(1));
        assert_eq!(s.load(), Some(t0));
    }
}
