//! `RpcClientConf`: go-zero's `zrpc.RpcClientConf` (`zrpc/config.go`), same keys and defaults.
//!
//! Load it with `zrpc_core::conf::load::<RpcClientConf>("etc/client.yaml")`, or build it with
//! [`RpcClientConf::direct`], [`RpcClientConf::etcd`] or [`RpcClientConf::target`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zrpc_core::conf::{ConfError, EtcdConf, Validate, duration, feature_on};
use zrpc_core::grpc::compression::{self, Encoding};

pub use crate::tls::ClientTlsConf;
pub use retry::{
    HedgingPolicyConf, MethodConf, MethodName, RetryBudgetConf, RetryPolicyConf, StatusCodes,
};
pub use tier::MethodTierConf;
pub use zrpc_core::limit::Tier;

mod retry;
mod tier;

/// The client config (go-zero `zrpc.RpcClientConf`).
///
/// Where the servers are comes from, in go-zero's priority: `Endpoints` > `Target` > `Etcd`
/// (see [`RpcClientConf::build_target`]).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RpcClientConf {
    /// etcd discovery (`Hosts` + `Key`).
    pub etcd: EtcdConf,
    /// Direct server addresses `host:port` (highest priority).
    pub endpoints: Vec<String>,
    /// A target URI: `direct:///a,b`, `etcd:///h1,h2?key=k`, `dns:///host:port`, ... (2nd priority).
    pub target: String,
    /// `app` metadata sent with each call (only when `Token` is set too).
    pub app: String,
    /// `token` metadata sent with each call (only when `App` is set too).
    pub token: String,
    /// Create the client without waiting for a usable endpoint (default true).
    pub non_block: bool,
    /// Per-call timeout in milliseconds (default 2000; 0 = none).
    pub timeout: u64,
    /// HTTP/2 keepalive ping interval (Go duration; default 0 = off).
    #[serde(with = "duration")]
    pub keepalive_time: Duration,
    /// Switches for the client interceptors.
    pub middlewares: ClientMiddlewaresConf,
    /// `p2c_ewma` (default) or `round_robin`.
    pub balancer_name: BalancerName,
    /// zrpc addition: TLS / mutual TLS to the servers (absent = plaintext, the default).
    pub tls: Option<crate::tls::ClientTlsConf>,
    /// zrpc addition: settings of the `p2c_ewma` balancer (`P2c` block, optional).
    #[serde(skip_serializing_if = "P2cConf::is_default")]
    pub p2c: P2cConf,
    /// zrpc addition: retry or hedging policies per method (`MethodConfig`; none by default:
    /// only requests that never reached a server are sent again).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub method_config: Vec<MethodConf>,
    /// zrpc addition: the cap on the retries and hedges of all calls (`RetryBudget`).
    #[serde(skip_serializing_if = "RetryBudgetConf::is_default")]
    pub retry_budget: RetryBudgetConf,
    /// zrpc addition: the encoding of request messages (`gzip`, `deflate`, `zstd`); none (the
    /// default) sends them uncompressed. Set, the client's calls also list the encodings it can
    /// decompress in `grpc-accept-encoding` (asking for compressed responses). Compressed
    /// responses are decompressed whatever this says.
    #[serde(with = "compression::setting", skip_serializing_if = "Option::is_none")]
    pub compression: Option<Encoding>,
    /// zrpc addition: `Compression` for single methods, over the client's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub method_compression: Vec<MethodCompressionConf>,
    /// zrpc addition: request messages smaller than this many octets are sent uncompressed
    /// (default 1024).
    #[serde(skip_serializing_if = "is_default_min_size")]
    pub compression_min_size: usize,
    /// zrpc addition: the most octets a response message may have, or a compressed one
    /// decompress to (and be compressed to); a larger one fails the call with
    /// `ResourceExhausted` and grpc-go's words (default 4 MiB, tonic's and grpc-go's message
    /// limit). Above 4 MiB, raise the generated client's `max_decoding_message_size` too.
    #[serde(skip_serializing_if = "is_default_limit")]
    pub max_decompressed_size: usize,
    /// zrpc addition: the priority tier of every call, sent as `zrpc-tier` metadata (none by
    /// default: the server treats the calls as its default tier).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// zrpc addition: the tier of some methods' calls, whatever `Tier` says.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub method_tiers: Vec<MethodTierConf>,
    /// The file this config was loaded from (named by the errors of `Client::new`).
    #[serde(skip)]
    file: zrpc_core::conf::ConfFile,
}

