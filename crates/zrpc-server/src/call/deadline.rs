//! The caller's deadline: read from `grpc-timeout` as the request arrives, enforced by the
//! stage executor over the whole call (`stage::governor`).

use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use zrpc_core::grpc::timeout as grpc_timeout;

/// The deadline a caller set with `grpc-timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallerDeadline {
    /// When it passes.
    pub(crate) at: Instant,
    /// The timeout it was set with, from the request's arrival.
    pub(crate) timeout: Duration,
}

impl CallerDeadline {
    /// The deadline the caller's `grpc-timeout` sets, counted from now (the serve loop reads
    /// it once as the request arrives and hands it to the governor in the call's `Arrival`).
    #[inline]
    pub(crate) fn of(headers: &http::HeaderMap) -> Option<CallerDeadline> {
        Self::read(headers).0
    }

    /// [`of`](Self::of), and whether a `grpc-timeout` is there that does not parse (which
    /// the transport's `Front` answers with HTTP 400, as grpc-go does): one scan of the
    /// headers for both.
    #[inline]
    pub(crate) fn read(headers: &http::HeaderMap) -> (Option<CallerDeadline>, bool) {
        let Some(value) = zrpc_core::grpc::find_header(headers, &grpc_timeout::GRPC_TIMEOUT_HEADER)
        else {
            return (None, false);
        };
        let Some(timeout) = grpc_timeout::parse(value.as_bytes()) else {
            return (None, true);
        };
        let deadline = Instant::now()
            .checked_add(timeout)
            .map(|at| CallerDeadline { at, timeout });
        (deadline, false)
    }

    /// Whether a caller that went away at `now` did so because its deadline passed: at the
    /// deadline, or within [`NEAR_DEADLINE`] (and a tenth of its timeout) before it.
    pub(crate) fn passed_for_reset(&self, now: Instant) -> bool {
        let slack = NEAR_DEADLINE.min(self.timeout / 10);
        now + slack >= self.at
    }
}

/// How early before its deadline a caller's reset still counts as the deadline passing.
///
/// A caller starts its clock before it sends, so the server's deadline (counted from arrival)
/// comes later than the caller's by about the time the request took to arrive, and the
/// caller's `RST_STREAM` at its deadline arrives at about the server's deadline: whichever of
/// the two the server sees first is chance. `grpc-timeout`'s precision and the time between the
/// caller fixing its deadline and writing the header move it a little earlier, and on a busy
/// machine (the caller's task waiting for a core before it sends) tens of milliseconds earlier:
/// 100 ms, or a tenth of the timeout when that is less. A caller cancelling on purpose that
/// close to its deadline is recorded as the deadline.
const NEAR_DEADLINE: Duration = Duration::from_millis(100);

/// A call's deadline and, once armed, its timer.
///
/// The timer is armed only when the call is still pending after a poll: most unary handlers
/// answer at their first poll, and a tokio `Sleep` made for each call (a clock read, a runtime
/// handle clone, ~100 bytes more in the call's future) cost them for nothing. Armed, it is
/// boxed, so the future stays small.
#[derive(Debug)]
pub(crate) struct Timer {
    deadline: Option<Instant>,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Timer {
    pub(crate) fn new(deadline: Option<Instant>) -> Self {
        Timer {
            deadline,
            sleep: None,
        }
    }

    /// The deadline.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the deadline has passed, for a call that is still pending (registers the
    /// wake-up otherwise).
    pub(crate) fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.deadline else {
            return false;
        };
        self.sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)))
            .as_mut()
            .poll(cx)
            .is_ready()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_near_the_deadline_is_the_deadline() {
        let ms = Duration::from_millis;
        let d = |timeout| CallerDeadline {
            at: Instant::now() + timeout,
            timeout,
        };
        // A long timeout: at most 100 ms before.
        let long = d(Duration::from_secs(5));
        assert!(long.passed_for_reset(long.at));
        assert!(long.passed_for_reset(long.at + ms(5)));
        assert!(long.passed_for_reset(long.at - ms(100)));
        assert!(!long.passed_for_reset(long.at - ms(101)));
        // A short timeout: a tenth of it.
        let short = d(ms(50));
        assert!(short.passed_for_reset(short.at - ms(5)));
        assert!(!short.passed_for_reset(short.at - ms(6)));
    }

    #[test]
    fn the_caller_deadline_is_read_from_grpc_timeout() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(CallerDeadline::of(&headers), None);
        headers.insert("grpc-timeout", http::HeaderValue::from_static("250m"));
        let before = Instant::now();
        let d = CallerDeadline::of(&headers).unwrap();
        assert_eq!(d.timeout, Duration::from_millis(250));
        let t = Duration::from_millis(250);
        assert!(d.at >= before + t && d.at <= Instant::now() + t);
        headers.insert("grpc-timeout", http::HeaderValue::from_static("bad"));
        assert_eq!(CallerDeadline::of(&headers), None);
    }
}
