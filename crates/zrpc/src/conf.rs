//! go-zero style configuration: the config types and their loader (`conf.MustLoad` in go-zero).
//!
//! Every config type keeps go-zero's key names (PascalCase in the file, case-insensitive) and
//! defaults, so a go-zero YAML file loads unchanged. Durations use Go's syntax (`"500ms"`,
//! `"1m30s"`); see [`duration`] to use them in your own config structs.
//!
//! The key-by-key reference, with defaults and where zrpc differs from go-zero, is
//! [`docs/configuration.md`](https://github.com/zrpc-rs/zrpc/blob/main/docs/configuration.md).

pub use zrpc_core::conf::{
    ConfError, Embed, EtcdConf, Format, Validate, duration, from_str, from_str_with_env, load,
    load_with_env,
};

pub use zrpc_client::conf::{
    BalancerName, ClientMiddlewaresConf, ClientTlsConf, HedgingPolicyConf, MethodConf, MethodName,
    RetryBudgetConf, RetryPolicyConf, RpcClientConf, StatusCodes,
};
pub use zrpc_server::conf::{
    AuthTokenConf, ClientAuth, DevServerConf, IgnoredKey, LogConf, LogFieldKeys, MethodTimeoutConf,
    ProfileTypeConf, ProfilingConf, PrometheusConf, RedisKeyConf, RpcServerConf,
    ServerMiddlewaresConf, ServerTlsConf, ServiceMode, ShutdownConf, StatConf, TelemetryConf,
};
