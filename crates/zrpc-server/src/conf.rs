//! `RpcServerConf`: go-zero's `zrpc.RpcServerConf` (`zrpc/config.go`) with its embedded
//! `service.ServiceConf` (`core/service/serviceconf.go`), same keys and defaults.
//!
//! Load it with `zrpc_core::conf::load::<RpcServerConf>("etc/greet.yaml")`, or build it in code
//! with [`RpcServerConf::new`]. Every key is documented in `docs/configuration.md`.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use zrpc_core::conf::{ConfError, EtcdConf, Validate, duration, one_of};
use zrpc_core::grpc::compression::{self, Encoding};

pub(crate) mod features;
mod ignored;

mod log;
mod redis;
mod service;
mod tls;
mod transport;

pub use crate::stage::limit::conf::ConcurrencyLimitConf;
pub use ignored::IgnoredKey;
pub use log::{LogConf, LogFieldKeys};
#[cfg(not(feature = "redis-auth"))]
pub(crate) use redis::redis_auth_off;
pub use service::{
    DevServerConf, ProfileTypeConf, ProfilingConf, PrometheusConf, ServiceMode, ShutdownConf,
    TelemetryConf,
};
pub use tls::{ClientAuth, ServerTlsConf};
pub use transport::TransportConf;
pub use zrpc_core::conf::RedisKeyConf;

/// The server config (go-zero `zrpc.RpcServerConf`).
///
/// The `ServiceConf` keys (`Name`, `Mode`, `Log`, `Telemetry`, `DevServer`, `Shutdown`,
/// `Prometheus`, `MetricsUrl`, `Profiling`) sit at the top level, as go-zero embeds them.
///
/// zrpc additions (not in go-zero): `AdvertiseAddr`, `Reflection`, `AuthTokens`,
/// `Middlewares.StatConf.LogRequestContent`, the `ConcurrencyLimit`, `Transport` and `Tls`
/// blocks, `Compression`, `CompressionMinSize` and `MaxDecompressedSize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RpcServerConf {
    // ---- service.ServiceConf ----
    /// Service name (required); also the default log service name and telemetry name.
    pub name: String,
    /// `dev`, `test`, `rt`, `pre` or `pro` (default `pro`).
    pub mode: ServiceMode,
    /// Logging (go-zero `logx.LogConf`).
    pub log: LogConf,
    /// OpenTelemetry tracing (optional; export only when `Endpoint` is set).
    pub telemetry: Option<TelemetryConf>,
    /// The dev/ops HTTP server with `/metrics` and `/healthz` (started only when the key is present).
    pub dev_server: Option<DevServerConf>,
    /// Graceful shutdown timings.
    pub shutdown: ShutdownConf,
    /// Deprecated go-zero Prometheus agent (accepted; use `DevServer` for metrics).
    pub prometheus: Option<PrometheusConf>,
    /// go-zero's stat report URL (accepted, ignored).
    pub metrics_url: String,
    /// go-zero's continuous profiling (accepted, ignored).
    pub profiling: Option<ProfilingConf>,

    // ---- zrpc.RpcServerConf ----
    /// `host:port` to listen on (required), e.g. `0.0.0.0:8080`.
    pub listen_on: String,
    /// zrpc addition: the `host:port` registered in etcd; wins over `ListenOn` and `POD_IP`.
    /// A bare host (`10.0.0.7`) takes the bound port. Empty = unset.
    pub advertise_addr: Option<String>,
    /// etcd registration; the server registers when `Hosts` and `Key` are set.
    pub etcd: EtcdConf,
    /// Turn on app/token authentication.
    pub auth: bool,
    /// go-zero's Redis token store: with `Auth` and `Redis.Host` set, tokens are `HGET Key app`,
    /// cached 5 minutes (wins over `AuthTokens`).
    pub redis: Option<RedisKeyConf>,
    /// zrpc addition: the static token store for `Auth` (app -> token), used when `Redis.Host`
    /// is not set.
    pub auth_tokens: Vec<AuthTokenConf>,
    /// Auth: reject when the token store fails or does not know the app (go-zero semantics).
    pub strict_control: bool,
    /// Default per-request timeout in milliseconds (default 2000; 0 = no timeout of the
    /// server's own: the caller's deadline still holds).
    pub timeout: u64,
    /// Adaptive shedding CPU threshold in millicpu, range [0, 1000) (default 900; 0 = off).
    pub cpu_threshold: u64,
    /// zrpc addition: the adaptive concurrency limit and its priority tiers (absent = off, the
    /// default); it acts on latency, where `CpuThreshold` acts on CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency_limit: Option<ConcurrencyLimitConf>,
    /// Register the gRPC health service (default true).
    pub health: bool,
    /// zrpc addition: serve gRPC reflection (default false; also on in `dev`/`test` mode).
    pub reflection: bool,
    /// Switches for the built-in interceptors.
    pub middlewares: ServerMiddlewaresConf,
    /// Per-method timeout overrides.
    pub method_timeouts: Vec<MethodTimeoutConf>,
    /// zrpc addition: HTTP/2 and connection limits (streams per connection, handshake and
    /// idle timeouts, keepalive, connection age, connection cap).
    pub transport: TransportConf,
    /// zrpc addition: TLS / mutual TLS (absent = plaintext, the default).
    pub tls: Option<ServerTlsConf>,
    /// zrpc addition: the encoding of responses to the clients that accept it
    /// (`grpc-accept-encoding`): `gzip`, `deflate` or `zstd`; none (the default) sends every
    /// response uncompressed. Compressed requests are accepted in every encoding the build
    /// has, whatever this says (as go-zero services accept gzip).
    #[serde(with = "compression::setting", skip_serializing_if = "Option::is_none")]
    pub compression: Option<Encoding>,
    /// zrpc addition: response messages smaller than this many octets are sent uncompressed
    /// (default 1024).
    pub compression_min_size: usize,
    /// zrpc addition: the largest request message, in octets: an uncompressed one as it
    /// arrives, a compressed one decompressed (and compressed); a larger one ends its call with
    /// `ResourceExhausted`, as grpc-go answers (default 4 MiB, tonic's and grpc-go's message
    /// limit).
    pub max_decompressed_size: usize,
    /// The file this config was loaded from (named by the errors of a start).
    #[serde(skip)]
    file: zrpc_core::conf::ConfFile,
}

