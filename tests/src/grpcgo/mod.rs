//! gRPC's interop programs next to zrpc: grpc-go v1.83.2's own interop client and server
//! (`interop/grpc-go/`, built from the Go module proxy), and zrpc's (the `zrpc-interop` crate)
//! served in-process, with test certificates made here.
//!
//! # The Go programs
//!
//! [`programs`] runs `bash interop/grpc-go/build.sh` once per test process (binaries newer than
//! every source are reused; [`crate::gobuild`] has the rules without Go). Without Go, the tests
//! that need them return early ([`crate::grpcgo_or_skip!`]) after printing `SKIPPED`; with
//! `CI=true` a missing Go is a panic.
//!
//! - [`GrpcGoServer`]: `grpc-go-server --port=0`, grpc-go's stock interop server (it listens on
//!   every interface, as grpc-go wrote it; its port is read from its log line).
//! - [`run_grpcgo_client`]: one `grpc-go-client --test_case=...` run, bounded in time.
//! - `gzip-interop`: grpc-go with gzip registered, for the compression cases
//!   ([`GrpcGoServer::start_gzip`], [`run_gzip_client`]), and one call whose status a grpc-go
//!   client prints ([`grpcgo_unary_status`]).
//! - `testing-descriptors`: grpc-go's compiled `grpc.testing` descriptors, for the proto check.
//!
//! # The zrpc side
//!
//! [`ZrpcInteropServer`]: zrpc's `TestService` behind `zrpc::server` on `127.0.0.1:0`, with the
//! default chain (its own breakers, the CPU shedder off: the test machine's CPU is not this
//! server's load). [`InteropCerts`]: a CA and a server certificate for `*.test.google.fr`,
//! `localhost` and `127.0.0.1`; clients verify it as [`SERVER_NAME`], as grpc-go's interop
//! scripts do with `--server_host_override`.

mod client;
mod server;
mod zrpc;

use std::path::PathBuf;
use std::sync::OnceLock;

pub use client::{ClientRun, grpcgo_unary_status, run_grpcgo_client, run_gzip_client};
pub use server::GrpcGoServer;
pub use zrpc::{InteropCerts, SERVER_NAME, ZrpcInteropServer, zrpc_runner};

/// The built Go programs of `interop/grpc-go/`.
#[derive(Debug, Clone)]
pub struct GrpcGoPrograms {
    /// `bin/grpc-go-client`: `google.golang.org/grpc/interop/client`.
    pub client: PathBuf,
    /// `bin/grpc-go-server`: `google.golang.org/grpc/interop/server`.
    pub server: PathBuf,
    /// `bin/testing-descriptors`: grpc-go's `grpc.testing` descriptor set on stdout.
    pub descriptors: PathBuf,
    /// `bin/gzip-interop`: TestService with gzip, server and client of the compression cases.
    pub gzip: PathBuf,
}

/// `interop/grpc-go/` in the repository.
pub fn grpcgo_dir() -> PathBuf {
    crate::gobuild::repo_root().join("interop").join("grpc-go")
}

/// Returns the grpc-go programs, or from the enclosing test when they are not available (see
/// [`programs`]).
#[macro_export]
macro_rules! grpcgo_or_skip {
    () => {
        match $crate::grpcgo::programs() {
            Some(p) => p,
            None => return,
        }
    };
}

/// The grpc-go programs, built once per test process. None when Go is missing (the skip is
/// printed to stderr once per test).
///
/// # Panics
/// When the build fails, or Go is missing and `CI=true`.
pub fn programs() -> Option<&'static GrpcGoPrograms> {
    static PROGRAMS: OnceLock<Option<GrpcGoPrograms>> = OnceLock::new();
    crate::gobuild::once(&PROGRAMS, "grpc-go", || {
        let dir = grpcgo_dir();
        let bin = dir.join("bin");
        let p = GrpcGoPrograms {
            client: bin.join("grpc-go-client"),
            server: bin.join("grpc-go-server"),
            descriptors: bin.join("testing-descriptors"),
            gzip: bin.join("gzip-interop"),
        };
        let bins = [
            p.client.clone(),
            p.server.clone(),
            p.descriptors.clone(),
            p.gzip.clone(),
        ];
        crate::gobuild::build("grpc-go", &dir, &bins).then_some(p)
    })
}
