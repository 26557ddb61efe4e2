//! The greeter server, in the shape `goctl rpc new` generates for go-zero.
//!
//! ```text
//! cargo run -p zrpc-examples --bin greeter-server -- -f examples/etc/greeter-server.yaml
//! ```
//!
//! The config is a go-zero `RpcServerConf` (`Name`, `ListenOn`, `Etcd: {Hosts, Key}`, ...). With
//! `Etcd`, the server registers itself there; SIGTERM or Ctrl-C deregisters it, waits
//! `Shutdown.WrapUpTime` and drains in-flight calls before it exits.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use zrpc_examples::greeter::Greeter;
use zrpc_examples::pb;

/// Serve the greeter (SayHello, SayHelloStream) with zrpc.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The config file: a go-zero `RpcServerConf` in YAML, JSON or TOML.
    #[arg(
        short = 'f',
        long = "file",
        default_value = "examples/etc/greeter-server.yaml"
    )]
    file: PathBuf,
    /// Listen on this address instead of the config's `ListenOn` (port 0: any free port).
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Answer each SayHello after this many milliseconds (to play a slow server).
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    match serve(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), zrpc::Error> {
    let mut conf: zrpc::RpcServerConf = zrpc::conf::load(&args.file)?;
    if let Some(listen) = args.listen {
        conf.listen_on = listen;
    }

    // Bind first so the greeter can name the address it serves on (port 0 included), the
    // same address the server registers in etcd.
    let listen = match conf.listen_on.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"), // go-zero's ":8080"
        None => conf.listen_on.clone(),
    };
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    let addr = zrpc::registry::advertise_addr(
        &conf.listen_on,
        listener.local_addr()?,
        conf.advertise_addr.as_deref(),
    );
    // `serve()` does this itself; `serve_with_listener` leaves it to us.
    let _telemetry = zrpc::telemetry::init(&conf)?;

    let greeter = Greeter::new(&addr, Duration::from_millis(args.delay_ms));
    zrpc::server(conf)?
        .add_service(greeter.into_service())
        // Tells the server which methods stream (never timed out or shed) and serves reflection
        // in `Mode: dev`/`test`.
        .reflection_descriptor(pb::FILE_DESCRIPTOR_SET)
        .serve_with_listener(listener, zrpc::shutdown::signal())
        .await?;
    Ok(())
}
