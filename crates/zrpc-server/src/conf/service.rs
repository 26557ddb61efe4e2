//! The `service.ServiceConf` part of the server config (`core/service/serviceconf.go`): mode,
//! logging, telemetry, the dev server, shutdown timings, and go-zero keys zrpc accepts but ignores.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use zrpc_core::conf::{ConfError, Validate, duration};

use super::one_of;
/// go-zero's service modes (`Mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ServiceMode {
    /// Development (reflection on).
    Dev,
    /// Test (reflection on).
    Test,
    /// Regression test.
    Rt,
    /// Pre-release.
    Pre,
    /// Production (the default).
    #[default]
    Pro,
}

impl ServiceMode {
    /// The config spelling (`dev`, ..., `pro`).
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceMode::Dev => "dev",
            ServiceMode::Test => "test",
            ServiceMode::Rt => "rt",
            ServiceMode::Pre => "pre",
            ServiceMode::Pro => "pro",
        }
    }
}

impl fmt::Display for ServiceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Graceful shutdown timings (go-zero `proc.ShutdownConf`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ShutdownConf {
    /// Time between deregistration / NOT_SERVING and closing the listener (default 1s).
    #[serde(with = "duration")]
    pub wrap_up_time: Duration,
    /// Time after the shutdown signal at which remaining calls are cut (default 5.5s).
    #[serde(with = "duration")]
    pub wait_time: Duration,
}

impl Default for ShutdownConf {
    fn default() -> Self {
        ShutdownConf {
            wrap_up_time: Duration::from_secs(1),
            wait_time: Duration::from_millis(5500),
        }
    }
}

impl ShutdownConf {
    /// Shutdown timings.
    pub fn new(wrap_up_time: Duration, wait_time: Duration) -> Self {
        ShutdownConf {
            wrap_up_time,
            wait_time,
        }
    }
}

/// The dev/ops HTTP server (go-zero `devserver.Config`). Started only when the `DevServer` key is present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct DevServerConf {
    /// Start it (default true).
    pub enabled: bool,
    /// Host to bind (default empty = all interfaces).
    pub host: String,
    /// Port (default 6060).
    pub port: u16,
    /// Prometheus metrics path (default `/metrics`).
    pub metrics_path: String,
    /// Health path (default `/healthz`).
    pub health_path: String,
    /// Serve metrics (default true).
    pub enable_metrics: bool,
    /// Go pprof (default true in go-zero; accepted, not available in Rust).
    pub enable_pprof: bool,
    /// Body of a healthy answer (default `OK`).
    pub health_response: String,
}

impl Default for DevServerConf {
    fn default() -> Self {
        DevServerConf {
            enabled: true,
            host: String::new(),
            port: 6060,
            metrics_path: "/metrics".to_owned(),
            health_path: "/healthz".to_owned(),
            enable_metrics: true,
            enable_pprof: true,
            health_response: "OK".to_owned(),
        }
    }
}

impl DevServerConf {
    /// A dev server on `host:port` with the other defaults.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        DevServerConf {
            host: host.into(),
            port,
            ..DevServerConf::default()
        }
    }

    /// `host:port` to bind (`0.0.0.0:port` when host is empty).
    pub fn bind_addr(&self) -> String {
        if self.host.is_empty() {
            format!("0.0.0.0:{}", self.port)
        } else if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// OpenTelemetry settings (go-zero `trace.Config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct TelemetryConf {
    /// Service name in spans (default: the service `Name`).
    pub name: String,
    /// Exporter endpoint; no export when empty.
    pub endpoint: String,
    /// Sampling ratio (default 1.0).
    pub sampler: f64,
    /// `otlpgrpc` (default), `otlphttp`, `zipkin` or `file`.
    pub batcher: String,
    /// Headers for OTLP export.
    pub otlp_headers: BTreeMap<String, String>,
    /// Path for OTLP/HTTP export, e.g. `/v1/traces`.
    pub otlp_http_path: String,
    /// Use https for OTLP/HTTP.
    pub otlp_http_secure: bool,
    /// Do not start the exporter.
    pub disabled: bool,
}

impl Default for TelemetryConf {
    fn default() -> Self {
        TelemetryConf {
            name: String::new(),
            endpoint: String::new(),
            sampler: 1.0,
            batcher: "otlpgrpc".to_owned(),
            otlp_headers: BTreeMap::new(),
            otlp_http_path: String::new(),
            otlp_http_secure: false,
            disabled: false,
        }
    }
}

impl Validate for TelemetryConf {
    fn validate(&self) -> Result<(), ConfError> {
        one_of(
            "Telemetry.Batcher",
            &self.batcher,
            &["zipkin", "otlpgrpc", "otlphttp", "file"],
        )?;
        if !(0.0..=1.0).contains(&self.sampler) {
            return Err(ConfError::invalid(
                "Telemetry.Sampler",
                format!("{} is out of range [0:1]", self.sampler),
            ));
        }
        Ok(())
    }
}

