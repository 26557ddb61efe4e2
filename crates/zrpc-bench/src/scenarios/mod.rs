//! The scenarios, and what they share: servers and load generators started as child processes
//! (Rust: this binary's `serve`/`load`; go-zero: `gzbench serve`/`load`), h2load runs, and the
//! run driver that collects every section into the report.

mod balance;
mod breaker;
mod compression;
mod failover;
pub(crate) mod fleet;
mod instructions;
mod latency;
mod memory;
mod overhead;
mod overload;
mod payloads;
mod scale;
mod scale_server;
mod shed;

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use crate::env::Env;
use crate::proc::{Proc, free_port};
use crate::report::Section;
use crate::stats::{Record, Summary, read_records};

/// Options of a run.
#[derive(Debug, Clone)]
pub(crate) struct Opts {
    /// Small sizes (smoke test).
    pub(crate) quick: bool,
    /// Alternating rounds per comparison.
    pub(crate) rounds: usize,
    /// Seconds each subject is measured per round (`latency`).
    pub(crate) round_secs: f64,
    /// `overhead`: alternating rounds per comparison (more and shorter than `rounds`).
    pub(crate) overhead_rounds: usize,
    /// `overhead`: seconds each subject is measured per round.
    pub(crate) overhead_secs: f64,
    /// The report path.
    pub(crate) out: PathBuf,
    /// `balance`: seconds per run (default sizes when `None`).
    pub(crate) balance_secs: Option<u64>,
    /// `balance`: only these clients (all when empty).
    pub(crate) balance_clients: Vec<String>,
    /// Replace only this run's sections in the existing report.
    pub(crate) merge: bool,
}

/// A scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Throughput, CPU, RSS.
    Overhead,
    /// Serial latency.
    Latency,
    /// The slow-node scenario.
    Balance,
    /// The client breaker.
    Breaker,
    /// Load shedding.
    Shed,
    /// Overload of a handler bound by a downstream resource: the concurrency limit.
    Overload,
    /// Failover and registration.
    Failover,
    /// Server memory per idle connection.
    Memory,
    /// Server streaming and large unary requests.
    Payloads,
    /// 256 KiB requests with and without gzip.
    Compression,
    /// A client's costs at 10 to 10,000 endpoints.
    Scale,
}

/// Every scenario, in report order.
pub(crate) const ALL: [Kind; 11] = [
    Kind::Overhead,
    Kind::Latency,
    Kind::Balance,
    Kind::Breaker,
    Kind::Shed,
    Kind::Overload,
    Kind::Failover,
    Kind::Memory,
    Kind::Payloads,
    Kind::Compression,
    Kind::Scale,
];

impl Kind {
    fn title(self) -> &'static str {
        match self {
            Kind::Overhead => "Overhead: throughput, CPU and memory",
            Kind::Latency => "Latency: serial calls",
            Kind::Balance => "Balance: one slow node",
            Kind::Breaker => "Breaker: a backend that fails, then heals",
            Kind::Shed => "Shedding: 2x overload of a CPU-bound handler",
            Kind::Overload => "Overload: a handler bound by a downstream resource",
            Kind::Failover => "Failover and registration",
            Kind::Memory => "Memory per idle connection",
            Kind::Payloads => "Server streaming and 256 KiB requests",
            Kind::Compression => "gzip on 256 KiB requests",
            Kind::Scale => "Scaling with the fleet",
        }
    }
}

