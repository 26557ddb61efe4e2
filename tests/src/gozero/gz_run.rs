//! The output of `gz-client`: its [`Summary`], its `-v` [`CallLine`]s, a finished [`GzRun`].

use std::collections::BTreeMap;

use serde::Deserialize;

/// The summary line of `gz-client`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Summary {
    /// Calls counted.
    pub calls: u64,
    /// Calls that succeeded.
    pub ok: u64,
    /// Calls that failed.
    pub failed: u64,
    /// Calls per gRPC code name (`OK`, `Unavailable`, ...).
    pub codes: BTreeMap<String, u64>,
    /// Calls per peer address.
    pub peers: BTreeMap<String, u64>,
    /// Calls per `x-server` header value.
    pub servers: BTreeMap<String, u64>,
    /// The first distinct errors.
    pub first_errors: Vec<String>,
    /// Median latency.
    pub p50_ms: f64,
    /// 99th percentile latency.
    pub p99_ms: f64,
    /// Wall time of the calls.
    pub elapsed_ms: f64,
}

/// One `-v` line of `gz-client`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CallLine {
    /// Call index.
    pub call: u64,
    /// The call's hash key (`-hash-keys`), else empty.
    pub key: String,
    /// Peer address.
    pub peer: String,
    /// `x-server` header value.
    pub server: String,
    /// gRPC code name.
    pub code: String,
    /// Reply text, or the status message.
    pub message: String,
}

/// A finished `gz-client` run.
#[derive(Debug, Clone)]
pub struct GzRun {
    /// Its summary (default if it printed none).
    pub summary: Summary,
    /// Its `-v` lines.
    pub calls: Vec<CallLine>,
    /// Its exit status code.
    pub exit_code: Option<i32>,
    /// Its stderr (go-zero logs).
    pub stderr: String,
    /// The YAML it ran with.
    pub yaml: String,
}

impl GzRun {
    /// Share of the calls that went to `peer` (0..=1).
    pub fn share(&self, peer: &str) -> f64 {
        if self.summary.calls == 0 {
            return 0.0;
        }
        self.summary.peers.get(peer).copied().unwrap_or(0) as f64 / self.summary.calls as f64
    }

    /// The shares of `peers`, as `peer=NN%` text.
    pub fn shares_text(&self, peers: &[String]) -> String {
        peers
            .iter()
            .map(|p| format!("{p}={:.0}%", self.share(p) * 100.0))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A description for failure messages: summary, first errors, YAML and the stderr tail.
    pub fn explain(&self) -> String {
        let tail: Vec<&str> = self.stderr.lines().rev().take(15).collect();
        format!(
            "summary: {:?}\nexit: {:?}\nyaml:\n{}\nstderr (last lines, newest first):\n{}",
            self.summary,
            self.exit_code,
            self.yaml,
            tail.join("\n")
        )
    }

    /// Asserts `expected_calls` calls (when given), 0 failures and exit code 0.
    ///
    /// # Panics
    /// When a call failed.
    pub fn assert_all_ok(&self, what: &str, expected_calls: Option<u64>) {
        if let Some(n) = expected_calls {
            assert_eq!(self.summary.calls, n, "{what}: calls\n{}", self.explain());
        }
        assert!(
            self.summary.calls > 0,
            "{what}: no calls\n{}",
            self.explain()
        );
        assert_eq!(
            self.summary.failed,
            0,
            "{what}: failed calls\n{}",
            self.explain()
        );
        assert_eq!(self.exit_code, Some(0), "{what}: exit\n{}", self.explain());
    }

    /// Asserts that each of `peers` got at least `min` of the calls, and nothing else got any.
    ///
    /// # Panics
    /// When a share is below `min`.
    pub fn assert_shares(&self, what: &str, peers: &[String], min: f64) {
        for p in peers {
            assert!(
                self.share(p) >= min,
                "{what}: {p} got {:.1}% of the calls (want >= {:.0}%)\n{}",
                self.share(p) * 100.0,
                min * 100.0,
                self.explain()
            );
        }
        let counted: u64 = peers
            .iter()
            .map(|p| self.summary.peers.get(p).copied().unwrap_or(0))
            .sum();
        assert_eq!(
            counted,
            self.summary.calls,
            "{what}: calls went to unexpected peers\n{}",
            self.explain()
        );
    }
}