impl Default for RpcServerConf {
    fn default() -> Self {
        RpcServerConf {
            name: String::new(),
            mode: ServiceMode::default(),
            log: LogConf::default(),
            telemetry: None,
            dev_server: None,
            shutdown: ShutdownConf::default(),
            prometheus: None,
            metrics_url: String::new(),
            profiling: None,
            listen_on: String::new(),
            advertise_addr: None,
            etcd: EtcdConf::default(),
            auth: false,
            redis: None,
            auth_tokens: Vec::new(),
            strict_control: false,
            timeout: 2000,
            cpu_threshold: 900,
            concurrency_limit: None,
            health: true,
            reflection: false,
            middlewares: ServerMiddlewaresConf::default(),
            method_timeouts: Vec::new(),
            transport: TransportConf::default(),
            tls: None,
            compression: None,
            compression_min_size: compression::DEFAULT_MIN_SIZE,
            max_decompressed_size: compression::DEFAULT_MAX_DECOMPRESSED_SIZE,
            file: zrpc_core::conf::ConfFile::default(),
        }
    }
}

impl RpcServerConf {
    /// A config with the two required keys and go-zero's defaults for everything else.
    pub fn new(name: impl Into<String>, listen_on: impl Into<String>) -> Self {
        RpcServerConf {
            name: name.into(),
            listen_on: listen_on.into(),
            ..RpcServerConf::default()
        }
    }

    /// The file this config was loaded from ([`conf::load`](zrpc_core::conf::load)); `None`
    /// for a config built in code. The errors of a start name it, as load errors do.
    pub fn file(&self) -> Option<&str> {
        self.file.get()
    }

    /// Sets `Etcd` (registration). Default: none.
    #[must_use]
    pub fn with_etcd(mut self, etcd: EtcdConf) -> Self {
        self.etcd = etcd;
        self
    }

    /// Sets `Timeout` (default 2000 ms; zero = no timeout).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Sets `CpuThreshold` (default 900; 0 = no shedding).
    #[must_use]
    pub fn with_cpu_threshold(mut self, millicpu: u64) -> Self {
        self.cpu_threshold = millicpu;
        self
    }

