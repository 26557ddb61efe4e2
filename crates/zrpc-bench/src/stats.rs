//! What a load generator reports (the same JSON from the Rust and the Go generator), per-call
//! records, percentiles and medians.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// gRPC code a generator writes for a call the client's breaker dropped locally (not a real
/// gRPC code: 100 + Unavailable).
pub(crate) const DROPPED: u32 = 114;

/// A load generator's summary line.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Summary {
    /// Calls counted.
    pub(crate) calls: u64,
    /// Calls that ended OK.
    pub(crate) ok: u64,
    /// Calls that failed (dropped ones included).
    pub(crate) failed: u64,
    /// Calls the client's own breaker refused.
    #[serde(default)]
    pub(crate) dropped: u64,
    /// Calls per gRPC code name.
    #[serde(default)]
    pub(crate) codes: BTreeMap<String, u64>,
    /// Successful calls per answering server (`x-server`).
    #[serde(default)]
    pub(crate) servers: BTreeMap<String, u64>,
    /// Latency percentiles of all calls, ms.
    pub(crate) p50_ms: f64,
    /// 99th percentile, ms.
    pub(crate) p99_ms: f64,
    /// 99.9th percentile, ms.
    #[serde(default)]
    pub(crate) p999_ms: f64,
    /// Wall time of the measured part, ms.
    pub(crate) elapsed_ms: f64,
    /// The generator's own CPU time per call, µs.
    #[serde(default)]
    pub(crate) cpu_us: f64,
    /// The generator's peak RSS, MB.
    #[serde(default)]
    pub(crate) rss_mb: f64,
    /// When the measured part started (records' time 0), ms since the Unix epoch.
    #[serde(default)]
    pub(crate) t0_unix_ms: f64,
    /// Streamed messages received in completed streams (`load --stream`; 0 for unary calls).
    #[serde(default)]
    pub(crate) messages: u64,
    /// Octets the generator wrote per call (its connections' HTTP/2 frames: the requests on
    /// the wire, TCP/IP headers aside), from `/proc/self/io`.
    #[serde(default)]
    pub(crate) sent_per_call: f64,
}

impl Summary {
    /// Calls per second.
    pub(crate) fn rate(&self) -> f64 {
        if self.elapsed_ms <= 0.0 {
            return 0.0;
        }
        self.calls as f64 * 1000.0 / self.elapsed_ms
    }
}

/// One call, as written to a records file: `start_ms latency_ms code server [tier]` (the Go
/// generator writes no tier).
#[derive(Debug, Clone)]
pub(crate) struct Record {
    /// Start, ms since the generator's first call.
    pub(crate) start_ms: f64,
    /// Latency, ms.
    pub(crate) latency_ms: f64,
    /// gRPC code (0 = OK), or [`DROPPED`].
    pub(crate) code: u32,
    /// The answering server (`-` when unknown).
    pub(crate) server: String,
    /// Sent as `zrpc-tier: critical`.
    pub(crate) critical: bool,
}

/// Reads a records file.
pub(crate) fn read_records(path: &Path) -> Result<Vec<Record>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the records file {}", path.display()))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(s), Some(l), Some(c), Some(srv)) = (f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        out.push(Record {
            start_ms: s.parse().unwrap_or(0.0),
            latency_ms: l.parse().unwrap_or(0.0),
            code: c.parse().unwrap_or(2),
            server: srv.to_owned(),
            critical: f.next() == Some("critical"),
        });
    }
    out.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    Ok(out)
}

/// Nearest-rank percentile of sorted values (`q` in 0..=1); 0 for none.
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[rank]
}

/// The median (upper middle for an even count) of the figures that are numbers (a round that
/// measured nothing is NaN and left out); 0 for none.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The name of a numeric gRPC code.
pub(crate) fn code_name(code: u32) -> String {
    if code == DROPPED {
        return "Dropped".to_owned();
    }
    format!("{:?}", tonic::Code::from_i32(code as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 0.999), 100.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn median_takes_the_upper_middle() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![f64::NAN, 1.0, 3.0, 2.0]), 2.0, "NaN: no figure");
        assert_eq!(median(vec![f64::NAN]), 0.0);
    }
}
