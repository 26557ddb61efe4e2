//! W3C trace-context pass-through, for builds without OpenTelemetry.
//!
//! go-zero services send `traceparent` (and `tracestate`, `baggage`) on every call. A zrpc
//! service built without the `otel` feature exports no spans, so it takes no part in the trace:
//! its server keeps a call's fields ([`TraceContext::extract`]) while it polls the handler
//! ([`TraceContext::in_scope`]), and its client copies them onto the calls the handler makes
//! ([`inject_current`]). The next service's spans then hang under the caller's, and the trace id
//! survives a hop through Rust. Like a tracing span, the context follows the handler's own task:
//! a task the handler spawns does not carry it.

use std::cell::RefCell;

use http::{HeaderMap, HeaderName, HeaderValue};

/// W3C `traceparent`.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// W3C `tracestate`.
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
/// W3C `baggage`.
pub const BAGGAGE: HeaderName = HeaderName::from_static("baggage");

/// The trace-context fields of one call: a valid `traceparent`, and `tracestate` and `baggage`
/// when present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: HeaderValue,
    tracestate: Option<HeaderValue>,
    baggage: Option<HeaderValue>,
}

thread_local! {
    static CURRENT: RefCell<Option<TraceContext>> = const { RefCell::new(None) };
}

impl TraceContext {
    /// The fields of `headers`, when their `traceparent` is valid as OpenTelemetry's propagator
    /// reads it (32 and 16 lowercase hex digits, neither all zeros, 2 hex digits of flags, and
    /// for version `00` nothing more and flags of at most `02`). An invalid or absent
    /// `traceparent` carries nothing, as OpenTelemetry's propagator drops it.
    pub fn extract(headers: &HeaderMap) -> Option<Self> {
        let traceparent = super::find_header(headers, &TRACEPARENT)?;
        if !is_valid_traceparent(traceparent.as_bytes()) {
            return None;
        }
        Some(TraceContext {
            traceparent: traceparent.clone(),
            tracestate: super::find_header(headers, &TRACESTATE).cloned(),
            baggage: super::find_header(headers, &BAGGAGE).cloned(),
        })
    }

    /// The call's trace id (32 hex digits).
    pub fn trace_id(&self) -> &str {
        // validated in `extract`: `<2 hex>-<32 hex>-...`; a later version's tail may hold
        // octets that are not visible ASCII, so not `HeaderValue::to_str` of the whole value
        let id = self.traceparent.as_bytes().get(3..35).unwrap_or_default();
        std::str::from_utf8(id).unwrap_or("")
    }

    /// Runs `f` with this context current on this thread (a server polls its handler so), and
    /// restores the previous one afterwards, also when `f` panics.
    pub fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<TraceContext>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                CURRENT.with(|c| *c.borrow_mut() = previous);
            }
        }
        let previous = CURRENT.with(|c| c.borrow_mut().replace(self.clone()));
        let _restore = Restore(previous);
        f()
    }

    /// Sets the fields on `headers`, leaving any the caller set itself; baggage is merged (see
    /// [`merge_baggage`]).
    pub fn inject(&self, headers: &mut HeaderMap) {
        let fields = [
            (TRACEPARENT, Some(&self.traceparent)),
            (TRACESTATE, self.tracestate.as_ref()),
        ];
        for (name, value) in fields {
            if let Some(v) = value
                && !headers.contains_key(&name)
            {
                headers.insert(name, v.clone());
            }
        }
        if let Some(b) = &self.baggage {
            merge_baggage(headers, b);
        }
    }
}

/// `f` of the context current on this thread (see [`TraceContext::in_scope`]), if any: how a log
/// line written while a server polls a call's handler finds the call's trace id.
pub fn with_current<R>(f: impl FnOnce(Option<&TraceContext>) -> R) -> R {
    CURRENT.with(|c| f(c.borrow().as_ref()))
}

/// Sets the current context's fields (see [`TraceContext::in_scope`]) on `headers`; nothing
/// outside a scope.
pub fn inject_current(headers: &mut HeaderMap) {
    CURRENT.with(|c| {
        if let Some(cx) = c.borrow().as_ref() {
            cx.inject(headers);
        }
    });
}

/// W3C's limit on a `baggage` header (bytes).
const MAX_BAGGAGE: usize = 8192;

/// Adds the members of `baggage` to the `baggage` header of `headers`: a member whose key the
/// header already has keeps the header's value (what the call sets itself wins over what it
/// passes on), and members that would take the header past W3C's 8192 bytes are left out.
/// Metadata is merged, never replaced.
pub fn merge_baggage(headers: &mut HeaderMap, baggage: &HeaderValue) {
    let Some(own) = headers.get(&BAGGAGE) else {
        headers.insert(BAGGAGE, baggage.clone());
        return;
    };
    let (Ok(own), Ok(more)) = (own.to_str(), baggage.to_str()) else {
        return;
    };
    let key = |member: &str| {
        member
            .split(['=', ';'])
            .next()
            .unwrap_or("")
            .trim()
            .to_owned()
    };
    let keys: Vec<String> = own.split(',').map(key).collect();
    let mut merged = own.to_owned();
    for member in more.split(',').filter(|m| !m.trim().is_empty()) {
        if keys.contains(&key(member)) || merged.len() + 1 + member.len() > MAX_BAGGAGE {
            continue;
        }
        merged.push(',');
        merged.push_str(member.trim());
    }
    if let Ok(v) = HeaderValue::from_str(&merged) {
        headers.insert(BAGGAGE, v);
    }
}