/// Runs `which`, then writes the report (a failing scenario becomes a FAILED section).
pub(crate) fn run(which: &[Kind], opts: &Opts) -> Result<()> {
    let t0 = Instant::now();
    let env = Env::detect()?;
    if let Err(e) = &env.gozero {
        eprintln!("WARNING: go-zero columns will be SKIPPED: {e}");
    }
    let stem = opts
        .out
        .file_stem()
        .map_or("benchmarks".into(), |s| s.to_string_lossy().into_owned());
    let charts = opts.out.parent().unwrap_or(Path::new(".")).join(&stem);
    std::fs::create_dir_all(&charts)
        .with_context(|| format!("cannot create {}", charts.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix("zrpc-bench-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let ctx = Ctx {
        opts,
        env: &env,
        tmp: tmp.path().to_path_buf(),
        charts,
        counter: Cell::new(0),
        noise: crate::noise::Monitor::new(env.cpus),
    };
    let mut sections = Vec::new();
    for &kind in which {
        eprintln!("== {}", kind.title());
        let started = Instant::now();
        let result = match kind {
            Kind::Overhead => overhead::run(&ctx),
            Kind::Latency => latency::run(&ctx),
            Kind::Balance => balance::run(&ctx),
            Kind::Breaker => breaker::run(&ctx),
            Kind::Shed => shed::run(&ctx),
            Kind::Overload => overload::run(&ctx),
            Kind::Failover => failover::run(&ctx),
            Kind::Memory => memory::run(&ctx),
            Kind::Payloads => payloads::run(&ctx),
            Kind::Compression => compression::run(&ctx),
            Kind::Scale => scale::run(&ctx),
        };
        crate::proc::kill_all();
        let mut section = result.unwrap_or_else(|e| {
            eprintln!("scenario failed: {e:#}");
            Section {
                intro: format!("FAILED: {}", format!("{e:#}").replace('\n', " / ")),
                ..Section::default()
            }
        });
        section.title = kind.title().to_owned();
        section.notes.push(format!(
            "Scenario time: {:.0} s.",
            started.elapsed().as_secs_f64()
        ));
        sections.push(section);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = format!("cargo run --release -p zrpc-bench -- {}", args.join(" "));
    if opts.merge {
        let order: Vec<&str> = ALL.iter().map(|k| k.title()).collect();
        crate::report::merge(&opts.out, &stem, &env, &command, &order, &sections)?;
        eprintln!("report: {} (sections replaced)", opts.out.display());
        return Ok(());
    }
    crate::report::write(
        &opts.out,
        &stem,
        &env,
        &command,
        t0.elapsed().as_secs_f64(),
        &sections,
    )?;
    eprintln!(
        "report: {} ({:.0} s)",
        opts.out.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What every scenario gets.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub(crate) opts: &'a Opts,
    pub(crate) env: &'a Env,
    tmp: PathBuf,
    /// Where charts go.
    pub(crate) charts: PathBuf,
    counter: Cell<u32>,
    /// The noise monitor (others' CPU and steal around each measured run).
    pub(crate) noise: crate::noise::Monitor,
}

/// A server's configuration profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Profile {
    /// Bare `tonic::transport::Server` (Rust only).
    #[default]
    Tonic,
    /// Full chain, logging matched with go-zero (`Level: error`, request content not logged).
    Quiet,
    /// Every middleware off, no timeout (zrpc only).
    Minimal,
    /// Both log every request at info (as go-zero ships), output to /dev/null.
    Shipped,
}

/// What a server does.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServerSpec {
    pub(crate) profile: Profile,
    pub(crate) delay_ms: u64,
    pub(crate) spin_us: u64,
    pub(crate) fail_ms: u64,
    /// Adaptive shedding on (CpuThreshold 900, go-zero's default).
    pub(crate) shedding: bool,
    /// Pin to this CPU.
    pub(crate) cpu: Option<usize>,
    /// Runtime threads / GOMAXPROCS (0: default).
    pub(crate) threads: usize,
    /// Register in etcd: (hosts, key).
    pub(crate) etcd: Option<(String, String)>,
    /// Run under `valgrind --tool=callgrind`, writing its counts to this file (not pinned).
    pub(crate) callgrind: Option<PathBuf>,
    /// zrpc with its `:authority` repair off.
    pub(crate) no_authority_repair: bool,
    /// gzip on (`serve --gzip`).
    pub(crate) gzip: bool,
    /// Places of a downstream resource each call waits for (0: none), held `slot_ms` each.
    pub(crate) slots: usize,
    /// See `slots`.
    pub(crate) slot_ms: u64,
    /// zrpc: the adaptive concurrency limit on (`ConcurrencyLimit: {}`).
    pub(crate) limit: bool,
    /// zrpc: a DevServer (`/metrics`) on this loopback port.
    pub(crate) dev_port: Option<u16>,
    /// zrpc: the shedder reads the server's own CPU usage over this many CPUs (0: the
    /// default reading; see `serve --own-cpu`).
    pub(crate) own_cpu: u32,
}

/// A running server.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) proc: Proc,
    pub(crate) addr: String,
    /// When the harness started the process, ms since the Unix epoch.
    started_unix_ms: f64,
    /// When it said `ready` (listening), ms since the Unix epoch (0 when it did not say).
    ready_unix_ms: f64,
}

/// Which side implements something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Rust,
    Go,
}

/// A load generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gen {
    /// zrpc's client with this balancer.
    Zrpc(&'static str),
    /// One bare tonic channel.
    Tonic,
    /// go-zero's client.
    GoZero,
}

impl Gen {
    pub(crate) fn label(self) -> String {
        match self {
            Gen::Zrpc(b) => format!("zrpc client ({b})"),
            Gen::Tonic => "bare tonic channel".into(),
            Gen::GoZero => "go-zero client (p2c_ewma)".into(),
        }
    }
}