    /// Sets `ConcurrencyLimit` (default: none, no limit).
    #[must_use]
    pub fn with_concurrency_limit(mut self, limit: ConcurrencyLimitConf) -> Self {
        self.concurrency_limit = Some(limit);
        self
    }

    /// The concurrency limit's settings when it is on (`ConcurrencyLimit` present and
    /// `Enabled`).
    pub fn concurrency_limit_enabled(&self) -> Option<&ConcurrencyLimitConf> {
        self.concurrency_limit.as_ref().filter(|l| l.enabled)
    }

    /// Sets `Mode` (default `pro`).
    #[must_use]
    pub fn with_mode(mut self, mode: ServiceMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets `DevServer` (default: none, not started).
    #[must_use]
    pub fn with_dev_server(mut self, dev_server: DevServerConf) -> Self {
        self.dev_server = Some(dev_server);
        self
    }

    /// Turns on `Auth` with a static token list (`AuthTokens`). Default: auth off.
    #[must_use]
    pub fn with_auth_tokens<I, A, T>(mut self, tokens: I) -> Self
    where
        I: IntoIterator<Item = (A, T)>,
        A: Into<String>,
        T: Into<String>,
    {
        self.auth = true;
        self.auth_tokens = tokens
            .into_iter()
            .map(|(app, token)| AuthTokenConf::new(app, token))
            .collect();
        self
    }

    /// Adds a `MethodTimeouts` entry (`/pkg.Service/Method`).
    #[must_use]
    pub fn with_method_timeout(
        mut self,
        full_method: impl Into<String>,
        timeout: Duration,
    ) -> Self {
        self.method_timeouts
            .push(MethodTimeoutConf::new(full_method, timeout));
        self
    }

    /// Sets `AdvertiseAddr` (default: derived from `ListenOn` / `POD_IP`).
    #[must_use]
    pub fn with_advertise_addr(mut self, addr: impl Into<String>) -> Self {
        self.advertise_addr = Some(addr.into());
        self
    }

    /// Sets `Reflection` (default false; reflection is also on in `dev`/`test` mode).
    #[must_use]
    pub fn with_reflection(mut self, on: bool) -> Self {
        self.reflection = on;
        self
    }

    /// Sets `Health` (default true).
    #[must_use]
    pub fn with_health(mut self, on: bool) -> Self {
        self.health = on;
        self
    }

    /// Sets `Shutdown` (default WrapUpTime 1s, WaitTime 5.5s).
    #[must_use]
    pub fn with_shutdown(mut self, shutdown: ShutdownConf) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// Sets the `Transport` block (default: see [`TransportConf`]).
    #[must_use]
    pub fn with_transport(mut self, transport: TransportConf) -> Self {
        self.transport = transport;
        self
    }

    /// Sets the `Tls` block (default: none, plaintext).
    #[must_use]
    pub fn with_tls(mut self, tls: ServerTlsConf) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets `Compression`, the encoding of responses to the clients that accept it (default:
    /// none, responses uncompressed).
    #[must_use]
    pub fn with_compression(mut self, encoding: Option<Encoding>) -> Self {
        self.compression = encoding;
        self
    }

    /// The server registers in etcd (go-zero `HasEtcd`: `Etcd.Hosts` and `Etcd.Key` set).
    pub fn has_etcd(&self) -> bool {
        self.etcd.has_etcd()
    }

    /// `Timeout` as a duration, `None` when 0 (no default timeout; unlike go-zero, `MethodTimeouts`
    /// still apply).
    pub fn timeout_duration(&self) -> Option<Duration> {
        (self.timeout > 0).then(|| Duration::from_millis(self.timeout))
    }

    /// Reflection is served: `Reflection` is true or `Mode` is `dev` / `test`.
    pub fn reflection_enabled(&self) -> bool {
        self.reflection || matches!(self.mode, ServiceMode::Dev | ServiceMode::Test)
    }

    /// The name used for tracing: `Telemetry.Name`, else `Name`.
    pub fn telemetry_name(&self) -> &str {
        match &self.telemetry {
            Some(t) if !t.name.is_empty() => &t.name,
            _ => &self.name,
        }
    }
}

impl Validate for RpcServerConf {
    fn validate(&self) -> Result<(), ConfError> {
        if self.name.trim().is_empty() {
            return Err(ConfError::missing("Name"));
        }
        if self.listen_on.trim().is_empty() {
            return Err(ConfError::missing("ListenOn"));
        }
        check_listen_on(&self.listen_on)?;
        if let Some(addr) = &self.advertise_addr
            && !addr.trim().is_empty()
            && !looks_like_host_port(addr.trim())
            && !looks_like_host(addr.trim())
        {
            return Err(ConfError::invalid(
                "AdvertiseAddr",
                format!("expected host:port or host, got {addr:?}"),
            ));
        }
        if self.cpu_threshold >= 1000 {
            return Err(ConfError::invalid(
                "CpuThreshold",
                format!("{} is out of range [0:1000)", self.cpu_threshold),
            ));
        }
        if let Some(l) = &self.concurrency_limit {
            l.validate()?;
        }
        if self.etcd.is_configured() {
            self.etcd.validate()?;
        }
        for (i, m) in self.method_timeouts.iter().enumerate() {
            if !is_full_method(&m.full_method) {
                return Err(ConfError::invalid(
                    format!("MethodTimeouts[{i}].FullMethod"),
                    format!("expected /package.Service/Method, got {:?}", m.full_method),
                ));
            }
        }
        for (i, t) in self.auth_tokens.iter().enumerate() {
            if t.app.is_empty() {
                return Err(ConfError::missing(format!("AuthTokens[{i}].App")));
            }
            if t.token.is_empty() {
                return Err(ConfError::missing(format!("AuthTokens[{i}].Token")));
            }
        }
        check_message_limit(self.max_decompressed_size)?;
        self.log.validate()?;
        self.transport.validate()?;
        if let Some(t) = &self.tls {
            t.validate()?;
        }
        if let Some(t) = &self.telemetry {
            t.validate()?;
        }
        if let Some(r) = &self.redis {
            r.validate_at("Redis")?;
            if self.auth
                && !r.redis.host.is_empty()
                && !zrpc_core::conf::feature_on("redis-auth", cfg!(feature = "redis-auth"))
            {
                return Err(redis::redis_auth_off(&r.redis.host));
            }
        }
        if let Some(p) = &self.profiling {
            p.validate()?;
        }
        features::check(self)?;
        if let Some(d) = &self.dev_server
            && d.enabled
        {
            for (key, path) in [
                ("DevServer.MetricsPath", &d.metrics_path),
                ("DevServer.HealthPath", &d.health_path),
            ] {
                if !path.starts_with('/') {
                    return Err(ConfError::invalid(
                        key,
                        format!("must start with `/`, got {path:?}"),
                    ));
                }
                // zrpc's own routes answer first: a probe there would never see the health
                if path == "/" || path == "/admin" || path.starts_with("/admin/") {
                    return Err(ConfError::invalid(
                        key,
                        format!("{path:?} is the DevServer's own route (`/`, `/admin...`)"),
                    ));
                }
            }
            if d.enable_metrics && d.metrics_path == d.health_path {
                return Err(ConfError::invalid(
                    "DevServer.MetricsPath",
                    format!(
                        "{:?} is DevServer.HealthPath too: one of them would never be served",
                        d.metrics_path
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A go-zero service file holds the service's own keys (`DataSource`, `Cache`, `UserRpc`)
    /// next to the embedded `RpcServerConf`; loaded as a bare `RpcServerConf`, the first one is
    /// an unknown key, so the error says how to embed.
    fn unknown_key_note() -> Option<&'static str> {
        Some(
            "RpcServerConf holds only zrpc's server keys: put your service's own keys \
             (DataSource, Cache, UserRpc, ...) in your own config struct and load \
             `zrpc::conf::Embed<zrpc::RpcServerConf, YourConf>`, which reads the file into both \
             as go-zero's embedded `zrpc.RpcServerConf` does (docs/configuration.md, \
             \"Your own config struct\")",
        )
    }

    fn loaded_from(&mut self, file: &str) {
        self.file.set(file);
    }
}

/// `MaxDecompressedSize`: at least 1, at most what a message's 4-octet length can say.
fn check_message_limit(limit: usize) -> Result<(), ConfError> {
    if limit == 0 || u32::try_from(limit).is_err() {
        return Err(ConfError::invalid(
            "MaxDecompressedSize",
            format!("{limit} is out of range [1:4294967295]"),
        ));
    }
    Ok(())
}

fn check_listen_on(listen_on: &str) -> Result<(), ConfError> {
    if listen_on.parse::<SocketAddr>().is_ok() || looks_like_host_port(listen_on) {
        Ok(())
    } else {
        Err(ConfError::invalid(
            "ListenOn",
            format!("expected host:port (e.g. 0.0.0.0:8080), got {listen_on:?}"),
        ))
    }
}

/// `host:port` with a numeric port; host may be empty (`:8080`), a name, IPv4, or `[v6]`.
fn looks_like_host_port(s: &str) -> bool {
    if s.parse::<SocketAddr>().is_ok() {
        return true;
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return false;
    };
    if port.parse::<u16>().is_err() {
        return false;
    }
    if let Some(inner) = host.strip_prefix('[') {
        return inner
            .strip_suffix(']')
            .is_some_and(|v6| v6.parse::<std::net::Ipv6Addr>().is_ok());
    }
    host.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_')
}

/// A host name, an IPv4 address, or an IPv6 address (bracketed or not).
fn looks_like_host(s: &str) -> bool {
    let unbracketed = s
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or(s);
    unbracketed.parse::<std::net::IpAddr>().is_ok()
        || (!s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_'))
}

/// `/pkg.Service/Method` (the package part is optional: `/Service/Method`).
fn is_full_method(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('/') else {
        return false;
    };
    let Some((service, method)) = rest.split_once('/') else {
        return false;
    };
    let ident = |x: &str| !x.is_empty() && x.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    !service.is_empty() && service.split('.').all(ident) && ident(method)
}

/// Switches for the server interceptors (go-zero `ServerMiddlewaresConf`); all default true.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ServerMiddlewaresConf {
    /// Tracing span per RPC.
    pub trace: bool,
    /// Panic recovery.
    pub recover: bool,
    /// Slow-call (and optional content) logging.
    pub stat: bool,
    /// Stat interceptor settings.
    pub stat_conf: StatConf,
    /// Prometheus metrics.
    pub prometheus: bool,
    /// Per-method circuit breaker.
    pub breaker: bool,
}

impl Default for ServerMiddlewaresConf {
    fn default() -> Self {
        ServerMiddlewaresConf {
            trace: true,
            recover: true,
            stat: true,
            stat_conf: StatConf::default(),
            prometheus: true,
            breaker: true,
        }
    }
}

/// The stat interceptor settings (`Middlewares.StatConf`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct StatConf {
    /// Calls slower than this are logged as slow (default 500ms).
    #[serde(with = "duration")]
    pub slow_threshold: Duration,
    /// Methods whose request content is never logged.
    pub ignore_content_methods: Vec<String>,
    /// zrpc addition: log every request's content at info level, as go-zero does (default false).
    pub log_request_content: bool,
}

impl Default for StatConf {
    fn default() -> Self {
        StatConf {
            slow_threshold: Duration::from_millis(500),
            ignore_content_methods: Vec::new(),
            log_request_content: false,
        }
    }
}

/// One `MethodTimeouts` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct MethodTimeoutConf {
    /// `/package.Service/Method`.
    pub full_method: String,
    /// The timeout for that method (a Go duration, e.g. `"5s"`; 0 = no timeout).
    #[serde(with = "duration")]
    pub timeout: Duration,
}

impl MethodTimeoutConf {
    /// A method timeout.
    pub fn new(full_method: impl Into<String>, timeout: Duration) -> Self {
        MethodTimeoutConf {
            full_method: full_method.into(),
            timeout,
        }
    }
}

/// One static token (`AuthTokens` entry, a zrpc addition). `Debug` shows whether the token is
/// set, never its value.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct AuthTokenConf {
    /// The `app` metadata value.
    pub app: String,
    /// The expected `token` metadata value.
    pub token: String,
}

impl std::fmt::Debug for AuthTokenConf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthTokenConf")
            .field("app", &self.app)
            .field("token", &zrpc_core::conf::redacted(&self.token))
            .finish()
    }
}

impl AuthTokenConf {
    /// An app/token pair.
    pub fn new(app: impl Into<String>, token: impl Into<String>) -> Self {
        AuthTokenConf {
            app: app.into(),
            token: token.into(),
        }
    }
}

#[cfg(test)]
mod tests;