/// `Token` (and `Etcd.Pass`) show whether they are set, never their values.
impl std::fmt::Debug for RpcClientConf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcClientConf")
            .field("etcd", &self.etcd)
            .field("endpoints", &self.endpoints)
            .field("target", &self.target)
            .field("app", &self.app)
            .field("token", &zrpc_core::conf::redacted(&self.token))
            .field("non_block", &self.non_block)
            .field("timeout", &self.timeout)
            .field("keepalive_time", &self.keepalive_time)
            .field("middlewares", &self.middlewares)
            .field("balancer_name", &self.balancer_name)
            .field("tls", &self.tls)
            .field("p2c", &self.p2c)
            .field("method_config", &self.method_config)
            .field("retry_budget", &self.retry_budget)
            .field("compression", &self.compression)
            .field("method_compression", &self.method_compression)
            .field("compression_min_size", &self.compression_min_size)
            .field("max_decompressed_size", &self.max_decompressed_size)
            .field("tier", &self.tier)
            .field("method_tiers", &self.method_tiers)
            .field("file", &self.file)
            .finish()
    }
}

fn is_default_min_size(v: &usize) -> bool {
    *v == compression::DEFAULT_MIN_SIZE
}

fn is_default_limit(v: &usize) -> bool {
    *v == compression::DEFAULT_MAX_DECOMPRESSED_SIZE
}

/// zrpc addition, a `MethodCompression` entry: the `Compression` of one method's requests.
///
/// ```yaml
/// MethodCompression:
///   - FullMethod: /files.Files/Upload
///     Compression: gzip
///   - FullMethod: /files.Files/Ping
///     Compression: identity      # uncompressed, whatever `Compression` says
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct MethodCompressionConf {
    /// The method, `/package.Service/Method`.
    pub full_method: String,
    /// Its encoding: `gzip`, `deflate`, `zstd`, or `identity` for none.
    #[serde(with = "compression::setting")]
    pub compression: Option<Encoding>,
}

impl MethodCompressionConf {
    /// `full_method`'s requests compressed with `encoding` (`None`: uncompressed).
    pub fn new(full_method: impl Into<String>, encoding: Option<Encoding>) -> Self {
        MethodCompressionConf {
            full_method: full_method.into(),
            compression: encoding,
        }
    }
}

impl Default for RpcClientConf {
    fn default() -> Self {
        RpcClientConf {
            etcd: EtcdConf::default(),
            endpoints: Vec::new(),
            target: String::new(),
            app: String::new(),
            token: String::new(),
            non_block: true,
            timeout: 2000,
            keepalive_time: Duration::ZERO,
            middlewares: ClientMiddlewaresConf::default(),
            balancer_name: BalancerName::default(),
            tls: None,
            p2c: P2cConf::default(),
            method_config: Vec::new(),
            retry_budget: RetryBudgetConf::default(),
            compression: None,
            method_compression: Vec::new(),
            compression_min_size: compression::DEFAULT_MIN_SIZE,
            max_decompressed_size: compression::DEFAULT_MAX_DECOMPRESSED_SIZE,
            file: zrpc_core::conf::ConfFile::default(),
            tier: None,
            method_tiers: Vec::new(),
        }
    }
}

impl RpcClientConf {
    /// The file this config was loaded from ([`conf::load`](zrpc_core::conf::load), or a
    /// service config's [`Validate::loaded_from`] passing it on); `None` for a config built
    /// in code. The errors of `Client::new` name it, as load errors do.
    pub fn file(&self) -> Option<&str> {
        self.file.get()
    }

    /// Sets the `Tls` block (default: none, plaintext).
    #[must_use]
    pub fn with_tls(mut self, tls: crate::tls::ClientTlsConf) -> Self {
        self.tls = Some(tls);
        self
    }