/// What a load run does.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoadSpec {
    pub(crate) endpoints: Vec<String>,
    pub(crate) etcd: Option<(String, String)>,
    pub(crate) concurrency: usize,
    pub(crate) calls: u64,
    pub(crate) duration_ms: u64,
    pub(crate) rate: f64,
    pub(crate) warmup: u64,
    pub(crate) timeout_ms: u64,
    pub(crate) records: bool,
    pub(crate) cpu: Option<usize>,
    pub(crate) threads: usize,
    /// Run the (Rust) load generator under callgrind, writing its counts here.
    pub(crate) callgrind: Option<PathBuf>,
    /// Rust generator: each call is a server stream of this many messages (0: unary).
    pub(crate) stream: u32,
    /// Rust generator: octets of the request's name field (0: a short name).
    pub(crate) payload_bytes: usize,
    /// Rust generator: the name is text (`load --text`).
    pub(crate) text: bool,
    /// Rust generator: calls compressed with gzip (`load --gzip`).
    pub(crate) gzip: bool,
    /// Rust generator: every n-th call is critical (`zrpc-tier`); 0: none.
    pub(crate) critical_every: u64,
    /// Rust tonic generator, open loop: connections the calls are spread over (0 or 1: one).
    pub(crate) connections: usize,
}

/// A load generator that is running.
#[derive(Debug)]
pub(crate) struct Running {
    proc: Proc,
    records: Option<PathBuf>,
    limit: Duration,
}

impl Running {
    /// Waits for its summary (and records).
    pub(crate) fn wait(mut self) -> Result<(Summary, Vec<Record>)> {
        let v = self
            .proc
            .wait_json(self.limit, |v| v.get("calls").is_some())?;
        self.proc.finish(Duration::from_secs(5))?;
        let summary: Summary = serde_json::from_value(v).context("load summary")?;
        let recs = match &self.records {
            Some(p) => read_records(p)?,
            None => Vec::new(),
        };
        Ok((summary, recs))
    }
}

