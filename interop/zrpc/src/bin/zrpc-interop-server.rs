//! gRPC's interop server on zrpc: `grpc.testing.TestService` behind zrpc's server with its
//! default chain.
//!
//! ```text
//! zrpc-interop-server --port=10000 [--use_tls --tls_cert_file=server.pem --tls_key_file=server.key]
//! ```
//!
//! Prints `listening on <address>` on stdout once it accepts connections (`--port=0` picks a
//! free port); SIGTERM or Ctrl-C shuts it down gracefully.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use zrpc_interop::flags::ServerFlags;

/// Serve grpc.testing.TestService on zrpc.
#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    flags: ServerFlags,
}

#[tokio::main]
async fn main() -> ExitCode {
    match serve(Cli::parse().flags).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(flags: ServerFlags) -> anyhow::Result<()> {
    let listen_on = flags.listen_on();
    let listener = tokio::net::TcpListener::bind(&listen_on)
        .await
        .with_context(|| format!("bind {listen_on}"))?;
    let addr = listener.local_addr()?;
    let server =
        zrpc::server(flags.conf(&addr.to_string())?)?.add_service(zrpc_interop::server::service());
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on {addr}")?;
    stdout.flush()?;
    server
        .serve_with_listener(listener, zrpc::shutdown::signal())
        .await?;
    Ok(())
}
