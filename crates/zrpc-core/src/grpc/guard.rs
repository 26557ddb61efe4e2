//! A callback that runs exactly once: with the final code, or with Cancelled on drop.

use std::fmt;

use http_body::Frame;

use super::{code, status_from_headers};

/// Receives the final gRPC code of a request, once.
///
/// Implemented for every `FnOnce(i32)` closure; layers whose futures must be nameable
/// implement it on a small struct instead (closures have no nameable type).
pub trait OnStatus {
    /// Called exactly once with the final numeric gRPC code.
    fn on_status(self, code: i32);
}

impl<F: FnOnce(i32)> OnStatus for F {
    fn on_status(self, code: i32) {
        self(code);
    }
}

/// Holds an [`OnStatus`] callback (e.g. an `FnOnce(i32)`) that must see the request's final gRPC code exactly once.
///
/// [`fire`](Self::fire) calls it with the given code; dropping the guard unfired calls it
/// with [`code::CANCELLED`]: a future or body dropped before it finished (the caller went
/// away, a timeout dropped it, the connection died) is still accounted for.
pub struct StatusGuard<F: OnStatus> {
    on_status: Option<F>,
}

impl<F: OnStatus> StatusGuard<F> {
    /// Arms a guard.
    pub fn new(on_status: F) -> Self {
        Self {
            on_status: Some(on_status),
        }
    }

    /// A guard that never calls anything (the status was already reported).
    pub fn disarmed() -> Self {
        Self { on_status: None }
    }

    /// Reports `code`; later calls and the drop do nothing.
    pub fn fire(&mut self, code: i32) {
        if let Some(f) = self.on_status.take() {
            f.on_status(code);
        }
    }

    /// Takes the callback out without calling it (to move it into a body wrapper).
    pub fn take(&mut self) -> Option<F> {
        self.on_status.take()
    }

    /// The callback, while it has not run.
    pub fn get(&self) -> Option<&F> {
        self.on_status.as_ref()
    }

    /// The callback, mutably, while it has not run (to add to a record before it reports).
    pub fn get_mut(&mut self) -> Option<&mut F> {
        self.on_status.as_mut()
    }

    /// Whether the callback has not run yet.
    pub fn is_armed(&self) -> bool {
        self.on_status.is_some()
    }

    /// Reports the final status that a response body's `poll_frame` output carries, if any:
    /// the `grpc-status` of its trailers ([`code::UNKNOWN`] when they have none), or
    /// [`code::UNKNOWN`] when the body ends or fails without trailers. A data frame reports
    /// nothing. What [`StatusBody`](super::StatusBody) does with each frame, for a body
    /// wrapper of one's own.
    #[inline]
    pub fn observe<D, E>(&mut self, item: &Option<Result<Frame<D>, E>>) {
        // A body with nothing to report (status known, nobody listening) reads no trailers.
        if !self.is_armed() {
            return;
        }
        match item {
            Some(Ok(frame)) => {
                if let Some(trailers) = frame.trailers_ref() {
                    self.fire(status_from_headers(trailers).unwrap_or(code::UNKNOWN));
                }
            }
            Some(Err(_)) | None => self.fire(code::UNKNOWN),
        }
    }
}

impl<F: OnStatus> Drop for StatusGuard<F> {
    fn drop(&mut self) {
        self.fire(code::CANCELLED);
    }
}

impl<F: OnStatus> fmt::Debug for StatusGuard<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatusGuard")
            .field("armed", &self.is_armed())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn fires_once_and_cancelled_on_drop() {
        let seen = Cell::new(Vec::new());
        let push = |c| {
            let mut v = seen.take();
            v.push(c);
            seen.set(v);
        };
        {
            let mut g = StatusGuard::new(push);
            g.fire(code::OK);
            g.fire(code::INTERNAL);
        }
        {
            let _g = StatusGuard::new(push);
        }
        assert_eq!(seen.take(), vec![code::OK, code::CANCELLED]);
    }
}