impl Ctx<'_> {
    /// A fresh file path in the run's temporary directory.
    pub(crate) fn file(&self, name: &str) -> PathBuf {
        let n = self.counter.get() + 1;
        self.counter.set(n);
        self.tmp.join(format!("{n:04}-{name}"))
    }

    /// `quick` or full value.
    pub(crate) fn size<T>(&self, quick: T, full: T) -> T {
        if self.opts.quick { quick } else { full }
    }

    /// A progress bar for `steps` steps.
    pub(crate) fn progress(&self, steps: u64, what: &str) -> ProgressBar {
        let pb = ProgressBar::new(steps);
        pb.set_style(
            ProgressStyle::with_template(
                "{prefix:>10} [{bar:30}] {pos}/{len} {elapsed_precise} {wide_msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        pb.set_prefix(what.to_owned());
        pb
    }

    /// The go-zero program, or why the go-zero columns are skipped.
    pub(crate) fn gozero(&self) -> Result<&Path, String> {
        self.env.gozero.as_deref().map_err(Clone::clone)
    }

    /// Starts a server on `side` and waits until it accepts connections.
    pub(crate) fn server(&self, side: Side, spec: &ServerSpec) -> Result<Server> {
        let port = free_port()?;
        let listen = format!("127.0.0.1:{port}");
        let events = self.file("events.jsonl");
        let started_unix_ms = unix_ms();
        let mut proc = match side {
            Side::Rust => {
                let mut cmd = self.server_command(&self.env.me, spec);
                cmd.arg("serve")
                    .arg("--events")
                    .arg(&events)
                    .args(["--threads", &spec.threads.to_string()])
                    .args(["--delay-ms", &spec.delay_ms.to_string()])
                    .args(["--spin-us", &spec.spin_us.to_string()])
                    .args(["--fail-ms", &spec.fail_ms.to_string()])
                    .args(["--slots", &spec.slots.to_string()])
                    .args(["--slot-ms", &spec.slot_ms.to_string()])
                    .args(["--own-cpu", &spec.own_cpu.to_string()]);
                if spec.no_authority_repair {
                    cmd.arg("--no-authority-repair");
                }
                if spec.gzip {
                    cmd.arg("--gzip");
                }
                if spec.profile == Profile::Tonic {
                    cmd.args(["--kind", "tonic", "--listen", &listen]);
                } else {
                    let yaml = self.file("zrpc.yaml");
                    std::fs::write(&yaml, zrpc_yaml(&listen, spec))?;
                    cmd.args(["--kind", "zrpc", "--conf"]).arg(yaml);
                }
                Proc::spawn("zrpc-bench serve", cmd, Some(events), false)?
            }
            Side::Go => {
                let gz = self.gozero().map_err(|e| anyhow::anyhow!(e))?;
                if spec.profile == Profile::Tonic || spec.profile == Profile::Minimal {
                    bail!("go-zero has no {:?} profile", spec.profile);
                }
                let mut cmd = self.server_command(gz, spec);
                cmd.arg("serve")
                    .args(["-listen", &listen])
                    .arg("-events")
                    .arg(&events)
                    .args(["-delay-ms", &spec.delay_ms.to_string()])
                    .args(["-spin-us", &spec.spin_us.to_string()])
                    .args(["-fail-ms", &spec.fail_ms.to_string()])
                    .args(["-slots", &spec.slots.to_string()])
                    .args(["-slot-ms", &spec.slot_ms.to_string()])
                    .args(["-cpu-threshold", if spec.shedding { "900" } else { "0" }])
                    .args([
                        "-profile",
                        if spec.profile == Profile::Shipped {
                            "shipped"
                        } else {
                            "quiet"
                        },
                    ]);
                if let Some((hosts, key)) = &spec.etcd {
                    cmd.args(["-etcd", hosts, "-key", key]);
                }
                if spec.threads > 0 {
                    cmd.env("GOMAXPROCS", spec.threads.to_string());
                }
                Proc::spawn("gzbench serve", cmd, Some(events), false)?
            }
        };
        let ready = if spec.callgrind.is_some() { 120 } else { 20 };
        let ready = proc.wait_json(Duration::from_secs(ready), |v| v["event"] == "ready")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(&listen).is_err() {
            if Instant::now() > deadline {
                bail!("{} never accepted on {listen}", proc.label);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Server {
            proc,
            addr: listen,
            started_unix_ms,
            ready_unix_ms: ready["unix_ms"].as_f64().unwrap_or(0.0),
        })
    }

    /// The command that starts a server program: pinned with taskset, or under callgrind.
    fn server_command(&self, program: &Path, spec: &ServerSpec) -> std::process::Command {
        match &spec.callgrind {
            Some(out) => {
                let mut c = std::process::Command::new("valgrind");
                c.args(["--tool=callgrind", "--quiet"])
                    .arg(format!("--callgrind-out-file={}", out.display()))
                    .arg(program);
                c
            }
            None => self.env.command(program, spec.cpu),
        }
    }

    /// Starts a load generator.
    pub(crate) fn start_load(&self, client: Gen, spec: &LoadSpec) -> Result<Running> {
        let records = spec.records.then(|| self.file("records.txt"));
        let mut cmd = match client {
            Gen::GoZero => {
                let gz = self.gozero().map_err(|e| anyhow::anyhow!(e))?;
                let mut c = self.env.command(gz, spec.cpu);
                c.arg("load");
                if spec.threads > 0 {
                    c.env("GOMAXPROCS", spec.threads.to_string());
                }
                c
            }
            Gen::Zrpc(b) => {
                let mut c = self.rust_load_command(spec);
                c.args(["load", "--client", "zrpc", "--balancer", b]);
                c
            }
            Gen::Tonic => {
                let mut c = self.rust_load_command(spec);
                c.args(["load", "--client", "tonic"]);
                c
            }
        };
        if spec.stream > 0
            || spec.payload_bytes > 0
            || spec.critical_every > 0
            || spec.connections > 1
        {
            if client == Gen::GoZero {
                bail!("gzbench load sends short unary calls of no tier on one client only");
            }
            cmd.args(["--stream", &spec.stream.to_string()])
                .args(["--payload-bytes", &spec.payload_bytes.to_string()])
                .args(["--critical-every", &spec.critical_every.to_string()])
                .args(["--connections", &spec.connections.max(1).to_string()]);
        }
        if spec.text {
            cmd.arg("--text");
        }
        if spec.gzip {
            cmd.arg("--gzip");
        }
        cmd.args(["--endpoints", &spec.endpoints.join(",")])
            .args(["-c", &spec.concurrency.max(1).to_string()])
            .args(["-n", &spec.calls.to_string()])
            .args(["--duration-ms", &spec.duration_ms.to_string()])
            .args(["--rate", &spec.rate.to_string()])
            .args(["--warmup", &spec.warmup.to_string()])
            .args(["--timeout-ms", &spec.timeout_ms.to_string()])
            .args(["--threads", &spec.threads.to_string()]);
        if let Some((hosts, key)) = &spec.etcd {
            cmd.args(["--etcd", hosts, "--key", key]);
        }
        if let Some(r) = &records {
            cmd.arg("--records").arg(r);
        }
        let proc = Proc::spawn(&format!("load ({})", client.label()), cmd, None, true)?;
        // Generous: start-up, discovery wait, the run itself, and the slowest calls.
        let limit = Duration::from_millis(spec.duration_ms) + Duration::from_secs(120);
        Ok(Running {
            proc,
            records,
            limit,
        })
    }

    /// This binary as a load generator: pinned with taskset, or under callgrind.
    fn rust_load_command(&self, spec: &LoadSpec) -> std::process::Command {
        match &spec.callgrind {
            Some(out) => {
                let mut c = std::process::Command::new("valgrind");
                c.args(["--tool=callgrind", "--quiet"])
                    .arg(format!("--callgrind-out-file={}", out.display()))
                    .arg(&self.env.me);
                c
            }
            None => self.env.command(&self.env.me, spec.cpu),
        }
    }

    /// Runs a load generator to the end.
    pub(crate) fn load(&self, client: Gen, spec: &LoadSpec) -> Result<(Summary, Vec<Record>)> {
        self.start_load(client, spec)?.wait()
    }

    /// [`Ctx::load`] with the machine's lost share over the run; a run that completed no call
    /// is run once more (counted in `reruns`), then returned as it is: the caller counts it
    /// missing (never an extreme ratio).
    pub(crate) fn load_rerun_empty(
        &self,
        client: Gen,
        spec: &LoadSpec,
        reruns: &mut u32,
    ) -> (Result<(Summary, Vec<Record>)>, f64) {
        let mut attempt = 0;
        loop {
            let before = self.noise.snap();
            let result = self.load(client, spec);
            let lost = self.noise.lost_share(&before, &self.noise.snap());
            attempt += 1;
            match &result {
                Ok((s, _)) if s.calls == 0 && attempt < 2 => *reruns += 1,
                _ => return (result, lost),
            }
        }
    }
}

impl Server {
    /// ms from the harness starting the process to its first call (`first_call` event), if any.
    pub(crate) fn first_call_ms(&mut self) -> Option<f64> {
        self.proc
            .wait_json(Duration::from_millis(1), |v| v["event"] == "first_call")
            .ok()
            .and_then(|v| v["unix_ms"].as_f64())
            .map(|t| t - self.started_unix_ms)
    }

    /// ms from the harness starting the process to its `ready` event (listening), if it said.
    pub(crate) fn ready_ms(&self) -> Option<f64> {
        (self.ready_unix_ms > 0.0).then_some(self.ready_unix_ms - self.started_unix_ms)
    }

    /// Stops it (SIGTERM) and returns its `stopped` event.
    pub(crate) fn stop(mut self) -> Option<serde_json::Value> {
        self.proc.stop(Duration::from_secs(8));
        self.proc
            .drain_json(Duration::from_millis(50))
            .into_iter()
            .find(|v| v["event"] == "stopped")
    }
}

/// Wall-clock time, ms since the Unix epoch.
pub(crate) fn unix_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// The zrpc server config (go-zero YAML) for a profile.
fn zrpc_yaml(listen: &str, spec: &ServerSpec) -> String {
    let mut y = format!(
        "Name: zrpc.bench\nListenOn: {listen}\nCpuThreshold: {}\n",
        if spec.shedding { 900 } else { 0 }
    );
    match spec.profile {
        Profile::Tonic | Profile::Quiet => {
            y.push_str("Log: {Mode: console, Level: error, Stat: false}\n");
            y.push_str(
                "Middlewares:\n  StatConf:\n    IgnoreContentMethods: [/greeter.Greeter/SayHello]\n",
            );
        }
        Profile::Minimal => {
            y.push_str("Timeout: 0\nLog: {Mode: console, Level: error, Stat: false}\n");
            y.push_str(
                "Middlewares: {Trace: false, Recover: false, Stat: false, Prometheus: false, Breaker: false}\n",
            );
        }
        Profile::Shipped => {
            y.push_str("Log: {Mode: console, Level: info}\n");
            y.push_str("Middlewares:\n  StatConf:\n    LogRequestContent: true\n");
        }
    }
    if let Some((hosts, key)) = &spec.etcd {
        let _ = std::fmt::Write::write_fmt(
            &mut y,
            format_args!("Etcd: {{Hosts: [{hosts}], Key: {key}}}\n"),
        );
    }
    if spec.limit {
        y.push_str("ConcurrencyLimit: {}\n");
    }
    if let Some(port) = spec.dev_port {
        let _ = std::fmt::Write::write_fmt(
            &mut y,
            format_args!("DevServer: {{Host: 127.0.0.1, Port: {port}}}\n"),
        );
    }
    y
}

/// Starts etcd on free loopback ports with a temporary data dir (ended when dropped).
pub(crate) fn start_etcd(ctx: &Ctx<'_>) -> Result<(Proc, String)> {
    let etcd = ctx.env.etcd.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
    let (client, peer) = (free_port()?, free_port()?);
    let dir = ctx.file("etcd-data");
    let endpoint = format!("127.0.0.1:{client}");
    let mut cmd = std::process::Command::new(etcd);
    cmd.arg("--data-dir")
        .arg(&dir)
        .args(["--name", "bench"])
        .args(["--listen-client-urls", &format!("http://{endpoint}")])
        .args(["--advertise-client-urls", &format!("http://{endpoint}")])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
        ])
        .args([
            "--initial-cluster",
            &format!("bench=http://127.0.0.1:{peer}"),
        ])
        .args(["--log-level", "error"]);
    let proc = Proc::spawn("etcd", cmd, None, true)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ok = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "exec 3<>/dev/tcp/127.0.0.1/{client} && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3"
            ))
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("\"health\":\"true\""))
            .unwrap_or(false);
        if ok {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "etcd did not become healthy on {endpoint}; stderr:\n{}",
                proc.stderr_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok((proc, endpoint))
}

