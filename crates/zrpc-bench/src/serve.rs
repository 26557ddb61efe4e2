//! `zrpc-bench serve`: the Rust servers of a run (bare tonic, or zrpc from a go-zero YAML), with
//! a greeter that can sleep, burn CPU, fail for a while, or wait for a place of a downstream
//! resource, and that names itself in `x-server`.
//! Events (`ready`, `first_call`, `stopped`) are JSON lines appended to `--events`.

use std::io::Write;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tonic::{Request, Response, Status};
use zrpc_tests::pb::greeter_server::{Greeter, GreeterServer};
use zrpc_tests::pb::{HelloReply, HelloRequest, HelloStreamRequest};

/// The `serve` arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServeArgs {
    /// `tonic` (bare tonic server) or `zrpc` (zrpc server from `--conf`).
    #[arg(long, default_value = "tonic")]
    kind: String,
    /// The zrpc server config (go-zero YAML); its ListenOn is used.
    #[arg(long)]
    conf: Option<PathBuf>,
    /// Listen address for `tonic`.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Where to append JSON events.
    #[arg(long)]
    events: PathBuf,
    /// Sleep this long in every call, ms.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Burn this much CPU in every call, µs.
    #[arg(long, default_value_t = 0)]
    spin_us: u64,
    /// Fail every call with Internal for this long after the first call, ms.
    #[arg(long, default_value_t = 0)]
    fail_ms: u64,
    /// Places of a downstream resource (a connection pool): each call waits for one (FIFO)
    /// and holds it `--slot-ms` (0: no resource).
    #[arg(long, default_value_t = 0)]
    slots: usize,
    /// How long a call holds its place of the resource, ms.
    #[arg(long, default_value_t = 10)]
    slot_ms: u64,
    /// Tokio worker threads (0: one per CPU).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// zrpc only: turn the `:authority` repair off (to see what its inspection costs).
    #[arg(long)]
    no_authority_repair: bool,
    /// gzip: tonic's own (`accept_compressed` and `send_compressed`) for `tonic`,
    /// `Compression: gzip` for `zrpc` (which accepts gzip in any case).
    #[arg(long)]
    gzip: bool,
    /// zrpc only: the shedder reads this process's own CPU usage over this many CPUs, as in a
    /// container of its own with that many (0: zrpc's default, the cgroup's or the host's,
    /// which on a shared machine counts the neighbours' jobs too).
    #[arg(long, default_value_t = 0)]
    own_cpu: u32,
}

#[derive(Debug)]
struct State {
    name: String,
    delay: Duration,
    spin: Duration,
    fail: Duration,
    /// The downstream resource's places, and how long a call holds one.
    slots: Option<(tokio::sync::Semaphore, Duration)>,
    started: Instant,
    first: OnceLock<Instant>,
    calls: AtomicU64,
    failed_phase: AtomicU64,
    events: Mutex<std::fs::File>,
}

impl State {
    fn event(&self, v: serde_json::Value) {
        let mut f = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(f, "{v}");
        let _ = f.flush();
    }
}

#[derive(Debug, Clone)]
struct BenchGreeter(Arc<State>);

