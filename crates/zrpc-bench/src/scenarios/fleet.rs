//! `zrpc-bench fleet`: a fleet on one machine. A 3-member etcd cluster on loopback, N zrpc
//! server processes registered in it (every member listed in `Etcd.Hosts`), and M client
//! processes (half zrpc's `load`, half go-zero's `gzbench load`) calling at a steady rate
//! through `etcd://` discovery. Phases: steady load; a rolling deploy replacing every server
//! (start a batch, wait until etcd holds it, then SIGTERM the batch it replaces); a third of
//! the servers killed with SIGKILL; etcd's leader killed (then one batch replaced, to show that
//! registration and discovery go on with two members).
//!
//! Per phase: calls and failed calls (per client kind, code and message, from each client's
//! `--watch` log, `watch_log.rs`), convergence (for every change in etcd and every client, the
//! time from the harness's own etcd watch seeing it to the client's resolver publishing a set
//! that reflects it), etcd's request rate and the leader's CPU (from each member's `/metrics`),
//! the clients' RSS at the phase's start and end, and the load average.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::{Profile, ServerSpec, unix_ms, zrpc_yaml};
use crate::env::Env;
use crate::proc::{Proc, Signal, free_port, rss_mb_of};
use crate::stats::percentile;

/// The `fleet` arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FleetArgs {
    /// zrpc server processes.
    #[arg(long, default_value_t = 200)]
    servers: usize,
    /// Client processes: half zrpc clients, half go-zero clients.
    #[arg(long, default_value_t = 20)]
    clients: usize,
    /// Calls per second per client (open loop).
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// Seconds of steady load before the first change.
    #[arg(long, default_value_t = 20)]
    steady_secs: u64,
    /// Servers replaced at once in the rolling deploy.
    #[arg(long, default_value_t = 10)]
    batch: usize,
    /// Seconds each phase waits after its last change, so that every client can follow.
    #[arg(long, default_value_t = 5)]
    settle_secs: u64,
    /// Write the figures as JSON here (the ignored test reads them).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The etcd key every server registers under.
const KEY: &str = "fleet.greeter";

/// A change the harness's etcd watch saw.
#[derive(Debug, Clone)]
struct Change {
    unix_ms: f64,
    put: bool,
    addr: String,
}

/// What the harness's etcd watch holds: the live keys (key -> address) and every change.
#[derive(Debug, Default)]
struct EtcdView {
    keys: HashMap<String, String>,
    changes: Vec<Change>,
}

impl EtcdView {
    fn addrs(&self) -> HashSet<String> {
        self.keys.values().cloned().collect()
    }
}

#[derive(Debug)]
struct FleetServer {
    proc: Proc,
    addr: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Zrpc,
    GoZero,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Zrpc => "zrpc",
            Kind::GoZero => "go-zero",
        }
    }
}

#[derive(Debug)]
struct Client {
    kind: Kind,
    proc: Proc,
    watch: PathBuf,
}

/// Counters read from one member's `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
struct Member {
    msgs: f64,
    handled: f64,
    cpu_s: f64,
    leader: bool,
}

/// One phase's boundaries and readings.
#[derive(Debug)]
struct Phase {
    name: String,
    start: f64,
    end: f64,
    etcd0: Vec<Option<Member>>,
    etcd1: Vec<Option<Member>>,
    rss0: Vec<f64>,
    rss1: Vec<f64>,
    loadavg: String,
    notes: Vec<String>,
}

/// What a client's watch log holds.
#[derive(Debug, Default)]
struct Log {
    views: Vec<(f64, HashSet<String>)>,
    fails: Vec<(f64, String, String)>,
    counts: Vec<(f64, u64)>,
}