/// An h2load run: requests/s, requests done and per-request latencies (ms) from its log file.
#[derive(Debug, Clone)]
pub(crate) struct H2Run {
    pub(crate) rate: f64,
    pub(crate) requests: u64,
    pub(crate) latencies: Vec<f64>,
    /// What the scheduler counted for the server over the middle of the measured window (see
    /// [`h2load_sampled`]).
    pub(crate) server: Option<Window>,
}

/// A server's (and the load generator's) scheduler counters over a stretch of a measured h2load
/// window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    /// The stretch, s.
    pub(crate) secs: f64,
    /// The server's CPU time in it, s (summed over its threads).
    pub(crate) run_s: f64,
    /// The time its threads were runnable while another task had their CPU, s (summed over its
    /// threads).
    pub(crate) wait_s: f64,
    /// The same two for h2load (the load generator), s.
    pub(crate) load_run_s: f64,
    /// See `load_run_s`.
    pub(crate) load_wait_s: f64,
}

impl Window {
    /// CPU µs per request at `rate` requests/s (the measured window's rate).
    pub(crate) fn cpu_us_per_request(&self, rate: f64) -> f64 {
        if rate <= 0.0 || self.secs <= 0.0 {
            return 0.0;
        }
        self.run_s * 1e6 / (rate * self.secs)
    }

