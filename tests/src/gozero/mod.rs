//! Real go-zero next to zrpc: builds and runs the Go programs of `interop/gozero/` (go-zero
//! v1.10.3), and serves zrpc greeters that answer exactly as the Go one does.
//!
//! # The Go programs
//!
//! [`programs`] builds `interop/gozero/bin/gz-server` and `bin/gz-client` once per test process
//! (`bash interop/gozero/build.sh`, which needs `go`; binaries newer than every source file are
//! reused). Without `go` on `PATH` (and without built binaries) it prints
//! `SKIPPED: go not found, go-zero interop tests not run` to stderr and returns None, so every
//! test returns early ([`crate::gozero_or_skip!`]); with `CI=true` a missing Go is a panic.
//!
//! - [`GzServer`]: `gz-server -f <yaml>`, a go-zero greeter (`zrpc.MustNewServer`). Its YAML
//!   comes from [`ServerYaml`] (ListenOn `127.0.0.1:<free port>`, DevServer on `127.0.0.1`,
//!   `CpuThreshold: 0`, `Log: {Mode: console, Level: error}`) or from a file. Started means its
//!   gRPC port accepts connections; dropped means SIGTERM, then SIGKILL after 10 s (only our PID).
//! - [`GzClient`]: `gz-client -f <yaml> -n N -c C ...`, a go-zero client whose config comes from
//!   [`ClientYaml`]; [`GzRun`] is its parsed summary (calls, codes, calls per peer and per
//!   `x-server`) and, with `-v`, its per-call lines.
//! - [`go_zero_owners`]: `gz-ring`, the server go-zero's `consistent_hash` ring gives each key.
//!
//! # The zrpc side
//!
//! [`InteropGreeter`] answers as `gz-server` does (the name directives `sleep:<ms>`, `panic`,
//! `code:<n>` (message `forced <n>`), `meta`; response header `x-server: <ListenOn>`), so one
//! assertion covers both servers. [`start_zrpc`] serves it behind a zrpc `Server` on
//! `127.0.0.1:<port>` (registered in etcd when the config has `Etcd`).

// The Go programs.
mod gz_client;
mod gz_ring;
mod gz_run;
mod gz_server;
mod process;
mod programs;
mod yaml;

// Shared helpers.
mod net;
mod prometheus;

// The zrpc side.
mod interop_greeter;
mod load;
mod serve;

pub use gz_client::{GzClient, RunningGzClient};
pub use gz_ring::go_zero_owners;
pub use gz_run::{CallLine, GzRun, Summary};
pub use gz_server::{GzServer, GzStopped};
pub use interop_greeter::{InteropGreeter, SERVER_HEADER, parse_grpc_timeout};
pub use load::{Load, ZrpcCall, ZrpcRun, say_hello, zrpc_load};
pub use net::{eventually, http10_get, scrape, wait_deregistered, wait_registered, wait_tcp};
pub use programs::{Programs, gozero_dir, programs, repo_root};
pub use prometheus::{family_help, family_type, sample, samples};
pub use serve::{ZrpcServer, start_zrpc, start_zrpc_with, zrpc_conf};
pub use yaml::{ClientYaml, Discovery, ServerYaml, etcd_target, query_escape};