fn read_log(path: &PathBuf) -> Log {
    let mut log = Log::default();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines() {
        let mut f = line.splitn(3, ' ');
        let (Some(what), Some(t)) = (f.next(), f.next().and_then(|t| t.parse::<f64>().ok())) else {
            continue;
        };
        let rest = f.next().unwrap_or("");
        match what {
            "view" => log.views.push((
                t,
                rest.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
            )),
            "fail" => {
                let (code, msg) = rest.split_once(' ').unwrap_or((rest, ""));
                log.fails.push((t, code.to_owned(), msg.to_owned()));
            }
            "count" => {
                if let Some(n) = rest.split(' ').next().and_then(|n| n.parse().ok()) {
                    log.counts.push((t, n));
                }
            }
            _ => {}
        }
    }
    log
}

/// `GET /metrics` of an etcd member (HTTP/1.0, 2 s), summed counters.
fn scrape(endpoint: &str) -> Option<Member> {
    let addr: std::net::SocketAddr = endpoint.parse().ok()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let sum = |name: &str| -> f64 {
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    Some(Member {
        msgs: sum("grpc_server_msg_received_total"),
        handled: sum("grpc_server_handled_total"),
        cpu_s: sum("process_cpu_seconds_total"),
        leader: sum("etcd_server_is_leader") > 0.5,
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The harness's watch of the fleet's prefix: every change with the time it arrived.
async fn watch_etcd(endpoints: Vec<String>, view: Arc<Mutex<EtcdView>>) {
    use etcd_client::{EventType, GetOptions, WatchOptions};
    let prefix = format!("{KEY}/");
    let mut revision = 0i64;
    loop {
        let attempt = async {
            let mut c = etcd_client::Client::connect(&endpoints, None).await?;
            if revision == 0 {
                let resp = c
                    .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
                    .await?;
                revision = resp.header().map_or(0, |h| h.revision());
                let mut v = view.lock().unwrap_or_else(|e| e.into_inner());
                for kv in resp.kvs() {
                    let (k, a) = (kv.key_str()?.to_owned(), kv.value_str()?.to_owned());
                    v.keys.insert(k, a);
                }
            }
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(revision + 1);
            let (_requests, mut responses) = c.watch(prefix.as_str(), Some(options)).await?.split();
            while let Some(resp) = responses.message().await? {
                let now = unix_ms();
                let mut v = view.lock().unwrap_or_else(|e| e.into_inner());
                for event in resp.events() {
                    let Some(kv) = event.kv() else { continue };
                    revision = revision.max(kv.mod_revision());
                    let key = kv.key_str()?.to_owned();
                    match event.event_type() {
                        EventType::Put => {
                            let addr = kv.value_str()?.to_owned();
                            v.keys.insert(key, addr.clone());
                            v.changes.push(Change {
                                unix_ms: now,
                                put: true,
                                addr,
                            });
                        }
                        EventType::Delete => {
                            if let Some(addr) = v.keys.remove(&key) {
                                v.changes.push(Change {
                                    unix_ms: now,
                                    put: false,
                                    addr,
                                });
                            }
                        }
                    }
                }
            }
            anyhow::Ok(())
        };
        if let Err(e) = attempt.await {
            eprintln!("fleet: the harness's etcd watch broke ({e:#}); watching again");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Everything a run holds.
struct Fleet {
    env: Env,
    dir: PathBuf,
    rt: tokio::runtime::Runtime,
    cluster: zrpc_tests::etcd::EtcdCluster,
    hosts: String,
    view: Arc<Mutex<EtcdView>>,
    servers: Vec<FleetServer>,
    clients: Vec<Client>,
    counter: usize,
}

impl Fleet {
    fn file(&mut self, name: &str) -> PathBuf {
        self.counter += 1;
        self.dir.join(format!("{:05}-{name}", self.counter))
    }

    /// Starts `n` servers at once, then waits until each listens.
    fn start_servers(&mut self, n: usize) -> Result<Vec<FleetServer>> {
        let mut started = Vec::with_capacity(n);
        for _ in 0..n {
            started.push(self.spawn_server()?);
        }
        for s in &mut started {
            // A free port can be taken by another process before the server binds it: start
            // that one again on another port.
            for retry in 0.. {
                match s
                    .proc
                    .wait_json(Duration::from_secs(60), |v| v["event"] == "ready")
                {
                    Ok(_) => break,
                    Err(e)
                        if retry < 3
                            && format!("{e:#}{}", s.proc.stderr_tail())
                                .contains("Address already in use") =>
                    {
                        *s = self.spawn_server()?;
                    }
                    Err(e) => return Err(e.context(format!("server {} never said ready", s.addr))),
                }
            }
        }
        Ok(started)
    }

    fn spawn_server(&mut self) -> Result<FleetServer> {
        let listen = format!("127.0.0.1:{}", free_port()?);
        let spec = ServerSpec {
            profile: Profile::Quiet,
            etcd: Some((self.hosts.clone(), KEY.to_owned())),
            ..ServerSpec::default()
        };
        let yaml = self.file("server.yaml");
        std::fs::write(&yaml, zrpc_yaml(&listen, &spec))?;
        let mut cmd = Command::new(&self.env.me);
        // Events on stdout: read by a blocking thread, no file polling for 200 servers.
        cmd.args(["serve", "--kind", "zrpc", "--threads", "1"])
            .args(["--events", "/dev/stdout", "--conf"])
            .arg(&yaml);
        let proc = Proc::spawn("zrpc-bench serve (fleet)", cmd, None, true)?;
        Ok(FleetServer { proc, addr: listen })
    }

    /// Waits until etcd holds every address of `want` (`present`) or none (`!present`).
    fn wait_etcd(&self, want: &[String], present: bool, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let addrs = self.view.lock().unwrap_or_else(|e| e.into_inner()).addrs();
            if want.iter().all(|a| addrs.contains(a) == present) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let missing = want
                    .iter()
                    .filter(|a| addrs.contains(*a) != present)
                    .count();
                bail!(
                    "after {limit:?}, {missing} of {} addresses still {} etcd",
                    want.len(),
                    if present { "missing from" } else { "in" }
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn start_client(&mut self, kind: Kind, rate: f64) -> Result<Client> {
        let watch = self.file(&format!("{}.watch", kind.label()));
        let mut cmd = match kind {
            Kind::Zrpc => {
                let mut c = Command::new(&self.env.me);
                c.args(["load", "--client", "zrpc", "--threads", "1"]);
                c
            }
            Kind::GoZero => {
                let gz = self
                    .env
                    .gozero
                    .as_ref()
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let mut c = Command::new(gz);
                c.arg("load");
                c
            }
        };
        cmd.args(["--etcd", &self.hosts, "--key", KEY])
            .args(["--rate", &rate.to_string()])
            // longer than any run: the harness ends the clients itself
            .args(["--duration-ms", "36000000"])
            .arg("--watch")
            .arg(&watch);
        let proc = Proc::spawn(&format!("{} client", kind.label()), cmd, None, true)?;
        Ok(Client { kind, proc, watch })
    }

    fn scrape_all(&self) -> Vec<Option<Member>> {
        self.cluster.endpoints().iter().map(|e| scrape(e)).collect()
    }

    fn rss(&self) -> Vec<f64> {
        self.clients
            .iter()
            .map(|c| rss_mb_of(c.proc.pid()))
            .collect()
    }

    fn begin(&self, name: &str) -> Phase {
        eprintln!("fleet: {name}");
        Phase {
            name: name.to_owned(),
            start: unix_ms(),
            end: 0.0,
            etcd0: self.scrape_all(),
            etcd1: Vec::new(),
            rss0: self.rss(),
            rss1: Vec::new(),
            loadavg: String::new(),
            notes: Vec::new(),
        }
    }

    fn end(&self, mut p: Phase, settle: Duration) -> Phase {
        std::thread::sleep(settle);
        p.end = unix_ms();
        p.etcd1 = self.scrape_all();
        p.rss1 = self.rss();
        p.loadavg = loadavg();
        p
    }

    /// Replaces `old` in batches: start a batch, wait until etcd holds it, SIGTERM the servers
    /// it replaces (they drain while the next batch starts). Returns the new servers and notes.
    fn roll(
        &mut self,
        old: Vec<FleetServer>,
        batch: usize,
    ) -> Result<(Vec<FleetServer>, Vec<String>)> {
        let mut new = Vec::with_capacity(old.len());
        let mut stopping: Vec<FleetServer> = Vec::new();
        let mut old = old.into_iter().peekable();
        let mut register_ms = Vec::new();
        while old.peek().is_some() {
            let outgoing: Vec<FleetServer> = old.by_ref().take(batch).collect();
            let t = Instant::now();
            let fresh = self.start_servers(outgoing.len())?;
            let addrs: Vec<String> = fresh.iter().map(|s| s.addr.clone()).collect();
            // generous: on a starved machine (load average above 100 seen) registration takes long
            self.wait_etcd(&addrs, true, Duration::from_secs(120))?;
            register_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            for s in &outgoing {
                s.proc.signal(Signal::SIGTERM);
            }
            stopping.extend(outgoing);
            new.extend(fresh);
        }
        let mut unclean = 0;
        for mut s in stopping {
            if s.proc.finish(Duration::from_secs(20)).is_err() {
                unclean += 1;
            }
        }
        register_ms.sort_by(f64::total_cmp);
        let mut notes = vec![format!(
            "batches of {batch}: start -> every server of the batch in etcd, ms p50 {:.0} / max {:.0}",
            percentile(&register_ms, 0.5),
            percentile(&register_ms, 1.0)
        )];
        if unclean > 0 {
            notes.push(format!(
                "{unclean} stopped servers did not exit cleanly within 20 s"
            ));
        }
        Ok((new, notes))
    }
}

/// One kind's convergence delays (ms) for the changes of a phase, and the changes a client
/// never followed.
fn convergence(changes: &[Change], log: &Log, kind: Kind, out: &mut Vec<f64>) -> usize {
    // The client's resolver and the harness's watch hear from etcd at about the same time:
    // a view up to this much earlier than the harness's reading counts as following it.
    const SLACK: f64 = 20.0;
    let mut never = 0;
    for c in changes {
        let from = c.unix_ms - SLACK;
        let before = log.views.iter().rev().find(|(t, _)| *t < from);
        let after = log.views.iter().filter(|(t, _)| *t >= from);
        let hit = if c.put {
            match kind {
                // zrpc publishes the whole set: the address appears
                Kind::Zrpc => after
                    .filter(|(_, s)| s.contains(&c.addr))
                    .map(|(t, _)| *t)
                    .next(),
                // go-zero hands grpc a random subset of 32 on every change: its first update
                // after the change is the one that knows it
                Kind::GoZero => after
                    .filter(|(t, _)| *t >= c.unix_ms)
                    .map(|(t, _)| *t)
                    .next(),
            }
        } else {
            // a deletion matters to a client whose set held the address
            if !before.is_some_and(|(_, s)| s.contains(&c.addr)) {
                continue;
            }
            after
                .filter(|(_, s)| !s.contains(&c.addr))
                .map(|(t, _)| *t)
                .next()
        };
        match hit {
            Some(t) => out.push((t - c.unix_ms).max(0.0)),
            None => never += 1,
        }
    }
    never
}

fn calls_between(log: &Log, a: f64, b: f64) -> u64 {
    let at = |t: f64| {
        log.counts
            .iter()
            .rev()
            .find(|(ct, _)| *ct <= t)
            .map_or(0, |(_, n)| *n)
    };
    at(b).saturating_sub(at(a))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    percentile(&v, 0.5)
}

pub(crate) fn run(args: FleetArgs) -> Result<()> {
    if args.servers < 3 || args.clients < 2 || args.batch == 0 || args.rate <= 0.0 {
        bail!("fleet: needs at least 3 servers, 2 clients, a batch of 1 and a positive rate");
    }
    let env = Env::detect()?;
    if let Err(e) = &env.gozero {
        bail!("fleet: the go-zero clients need gzbench: {e}");
    }
    if let Err(e) = &env.etcd {
        bail!("fleet: {e}");
    }
    let tmp = tempfile::Builder::new().prefix("zrpc-fleet-").tempdir()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let cluster = rt.block_on(zrpc_tests::etcd::EtcdCluster::start(3));
    let hosts = cluster.endpoints().join(",");
    let view = Arc::new(Mutex::new(EtcdView::default()));
    rt.spawn(watch_etcd(cluster.endpoints(), view.clone()));
    let mut fleet = Fleet {
        env,
        dir: tmp.path().to_path_buf(),
        rt,
        cluster,
        hosts,
        view,
        servers: Vec::new(),
        clients: Vec::new(),
        counter: 0,
    };
    let load0 = loadavg();
    eprintln!("fleet: starting {} servers", args.servers);
    let t = Instant::now();
    let mut servers = Vec::with_capacity(args.servers);
    while servers.len() < args.servers {
        let n = args.batch.min(args.servers - servers.len());
        servers.extend(fleet.start_servers(n)?);
    }
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
    fleet.wait_etcd(&addrs, true, Duration::from_secs(60))?;
    let start_s = t.elapsed().as_secs_f64();
    let server_rss = median(servers.iter().map(|s| s.proc.rss_mb()).collect());
    fleet.servers = servers;
    eprintln!("fleet: {start_s:.0} s to start and register; starting the clients");
    let zrpc_n = args.clients / 2;
    for i in 0..args.clients {
        let kind = if i < zrpc_n { Kind::Zrpc } else { Kind::GoZero };
        let c = fleet.start_client(kind, args.rate)?;
        fleet.clients.push(c);
    }
    // every client has published a full view
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = fleet
            .clients
            .iter()
            .filter(|c| !read_log(&c.watch).counts.iter().all(|(_, n)| *n == 0))
            .count();
        if ready == fleet.clients.len() {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "only {ready} of {} clients are calling after 60 s",
                fleet.clients.len()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let settle = Duration::from_secs(args.settle_secs);
    let mut phases = Vec::new();

    let p = fleet.begin("steady load");
    std::thread::sleep(Duration::from_secs(args.steady_secs));
    phases.push(fleet.end(p, Duration::ZERO));

    let mut p = fleet.begin(&format!(
        "rolling deploy of {} (batches of {})",
        args.servers, args.batch
    ));
    let old = std::mem::take(&mut fleet.servers);
    let (new, notes) = fleet.roll(old, args.batch)?;
    fleet.servers = new;
    p.notes = notes;
    phases.push(fleet.end(p, settle));

    let mut p = fleet.begin("SIGKILL a third");
    let third = fleet.servers.len().div_ceil(3);
    let victims: Vec<FleetServer> = fleet.servers.drain(..third).collect();
    let killed_at = unix_ms();
    for s in &victims {
        s.proc.signal(Signal::SIGKILL);
    }
    let gone: Vec<String> = victims.iter().map(|s| s.addr.clone()).collect();
    let waited = fleet.wait_etcd(&gone, false, Duration::from_secs(40));
    drop(victims);
    {
        let v = fleet.view.lock().unwrap_or_else(|e| e.into_inner());
        let mut expiry: Vec<f64> = v
            .changes
            .iter()
            .filter(|c| !c.put && c.unix_ms >= killed_at && gone.contains(&c.addr))
            .map(|c| (c.unix_ms - killed_at) / 1000.0)
            .collect();
        expiry.sort_by(f64::total_cmp);
        p.notes.push(format!(
            "{third} servers killed; kill -> key gone from etcd (lease TTL), s p50 {:.1} / max {:.1}{}",
            percentile(&expiry, 0.5),
            percentile(&expiry, 1.0),
            waited.err().map_or(String::new(), |e| format!(" ({e:#})"))
        ));
    }
    phases.push(fleet.end(p, settle));

    let mut p = fleet.begin("etcd leader killed, then one batch replaced");
    let leader = fleet.rt.block_on(fleet.cluster.leader());
    match leader {
        Some(i) => {
            let t = Instant::now();
            fleet.cluster.kill_member(i);
            let next = fleet
                .rt
                .block_on(fleet.cluster.wait_leader(Duration::from_secs(20)));
            p.notes.push(format!(
                "member {i} (leader) killed; new leader {} after {:.0} ms",
                next.map_or("none".into(), |n| format!("member {n}")),
                t.elapsed().as_secs_f64() * 1000.0
            ));
        }
        None => p.notes.push("no leader found to kill".into()),
    }
    std::thread::sleep(settle);
    let old: Vec<FleetServer> = fleet
        .servers
        .drain(..args.batch.min(fleet.servers.len()))
        .collect();
    let (new, notes) = fleet.roll(old, args.batch)?;
    fleet.servers.extend(new);
    p.notes.extend(notes);
    phases.push(fleet.end(p, settle));

    // The clients' final view against etcd's.
    let live = fleet.view.lock().unwrap_or_else(|e| e.into_inner()).addrs();
    for c in &mut fleet.clients {
        c.proc.signal(Signal::SIGKILL);
    }
    let logs: Vec<(Kind, Log)> = fleet
        .clients
        .iter()
        .map(|c| (c.kind, read_log(&c.watch)))
        .collect();
    let stale: usize = logs
        .iter()
        .filter(|(_, l)| {
            l.views
                .last()
                .is_none_or(|(_, s)| s.is_empty() || !s.is_subset(&live))
        })
        .count();
    let changes = fleet
        .view
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .changes
        .clone();
    report(
        &args,
        &fleet,
        &phases,
        &logs,
        &changes,
        stale,
        (start_s, server_rss, &load0),
    )
}

#[allow(clippy::too_many_lines)]
fn report(
    args: &FleetArgs,
    fleet: &Fleet,
    phases: &[Phase],
    logs: &[(Kind, Log)],
    changes: &[Change],
    stale: usize,
    (start_s, server_rss, load0): (f64, f64, &str),
) -> Result<()> {
    let kinds = [Kind::Zrpc, Kind::GoZero];
    let mut out = Vec::new();
    println!(
        "\n| phase | s | calls zrpc / go-zero | failed zrpc / go-zero | convergence zrpc p50 / p99 / max, ms | convergence go-zero p50 / p99 / max, ms | not followed | etcd msgs/s (unary/s) | leader CPU, % of a core | client RSS MiB zrpc, go-zero: start -> end (median) | load avg (1/5/15 min) |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for p in phases {
        let secs = (p.end - p.start) / 1000.0;
        let pc: Vec<Change> = changes
            .iter()
            .filter(|c| c.unix_ms >= p.start && c.unix_ms < p.end)
            .cloned()
            .collect();
        let mut calls = BTreeMap::new();
        let mut failed = BTreeMap::new();
        let mut codes: BTreeMap<String, u64> = BTreeMap::new();
        let mut conv: BTreeMap<Kind, Vec<f64>> = BTreeMap::new();
        let mut never = 0;
        // when the failures came, s from the phase's start
        let (mut first_fail, mut last_fail) = (f64::INFINITY, f64::NEG_INFINITY);
        for (kind, log) in logs {
            *calls.entry(*kind).or_insert(0u64) += calls_between(log, p.start, p.end);
            for (t, code, msg) in &log.fails {
                if *t >= p.start && *t < p.end {
                    *failed.entry(*kind).or_insert(0u64) += 1;
                    first_fail = first_fail.min((t - p.start) / 1000.0);
                    last_fail = last_fail.max((t - p.start) / 1000.0);
                    *codes
                        .entry(format!("{} {code}: {msg}", kind.label()))
                        .or_default() += 1;
                }
            }
            never += convergence(&pc, log, *kind, conv.entry(*kind).or_default());
        }
        let stat = |k: Kind| {
            let mut v = conv.get(&k).cloned().unwrap_or_default();
            v.sort_by(f64::total_cmp);
            (
                v.len(),
                percentile(&v, 0.5),
                percentile(&v, 0.99),
                percentile(&v, 1.0),
            )
        };
        // request rate and leader CPU over the members that ran at both ends
        let (mut msgs, mut handled, mut leader_cpu) = (0.0, 0.0, f64::NAN);
        for (a, b) in p.etcd0.iter().zip(&p.etcd1) {
            if let (Some(a), Some(b)) = (a, b) {
                msgs += b.msgs - a.msgs;
                handled += b.handled - a.handled;
                if b.leader {
                    leader_cpu = (b.cpu_s - a.cpu_s) / secs * 100.0;
                }
            }
        }
        let rss = |v: &[f64], k: Kind| {
            median(
                v.iter()
                    .zip(logs)
                    .filter(|(_, (kind, _))| *kind == k)
                    .map(|(r, _)| *r)
                    .collect(),
            )
        };
        let n = |k: Kind, m: &BTreeMap<Kind, u64>| m.get(&k).copied().unwrap_or(0);
        let (zc, gc) = (stat(Kind::Zrpc), stat(Kind::GoZero));
        println!(
            "| {} | {:.0} | {} / {} | {} / {} | {:.0} / {:.0} / {:.0} | {:.0} / {:.0} / {:.0} | {} | {:.0} ({:.0}) | {:.1} | {:.1} -> {:.1}, {:.1} -> {:.1} | {} |",
            p.name,
            secs,
            n(Kind::Zrpc, &calls),
            n(Kind::GoZero, &calls),
            n(Kind::Zrpc, &failed),
            n(Kind::GoZero, &failed),
            zc.1,
            zc.2,
            zc.3,
            gc.1,
            gc.2,
            gc.3,
            never,
            msgs / secs,
            handled / secs,
            leader_cpu,
            rss(&p.rss0, Kind::Zrpc),
            rss(&p.rss1, Kind::Zrpc),
            rss(&p.rss0, Kind::GoZero),
            rss(&p.rss1, Kind::GoZero),
            p.loadavg
        );
        out.push(json!({
            "phase": p.name,
            "secs": secs,
            "changes": pc.len(),
            "calls": kinds.iter().map(|k| (k.label(), n(*k, &calls))).collect::<BTreeMap<_, _>>(),
            "failed": kinds.iter().map(|k| (k.label(), n(*k, &failed))).collect::<BTreeMap<_, _>>(),
            "failures": codes,
            "failures_from_to_s": if first_fail.is_finite() { json!([first_fail, last_fail]) } else { serde_json::Value::Null },
            "convergence_ms": {
                "zrpc": {"samples": zc.0, "p50": zc.1, "p99": zc.2, "max": zc.3},
                "go-zero": {"samples": gc.0, "p50": gc.1, "p99": gc.2, "max": gc.3},
            },
            "not_followed": never,
            "etcd_msgs_per_s": msgs / secs,
            "etcd_unary_per_s": handled / secs,
            "leader_cpu_pct": if leader_cpu.is_nan() { serde_json::Value::Null } else { json!(leader_cpu) },
            "client_rss_mib": {
                "zrpc": [rss(&p.rss0, Kind::Zrpc), rss(&p.rss1, Kind::Zrpc)],
                "go-zero": [rss(&p.rss0, Kind::GoZero), rss(&p.rss1, Kind::GoZero)],
            },
            "loadavg": p.loadavg,
            "notes": p.notes,
        }));
    }
    println!();
    for (p, o) in phases.iter().zip(&out) {
        for n in &p.notes {
            println!("- {}: {n}", p.name);
        }
        if let Some(f) = o["failures"].as_object().filter(|f| !f.is_empty()) {
            println!(
                "- {}: failed calls (first and last, s after the phase's start: {}): {}",
                p.name,
                o["failures_from_to_s"],
                serde_json::Value::Object(f.clone())
            );
        }
    }
    println!(
        "- {} servers started and registered in {start_s:.0} s (median server RSS {server_rss:.1} MiB); load average before: {load0}; clients whose last view was not a subset of etcd's keys at the end: {stale}",
        args.servers
    );
    let summary = json!({
        "servers": args.servers,
        "clients": args.clients,
        "rate_per_client": args.rate,
        "batch": args.batch,
        "etcd_members": fleet.cluster.endpoints().len(),
        "start_secs": start_s,
        "server_rss_mib": server_rss,
        "loadavg_before": load0,
        "stale_clients": stale,
        "phases": out,
    });
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&summary)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