    /// Of the CPU time the server's threads asked for (on a CPU or runnable in a run queue), the
    /// share they spent waiting: wait / (run + wait), at most 1 whatever the number of threads
    /// (a per-second figure summed over threads is not: two runnable threads wait up to 2 s a
    /// second).
    pub(crate) fn wait_share(&self) -> f64 {
        share(self.wait_s, self.run_s)
    }

    /// The same for the load generator.
    pub(crate) fn load_wait_share(&self) -> f64 {
        share(self.load_wait_s, self.load_run_s)
    }
}

/// wait / (run + wait), 0 when neither.
fn share(wait: f64, run: f64) -> f64 {
    if wait + run <= 0.0 {
        0.0
    } else {
        wait / (wait + run)
    }
}

/// How long an h2load run lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum H2Amount {
    /// `-n`: this many requests.
    Requests(u64),
    /// `-D`: this many seconds (timing-based: every subject gets the same time).
    Secs(f64),
    /// `--warm-up-time` then `-D`: the connections are made and the streams ramp up in the
    /// warm-up, so that the measured seconds hold only the steady state.
    WarmSecs {
        /// Seconds before the measurement starts.
        warm_up: f64,
        /// Seconds measured.
        secs: f64,
    },
}

/// `h2load -c conns -m streams (-n requests | -D secs) -t threads` of SayHello against `addr`.
pub(crate) fn h2load(
    ctx: &Ctx<'_>,
    addr: &str,
    args: (u64, u64, H2Amount, u64),
    cpu: Option<usize>,
) -> Result<H2Run> {
    h2load_sampled(ctx, addr, args, cpu, None)
}