    /// A client of fixed addresses (go-zero `NewDirectClientConf`).
    pub fn direct<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RpcClientConf {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ..RpcClientConf::default()
        }
    }

    /// A client discovering `key` in etcd (go-zero `NewEtcdClientConf`).
    pub fn etcd<I, S>(hosts: I, key: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RpcClientConf {
            etcd: EtcdConf::new(hosts, key),
            ..RpcClientConf::default()
        }
    }

    /// A client of a target URI (go-zero `NewClientWithTarget`).
    pub fn target(target: impl Into<String>) -> Self {
        RpcClientConf {
            target: target.into(),
            ..RpcClientConf::default()
        }
    }

    /// Adds a `MethodConfig` entry: `policy` for the methods `names` (default: none).
    #[must_use]
    pub fn with_method_config(mut self, entry: MethodConf) -> Self {
        self.method_config.push(entry);
        self
    }

    /// Sets `RetryBudget` (default: 0.1 retries per call plus 10 per second, over 10 s).
    #[must_use]
    pub fn with_retry_budget(mut self, budget: RetryBudgetConf) -> Self {
        self.retry_budget = budget;
        self
    }

    /// Sets `Tier`, the tier of every call (default: none sent).
    #[must_use]
    pub fn with_tier(mut self, tier: Tier) -> Self {
        self.tier = Some(tier);
        self
    }

    /// Adds a `MethodTiers` entry: the tier of `full_method`'s calls (default: none).
    #[must_use]
    pub fn with_method_tier(mut self, full_method: impl Into<String>, tier: Tier) -> Self {
        self.method_tiers
            .push(MethodTierConf::new(full_method, tier));
        self
    }

    /// Sets `App` and `Token` (default: none).
    #[must_use]
    pub fn with_credential(mut self, app: impl Into<String>, token: impl Into<String>) -> Self {
        self.app = app.into();
        self.token = token.into();
        self
    }

    /// Sets `Timeout` (default 2000 ms; zero = none).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Sets `NonBlock` (default true).
    #[must_use]
    pub fn with_non_block(mut self, non_block: bool) -> Self {
        self.non_block = non_block;
        self
    }

    /// Sets the `P2c` block (default: [`P2cConf::default`]).
    #[must_use]
    pub fn with_p2c(mut self, p2c: P2cConf) -> Self {
        self.p2c = p2c;
        self
    }

    /// Sets `BalancerName` (default `p2c_ewma`).
    #[must_use]
    pub fn with_balancer(mut self, balancer: BalancerName) -> Self {
        self.balancer_name = balancer;
        self
    }

    /// Sets `KeepaliveTime` (default 0 = off).
    #[must_use]
    pub fn with_keepalive_time(mut self, every: Duration) -> Self {
        self.keepalive_time = every;
        self
    }

    /// Sets `Compression`, the encoding of request messages (default: none, uncompressed).
    #[must_use]
    pub fn with_compression(mut self, encoding: Option<Encoding>) -> Self {
        self.compression = encoding;
        self
    }

    /// Adds a `MethodCompression` entry: `full_method`'s requests compressed with `encoding`
    /// (`None`: uncompressed), over `Compression`.
    #[must_use]
    pub fn with_method_compression(
        mut self,
        full_method: impl Into<String>,
        encoding: Option<Encoding>,
    ) -> Self {
        self.method_compression
            .push(MethodCompressionConf::new(full_method, encoding));
        self
    }

    /// Sets `Middlewares` (default all on).
    #[must_use]
    pub fn with_middlewares(mut self, middlewares: ClientMiddlewaresConf) -> Self {
        self.middlewares = middlewares;
        self
    }

    /// `App` and `Token` are both set (go-zero `HasCredential`).
    pub fn has_credential(&self) -> bool {
        !self.app.is_empty() && !self.token.is_empty()
    }

    /// `Timeout` as a duration, `None` when 0.
    pub fn timeout_duration(&self) -> Option<Duration> {
        (self.timeout > 0).then(|| Duration::from_millis(self.timeout))
    }

    /// `KeepaliveTime`, `None` when 0.
    pub fn keepalive(&self) -> Option<Duration> {
        (!self.keepalive_time.is_zero()).then_some(self.keepalive_time)
    }

    /// The target URI, with go-zero's priority (`RpcClientConf.BuildTarget`):
    /// `Endpoints` -> `direct:///a,b`; else `Target` as given; else `Etcd` ->
    /// `etcd:///h1,h2?key=<url-encoded key>`.
    ///
    /// # Errors
    /// With none of `Endpoints`, `Target` and `Etcd` set: an error at `Endpoints` saying that one
    /// of the three must be set (it keeps go-zero's text `empty etcd hosts` for searches). With
    /// only `Etcd` set: go-zero's `empty etcd hosts` / `empty etcd key`, or a partial etcd account
    /// / TLS set.
    pub fn build_target(&self) -> Result<String, ConfError> {
        if !self.endpoints.is_empty() {
            return Ok(format!("direct:///{}", self.endpoints.join(",")));
        }
        if !self.target.is_empty() {
            return Ok(self.target.clone());
        }
        if !self.etcd.is_configured() {
            return Err(ConfError::invalid("Endpoints", NO_TARGET));
        }
        self.etcd.validate()?;
        Ok(format!(
            "etcd:///{}?key={}",
            self.etcd.hosts.join(","),
            query_escape(&self.etcd.key)
        ))
    }
}

