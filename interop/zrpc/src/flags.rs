//! grpc-go's interop flags, for `zrpc-interop-client` and `zrpc-interop-server`.
//!
//! Names and defaults are those of grpc-go's `interop/client` and `interop/server` (`--flag=value`
//! or `--flag value`; a boolean alone means true). zrpc ships no test certificates: TLS needs the
//! files named (`--ca_file` on the client, `--tls_cert_file` and `--tls_key_file` on the server),
//! where grpc-go falls back to the ones in its module.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args};
use zrpc::RpcClientConf;
use zrpc::conf::{ClientTlsConf, RpcServerConf, ServerTlsConf};

use crate::cases::SoakConf;

/// The client's flags.
#[derive(Debug, Clone, Args)]
pub struct ClientFlags {
    /// The server's host name or address.
    #[arg(long = "server_host", default_value = "localhost")]
    pub server_host: String,
    /// The server's port.
    #[arg(long = "server_port", default_value_t = 10000)]
    pub server_port: u16,
    /// The name the server's certificate must carry (and the TLS SNI), when not
    /// `--server_host`.
    #[arg(long = "server_host_override")]
    pub server_host_override: Option<String>,
    /// The case to run (`empty_unary`, `large_unary`, ...).
    #[arg(long = "test_case", default_value = "large_unary")]
    pub test_case: String,
    /// Speak TLS (needs `--ca_file`).
    #[arg(long = "use_tls", action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub use_tls: bool,
    /// Trust the test CA instead of system roots: zrpc's client always trusts only its CA
    /// file, so this asks for `--ca_file`.
    #[arg(long = "use_test_ca", action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub use_test_ca: bool,
    /// The CA certificate (PEM) the server's certificate must chain to.
    #[arg(long = "ca_file")]
    pub ca_file: Option<PathBuf>,
    /// Soak: calls to make.
    #[arg(long = "soak_iterations", default_value_t = 10)]
    pub soak_iterations: u32,
    /// Soak: calls that may fail or be late.
    #[arg(long = "soak_max_failures", default_value_t = 0)]
    pub soak_max_failures: u32,
    /// Soak: a call slower than this (ms) counts as failed.
    #[arg(
        long = "soak_per_iteration_max_acceptable_latency_ms",
        default_value_t = 1000
    )]
    pub soak_max_latency_ms: u64,
    /// Soak: the whole case must end within this (s).
    #[arg(long = "soak_overall_timeout_seconds", default_value_t = 10)]
    pub soak_overall_timeout_seconds: u64,
    /// Soak: at least this long (ms) from one call's start to the next.
    #[arg(long = "soak_min_time_ms_between_rpcs", default_value_t = 0)]
    pub soak_min_time_ms_between_rpcs: u64,
    /// Soak: request payload bytes.
    #[arg(long = "soak_request_size", default_value_t = 271_828)]
    pub soak_request_size: usize,
    /// Soak: response payload bytes.
    #[arg(long = "soak_response_size", default_value_t = 314_159)]
    pub soak_response_size: usize,
}

impl ClientFlags {
    /// The zrpc client config the flags describe: the one endpoint, and TLS when asked.
    ///
    /// # Errors
    ///
    /// `--use_tls` or `--use_test_ca` without `--ca_file`.
    pub fn conf(&self) -> anyhow::Result<RpcClientConf> {
        let host = if self.server_host.contains(':') {
            format!("[{}]", self.server_host)
        } else {
            self.server_host.clone()
        };
        let conf = RpcClientConf::direct([format!("{host}:{}", self.server_port)]);
        if !self.use_tls {
            return Ok(conf);
        }
        let Some(ca) = &self.ca_file else {
            anyhow::bail!(
                "--use_tls{} needs --ca_file: zrpc's client trusts only the CA file it is given \
                 (never the system roots) and ships no test CA",
                if self.use_test_ca {
                    " --use_test_ca"
                } else {
                    ""
                }
            );
        };
        let mut tls = ClientTlsConf::new(ca.display().to_string());
        if let Some(name) = &self.server_host_override {
            tls = tls.with_server_name(name.clone());
        }
        Ok(conf.with_tls(tls))
    }

    /// The soak settings the flags give.
    pub fn soak(&self) -> SoakConf {
        SoakConf {
            iterations: self.soak_iterations,
            max_failures: self.soak_max_failures,
            max_latency: Duration::from_millis(self.soak_max_latency_ms),
            overall_timeout: Duration::from_secs(self.soak_overall_timeout_seconds),
            min_time_between: Duration::from_millis(self.soak_min_time_ms_between_rpcs),
            request_size: self.soak_request_size,
            response_size: self.soak_response_size,
        }
    }
}

/// The server's flags.
#[derive(Debug, Clone, Args)]
pub struct ServerFlags {
    /// The port to listen on (0: any free port, printed on stdout).
    #[arg(long = "port", default_value_t = 10000)]
    pub port: u16,
    /// The address to listen on (grpc-go's server listens on every interface).
    #[arg(long = "host", default_value = "0.0.0.0")]
    pub host: String,
    /// Speak TLS (needs `--tls_cert_file` and `--tls_key_file`).
    #[arg(long = "use_tls", action = ArgAction::Set, num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub use_tls: bool,
    /// The server's certificate chain (PEM).
    #[arg(long = "tls_cert_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// The server's private key (PEM).
    #[arg(long = "tls_key_file")]
    pub tls_key_file: Option<PathBuf>,
}

impl ServerFlags {
    /// The address to bind.
    pub fn listen_on(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The interop server's config ([`server::conf`](crate::server::conf)) listening on
    /// `listen_on`, with TLS when the flags ask.
    ///
    /// # Errors
    ///
    /// `--use_tls` without both certificate files.
    pub fn conf(&self, listen_on: &str) -> anyhow::Result<RpcServerConf> {
        let conf = crate::server::conf(listen_on);
        if !self.use_tls {
            return Ok(conf);
        }
        let (Some(cert), Some(key)) = (&self.tls_cert_file, &self.tls_key_file) else {
            anyhow::bail!(
                "--use_tls needs --tls_cert_file and --tls_key_file: zrpc ships no test certificate"
            );
        };
        Ok(conf.with_tls(ServerTlsConf::new(
            cert.display().to_string(),
            key.display().to_string(),
        )))
    }
}