/// [`h2load`], and with `server` (a pid) and a timed amount, that server's scheduler counters
/// (`/proc/<pid>/task/*/schedstat`, ns) read twice inside h2load's measured window, 30 ms after
/// its start and 30 ms before its end (counted from starting h2load): its CPU time per request
/// then holds neither the connections' setup, the warm-up nor the teardown, only the steady
/// state the request rate was measured in.
pub(crate) fn h2load_sampled(
    ctx: &Ctx<'_>,
    addr: &str,
    (conns, streams, amount, threads): (u64, u64, H2Amount, u64),
    cpu: Option<usize>,
    server: Option<i32>,
) -> Result<H2Run> {
    // gRPC frame of HelloRequest{name: "world"}.
    h2load_body(
        ctx,
        addr,
        (conns, streams, amount, threads),
        cpu,
        server,
        b"\x00\x00\x00\x00\x07\x0a\x05world",
    )
}

/// A gRPC frame of `HelloRequest { name }` with a name of `len` octets.
pub(crate) fn hello_request(len: usize) -> Vec<u8> {
    let mut msg = vec![0x0a];
    let mut n = len;
    while n >= 0x80 {
        msg.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    msg.push(n as u8);
    msg.resize(msg.len() + len, b'a');
    let mut frame = vec![0];
    frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    frame.extend_from_slice(&msg);
    frame
}

/// [`h2load_sampled`] sending `body` (a gRPC frame) in every request.
pub(crate) fn h2load_body(
    ctx: &Ctx<'_>,
    addr: &str,
    (conns, streams, amount, threads): (u64, u64, H2Amount, u64),
    cpu: Option<usize>,
    server: Option<i32>,
    body: &[u8],
) -> Result<H2Run> {
    let h2 = ctx
        .env
        .h2load
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let request = body;
    let body = ctx.file("request.bin");
    std::fs::write(&body, request)?;
    let log = ctx.file("h2load.log");
    // h2load takes whole units: milliseconds.
    let ms = |s: f64| format!("{}ms", (s * 1000.0).round().max(1.0));
    let mut cmd = ctx.env.command(h2, cpu);
    cmd.args(["-t", &threads.to_string()])
        .args(["-c", &conns.to_string()])
        .args(["-m", &streams.to_string()]);
    match amount {
        H2Amount::Requests(n) => cmd.args(["-n", &n.to_string()]),
        H2Amount::Secs(s) => cmd.args(["-D", &ms(s)]),
        H2Amount::WarmSecs { warm_up, secs } => cmd
            .args(["-D", &ms(secs)])
            .arg(format!("--warm-up-time={}", ms(warm_up))),
    };
    cmd.arg("-d")
        .arg(&body)
        .arg(format!("--log-file={}", log.display()))
        // A server that stops answering fails the run instead of hanging it.
        .arg("--connection-inactivity-timeout=60")
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .arg(format!("http://{addr}/greeter.Greeter/SayHello"));
    let (skip, measured) = match amount {
        H2Amount::Requests(_) => (0.0, 0.0),
        H2Amount::Secs(s) => (0.0, s),
        H2Amount::WarmSecs { warm_up, secs } => (warm_up, secs),
    };
    let margin = 0.03;
    let sample = server.filter(|_| measured > 3.0 * margin);
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("cannot run h2load")?;
    let started = Instant::now();
    let load_pid = i32::try_from(child.id()).unwrap_or(0);
    let mut window = None;
    if let Some(pid) = sample {
        let sleep_until = |at: f64| {
            let left = Duration::from_secs_f64(at).saturating_sub(started.elapsed());
            std::thread::sleep(left);
        };
        let read = || {
            (
                crate::proc::sched_of(pid),
                crate::proc::sched_of(load_pid),
                Instant::now(),
            )
        };
        sleep_until(skip + margin);
        let (a, la, ta) = read();
        sleep_until(skip + measured - margin);
        let (b, lb, tb) = read();
        if let (Some(a), Some(b)) = (a, b) {
            let (la, lb) = (la.unwrap_or_default(), lb.unwrap_or_default());
            let s = |x: u64, y: u64| y.saturating_sub(x) as f64 / 1e9;
            window = Some(Window {
                secs: tb.duration_since(ta).as_secs_f64(),
                run_s: s(a.run_ns, b.run_ns),
                wait_s: s(a.wait_ns, b.wait_ns),
                load_run_s: s(la.run_ns, lb.run_ns),
                load_wait_s: s(la.wait_ns, lb.wait_ns),
            });
        }
    }
    let out = child.wait_with_output().context("cannot run h2load")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .map(str::to_owned)
            .with_context(|| format!("no `{prefix}` in h2load output:\n{text}"))
    };
    let done = line("requests:")?;
    if !done.contains(" 0 failed, 0 errored") {
        bail!("h2load saw failures against {addr}: {done}");
    }
    // `requests: 100 total, 100 started, 100 done, 100 succeeded, 0 failed, ...`
    let requests = done
        .split(", ")
        .find_map(|p| p.trim().strip_suffix(" succeeded")?.trim().parse().ok())
        .with_context(|| format!("cannot read the succeeded requests from `{done}`"))?;
    let finished = line("finished in")?;
    let rate = finished
        .split(", ")
        .nth(1)
        .and_then(|s| s.strip_suffix(" req/s"))
        .and_then(|s| s.trim().parse().ok())
        .with_context(|| format!("cannot read req/s from `{finished}`"))?;
    let latencies = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split('\t').nth(2)?.trim().parse::<f64>().ok())
        .map(|us| us / 1000.0)
        .collect();
    let _ = std::fs::remove_file(&log);
    Ok(H2Run {
        rate,
        requests,
        latencies,
        server: window,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_request_is_a_grpc_frame_of_the_message() {
        let frame = hello_request(300);
        // Tag 1 (length-delimited), varint 300 = 0xac 0x02, then the name.
        assert_eq!(&frame[..8], &[0, 0, 0, 1, 47, 0x0a, 0xac, 0x02]);
        assert_eq!(frame.len(), 5 + 3 + 300);
        assert_eq!(hello_request(5).len(), 5 + 2 + 5);
    }

    #[test]
    fn a_window_gives_cpu_per_request_and_the_share_spent_waiting() {
        // 0.4 s of the measured window: 0.36 s on the CPU at 45,000 requests/s = 20 µs each.
        let w = Window {
            secs: 0.4,
            run_s: 0.36,
            wait_s: 0.04,
            load_run_s: 0.1,
            load_wait_s: 0.0,
        };
        assert!((w.cpu_us_per_request(45_000.0) - 20.0).abs() < 1e-9);
        assert!((w.wait_share() - 0.1).abs() < 1e-12);
        assert_eq!(w.load_wait_share(), 0.0);
        assert_eq!(w.cpu_us_per_request(0.0), 0.0, "no requests");
        // Two threads, each runnable the whole 0.4 s on one core: 0.4 s run, 0.4 s waited. The
        // share is a half, not 100% of the stretch (summed over threads it would read 200%).
        let two = Window {
            run_s: 0.4,
            wait_s: 0.4,
            ..w
        };
        assert!((two.wait_share() - 0.5).abs() < 1e-12);
        let empty = Window {
            secs: 0.0,
            run_s: 0.0,
            wait_s: 0.0,
            load_run_s: 0.0,
            load_wait_s: 0.0,
        };
        assert_eq!(empty.cpu_us_per_request(1000.0), 0.0);
        assert_eq!(empty.wait_share(), 0.0);
    }
}

/// Where a two-sided run goes: pinned (the server on CPU 0 with one runtime thread, the load
/// generator on CPU 1 with one) when taskset and a second CPU are there, else unpinned with
/// default threads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pinning {
    pub(crate) pinned: bool,
    pub(crate) server_cpu: Option<usize>,
    pub(crate) load_cpu: Option<usize>,
    pub(crate) threads: usize,
}

