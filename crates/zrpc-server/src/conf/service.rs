//! The `service.ServiceConf` part of the server config (`core/service/serviceconf.go`): mode,
//! telemetry, the dev server, shutdown timings, and go-zero keys zrpc accepts but ignores
//! (`Prometheus`, `Profiling`). `Log` is in `log.rs`, `Redis` in `redis.rs`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tonic::metadata::{Ascii, MetadataKey, MetadataMap, MetadataValue};
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
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Go pprof: accepted, not available in Rust. `None` when the key is not given, which
    /// go-zero reads as its default, true ([`DevServerConf::pprof`]); an `Option` so that zrpc
    /// warns only about an `EnablePprof: true` actually written in the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_pprof: Option<bool>,
    /// Body of a healthy answer (default `OK`).
    pub health_response: String,
    /// zrpc addition: the secret the DevServer's write routes (`POST /admin/...`: pausing and
    /// resuming the registration) require as `Authorization: Bearer <token>`. Empty (the
    /// default) turns them off. Never printed (`Debug` shows whether it is set).
    pub admin_token: String,
}

impl std::fmt::Debug for DevServerConf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevServerConf")
            .field("enabled", &self.enabled)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("metrics_path", &self.metrics_path)
            .field("health_path", &self.health_path)
            .field("enable_metrics", &self.enable_metrics)
            .field("enable_pprof", &self.enable_pprof)
            .field("health_response", &self.health_response)
            // a secret: whether it is set, never its value
            .field("admin_token", &zrpc_core::conf::redacted(&self.admin_token))
            .finish()
    }
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
            enable_pprof: None,
            health_response: "OK".to_owned(),
            admin_token: String::new(),
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

    /// `EnablePprof` as go-zero reads it: the value given, else true (go-zero's default).
    pub fn pprof(&self) -> bool {
        self.enable_pprof.unwrap_or(true)
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

/// OpenTelemetry settings (go-zero `trace.Config`). `Debug` shows the names of the
/// `OtlpHeaders`, never their values (exporters' API keys go there).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
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

impl std::fmt::Debug for TelemetryConf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: BTreeMap<&str, &str> = self
            .otlp_headers
            .keys()
            .map(|k| (k.as_str(), zrpc_core::conf::REDACTED))
            .collect();
        f.debug_struct("TelemetryConf")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field("sampler", &self.sampler)
            .field("batcher", &self.batcher)
            .field("otlp_headers", &headers)
            .field("otlp_http_path", &self.otlp_http_path)
            .field("otlp_http_secure", &self.otlp_http_secure)
            .field("disabled", &self.disabled)
            .finish()
    }
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
        self.exportable()?;
        if !(0.0..=1.0).contains(&self.sampler) {
            return Err(ConfError::invalid(
                "Telemetry.Sampler",
                format!("{} is out of range [0:1]", self.sampler),
            ));
        }
        self.metadata().map(drop)
    }
}

impl TelemetryConf {
    /// What each batcher's `Endpoint` must be, as go-zero reads it: `otlpgrpc` and `otlphttp` a
    /// `host:port` (a leading `http://` is accepted), `zipkin` the collector's `http://` URL,
    /// `file` a path. zrpc's HTTP exporters speak plain HTTP only, so `https` is refused here
    /// rather than failing at every export.
    fn exportable(&self) -> Result<(), ConfError> {
        if self.endpoint.is_empty() || self.disabled {
            return Ok(());
        }
        let https = |key: &str, what: &str| {
            ConfError::invalid(
                key.to_owned(),
                format!(
                    "{what}: zrpc exports over plain HTTP only; send to a collector or agent \
                     that takes plain HTTP (usually one on the same host), or use `Batcher: \
                     otlpgrpc`"
                ),
            )
        };
        match self.batcher.as_str() {
            "otlphttp" if self.otlp_http_secure => Err(https(
                "Telemetry.OtlpHttpSecure",
                "true asks for HTTPS to the OTLP/HTTP endpoint",
            )),
            "otlphttp" if self.endpoint.starts_with("https://") => Err(https(
                "Telemetry.Endpoint",
                &format!("{:?} is an HTTPS endpoint", self.endpoint),
            )),
            "zipkin" if self.endpoint.starts_with("https://") => Err(https(
                "Telemetry.Endpoint",
                &format!("{:?} is an HTTPS endpoint", self.endpoint),
            )),
            "zipkin" if !self.endpoint.starts_with("http://") => Err(ConfError::invalid(
                "Telemetry.Endpoint",
                format!(
                    "{:?} is not a URL: the zipkin batcher takes the collector's URL, e.g. \
                     http://zipkin:9411/api/v2/spans",
                    self.endpoint
                ),
            )),
            _ => Ok(()),
        }
    }