#[tonic::async_trait]
impl Greeter for BenchGreeter {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let s = &self.0;
        s.calls.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let first = *s.first.get_or_init(|| {
            s.event(serde_json::json!({
                "event": "first_call",
                "ms_since_start": now.duration_since(s.started).as_secs_f64() * 1000.0,
                "unix_ms": unix_ms(),
            }));
            now
        });
        if !s.fail.is_zero() && now.duration_since(first) < s.fail {
            s.failed_phase.fetch_add(1, Ordering::Relaxed);
            return Err(Status::internal(
                "failing on purpose (bench backend is down)",
            ));
        }
        if !s.spin.is_zero() {
            // CPU-bound work: spin on the clock (the handler under test must hold a core).
            let t = Instant::now();
            let mut x = 0u64;
            while t.elapsed() < s.spin {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        if !s.delay.is_zero() {
            tokio::time::sleep(s.delay).await;
        }
        if let Some((places, hold)) = &s.slots {
            // Bound by the resource, not the CPU: wait for a place, hold it, give it back.
            let _place = places
                .acquire()
                .await
                .map_err(|_| Status::internal("resource closed"))?;
            tokio::time::sleep(*hold).await;
        }
        let mut resp = Response::new(HelloReply {
            message: greeting(&req.into_inner().name),
        });
        if let Ok(v) = s.name.parse() {
            resp.metadata_mut().insert("x-server", v);
        }
        Ok(resp)
    }

    type SayHelloStreamStream =
        Pin<Box<dyn tokio_stream_shim::Stream<Item = Result<HelloReply, Status>> + Send>>;

    /// `count` replies `hello <name> <i>`, as fast as the client reads them (the interval is
    /// ignored: the harness measures messages per second).
    async fn say_hello_stream(
        &self,
        req: Request<HelloStreamRequest>,
    ) -> Result<Response<Self::SayHelloStreamStream>, Status> {
        let req = req.into_inner();
        let name = greeting(&req.name);
        let replies = (0..req.count).map(move |i| {
            Ok(HelloReply {
                message: format!("{name} {i}"),
            })
        });
        Ok(Response::new(Box::pin(tokio_stream_shim::iter(replies))))
    }
}

/// `hello <name>`; a long name (a large request) is answered by its length, so that the reply
/// stays small and the request's size is what is measured.
fn greeting(name: &str) -> String {
    if name.len() > 64 {
        format!("hello <{} bytes>", name.len())
    } else {
        format!("hello {name}")
    }
}

/// The `Stream` trait tonic's generated code names (re-exported by tonic's codegen).
mod tokio_stream_shim {
    pub(crate) use tonic::codegen::tokio_stream::{Stream, iter};
}

/// This process's own CPU usage over `cpus` CPUs, refreshed and smoothed as go-zero's sampler
/// does (every 250 ms, `cpu = cpu * 0.95 + current * 0.05`): what the shedder of a server in a
/// container of its own would read.
#[derive(Debug)]
struct OwnCpu(AtomicU64);

impl OwnCpu {
    fn start(cpus: u32) -> Arc<OwnCpu> {
        use zrpc_core::cpu::{CPU_MAX, REFRESH_INTERVAL, SMOOTHING_BETA};
        let own = Arc::new(OwnCpu(AtomicU64::new(0)));
        let shared = Arc::clone(&own);
        std::thread::spawn(move || {
            let mut smoothed = 0.0f64;
            let (mut last_cpu, mut last) = (zrpc_tests::bench::cpu_ns(), Instant::now());
            loop {
                std::thread::sleep(REFRESH_INTERVAL);
                let (cpu, now) = (zrpc_tests::bench::cpu_ns(), Instant::now());
                let wall = now.duration_since(last).as_nanos() as f64 * f64::from(cpus);
                let current =
                    (cpu.saturating_sub(last_cpu) as f64 / wall * CPU_MAX as f64).min(1000.0);
                smoothed = smoothed * SMOOTHING_BETA + current * (1.0 - SMOOTHING_BETA);
                shared.0.store(smoothed.round() as u64, Ordering::Relaxed);
                (last_cpu, last) = (cpu, now);
            }
        });
        own
    }
}

impl zrpc_core::cpu::CpuUsage for OwnCpu {
    fn millicpu(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Wall-clock time, ms since the Unix epoch (the harness compares it with the time it started
/// this process).
fn unix_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Runs a server until SIGTERM/SIGINT.
pub(crate) fn run(args: ServeArgs) -> Result<()> {
    let mut rt = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    if args.threads > 1 {
        rt.worker_threads(args.threads);
    }
    rt.enable_all().build()?.block_on(serve(args))
}

async fn serve(args: ServeArgs) -> Result<()> {
    let events = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.events)
        .with_context(|| format!("cannot open the events file {}", args.events.display()))?;
    let mut conf: Option<zrpc::RpcServerConf> = match &args.conf {
        Some(path) => Some(zrpc::conf::load(path)?),
        None => None,
    };
    if let (true, Some(c)) = (args.gzip, conf.as_mut()) {
        c.compression = Some(zrpc::compression::Encoding::Gzip);
    }
    let listen = conf
        .as_ref()
        .map_or(args.listen.clone(), |c| c.listen_on.clone());
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    let state = Arc::new(State {
        name: addr.to_string(),
        delay: Duration::from_millis(args.delay_ms),
        spin: Duration::from_micros(args.spin_us),
        fail: Duration::from_millis(args.fail_ms),
        slots: (args.slots > 0).then(|| {
            (
                tokio::sync::Semaphore::new(args.slots),
                Duration::from_millis(args.slot_ms),
            )
        }),
        started: Instant::now(),
        first: OnceLock::new(),
        calls: AtomicU64::new(0),
        failed_phase: AtomicU64::new(0),
        events: Mutex::new(events),
    });
    let svc = GreeterServer::new(BenchGreeter(state.clone()));
    state.event(
        serde_json::json!({"event": "ready", "addr": addr.to_string(), "unix_ms": unix_ms()}),
    );
    match (args.kind.as_str(), conf) {
        ("zrpc", Some(conf)) => {
            let _telemetry = zrpc::telemetry::init(&conf)?;
            let mut server = zrpc::server(conf)?.authority_repair(!args.no_authority_repair);
            if args.own_cpu > 0 {
                server = server.cpu_usage(OwnCpu::start(args.own_cpu));
            }
            server
                .add_service(svc)
                .serve_with_listener(listener, zrpc::shutdown::signal())
                .await?;
        }
        ("tonic", None) => {
            let gzip = tonic::codec::CompressionEncoding::Gzip;
            let svc = if args.gzip {
                svc.accept_compressed(gzip).send_compressed(gzip)
            } else {
                svc
            };
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                    zrpc::shutdown::signal(),
                )
                .await?;
        }
        (kind, _) => anyhow::bail!(
            "serve: --kind {kind} needs {}",
            if kind == "zrpc" {
                "--conf <yaml>"
            } else {
                "no --conf (kinds: tonic, zrpc)"
            }
        ),
    }
    state.event(serde_json::json!({
        "event": "stopped",
        "calls": state.calls.load(Ordering::Relaxed),
        "failed_phase_calls": state.failed_phase.load(Ordering::Relaxed),
    }));
    Ok(())
}
