//! go-zero style configuration: the config types and their loader (`conf.MustLoad` in go-zero).
//!
//! Every config type keeps go-zero's key names (PascalCase in the file, case-insensitive) and
//! defaults, so a go-zero YAML file loads unchanged. Durations use Go's syntax (`"500ms"`,
//! `"1m30s"`); see [`duration`] to use them in your own config structs.
//!
//! The key-by-key reference, with defaults and where zrpc differs from go-zero, is
//! [`docs/configuration.md`](https://github.com/zrpc-rs/zrpc/blob/main/docs/configuration.md).

pub use zrpc_core::conf::{
    CacheConf, ConfError, Embed, EtcdConf, Format, NodeConf, RedisConf, Validate, duration,
    from_str, from_str_with_env, load, load_with_env,
};

#[cfg(feature = "client")]
#[cfg_attr(docsrs, doc(cfg(feature = "client")))]
pub use zrpc_client::conf::{
    BalancerName, ClientMiddlewaresConf, ClientTlsConf, HedgingPolicyConf, MethodCompressionConf,
    MethodConf, MethodName, MethodTierConf, RetryBudgetConf, RetryPolicyConf, RpcClientConf,
    StatusCodes,
};
pub use zrpc_server::conf::{
    AuthTokenConf, ClientAuth, ConcurrencyLimitConf, DevServerConf, IgnoredKey, LogConf,
    LogFieldKeys, MethodTimeoutConf, ProfileTypeConf, ProfilingConf, PrometheusConf, RedisKeyConf,
    RpcServerConf, ServerMiddlewaresConf, ServerTlsConf, ServiceMode, ShutdownConf, StatConf,
    TelemetryConf,
};

/// Checking a config as a build with other features would (`zrpcctl conf check --features`):
/// not a stable API.
#[doc(hidden)]
pub use zrpc_core::conf::{DEFAULT_FEATURES, FEATURES, FeatureSet, UnknownFeature, with_features};

/// The features this build of zrpc has: an override by [`with_features`] can only turn these
/// off. Not a stable API.
#[doc(hidden)]
pub fn compiled_features() -> FeatureSet {
    let mut set = FeatureSet::none();
    for (name, on) in [
        ("etcd", cfg!(feature = "etcd")),
        ("devserver", cfg!(feature = "devserver")),
        ("otel", cfg!(feature = "otel")),
        ("reflection", cfg!(feature = "reflection")),
        ("env-filter", cfg!(feature = "env-filter")),
        ("toml", cfg!(feature = "toml")),
        ("json5", cfg!(feature = "json5")),
        ("redis-auth", cfg!(feature = "redis-auth")),
        ("tls", cfg!(feature = "tls")),
        ("gzip", cfg!(feature = "gzip")),
        ("deflate", cfg!(feature = "deflate")),
        ("zstd", cfg!(feature = "zstd")),
        ("client", cfg!(feature = "client")),
    ] {
        if on {
            // every name is one of FEATURES (zrpcctl's tests compare them with Cargo.toml)
            let _ = set.insert(name);
        }
    }
    set
}