    /// `OtlpHeaders` as gRPC metadata for the OTLP/gRPC exporter.
    ///
    /// # Errors
    /// [`ConfError::Invalid`] naming `Telemetry.OtlpHeaders.<name>` when a name is not a valid
    /// ASCII metadata key or a value is not a valid header value.
    pub fn metadata(&self) -> Result<MetadataMap, ConfError> {
        let mut map = MetadataMap::new();
        for (name, value) in &self.otlp_headers {
            let path = || format!("Telemetry.OtlpHeaders.{name}");
            let key = MetadataKey::<Ascii>::from_bytes(name.as_bytes()).map_err(|_| {
                ConfError::invalid(path(), format!("{name:?} is not a valid header name"))
            })?;
            let value = MetadataValue::<Ascii>::try_from(value.as_str())
                .map_err(|_| ConfError::invalid(path(), "the value is not a valid header value"))?;
            map.insert(key, value);
        }
        Ok(map)
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

impl Validate for ProfilingConf {
    /// go-zero's range check of `CpuThreshold` (`[0:1000)`).
    fn validate(&self) -> Result<(), ConfError> {
        if !(0..1000).contains(&self.cpu_threshold) {
            return Err(ConfError::invalid(
                "Profiling.CpuThreshold",
                format!("{} is out of range [0:1000)", self.cpu_threshold),
            ));
        }
        Ok(())
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

// Telemetry with an endpoint loads only in builds that can export.
#[cfg(all(test, feature = "otel"))]
mod tests {
    use zrpc_core::conf::{Format, from_str_with_env};

    use crate::conf::RpcServerConf;

    fn load(telemetry: &str) -> Result<RpcServerConf, zrpc_core::conf::ConfError> {
        let text = format!("Name: greet.rpc\nListenOn: 127.0.0.1:1\nTelemetry: {telemetry}\n");
        from_str_with_env(&text, Format::Yaml, "greet.yaml", |_| None)
    }

    #[test]
    fn each_batcher_takes_its_kind_of_endpoint() {
        load("{Endpoint: http://zipkin:9411/api/v2/spans, Batcher: zipkin}").unwrap();
        load("{Endpoint: /var/log/trace.log, Batcher: file}").unwrap();
        load("{Endpoint: otel:4318, Batcher: otlphttp, OtlpHttpPath: /v1/traces}").unwrap();
        load("{Endpoint: http://otel:4318, Batcher: otlphttp}").unwrap();

        let e = load("{Endpoint: zipkin:9411, Batcher: zipkin}").unwrap_err();
        assert_eq!(e.path(), Some("Telemetry.Endpoint"));
        assert_eq!(
            e.to_string(),
            "config file greet.yaml: `Telemetry.Endpoint`: \"zipkin:9411\" is not a URL: the \
             zipkin batcher takes the collector's URL, e.g. http://zipkin:9411/api/v2/spans"
        );
        let e = load("{Endpoint: otel:4318, Batcher: otlphttp, OtlpHttpSecure: true}").unwrap_err();
        assert_eq!(e.path(), Some("Telemetry.OtlpHttpSecure"));
        assert!(e.to_string().contains("plain HTTP only"), "{e}");
        let e = load("{Endpoint: https://zipkin/api/v2/spans, Batcher: zipkin}").unwrap_err();
        assert_eq!(e.path(), Some("Telemetry.Endpoint"));
        // nothing is exported: nothing to check
        load("{Endpoint: https://z, Batcher: zipkin, Disabled: true}").unwrap();
    }

    #[test]
    fn a_batcher_that_exports_nothing_or_otlp_loads() {
        // nothing is exported: no endpoint, or disabled
        load("{Batcher: zipkin}").unwrap();
        load("{Endpoint: http://zipkin:9411, Batcher: zipkin, Disabled: true}").unwrap();
        load("{Endpoint: otel:4317, Batcher: otlpgrpc}").unwrap();
        let c = load("{Endpoint: otel:4318, Batcher: otlphttp}").unwrap();
        assert!(c.ignored_keys().is_empty(), "{:?}", c.ignored_keys());
    }
}
