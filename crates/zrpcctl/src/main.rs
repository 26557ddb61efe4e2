//! # zrpcctl
//!
//! goctl's rpc commands for zrpc:
//!
//! - `zrpcctl new <name> [--proto file.proto] [-I dir] [--zrpc-path <checkout> | --crates-io]`: a ready crate
//!   (Cargo.toml, build.rs, the proto and copies of the files it imports, `etc/<name>.yaml`,
//!   src/main.rs, one logic module per RPC that answers Unimplemented until written, a test that
//!   serves and calls it, a Dockerfile);
//! - `zrpcctl proto <file> [-I dir]`: regenerates the glue after the proto changed, creating logic
//!   modules only for new RPCs (never overwriting yours, never rewiring an RPC to another
//!   module);
//! - `zrpcctl etcd ls [--etcd hosts] [prefix]` / `zrpcctl etcd watch <key>`: registered services,
//!   endpoints and lease TTLs (zrpc and go-zero share the key layout), and live changes;
//! - `zrpcctl registration <status|pause|resume> <devserver host:port> [--token T]`: a server's
//!   etcd registration through its DevServer's `/admin` routes: take the node out of discovery
//!   while it keeps serving (to debug or drain it), and put it back;
//! - `zrpcctl inspect <devserver host:port> [--json] [--watch] [--token T]`: the process's live
//!   state from its DevServer's admin view (`/admin/state`): the server's limit, shedder,
//!   breakers, drops, connections and registration, and each zrpc client's endpoints (EWMA
//!   latency, calls in flight, success, state), breakers and retry budget;
//! - `zrpcctl conf check <file> [--features a,b] [--no-default-features] [--all-features]`:
//!   validates a server or client config with the errors the server and client give at start,
//!   as a build with zrpc's default features (or the ones given, as cargo takes them) would.
//!
//! Install with `cargo install --path crates/zrpcctl` (`cargo install zrpcctl` once published).

mod admin;
mod check;
mod etcd;
mod inspect;
mod proto;
mod scaffold;
mod templates;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub(crate) type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A message as an error.
pub(crate) fn fail(message: String) -> Box<dyn std::error::Error> {
    message.into()
}