/// OpenTelemetry's propagators' rule (Go's `propagation/trace_context.go`, Rust's
/// `TraceContextPropagator`): a version of 2 lowercase hex digits other than `ff`, a trace id of
/// 32 and a span id of 16 lowercase hex digits, neither all zeros, 2 hex digits of flags;
/// version `00` ends there and has flags of at most `02`; a later version may go on after a `-`.
fn is_valid_traceparent(t: &[u8]) -> bool {
    let hex = |s: &[u8]| s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let nonzero = |s: &[u8]| s.iter().any(|b| *b != b'0');
    if t.len() < 55 || t[2] != b'-' || t[35] != b'-' || t[52] != b'-' {
        return false;
    }
    let fields_ok = hex(&t[..2])
        && hex(&t[3..35])
        && nonzero(&t[3..35])
        && hex(&t[36..52])
        && nonzero(&t[36..52])
        && hex(&t[53..55]);
    fields_ok
        && match &t[..2] {
            b"ff" => false,
            b"00" => t.len() == 55 && matches!(&t[53..55], b"00" | b"01" | b"02"),
            _ => t.len() == 55 || t[55] == b'-',
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn extracts_a_valid_traceparent_with_its_state_and_baggage() {
        let cx = TraceContext::extract(&headers(&[
            ("traceparent", TP),
            ("tracestate", "go=1"),
            ("baggage", "user=alice"),
        ]))
        .unwrap();
        assert_eq!(cx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let mut out = HeaderMap::new();
        cx.inject(&mut out);
        assert_eq!(out["traceparent"], TP);
        assert_eq!(out["tracestate"], "go=1");
        assert_eq!(out["baggage"], "user=alice");
    }

    /// Found by fuzzing against OpenTelemetry's rule: a later version is taken (and passed on
    /// as it came), version 00's unknown flags are not.
    #[test]
    fn later_versions_are_taken_as_opentelemetry_takes_them() {
        for good in [
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-the-future-holds",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02",
        ] {
            let cx = TraceContext::extract(&headers(&[("traceparent", good)]));
            assert!(cx.is_some(), "{good:?}");
        }
        let mut h = HeaderMap::new();
        let odd = b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-\xff";
        h.insert("traceparent", HeaderValue::from_bytes(odd).unwrap());
        let cx = TraceContext::extract(&h).unwrap();
        assert_eq!(cx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn an_invalid_or_absent_traceparent_carries_nothing() {
        for bad in [
            "",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            let h = headers(&[("traceparent", bad), ("baggage", "user=alice")]);
            assert!(TraceContext::extract(&h).is_none(), "{bad:?}");
        }
        assert!(TraceContext::extract(&headers(&[("baggage", "user=alice")])).is_none());
    }

    #[test]
    fn baggage_is_merged_with_the_calls_own() {
        let cx = TraceContext::extract(&headers(&[
            ("traceparent", TP),
            ("baggage", "user=alice,tenant=t1;p=1"),
        ]))
        .unwrap();
        // the call's own member wins on its key; the others are added
        let mut out = headers(&[("baggage", "tenant=t2, region=eu"), ("x-own", "1")]);
        cx.inject(&mut out);
        assert_eq!(out["baggage"], "tenant=t2, region=eu,user=alice");
        assert_eq!(out["x-own"], "1");
        assert_eq!(out["traceparent"], TP);
        // nothing of its own: the caller's as it came
        let mut out = HeaderMap::new();
        cx.inject(&mut out);
        assert_eq!(out["baggage"], "user=alice,tenant=t1;p=1");
        // never past W3C's 8192 bytes
        let big = format!("big={}", "x".repeat(8190));
        let mut out = headers(&[("baggage", "a=1")]);
        merge_baggage(&mut out, &HeaderValue::from_str(&big).unwrap());
        assert_eq!(out["baggage"], "a=1");
    }

    #[test]
    fn the_scope_injects_and_ends_with_its_closure() {
        let cx = TraceContext::extract(&headers(&[("traceparent", TP)])).unwrap();
        let mut inside = HeaderMap::new();
        cx.in_scope(|| inject_current(&mut inside));
        assert_eq!(inside["traceparent"], TP);
        let mut outside = HeaderMap::new();
        inject_current(&mut outside);
        assert!(outside.is_empty());
        // a field the caller set itself is kept
        let mut own = headers(&[("traceparent", "mine")]);
        cx.in_scope(|| inject_current(&mut own));
        assert_eq!(own["traceparent"], "mine");
        // restored after a panic too
        let _ = std::panic::catch_unwind(|| cx.in_scope(|| panic!("handler panicked")));
        let mut after = HeaderMap::new();
        inject_current(&mut after);
        assert!(after.is_empty());
    }
}
