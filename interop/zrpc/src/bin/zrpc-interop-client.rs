//! gRPC's interop client on zrpc: runs one interop case against a `grpc.testing.TestService`
//! server through `zrpc::client`.
//!
//! ```text
//! zrpc-interop-client --server_host=127.0.0.1 --server_port=10000 --test_case=large_unary \
//!     [--use_tls --use_test_ca --ca_file=ca.pem --server_host_override=foo.test.google.fr]
//! ```
//!
//! Exits 0 when the case passed; otherwise prints why and exits 1.

use std::process::ExitCode;

use clap::Parser;
use zrpc_interop::flags::ClientFlags;
use zrpc_interop::{Case, Runner};

/// Run one gRPC interop case with zrpc's client.
#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    flags: ClientFlags,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse().flags).await {
        Ok(case) => {
            println!("{case} passed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(flags: ClientFlags) -> anyhow::Result<Case> {
    let case: Case = flags.test_case.parse()?;
    let runner = Runner::new(flags.conf()?).await?.with_soak(flags.soak());
    runner.run(case).await?;
    Ok(case)
}
