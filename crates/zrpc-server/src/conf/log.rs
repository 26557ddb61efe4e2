//! The `Log` block: go-zero's `logx.LogConf` (`core/logx/config.go`), every key and default.
//!
//! zrpc honours `Mode` (console, or go-zero's files under `Path`), `Encoding`, `Level` and
//! `ServiceName` (the `volume` directory); the other keys are accepted, and the ones that would
//! change go-zero's output are reported by [`super::RpcServerConf::ignored_keys`].

use serde::{Deserialize, Serialize};
use zrpc_core::conf::{ConfError, Validate};

use super::one_of;

/// Logging settings (go-zero `logx.LogConf`). All of go-zero's keys are accepted; which ones
/// zrpc honours is listed in `docs/configuration.md`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct LogConf {
    /// Service name; in `volume` mode the log directory is `Path/ServiceName/<hostname>`
    /// (default: the service `Name`).
    pub service_name: String,
    /// `console` (default, stdout), `file` (files under `Path`) or `volume` (files under
    /// `Path/ServiceName/<hostname>`).
    pub mode: String,
    /// `json` (default) or `plain`. Neither carries colour escape codes.
    pub encoding: String,
    /// Timestamp format (Go layout; accepted, not implemented).
    pub time_format: String,
    /// Log directory for the `file` and `volume` modes (default `logs`).
    pub path: String,
    /// `debug`, `info` (default), `error` or `severe`.
    pub level: String,
    /// Truncate log content longer than this (0 = no limit; accepted, not implemented).
    pub max_content_length: u32,
    /// Compress rotated files (accepted, not implemented).
    pub compress: bool,
    /// Log periodic statistics (default true; accepted, zrpc writes no stat log).
    pub stat: bool,
    /// Days to keep log files (0 = forever; accepted, not implemented).
    pub keep_days: i64,
    /// Cooldown between stack traces in ms (default 100; accepted, not implemented).
    pub stack_cooldown_millis: i64,
    /// Rotated files to keep (0 = all; accepted, not implemented).
    pub max_backups: i64,
    /// Max file size in MB for size rotation (0 = no limit; accepted, not implemented).
    pub max_size: i64,
    /// `daily` (default) or `size` (accepted; zrpc does not rotate its files).
    pub rotation: String,
    /// Time format in rotated file names (accepted, not implemented).
    pub file_time_format: String,
    /// Renamed JSON field keys (accepted, not implemented).
    pub field_keys: LogFieldKeys,
}

impl Default for LogConf {
    fn default() -> Self {
        LogConf {
            service_name: String::new(),
            mode: "console".to_owned(),
            encoding: "json".to_owned(),
            time_format: String::new(),
            path: "logs".to_owned(),
            level: "info".to_owned(),
            max_content_length: 0,
            compress: false,
            stat: true,
            keep_days: 0,
            stack_cooldown_millis: 100,
            max_backups: 0,
            max_size: 0,
            rotation: "daily".to_owned(),
            file_time_format: String::new(),
            field_keys: LogFieldKeys::default(),
        }
    }
}

impl LogConf {
    /// `Mode` is `file` or `volume`: log lines go to files under `Path`, not to stdout.
    pub fn writes_files(&self) -> bool {
        matches!(self.mode.as_str(), "file" | "volume")
    }
}

impl Validate for LogConf {
    fn validate(&self) -> Result<(), ConfError> {
        one_of("Log.Mode", &self.mode, &["console", "file", "volume"])?;
        one_of("Log.Encoding", &self.encoding, &["json", "plain"])?;
        one_of(
            "Log.Level",
            &self.level,
            &["debug", "info", "error", "severe"],
        )?;
        one_of("Log.Rotation", &self.rotation, &["daily", "size"])
    }
}

/// go-zero `logx` field key names (`Log.FieldKeys`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct LogFieldKeys {
    /// Default `caller`.
    pub caller_key: String,
    /// Default `content`.
    pub content_key: String,
    /// Default `duration`.
    pub duration_key: String,
    /// Default `level`.
    pub level_key: String,
    /// Default `span`.
    pub span_key: String,
    /// Default `@timestamp`.
    pub timestamp_key: String,
    /// Default `trace`.
    pub trace_key: String,
    /// Default `truncated`.
    pub truncated_key: String,
}

impl Default for LogFieldKeys {
    fn default() -> Self {
        LogFieldKeys {
            caller_key: "caller".to_owned(),
            content_key: "content".to_owned(),
            duration_key: "duration".to_owned(),
            level_key: "level".to_owned(),
            span_key: "span".to_owned(),
            timestamp_key: "@timestamp".to_owned(),
            trace_key: "trace".to_owned(),
            truncated_key: "truncated".to_owned(),
        }
    }
}
