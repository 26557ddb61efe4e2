//! `ConcurrencyLimit` (zrpc addition): the adaptive concurrency limit and its priority tiers.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use zrpc_core::conf::{ConfError, Validate, duration};
use zrpc_core::limit::LimitConfig;

/// The adaptive concurrency limit (`ConcurrencyLimit` block, a zrpc addition): on when the
/// block is present and `Enabled` (its default). Envoy's gradient controller with its
/// defaults; `docs/overload.md` explains each key. Callers mark a call's tier in the
/// `zrpc-tier` metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ConcurrencyLimitConf {
    /// Turn the limit on (default true: the block's presence turns it on).
    pub enabled: bool,
    /// One limit per method instead of one for the server (default false).
    pub per_method: bool,
    /// The lowest limit, and the concurrency the minimum round-trip time is measured at
    /// (default 3).
    pub min_limit: u32,
    /// The highest limit (default 1000).
    pub max_limit: u32,
    /// Latency above the minimum round-trip time that is not queueing, as a fraction of it
    /// (default 0.25).
    pub buffer: f64,
    /// The sample window after which the limit is computed again (default 100ms).
    #[serde(with = "duration")]
    pub window: Duration,
    /// How often the minimum round-trip time is measured again (default 60s).
    #[serde(with = "duration")]
    pub min_rtt_interval: Duration,
    /// Calls whose median round-trip time is the minimum (default 50).
    pub min_rtt_samples: u32,
    /// The latest start of a measurement after `MinRttInterval`, as a fraction of it
    /// (default 0.15).
    pub jitter: f64,
}

impl Default for ConcurrencyLimitConf {
    fn default() -> Self {
        let d = LimitConfig::default();
        ConcurrencyLimitConf {
            enabled: true,
            per_method: false,
            min_limit: d.min_limit,
            max_limit: d.max_limit,
            buffer: d.buffer,
            window: d.window,
            min_rtt_interval: d.min_rtt_interval,
            min_rtt_samples: d.min_rtt_samples,
            jitter: d.jitter,
        }
    }
}

impl ConcurrencyLimitConf {
    /// The limit's parameters.
    pub fn limit_config(&self) -> LimitConfig {
        let mut c = LimitConfig::default();
        c.min_limit = self.min_limit;
        c.max_limit = self.max_limit;
        c.buffer = self.buffer;
        c.window = self.window;
        c.min_rtt_interval = self.min_rtt_interval;
        c.min_rtt_samples = self.min_rtt_samples;
        c.jitter = self.jitter;
        c
    }

    /// Sets `PerMethod` (default false).
    #[must_use]
    pub fn with_per_method(mut self, per_method: bool) -> Self {
        self.per_method = per_method;
        self
    }
}

impl Validate for ConcurrencyLimitConf {
    fn validate(&self) -> Result<(), ConfError> {
        let key = |k: &str| format!("ConcurrencyLimit.{k}");
        if self.min_limit == 0 {
            return Err(ConfError::invalid(
                key("MinLimit"),
                "0 would admit no call while the minimum round-trip time is measured; use at \
                 least 1 (default 3)",
            ));
        }
        if self.max_limit < self.min_limit {
            return Err(ConfError::invalid(
                key("MaxLimit"),
                format!(
                    "{} is below MinLimit {}; use at least MinLimit (default 1000)",
                    self.max_limit, self.min_limit
                ),
            ));
        }
        for (k, v) in [("Buffer", self.buffer), ("Jitter", self.jitter)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(ConfError::invalid(
                    key(k),
                    format!("{v} is outside [0, 1], a fraction (0.25 = 25 %)"),
                ));
            }
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(10)).contains(&self.window) {
            return Err(ConfError::invalid(
                key("Window"),
                format!("{:?} is outside 1ms..10s (default 100ms)", self.window),
            ));
        }
        if self.min_rtt_interval < Duration::from_secs(1) || self.min_rtt_interval < self.window {
            return Err(ConfError::invalid(
                key("MinRttInterval"),
                format!(
                    "{:?} is below 1s or below Window; the minimum is measured again that \
                     often (default 60s)",
                    self.min_rtt_interval
                ),
            ));
        }
        if !(1..=10_000).contains(&self.min_rtt_samples) {
            return Err(ConfError::invalid(
                key("MinRttSamples"),
                format!("{} is outside 1..10000 (default 50)", self.min_rtt_samples),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::RpcServerConf;

    fn yaml(text: &str) -> Result<RpcServerConf, ConfError> {
        zrpc_core::conf::from_str_with_env(text, zrpc_core::conf::Format::Yaml, "t.yaml", |_| None)
    }

    #[test]
    fn the_block_turns_the_limit_on_with_envoys_defaults() {
        let c = yaml("Name: a\nListenOn: 127.0.0.1:1\n").unwrap();
        assert_eq!(c.concurrency_limit, None, "off without the block");
        let c = yaml("Name: a\nListenOn: 127.0.0.1:1\nConcurrencyLimit: {}\n").unwrap();
        let l = c.concurrency_limit.unwrap();
        assert!(l.enabled && !l.per_method);
        assert_eq!(l.limit_config(), LimitConfig::default());
        let c = yaml(
            "Name: a\nListenOn: 127.0.0.1:1\nConcurrencyLimit:\n  PerMethod: true\n  \
             MaxLimit: 200\n  Window: 50ms\n  MinRttInterval: 2m\n",
        )
        .unwrap();
        let l = c.concurrency_limit.unwrap();
        assert!(l.per_method);
        let cfg = l.limit_config();
        assert_eq!(cfg.max_limit, 200);
        assert_eq!(cfg.window, Duration::from_millis(50));
        assert_eq!(cfg.min_rtt_interval, Duration::from_secs(120));
    }

    #[test]
    fn unknown_and_invalid_keys_are_named() {
        let err = yaml("Name: a\nListenOn: 127.0.0.1:1\nConcurrencyLimit:\n  Limit: 5\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("Limit"), "{err}");
        for (text, key) in [
            ("MinLimit: 0", "ConcurrencyLimit.MinLimit"),
            ("MaxLimit: 2", "ConcurrencyLimit.MaxLimit"),
            ("Buffer: 25", "ConcurrencyLimit.Buffer"),
            ("Jitter: -0.1", "ConcurrencyLimit.Jitter"),
            ("Window: 0s", "ConcurrencyLimit.Window"),
            ("Window: 1m", "ConcurrencyLimit.Window"),
            ("MinRttInterval: 500ms", "ConcurrencyLimit.MinRttInterval"),
            ("MinRttSamples: 0", "ConcurrencyLimit.MinRttSamples"),
            ("PerMethod: yes please", "PerMethod"),
        ] {
            let err = yaml(&format!(
                "Name: a\nListenOn: 127.0.0.1:1\nConcurrencyLimit:\n  {text}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }
}