impl RpcClientConf {
    /// Validates everything but the target (`Endpoints`, `Target`, `Etcd`): what a client
    /// built over a resolution of its own uses.
    pub(crate) fn validate_settings(&self) -> Result<(), ConfError> {
        if let Some(t) = &self.tls {
            t.validate()?;
            if !feature_on("tls", cfg!(feature = "tls")) {
                return Err(crate::tls::tls_off(t));
            }
        }
        self.p2c.validate()?;
        validate_compression(self)?;
        retry::validate_methods(&self.method_config)?;
        tier::validate(&self.method_tiers)?;
        self.retry_budget.validate()
    }
}

impl Validate for RpcClientConf {
    fn validate(&self) -> Result<(), ConfError> {
        self.validate_settings()?;
        for (i, e) in self.endpoints.iter().enumerate() {
            if e.trim().is_empty() || e.contains(',') {
                return Err(ConfError::invalid(
                    format!("Endpoints[{i}]"),
                    format!("expected host:port, got {e:?}"),
                ));
            }
        }
        if self.etcd.is_configured() {
            self.etcd.validate()?;
        }
        if self.endpoints.is_empty() && !self.target.is_empty() {
            crate::resolver::Target::parse(&self.target)
                .map_err(|e| ConfError::invalid("Target", e.to_string()))?;
        }
        let target = self.build_target()?;
        if !feature_on("etcd", cfg!(feature = "etcd"))
            && matches!(
                crate::resolver::Target::parse(&target),
                Ok(crate::resolver::Target::Etcd { .. })
            )
        {
            // `Target` wins over `Etcd` (go-zero's priority), so the key in use is named.
            let (key, value) = if self.target.is_empty() {
                ("Etcd.Hosts", self.etcd.hosts.join(","))
            } else {
                ("Target", self.target.clone())
            };
            return Err(ConfError::feature_off(
                key,
                &value,
                "discovery in etcd",
                "etcd",
            ));
        }
        if !feature_on("tls", cfg!(feature = "tls"))
            && matches!(
                crate::resolver::Target::parse(&target),
                Ok(crate::resolver::Target::K8s { .. })
            )
        {
            return Err(crate::resolver::k8s_off(&target));
        }
        Ok(())
    }

    fn loaded_from(&mut self, file: &str) {
        self.file.set(file);
    }
}

/// `Compression`, `MethodCompression` and `MaxDecompressedSize`.
fn validate_compression(conf: &RpcClientConf) -> Result<(), ConfError> {
    compression::setting::check_built("Compression", conf.compression)?;
    for (i, m) in conf.method_compression.iter().enumerate() {
        let full = m
            .full_method
            .strip_prefix('/')
            .and_then(|r| r.split_once('/'));
        if !full.is_some_and(|(s, m)| !s.is_empty() && !m.is_empty() && !m.contains('/')) {
            return Err(ConfError::invalid(
                format!("MethodCompression[{i}].FullMethod"),
                format!("expected /package.Service/Method, got {:?}", m.full_method),
            ));
        }
        compression::setting::check_built(
            &format!("MethodCompression[{i}].Compression"),
            m.compression,
        )?;
    }
    let limit = conf.max_decompressed_size;
    if limit == 0 || u32::try_from(limit).is_err() {
        return Err(ConfError::invalid(
            "MaxDecompressedSize",
            format!("{limit} is out of range [1:4294967295]"),
        ));
    }
    Ok(())
}

