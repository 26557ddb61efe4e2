//! One read of the final status for several observers: [`Both`] feeds two records in the
//! order two nested bodies would report, and [`RecordersRecord`] is stat's and metrics' pair,
//! which share one clock read at the end of the call. The governor's single body wrapper
//! reports to every observing stage (stat, metrics, breaker, limit, shedding, trace) through these.

use zrpc_core::grpc::OnStatus;

use super::metrics::MetricsRecord;
use super::stat::StatRecord;

/// The records of two adjacent stages, fed by one read of the final status: `inner`'s first,
/// then `outer`'s, as two nested bodies would report.
#[derive(Debug)]
pub(crate) struct Both<O, I> {
    pub(crate) outer: Option<O>,
    pub(crate) inner: Option<I>,
}

impl<O, I> Default for Both<O, I> {
    fn default() -> Self {
        Both {
            outer: None,
            inner: None,
        }
    }
}

impl<O, I> Both<O, I> {
    /// Whether neither stage records this call.
    pub(crate) fn is_empty(&self) -> bool {
        self.outer.is_none() && self.inner.is_none()
    }
}

impl<O: OnStatus, I: OnStatus> OnStatus for Both<O, I> {
    fn on_status(self, c: i32) {
        if let Some(inner) = self.inner {
            inner.on_status(c);
        }
        if let Some(outer) = self.outer {
            outer.on_status(c);
        }
    }
}

/// Stat's and metrics', which share the call's start, and one
/// clock read at the end for both durations.
#[derive(Debug)]
pub(crate) struct RecordersRecord(Both<StatRecord, MetricsRecord>);

impl RecordersRecord {
    /// Stat's record (outer) and metrics' (inner), started at the same instant.
    pub(crate) fn new(stat: Option<StatRecord>, metrics: Option<MetricsRecord>) -> Self {
        RecordersRecord(Both {
            outer: stat,
            inner: metrics,
        })
    }

    /// Reports the final code `c`, the call having ended at `now`.
    pub(crate) fn finish(self, c: i32, now: tokio::time::Instant) {
        let Both { outer, inner } = self.0;
        let start = match (&outer, &inner) {
            (_, Some(m)) => m.started(),
            (Some(s), None) => s.started(),
            (None, None) => return,
        };
        let elapsed = now.saturating_duration_since(start);
        // Inner first, as two nested bodies would report.
        if let Some(m) = inner {
            m.report(elapsed, c);
        }
        if let Some(s) = outer {
            s.report(elapsed, c);
        }
    }
}

#[cfg(test)]
mod tests {
    use zrpc_core::grpc::code;

    use super::*;

    #[test]
    fn both_reports_inner_then_outer_once() {
        let seen = std::cell::RefCell::new(Vec::new());
        let push = |tag: &'static str| {
            let seen = &seen;
            move |c: i32| seen.borrow_mut().push((tag, c))
        };
        Both {
            outer: Some(push("outer")),
            inner: Some(push("inner")),
        }
        .on_status(code::INTERNAL);
        Both::<fn(i32), _> {
            outer: None,
            inner: Some(push("inner")),
        }
        .on_status(code::OK);
        assert_eq!(
            *seen.borrow(),
            [
                ("inner", code::INTERNAL),
                ("outer", code::INTERNAL),
                ("inner", code::OK)
            ]
        );
    }
}
