//! A rolling window of time buckets.
//!
//! Port of go-zero's `core/collection/rollingwindow.go` (`RollingWindow[T, B]`), with the same
//! offset and reset semantics, and time passed in:
//!
//! - The window holds `size` buckets of `interval` each, in a ring. `offset` is the ring index of the
//!   bucket being filled; `last_time` is the start of that bucket, always on the grid
//!   `origin + k * interval`.
//! - [`add`](RollingWindow::add) first moves the window: `span = (now - last_time) / interval`
//!   (capped at `size`); the `span` buckets after `offset` are reset, `offset` moves on by `span` and
//!   `last_time` is realigned to the grid. Then the value goes into the bucket at `offset`.
//! - [`reduce`](RollingWindow::reduce) does not move the window. It visits the buckets that are still
//!   inside the window at `now`, **oldest to newest**: `size - span` buckets starting at
//!   `(offset + span + 1) % size`. Buckets that would be newer than the last written one are
//!   skipped (they are logically empty). With *ignore current* set and `span == 0`, only `size - 1`
//!   buckets are visited, so the partially filled current bucket is left out (the shedder uses this).
//!
//! One difference: go-zero starts the bucket grid when the window is constructed; here the grid is
//! anchored at the first [`add`](RollingWindow::add), since construction takes no time. Before the
//! first `add` every bucket is empty, so this is only visible as a different bucket phase.
//!
//! The window is a plain `&mut self` structure; callers that share it wrap it in a lock (the breaker
//! and the shedder hold a short `parking_lot::Mutex` around it).

use std::fmt::Debug;
use std::ops::AddAssign;
use std::time::{Duration, Instant};

/// A bucket of a [`RollingWindow`]: something values can be added to and that can be reset.
pub trait Bucket: Default + Debug {
    /// The value type added to the bucket.
    type Value;

    /// Adds one value to the bucket.
    fn add(&mut self, v: Self::Value);

    /// Empties the bucket.
    fn reset(&mut self);
}

/// The default bucket: the sum of the values added and how many were added (go-zero `Bucket[T]`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SumBucket<T = f64> {
    /// The sum of the values added.
    pub sum: T,
    /// How many values were added.
    pub count: u64,
}

impl<T: Copy + Default + AddAssign + Debug> Bucket for SumBucket<T> {
    type Value = T;

    #[inline]
    fn add(&mut self, v: T) {
        self.sum += v;
        self.count += 1;
    }

    #[inline]
    fn reset(&mut self) {
        *self = SumBucket::default();
    }
}

/// A ring of `size` time buckets of `interval` each (go-zero `collection.RollingWindow`).
///
/// See the [module docs](self) for the exact semantics.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// use zrpc_core::window::{RollingWindow, SumBucket};
///
/// let t0 = Instant::now();
/// let ms = Duration::from_millis;
/// let mut w: RollingWindow<SumBucket<f64>> = RollingWindow::new(3, ms(50));
/// w.add(1.0, t0);
/// w.add(2.0, t0 + ms(50));
/// w.add(3.0, t0 + ms(60));
/// let mut sums = Vec::new();
/// w.reduce(t0 + ms(60), |b| sums.push(b.sum));
/// assert_eq!(sums, [0.0, 1.0, 5.0]); // oldest -> newest
/// ```
#[derive(Debug, Clone)]
pub struct RollingWindow<B = SumBucket> {
    buckets: Box<[B]>,
    interval: Duration,
    offset: usize,
    ignore_current: bool,
    /// Start of the bucket at `offset`; `None` until the first `add`.
    last_time: Option<Instant>,
}

impl<B: Bucket> RollingWindow<B> {
    /// Creates a window of `size` buckets of `interval` each.
    ///
    /// # Panics
    ///
    /// Panics if `size` is 0 or `interval` is zero (go-zero panics on `size < 1` too).
    #[must_use]
    pub fn new(size: usize, interval: Duration) -> Self {
        assert!(size >= 1, "rolling window size must be greater than 0");
        assert!(!interval.is_zero(), "rolling window interval must be > 0");
        RollingWindow {
            buckets: (0..size).map(|_| B::default()).collect(),
            interval,
            offset: 0,
            ignore_current: false,
            last_time: None,
        }
    }

    /// Leaves the current (partially filled) bucket out of [`reduce`](Self::reduce) (go-zero
    /// `IgnoreCurrentBucket`). Default: false.
    #[must_use]
    pub fn ignore_current(mut self, ignore: bool) -> Self {
        self.ignore_current = ignore;
        self
    }

    /// The number of buckets.
    #[must_use]
    pub fn size(&self) -> usize {
        self.buckets.len()
    }

    /// The duration of one bucket.
    #[must_use]
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The start of the bucket the last [`add`](Self::add) went into (`None` before the first add).
    ///
    /// That bucket stays inside the window until `start + size * interval`.
    #[must_use]
    pub fn current_bucket_start(&self) -> Option<Instant> {
        self.last_time
    }

    /// Adds `v` to the bucket of `now`, first expiring the buckets that fell out of the window.
    pub fn add(&mut self, v: B::Value, now: Instant) {
        self.update_offset(now);
        let offset = self.offset;
        self.buckets[offset].add(v);
    }

    /// Calls `f` on every bucket still inside the window at `now`, oldest to newest.
    ///
    /// Does not move the window.
    pub fn reduce(&self, now: Instant, f: impl FnMut(&B)) {
        let size = self.size();
        let span = match self.last_time {
            Some(last) => self.span(last, now),
            // Nothing written yet: every bucket is empty, visit them all like go-zero does.
            None => 0,
        };
        let count = if span == 0 && self.ignore_current {
            size - 1
        } else {
            size - span
        };
        let start = (self.offset + span + 1) % size;
        // The ring from `start`, `count` buckets long: two slices, no modulo per bucket.
        let head = &self.buckets[start..size.min(start + count)];
        let tail = &self.buckets[..count - head.len()];
        head.iter().chain(tail).for_each(f);
    }

    /// Whole intervals between `last` and `now`, capped at `size`.
    #[inline]
    fn span(&self, last: Instant, now: Instant) -> usize {
        let elapsed = now.saturating_duration_since(last);
        // Most adds land in the current bucket: no 128-bit division for them.
        if elapsed < self.interval {
            return 0;
        }
        let span = elapsed.as_nanos() / self.interval.as_nanos();
        usize::try_from(span).map_or(self.size(), |s| s.min(self.size()))
    }

    fn update_offset(&mut self, now: Instant) {
        let Some(last) = self.last_time else {
            self.last_time = Some(now);
            return;
        };
        let span = self.span(last, now);
        if span == 0 {
            return;
        }
        let size = self.size();
        for i in 0..span {
            self.buckets[(self.offset + i + 1) % size].reset();
        }
        self.offset = (self.offset + span) % size;
        // Align to the interval grid: now - (now - last) % interval.
        let elapsed = now.saturating_duration_since(last).as_nanos();
        let rem = elapsed % self.interval.as_nanos();
        // rem < interval, which fits in a Duration.
        let rem = Duration::from_nanos(u64::try_from(rem).unwrap_or(u64::MAX));
        self.last_time = Some(now - rem);
    }
}

#[cfg(test)]
mod tests;