/// goctl's rpc commands for zrpc: scaffold a service, regenerate its stubs, inspect etcd,
/// check configs.
#[derive(Debug, Parser)]
#[command(name = "zrpcctl", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Creates a ready zrpc service crate in ./NAME (goctl rpc new).
    New {
        /// Crate and service name (the config's `Name` is `<name>.rpc`).
        name: String,
        /// The service's .proto (default: goctl's Ping service).
        #[arg(long)]
        proto: Option<PathBuf>,
        /// A directory imports are relative to, as protoc's -I (repeatable; the proto's own
        /// directory is searched last).
        #[arg(
            short = 'I',
            long = "proto-path",
            alias = "proto_path",
            value_name = "DIR"
        )]
        includes: Vec<PathBuf>,
        /// Depend on a local zrpc checkout (its root) by path instead of zrpc's git repository.
        #[arg(long, value_name = "CHECKOUT_ROOT")]
        zrpc_path: Option<PathBuf>,
        /// Depend on zrpc from crates.io, at this zrpcctl's version (resolves once zrpc is
        /// published there; until then the default, zrpc's git repository, is the one that works).
        #[arg(long, conflicts_with = "zrpc_path")]
        crates_io: bool,
        /// Where to create the crate (default: the current directory).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
    /// Regenerates src/server.rs, src/pb.rs and src/logic/mod.rs from a proto, adding logic
    /// modules for new RPCs without touching existing ones (goctl rpc protoc).
    Proto {
        /// The proto file (usually proto/NAME.proto).
        file: PathBuf,
        /// A directory imports are relative to, as protoc's -I (repeatable; then the crate's
        /// proto/ and the file's own directory are searched).
        #[arg(
            short = 'I',
            long = "proto-path",
            alias = "proto_path",
            value_name = "DIR"
        )]
        includes: Vec<PathBuf>,
        /// The crate's root (default: the current directory).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
    /// Inspects etcd registrations (zrpc and go-zero key layout).
    Etcd {
        #[command(subcommand)]
        command: EtcdCommand,
        /// etcd endpoints, comma-separated.
        #[arg(
            long,
            global = true,
            default_value = "127.0.0.1:2379",
            value_delimiter = ','
        )]
        etcd: Vec<String>,
    },
    /// Config files.
    Conf {
        #[command(subcommand)]
        command: ConfCommand,
    },
    /// A running server's etcd registration, through its DevServer (`DevServer.AdminToken`
    /// for pause and resume).
    Registration {
        /// status, pause (out of discovery, still serving) or resume.
        #[arg(value_enum)]
        action: admin::Action,
        /// The server's DevServer address (`host:port`, e.g. 127.0.0.1:6060).
        addr: String,
        /// The server's `DevServer.AdminToken` (default: $ZRPC_ADMIN_TOKEN).
        #[arg(long, env = "ZRPC_ADMIN_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
    /// A running process's live state through its DevServer's admin view: the server's stages
    /// (limit, shedder, breakers), drops, connections and registration, and every zrpc client
    /// with its endpoints.
    Inspect {
        /// The DevServer address (`host:port`, e.g. 127.0.0.1:6060).
        addr: String,
        /// Print the view as JSON, as the server sends it.
        #[arg(long)]
        json: bool,
        /// Read it again every second.
        #[arg(long)]
        watch: bool,
        /// With --watch: stop after this many views (tests).
        #[arg(long, hide = true)]
        times: Option<u64>,
        /// The server's `DevServer.AdminToken`, when one is set (default: $ZRPC_ADMIN_TOKEN).
        #[arg(long, env = "ZRPC_ADMIN_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum EtcdCommand {
    /// Lists registered services, their endpoints and lease TTLs.
    Ls {
        /// Key prefix (default: every key).
        #[arg(default_value = "")]
        prefix: String,
    },
    /// Prints the endpoints under a key, then every change (PUT/DELETE) until Ctrl-C.
    Watch {
        /// The service key (e.g. greeter.rpc).
        key: String,
        /// Stop after this many changes.
        #[arg(long)]
        count: Option<usize>,
    },
}

#[derive(Debug, Subcommand)]
enum ConfCommand {
    /// Validates a server or client config (YAML, JSON or TOML) as at start.
    ///
    /// The file is checked as a build of the service with zrpc's default features (etcd,
    /// devserver) would check it, as `zrpcctl new` scaffolds: a key that needs a feature such a
    /// build leaves out (`Tls`, `Reflection: true`, `Telemetry.Endpoint`, ...) is refused,
    /// naming the feature. Give the features of the service's `zrpc` dependency as cargo takes
    /// them.
    Check {
        /// The config file.
        file: PathBuf,
        /// Check as a server config (default: guessed, `ListenOn` means server).
        #[arg(long, conflicts_with = "client")]
        server: bool,
        /// Check as a client config.
        #[arg(long)]
        client: bool,
        /// zrpc features the service's build enables, on top of the defaults unless
        /// --no-default-features (comma-separated, repeatable: etcd, devserver, otel,
        /// reflection, env-filter, toml, json5, redis-auth, tls, gzip, deflate, zstd, client).
        #[arg(long, short = 'F', value_name = "FEATURES")]
        features: Vec<String>,
        /// Check as a build without zrpc's default features (etcd, devserver, gzip, client).
        #[arg(long)]
        no_default_features: bool,
        /// Check as a build with every zrpc feature.
        #[arg(long)]
        all_features: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::New {
            name,
            proto,
            includes,
            zrpc_path,
            crates_io,
            dir,
        } => {
            let source = match (zrpc_path, crates_io) {
                (Some(p), _) => scaffold::Source::Path(p),
                (None, true) => scaffold::Source::Published(env!("CARGO_PKG_VERSION")),
                (None, false) => scaffold::Source::Git(env!("CARGO_PKG_REPOSITORY")),
            };
            let (root, report) = scaffold::new(&dir, &name, proto.as_deref(), &includes, &source)?;
            println!("created {}", root.display());
            report.print(&root);
            println!(
                "\nnext:\n  cd {}\n  cargo test            # starts the server on a free port and calls it\n  \
                 cargo run -- -f etc/{name}.yaml\n  \
                 edit src/logic/*.rs; after adding RPCs to the proto: zrpcctl proto proto/<file>.proto",
                root.display()
            );
            Ok(())
        }
        Command::Proto {
            file,
            includes,
            dir,
        } => {
            let report = scaffold::regenerate(&dir, &file, &includes)?;
            report.print(&dir);
            Ok(())
        }
        Command::Etcd { command, etcd } => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                match command {
                    EtcdCommand::Ls { prefix } => {
                        print!("{}", etcd::render(&etcd::list(&etcd, &prefix).await?));
                        Ok(())
                    }
                    EtcdCommand::Watch { key, count } => etcd::watch(&etcd, &key, count).await,
                }
            })
        }
        Command::Registration {
            action,
            addr,
            token,
        } => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let answer = rt.block_on(admin::registration(&addr, action, token.as_deref()))?;
            print!("{answer}");
            Ok(())
        }
        Command::Inspect {
            addr,
            json,
            watch,
            times,
            token,
        } => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(inspect::run(&addr, token.as_deref(), json, watch, times))
        }
        Command::Conf {
            command:
                ConfCommand::Check {
                    file,
                    server,
                    client,
                    features,
                    no_default_features,
                    all_features,
                },
        } => {
            let kind = match (server, client) {
                (true, _) => Some(check::Kind::Server),
                (_, true) => Some(check::Kind::Client),
                _ => None,
            };
            let features = check::feature_set(&features, no_default_features, all_features)?;
            let (kind, notes) = check::check(&file, kind, &features)?;
            for n in notes {
                println!("{n}");
            }
            println!("{}: ok ({kind:?} config)", file.display());
            println!("{}", check::checked_as(&features));
            Ok(())
        }
    }
}