/// zrpc addition, the `P2c` block: settings of the `p2c_ewma` balancer. go-zero has no such block;
/// leave it out and the defaults apply (a go-zero YAML loads unchanged).
///
/// ```yaml
/// P2c:
///   MaxEjectedPercent: 50   # at most half the endpoints ejected at once
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct P2cConf {
    /// The largest share of the endpoints, in percent (0..=100), ejected at the same time for
    /// failing calls (3 failed calls in a row eject an endpoint for 1 s doubling to 30 s). Default
    /// 100: any number (the picker still falls back to an ejected endpoint when every other one is
    /// ejected or down); 0 turns ejection off. A share is rounded down: 50 % of 3 endpoints is 1.
    pub max_ejected_percent: u32,
}

impl Default for P2cConf {
    fn default() -> Self {
        P2cConf {
            max_ejected_percent: 100,
        }
    }
}

impl P2cConf {
    /// Sets `MaxEjectedPercent` (default 100).
    #[must_use]
    pub fn with_max_ejected_percent(mut self, percent: u32) -> Self {
        self.max_ejected_percent = percent;
        self
    }

    fn is_default(&self) -> bool {
        *self == P2cConf::default()
    }
}

impl Validate for P2cConf {
    fn validate(&self) -> Result<(), ConfError> {
        if self.max_ejected_percent > 100 {
            return Err(ConfError::invalid(
                "P2c.MaxEjectedPercent",
                format!(
                    "{} is not a percentage: use 0..=100 (100, the default, caps nothing; 0 turns ejection off)",
                    self.max_ejected_percent
                ),
            ));
        }
        Ok(())
    }
}

/// The error of a client config that says nowhere to call. go-zero fails here with `empty etcd
/// hosts`, which blames etcd although the user may never have meant to use it.
const NO_TARGET: &str = "no server to call: set one of `Endpoints` (server addresses, e.g. \
     [127.0.0.1:8080]), `Target` (a target URI, e.g. dns:///greet:8080) or `Etcd.Hosts` + \
     `Etcd.Key` (etcd discovery); go-zero uses the first one set in that order and, with none \
     set, reports `empty etcd hosts`";

/// Go's `url.QueryEscape`: unreserved bytes kept, space as `+`, everything else `%XX`.
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Switches for the client interceptors (go-zero `ClientMiddlewaresConf`); all default true.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
#[allow(clippy::struct_excessive_bools)]
pub struct ClientMiddlewaresConf {
    /// Client span and trace context injection.
    pub trace: bool,
    /// Error and slow-call logging.
    pub duration: bool,
    /// Prometheus metrics.
    pub prometheus: bool,
    /// Per target+method circuit breaker.
    pub breaker: bool,
    /// Per-call timeout.
    pub timeout: bool,
}

impl Default for ClientMiddlewaresConf {
    fn default() -> Self {
        ClientMiddlewaresConf {
            trace: true,
            duration: true,
            prometheus: true,
            breaker: true,
            timeout: true,
        }
    }
}

impl ClientMiddlewaresConf {
    /// All switches off (for benchmarks and tests; build up with the fields).
    pub fn none() -> Self {
        ClientMiddlewaresConf {
            trace: false,
            duration: false,
            prometheus: false,
            breaker: false,
            timeout: false,
        }
    }
}

/// The load balancer (`BalancerName`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BalancerName {
    /// `p2c_ewma`: power of two choices on EWMA latency x in-flight (go-zero's default).
    #[default]
    P2cEwma,
    /// `round_robin`: the comparison baseline.
    RoundRobin,
    /// `consistent_hash` (go-zero v1.9.3+): each call goes to the server that owns its key
    /// ([`hash_key`](crate::hash_key)) on go-zero's ring; a call without a key fails with
    /// `InvalidArgument`.
    ConsistentHash,
}

impl BalancerName {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BalancerName::P2cEwma => "p2c_ewma",
            BalancerName::RoundRobin => "round_robin",
            BalancerName::ConsistentHash => "consistent_hash",
        }
    }
}

impl fmt::Display for BalancerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown or unsupported `BalancerName`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnknownBalancer(String);

impl FromStr for BalancerName {
    type Err = UnknownBalancer;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "p2c_ewma" | "" => Ok(BalancerName::P2cEwma),
            "round_robin" => Ok(BalancerName::RoundRobin),
            "consistent_hash" => Ok(BalancerName::ConsistentHash),
            other => Err(UnknownBalancer(format!(
                "unknown balancer {other:?} (supported: p2c_ewma, round_robin, consistent_hash)"
            ))),
        }
    }
}

