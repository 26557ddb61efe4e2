//! Call statistics of the example clients: latency percentiles and calls per server.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// The outcome of one call.
#[derive(Debug, Clone)]
pub struct Call {
    /// Time from sending the request to receiving the full response (or the error).
    pub latency: Duration,
    /// The `x-server` the response named; `None` for a failed call.
    pub server: Option<String>,
    /// The error of a failed call (`"<code>: <message>"`).
    pub error: Option<String>,
}

/// Aggregated outcome of a run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Number of calls made.
    pub calls: usize,
    /// Number of calls that failed.
    pub failures: usize,
    /// Median latency over all calls.
    pub p50: Duration,
    /// 99th percentile latency over all calls.
    pub p99: Duration,
    /// Successful calls per answering server.
    pub per_server: BTreeMap<String, usize>,
    /// Failed calls per error text.
    pub errors: BTreeMap<String, usize>,
}

impl Summary {
    /// Summarises `calls`.
    pub fn new(calls: &[Call]) -> Self {
        let mut latencies: Vec<Duration> = calls.iter().map(|c| c.latency).collect();
        latencies.sort_unstable();
        let mut summary = Summary {
            calls: calls.len(),
            p50: percentile(&latencies, 0.50),
            p99: percentile(&latencies, 0.99),
            ..Summary::default()
        };
        for call in calls {
            if let Some(error) = &call.error {
                summary.failures += 1;
                *summary.errors.entry(error.clone()).or_default() += 1;
            } else if let Some(server) = &call.server {
                *summary.per_server.entry(server.clone()).or_default() += 1;
            }
        }
        summary
    }

    /// Share (0..=1) of all calls that `server` answered.
    pub fn share(&self, server: &str) -> f64 {
        if self.calls == 0 {
            return 0.0;
        }
        self.per_server.get(server).copied().unwrap_or(0) as f64 / self.calls as f64
    }

    /// A human-readable report, one fact per line.
    pub fn report(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "calls:    {}", self.calls);
        let _ = writeln!(out, "failures: {}", self.failures);
        let _ = writeln!(out, "p50:      {}", fmt_duration(self.p50));
        let _ = writeln!(out, "p99:      {}", fmt_duration(self.p99));
        let _ = writeln!(out, "calls per server:");
        for (server, n) in &self.per_server {
            let _ = writeln!(
                out,
                "  {server:<24} {n:>8} ({:5.1}%)",
                100.0 * self.share(server)
            );
        }
        if !self.errors.is_empty() {
            let _ = writeln!(out, "errors:");
            for (error, n) in &self.errors {
                let _ = writeln!(out, "  {n:>8} x {error}");
            }
        }
        out
    }
}

/// The `q` quantile (0..=1) of sorted `latencies`, nearest-rank; zero when empty.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `1.2 ms`, `105 ms`, `1.50 s`.
pub fn fmt_duration(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", ms / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(ms: u64, server: &str) -> Call {
        Call {
            latency: Duration::from_millis(ms),
            server: Some(server.to_owned()),
            error: None,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let sorted: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&sorted, 0.50), Duration::from_millis(50));
        assert_eq!(percentile(&sorted, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&sorted, 1.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn counts_calls_per_server_and_failures() {
        let mut calls = vec![call(1, "a"), call(2, "a"), call(3, "b")];
        calls.push(Call {
            latency: Duration::from_millis(4),
            server: None,
            error: Some("Unavailable: down".into()),
        });
        let s = Summary::new(&calls);
        assert_eq!(s.calls, 4);
        assert_eq!(s.failures, 1);
        assert_eq!(s.per_server["a"], 2);
        assert_eq!(s.per_server["b"], 1);
        assert!((s.share("a") - 0.5).abs() < 1e-9);
        assert!(s.report().contains("Unavailable: down"));
    }
}