impl Pinning {
    pub(crate) fn of(ctx: &Ctx<'_>) -> Self {
        let pinned = ctx.env.taskset && ctx.env.cpus >= 2;
        let (server_cpu, load_cpu, threads) = if pinned {
            (Some(0), Some(1), 1)
        } else {
            (None, None, 0)
        };
        Pinning {
            pinned,
            server_cpu,
            load_cpu,
            threads,
        }
    }

    /// The notes of a run of alternating rounds: the noise monitor's figures over the runs
    /// (`lost`: each run's share of the machine lost to others), the runs done again, and
    /// whether it ran unpinned.
    pub(crate) fn notes(self, lost: &[f64], reruns: u32) -> Vec<String> {
        let mut notes = vec![format!(
            "Noise monitor: a run lost {:.1}% of the machine to other processes and steal \
             (median over the runs; worst {:.1}%).",
            crate::stats::median(lost.to_vec()) * 100.0,
            lost.iter().copied().fold(0.0, f64::max) * 100.0
        )];
        if reruns > 0 {
            notes.push(format!(
                "{reruns} runs completed nothing and were run again."
            ));
        }
        if !self.pinned {
            notes.push(
                "unpinned: taskset or a second CPU is missing; servers and the client ran \
                 with their default threads."
                    .into(),
            );
        }
        notes
    }
}