/// Logging settings (go-zero `logx.LogConf`). All of go-zero's keys are accepted; which ones
/// zrpc honours is listed in `docs/configuration.md`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct LogConf {
    /// Service name in log lines (default: the service `Name`).
    pub service_name: String,
    /// `console` (default), `file` or `volume`.
    pub mode: String,
    /// `json` (default) or `plain`.
    pub encoding: String,
    /// Timestamp format (Go layout; accepted).
    pub time_format: String,
    /// Log directory for file mode (default `logs`).
    pub path: String,
    /// `debug`, `info` (default), `error` or `severe`.
    pub level: String,
    /// Truncate log content longer than this (0 = no limit).
    pub max_content_length: u32,
    /// Compress rotated files.
    pub compress: bool,
    /// Log periodic statistics (default true).
    pub stat: bool,
    /// Days to keep log files (0 = forever).
    pub keep_days: i64,
    /// Cooldown between stack traces in ms (default 100).
    pub stack_cooldown_millis: i64,
    /// Rotated files to keep (0 = all).
    pub max_backups: i64,
    /// Max file size in MB for size rotation (0 = no limit).
    pub max_size: i64,
    /// `daily` (default) or `size`.
    pub rotation: String,
    /// Time format in rotated file names.
    pub file_time_format: String,
    /// Renamed JSON field keys.
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

/// go-zero's deprecated Prometheus agent (`Prometheus`); accepted, not started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct PrometheusConf {
    /// Host (the agent starts only when set).
    pub host: String,
    /// Port (default 9101).
    pub port: u16,
    /// Path (default `/metrics`).
    pub path: String,
}

impl Default for PrometheusConf {
    fn default() -> Self {
        PrometheusConf {
            host: String::new(),
            port: 9101,
            path: "/metrics".to_owned(),
        }
    }
}

/// go-zero's Redis token store config (`Redis`, a `redis.RedisKeyConf`); accepted, not used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RedisKeyConf {
    /// `host:port`.
    pub host: String,
    /// `node` (default) or `cluster`.
    #[serde(rename = "Type")]
    pub kind: String,
    /// User.
    pub user: String,
    /// Password.
    pub pass: String,
    /// Use TLS.
    pub tls: bool,
    /// Do not ping at start.
    pub non_block: bool,
    /// Ping timeout (Go duration).
    #[serde(with = "duration")]
    pub ping_timeout: Duration,
    /// The hash key holding app -> token.
    pub key: String,
}

impl Default for RedisKeyConf {
    fn default() -> Self {
        RedisKeyConf {
            host: String::new(),
            kind: "node".to_owned(),
            user: String::new(),
            pass: String::new(),
            tls: false,
            non_block: false,
            ping_timeout: Duration::ZERO,
            key: String::new(),
        }
    }
}

/// go-zero's continuous profiling config (`Profiling`); accepted, ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ProfilingConf {
    /// Application name.
    pub name: String,
    /// Pyroscope server address.
    pub server_addr: String,
    /// Basic auth user.
    pub auth_user: String,
    /// Basic auth password.
    pub auth_password: String,
    /// Default 15s.
    #[serde(with = "duration")]
    pub upload_rate: Duration,
    /// Default 10s.
    #[serde(with = "duration")]
    pub check_interval: Duration,
    /// Default 2m.
    #[serde(with = "duration")]
    pub profiling_duration: Duration,
    /// Default 700.
    pub cpu_threshold: i64,
    /// Profile types.
    pub profile_type: ProfileTypeConf,
}

impl Default for ProfilingConf {
    fn default() -> Self {
        ProfilingConf {
            name: String::new(),
            server_addr: String::new(),
            auth_user: String::new(),
            auth_password: String::new(),
            upload_rate: Duration::from_secs(15),
            check_interval: Duration::from_secs(10),
            profiling_duration: Duration::from_secs(120),
            cpu_threshold: 700,
            profile_type: ProfileTypeConf::default(),
        }
    }
}

/// `Profiling.ProfileType`; accepted, ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
#[allow(clippy::struct_excessive_bools)]
pub struct ProfileTypeConf {
    /// Default false.
    pub logger: bool,
    /// Default true.
    #[serde(rename = "CPU")]
    pub cpu: bool,
    /// Default true.
    pub goroutines: bool,
    /// Default true.
    pub memory: bool,
    /// Default false.
    pub mutex: bool,
    /// Default false.
    pub block: bool,
}

impl Default for ProfileTypeConf {
    fn default() -> Self {
        ProfileTypeConf {
            logger: false,
            cpu: true,
            goroutines: true,
            memory: true,
            mutex: false,
            block: false,
        }
    }
}