impl Serialize for BalancerName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for BalancerName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_the_token_or_the_etcd_password() {
        let mut c = RpcClientConf::direct(["127.0.0.1:1"]);
        c.app = "app-name".to_owned();
        c.token = "client-token".to_owned();
        c.etcd.pass = "etcd-pw".to_owned();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("client-token") && !shown.contains("etcd-pw"),
            "{shown}"
        );
        assert_eq!(shown.matches("<redacted>").count(), 2, "{shown}");
        assert!(shown.contains("app-name"), "{shown}");
        // unset: shown as unset
        assert!(format!("{:?}", RpcClientConf::default()).contains("token: None"));
    }

    #[test]
    fn defaults_match_go_zero() {
        let c = RpcClientConf::default();
        assert!(c.non_block);
        assert_eq!(c.timeout, 2000);
        assert_eq!(c.keepalive(), None);
        assert_eq!(c.balancer_name, BalancerName::P2cEwma);
        let m = &c.middlewares;
        assert!(m.trace && m.duration && m.prometheus && m.breaker && m.timeout);
        assert!(!c.has_credential());
    }

    #[test]
    fn target_priority_is_endpoints_then_target_then_etcd() {
        let mut c = RpcClientConf::etcd(["10.0.0.1:2379", "10.0.0.2:2379"], "greet.rpc/v 1");
        assert_eq!(
            c.build_target().unwrap(),
            "etcd:///10.0.0.1:2379,10.0.0.2:2379?key=greet.rpc%2Fv+1"
        );
        c.target = "dns:///greet:8080".into();
        assert_eq!(c.build_target().unwrap(), "dns:///greet:8080");
        c.endpoints = vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()];
        assert_eq!(
            c.build_target().unwrap(),
            "direct:///127.0.0.1:1,127.0.0.1:2"
        );
        assert_eq!(
            RpcClientConf::target("direct:///a:1")
                .build_target()
                .unwrap(),
            "direct:///a:1"
        );
    }

    #[test]
    fn nothing_configured_is_go_zeros_error() {
        let e = RpcClientConf::default().build_target().unwrap_err();
        assert!(e.to_string().contains("empty etcd hosts"), "{e}");
        let e = RpcClientConf::etcd(["h:2379"], "").validate().unwrap_err();
        assert!(e.to_string().contains("empty etcd key"), "{e}");
        RpcClientConf::direct(["127.0.0.1:8080"])
            .validate()
            .unwrap();
    }

    #[test]
    fn nothing_configured_names_the_three_ways_to_set_a_target() {
        use zrpc_core::conf::{Format, from_str};
        let e =
            from_str::<RpcClientConf>("Timeout: 1000\n", Format::Yaml, "client.yaml").unwrap_err();
        assert_eq!(e.path(), Some("Endpoints"));
        assert_eq!(
            e.to_string(),
            "config file client.yaml: `Endpoints`: no server to call: set one of `Endpoints` \
             (server addresses, e.g. [127.0.0.1:8080]), `Target` (a target URI, e.g. \
             dns:///greet:8080) or `Etcd.Hosts` + `Etcd.Key` (etcd discovery); go-zero uses the \
             first one set in that order and, with none set, reports `empty etcd hosts`"
        );
        // an Etcd block that is in use keeps go-zero's own errors
        let e = RpcClientConf::etcd(Vec::<String>::new(), "greet.rpc")
            .validate()
            .unwrap_err();
        assert_eq!(e.path(), Some("Etcd.Hosts"));
    }

    #[test]
    fn a_bad_target_fails_validation() {
        let e = RpcClientConf::target("nope:///x").validate().unwrap_err();
        assert_eq!(e.path(), Some("Target"));
        RpcClientConf::target("dns:///greet:8080")
            .validate()
            .unwrap();
        let etcd = RpcClientConf::target("etcd:///h1:2379,h2:2379?key=greet.rpc").validate();
        assert_eq!(etcd.is_ok(), cfg!(feature = "etcd"), "{etcd:?}");
    }

    #[test]
    fn credential_needs_both() {
        assert!(
            RpcClientConf::direct(["a:1"])
                .with_credential("app", "tok")
                .has_credential()
        );
        assert!(
            !RpcClientConf::direct(["a:1"])
                .with_credential("app", "")
                .has_credential()
        );
    }

    #[test]
    fn balancer_names() {
        assert_eq!(
            "round_robin".parse::<BalancerName>().unwrap(),
            BalancerName::RoundRobin
        );
        assert_eq!(
            "consistent_hash".parse::<BalancerName>().unwrap(),
            BalancerName::ConsistentHash
        );
        assert_eq!(BalancerName::ConsistentHash.to_string(), "consistent_hash");
        let e = "p2c".parse::<BalancerName>().unwrap_err().to_string();
        assert!(
            e.contains("supported: p2c_ewma, round_robin, consistent_hash"),
            "{e}"
        );
    }

    #[test]
    fn p2c_block_is_optional_and_its_share_is_validated() {
        use zrpc_core::conf::{Format, from_str};
        let load = |yaml: &str| from_str::<RpcClientConf>(yaml, Format::Yaml, "client.yaml");
        // go-zero's keys alone: the default cap (100 %, nothing capped)
        let c = load("Endpoints: [\"127.0.0.1:1\"]\n").unwrap();
        assert_eq!(c.p2c.max_ejected_percent, 100);
        let c = load("Endpoints: [\"127.0.0.1:1\"]\nP2c:\n  MaxEjectedPercent: 50\n").unwrap();
        assert_eq!(c.p2c, P2cConf::default().with_max_ejected_percent(50));
        let e = load("Endpoints: [\"127.0.0.1:1\"]\nP2c:\n  MaxEjectedPercent: 150\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("client.yaml") && e.contains("P2c.MaxEjectedPercent") && e.contains("150"),
            "{e}"
        );
        let e = load("Endpoints: [\"127.0.0.1:1\"]\nP2c:\n  MaxEjected: 50\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("P2c.MaxEjected"), "{e}");
    }

    #[test]
    fn etcd_discovery_needs_the_etcd_feature() {
        use zrpc_core::conf::{Format, from_str};
        for (text, key, value) in [
            (
                "Etcd:\n  Hosts: [127.0.0.1:2379]\n  Key: greet.rpc\n",
                "Etcd.Hosts",
                "127.0.0.1:2379",
            ),
            (
                "Target: etcd:///127.0.0.1:2379?key=greet.rpc\n",
                "Target",
                "etcd:///127.0.0.1:2379?key=greet.rpc",
            ),
        ] {
            let r = from_str::<RpcClientConf>(text, Format::Yaml, "client.yaml");
            if cfg!(feature = "etcd") {
                r.unwrap();
                continue;
            }
            let e = r.unwrap_err().to_string();
            for part in [key, value, "`etcd` cargo feature"] {
                assert!(e.contains(part), "{part:?} not in {e}");
            }
        }
        // `Endpoints` wins over `Etcd` (go-zero's priority): no etcd is used, any build loads it
        from_str::<RpcClientConf>(
            "Endpoints: [127.0.0.1:8080]\nEtcd:\n  Hosts: [h:2379]\n  Key: k\n",
            Format::Yaml,
            "client.yaml",
        )
        .unwrap();
    }

    #[test]
    fn k8s_targets_and_etcd_tls_need_the_tls_feature() {
        use zrpc_core::conf::{Format, from_str};
        let etcd_tls = "Etcd:\n  Hosts: [127.0.0.1:2379]\n  Key: greet.rpc\n  CertFile: c.pem\n  \
                        CertKeyFile: k.pem\n  CACertFile: ca.pem\n";
        for (text, key, value, loads) in [
            (
                "Target: k8s://prod/greet:8080\n",
                "Target",
                "k8s://prod/greet:8080",
                cfg!(feature = "tls"),
            ),
            (
                etcd_tls,
                "Etcd.CertFile",
                "c.pem",
                cfg!(feature = "tls") && cfg!(feature = "etcd"),
            ),
        ] {
            let r = from_str::<RpcClientConf>(text, Format::Yaml, "client.yaml");
            if loads {
                r.unwrap();
                continue;
            }
            if cfg!(feature = "tls") {
                // etcd TLS with the `etcd` feature off: refused for etcd (the test above)
                continue;
            }
            let e = r.unwrap_err().to_string();
            for part in [key, value, "`tls` cargo feature"] {
                assert!(e.contains(part), "{part:?} not in {e}");
            }
        }
    }
}
