//! Scaling with the fleet: what a client pays per endpoint at 10, 100, 1,000 and 10,000.
//! - pick cost: the P2C picker over the set the client picks from (its subset) and over all N,
//!   and the subset selection each endpoint-set update runs (in this process, medians of
//!   alternating rounds);
//! - memory: a client process whose direct target lists N endpoints (`scale-client`), RSS
//!   growth per endpoint, no connection opened;
//! - etcd: N keys under one prefix of a real etcd; the initial load, the RSS per endpoint, and
//!   the time from a DELETE or PUT to the picker's set;
//! - churn (not in `--quick`): a tenth of N real listeners replaced in etcd every second under
//!   calls: failed calls, the client's CPU and memory, the set afterwards.
//!
//! Memory, etcd and churn run go-zero v1.10.3's client too (`gzbench scale`, the same flags and
//! JSON as `scale-client`), beside zrpc's; go-zero's picker is internal, so it has no pick cost.
//!
//! The server's side (`scale_server.rs`): methods per service and streams per connection, zrpc's
//! full default chain beside bare tonic.

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use zrpc_client::sim::{DEFAULT_SUBSET_SIZE, EndpointStats, P2cPicker, ThreadRng, subset_select};

use super::{Ctx, start_etcd};
use crate::proc::Proc;
use crate::report::{Section, Table, f, round_ratio};
use crate::scale_client::address;
use crate::stats::{median, percentile};

/// The fleet sizes.
fn sizes(ctx: &Ctx<'_>) -> Vec<usize> {
    ctx.size(vec![10, 100], vec![10, 100, 1_000, 10_000])
}

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let sizes = sizes(ctx);
    let mut section = Section {
        intro: format!(
            "A client's cost as its target grows from {} to {} endpoints. The client picks \
             from a stable subset of at most {DEFAULT_SUBSET_SIZE} endpoints (rendezvous \
             hashing, `p2c_ewma` and `round_robin`; `consistent_hash` keeps the whole set), so \
             its picker never sees more than {DEFAULT_SUBSET_SIZE}; each endpoint-set update \
             selects the subset again over all N. The endpoints are addresses on 127.0.0.1 \
             where nothing listens: a client connects lazily, no call is made, so no \
             connection is opened (the memory is per endpoint without a connection). Client \
             processes log at info into a sink, as a service at go-zero's default level does. \
             Beside zrpc, go-zero v1.10.3's client (`zrpc.NewClient` with its defaults, in \
             `gzbench scale`, the same flags and figures) where go-zero has the same part: \
             memory, etcd and churn. The last two tables are the server's side: methods per \
             service and streams per connection, zrpc's full default chain beside bare tonic \
             (connections: the memory section).",
            sizes[0],
            sizes[sizes.len() - 1]
        ),
        ..Section::default()
    };
    let lost = |a: &crate::noise::Snapshot| ctx.noise.lost_share(a, &ctx.noise.snap()) * 100.0;
    let t0 = ctx.noise.snap();
    section.tables.push(pick_cost(ctx, &sizes));
    section.notes.push(
        "go-zero has no pick cost here: its `p2c_ewma` picker and its subset are in internal \
         packages (`zrpc/internal/balancer/p2c`, `zrpc/resolver/internal`), which another \
         module cannot import, and a copy would not be go-zero. Its picker sees at most 32 \
         endpoints (the subset its resolver hands grpc), READY ones only."
            .into(),
    );
    let (mem, notes) = memory(ctx, &sizes)?;
    section.tables.push(mem);
    section.notes.extend(notes);
    let mut noise = vec![format!("pick cost and memory {:.0}%", lost(&t0))];
    match start_etcd(ctx) {
        Ok((etcd_proc, etcd)) => {
            let t1 = ctx.noise.snap();
            let (t, notes) = etcd_updates(ctx, &sizes, &etcd)?;
            noise.push(format!("etcd updates {:.0}%", lost(&t1)));
            section.tables.push(t);
            section.notes.extend(notes);
            if !ctx.opts.quick {
                let t2 = ctx.noise.snap();
                let (t, notes) = churn(ctx, &sizes, &etcd)?;
                noise.push(format!("churn {:.0}%", lost(&t2)));
                section.tables.push(t);
                section.notes.extend(notes);
            }
            drop(etcd_proc);
        }
        Err(e) => {
            let mut t = Table::new("etcd", &["keys", "initial load, ms"]);
            t.skipped_row("all", format!("{e:#}"));
            section.tables.push(t);
        }
    }
    let t3 = ctx.noise.snap();
    let (t, notes) = super::scale_server::methods(ctx)?;
    noise.push(format!("server methods {:.0}%", lost(&t3)));
    section.tables.push(t);
    section.notes.extend(notes);
    let t4 = ctx.noise.snap();
    let (t, notes) = super::scale_server::streams(ctx)?;
    noise.push(format!("server streams {:.0}%", lost(&t4)));
    section.tables.push(t);
    section.notes.extend(notes);
    section.notes.push(format!(
        "Noise monitor: share of the machine other processes and steal took: {}.",
        noise.join(", ")
    ));
    Ok(section)
}

/// Endpoint stats that answered within the last second (no re-probe due).
fn live(n: usize, picker: &P2cPicker) -> Vec<Arc<EndpointStats>> {
    let set: Vec<Arc<EndpointStats>> = (0..n).map(|_| Arc::new(EndpointStats::new())).collect();
    refresh(&set, picker);
    set
}

fn refresh(set: &[Arc<EndpointStats>], picker: &P2cPicker) {
    let now = picker.clock().nanos(Instant::now());
    for (i, e) in set.iter().enumerate() {
        let lag = 1_000_000 * (1 + (i as u64 % 10));
        e.on_pick();
        e.on_done(now.saturating_sub(lag), now, 0);
    }
}

/// This thread's CPU time, ns (`CLOCK_THREAD_CPUTIME_ID`): the pick loops are timed with it,
/// so that time spent waiting for a core while a neighbour runs does not count.
fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// Picks per timed span: reading the thread's CPU time is a system call, so spans are long (the
/// in-flight counts of a span's picks only scale the cost, the code path is the same).
const SPAN: usize = 4096;

/// CPU ns per pick over `set`: `picks` picks in spans of [`SPAN`], each span's slots released
/// outside the timed span (as a client releases a slot when its call ends).
fn ns_per_pick(set: &[Arc<EndpointStats>], picker: &P2cPicker, picks: usize) -> f64 {
    refresh(set, picker);
    let clock = picker.clock();
    let mut picked = vec![0usize; SPAN];
    let mut total = 0u64;
    let mut left = picks;
    while left > 0 {
        let k = left.min(SPAN);
        let t = thread_cpu_ns();
        for slot in &mut picked[..k] {
            let now = clock.coarse_now();
            *slot = picker
                .pick_at(black_box(set), now, &mut ThreadRng)
                .unwrap_or(0);
        }
        total += thread_cpu_ns().saturating_sub(t);
        for &i in &picked[..k] {
            set[i].on_abandon();
        }
        left -= k;
    }
    total as f64 / picks as f64
}

/// CPU µs per subset selection over `addrs` (the work of one endpoint-set update).
fn us_per_select(addrs: &[String], seed: u64) -> f64 {
    let reps = (200_000 / addrs.len()).clamp(3, 2_000);
    let t = thread_cpu_ns();
    for r in 0..reps {
        black_box(subset_select(
            black_box(addrs),
            seed.wrapping_add(r as u64),
            DEFAULT_SUBSET_SIZE,
        ));
    }
    thread_cpu_ns().saturating_sub(t) as f64 / 1e3 / reps as f64
}

fn pick_cost(ctx: &Ctx<'_>, sizes: &[usize]) -> Table {
    let rounds = ctx.size(1, 9);
    let picks = ctx.size(20_000, 400_000);
    let picker = P2cPicker::new(Instant::now());
    let sets: Vec<_> = sizes
        .iter()
        .map(|&n| {
            (
                live(n.min(DEFAULT_SUBSET_SIZE), &picker),
                live(n, &picker),
                (0..n).map(address).collect::<Vec<_>>(),
            )
        })
        .collect();
    let k = sizes.len();
    let (mut sub, mut all, mut sel) = (vec![vec![]; k], vec![vec![]; k], vec![vec![]; k]);
    let pb = ctx.progress((rounds * k) as u64, "scale pick");
    for round in 0..rounds {
        for j in 0..k {
            let i = (j + round) % k;
            pb.inc(1);
            let (s, a, addrs) = &sets[i];
            sub[i].push(ns_per_pick(s, &picker, picks));
            all[i].push(ns_per_pick(a, &picker, picks));
            sel[i].push(us_per_select(addrs, 0x5eed + round as u64));
        }
    }
    pb.finish_and_clear();
    let mut t = Table::new(
        &format!(
            "Pick cost: {picks} picks per run (coarse clock read included), the thread's CPU \
             time, median of {rounds} alternating rounds; one thread"
        ),
        &[
            "endpoints",
            "client's picker set (subset)",
            "CPU ns per pick, client's set",
            "client's set vs 10 endpoints (min..max)",
            "CPU ns per pick, P2C over all N (no subset)",
            "all N vs 10 endpoints (min..max)",
            "subset selection per update, CPU µs",
        ],
    );
    for (i, &n) in sizes.iter().enumerate() {
        t.row(vec![
            n.to_string(),
            n.min(DEFAULT_SUBSET_SIZE).to_string(),
            f(median(sub[i].clone()), 1),
            round_ratio(&sub[i], &sub[0]),
            f(median(all[i].clone()), 1),
            round_ratio(&all[i], &all[0]),
            f(median(sel[i].clone()), 1),
        ]);
    }
    t.row(vec![
        "go-zero, any N".into(),
        "min(N, 32), random".into(),
        "n/a".into(),
        "-".into(),
        "n/a".into(),
        "-".into(),
        "n/a".into(),
    ]);
    t
}

/// Whose client a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Zrpc,
    GoZero,
}

const CLIENTS: [Client; 2] = [Client::Zrpc, Client::GoZero];

impl Client {
    fn label(self) -> &'static str {
        match self {
            Client::Zrpc => "zrpc",
            Client::GoZero => "go-zero",
        }
    }

    /// The client process (`scale-client` or `gzbench scale`, which take the same flags), or
    /// why it cannot run.
    fn command(self, ctx: &Ctx<'_>, args: &[String]) -> Result<Proc> {
        let cmd = match self {
            Client::Zrpc => {
                let mut cmd = Command::new(&ctx.env.me);
                cmd.arg("scale-client").arg("--log").args(args);
                cmd
            }
            Client::GoZero => {
                let gz = ctx.gozero().map_err(|e| anyhow::anyhow!(e))?;
                let mut cmd = Command::new(gz);
                cmd.arg("scale").args(args);
                cmd
            }
        };
        Proc::spawn(&format!("{} scale client", self.label()), cmd, None, true)
    }
}

/// A row for a client that could not run: `n`, the client, why, then `-`.
fn skipped(t: &mut Table, n: usize, client: Client, why: &str) {
    t.skipped_row(&n.to_string(), why);
    if let Some(row) = t.rows.last_mut() {
        row.insert(1, client.label().into());
        row.truncate(t.headers.len());
    }
}

/// The two clients in the order of `round` (alternating).
fn order(round: usize) -> [Client; 2] {
    if round.is_multiple_of(2) {
        CLIENTS
    } else {
        [CLIENTS[1], CLIENTS[0]]
    }
}

/// One client run: its JSON lines (the summary, then with `updates` the update times).
fn client_run(
    ctx: &Ctx<'_>,
    client: Client,
    args: &[String],
    updates: bool,
) -> Result<Vec<serde_json::Value>> {
    let mut p = client.command(ctx, args)?;
    let mut out = vec![p.wait_json(Duration::from_secs(120), |v| v.get("rss1_kib").is_some())?];
    if updates {
        out.push(p.wait_json(Duration::from_secs(300), |v| v.get("updates").is_some())?);
    }
    p.finish(Duration::from_secs(10))?;
    Ok(out)
}

fn num(v: &serde_json::Value, k: &str) -> f64 {
    v.get(k)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or(f64::NAN)
}

fn memory(ctx: &Ctx<'_>, sizes: &[usize]) -> Result<(Table, Vec<String>)> {
    let rounds = ctx.size(1, 3);
    let k = sizes.len();
    // per client: RSS growth per size and round, the last run's held and dialled counts
    let mut growth = [vec![vec![]; k], vec![vec![]; k]];
    let mut held = [vec![0.0; k], vec![0.0; k]];
    let mut dialed = vec![(f64::NAN, f64::NAN); k];
    let mut gz_err = None;
    let pb = ctx.progress((rounds * k) as u64, "scale mem");
    for round in 0..rounds {
        for j in 0..k {
            let i = (j + round) % k;
            pb.inc(1);
            for client in order(round) {
                let c = client as usize;
                let args = ["--n".to_owned(), sizes[i].to_string()];
                let v = match client_run(ctx, client, &args, false) {
                    Ok(v) => v,
                    Err(e) if client == Client::GoZero => {
                        gz_err = Some(format!("{e:#}"));
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                growth[c][i].push(num(&v[0], "rss1_kib") - num(&v[0], "rss0_kib"));
                held[c][i] = num(&v[0], "held");
                if client == Client::GoZero {
                    dialed[i] = (num(&v[0], "dialed"), num(&v[0], "dials"));
                }
            }
        }
    }
    pb.finish_and_clear();
    let mut t = Table::new(
        &format!(
            "Memory: a client process whose direct target lists N endpoints (127.0.0.1, nothing \
             listening, no call made); RSS growth from building the client to holding its set, \
             median of {rounds} alternating rounds (zrpc and go-zero alternate too), a fresh \
             process per run"
        ),
        &[
            "endpoints",
            "client",
            "endpoints in the picker",
            "connections opened",
            "client RSS growth, KiB",
            "per endpoint, bytes",
            "per endpoint beyond the first 10, bytes",
        ],
    );
    for (i, &n) in sizes.iter().enumerate() {
        for client in CLIENTS {
            let c = client as usize;
            if growth[c][i].is_empty() {
                skipped(&mut t, n, client, gz_err.as_deref().unwrap_or("no run"));
                continue;
            }
            let g = median(growth[c][i].clone());
            let beyond = if i == 0 || growth[c][0].is_empty() {
                "-".into()
            } else {
                let base = median(growth[c][0].clone());
                f((g - base) * 1024.0 / (n - sizes[0]) as f64, 0)
            };
            let conns = match client {
                Client::Zrpc => "0".to_owned(),
                Client::GoZero => format!("{} (refused; {} attempts)", dialed[i].0, dialed[i].1),
            };
            t.row(vec![
                n.to_string(),
                client.label().into(),
                f(held[c][i], 0),
                conns,
                f(g, 0),
                f(g * 1024.0 / n as f64, 0),
                beyond,
            ]);
        }
    }
    let notes = vec![
        "RSS moves in 4 KiB pages and with the allocator's arenas: at 10 and 100 endpoints the \
         growth is mostly the client's fixed cost, so the per-endpoint figure that matters is the \
         one beyond the first 10 at 1,000 and 10,000."
            .into(),
        "go-zero's direct resolver hands grpc a random subset of 32 of the N endpoints (so does \
         its etcd resolver, again on every change), and grpc's balancer dials every address it \
         is given at once: the go-zero client tries to connect to all of them (refused here; the \
         attempts are counted by a dialer passed with `zrpc.WithDialOption`, from building the \
         client to the RSS reading, retries after grpc's backoff included). zrpc connects an \
         endpoint on its first call. go-zero's RSS is the Go runtime's (heap not yet collected \
         included), read the same way (settled: three readings 100 ms apart within 8 KiB)."
            .into(),
    ];
    Ok((t, notes))
}

/// Puts `n` keys `<key>/<i>` -> [`address`]`(i)` (transactions of 100 puts).
async fn put_keys(etcd: &mut etcd_client::Client, key: &str, n: usize) -> Result<()> {
    let all: Vec<usize> = (0..n).collect();
    for chunk in all.chunks(100) {
        let ops: Vec<etcd_client::TxnOp> = chunk
            .iter()
            .map(|&i| etcd_client::TxnOp::put(format!("{key}/{i}"), address(i), None))
            .collect();
        etcd.txn(etcd_client::Txn::new().and_then(ops))
            .await
            .with_context(|| format!("etcd: putting the keys of {key}"))?;
    }
    Ok(())
}

fn etcd_updates(ctx: &Ctx<'_>, sizes: &[usize], etcd: &str) -> Result<(Table, Vec<String>)> {
    let rounds = ctx.size(1, 3);
    let pairs = ctx.size(3, 10);
    let k = sizes.len();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let t0 = Instant::now();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([etcd], None).await?;
        put_keys(&mut c, "scale/warm", 10).await?;
        for &n in sizes {
            put_keys(&mut c, &format!("scale/n{n}"), n).await?;
        }
        anyhow::Ok(())
    })?;
    let put_s = t0.elapsed().as_secs_f64();
    // per client and size: the figures of every run
    let mut runs: [Vec<EtcdRuns>; 2] = Default::default();
    for r in &mut runs {
        r.resize_with(k, EtcdRuns::default);
    }
    let mut gz_err = None;
    let pb = ctx.progress((rounds * k) as u64, "scale etcd");
    for round in 0..rounds {
        for j in 0..k {
            let i = (j + round) % k;
            let n = sizes[i];
            pb.inc(1);
            let args = [
                "--n".to_owned(),
                n.to_string(),
                "--etcd".into(),
                etcd.to_owned(),
                "--key".into(),
                format!("scale/n{n}"),
                "--warm-key".into(),
                "scale/warm".into(),
                "--updates".into(),
                pairs.to_string(),
            ];
            for client in order(round) {
                let v = match client_run(ctx, client, &args, true) {
                    Ok(v) => v,
                    Err(e) if client == Client::GoZero => {
                        gz_err = Some(format!("{e:#}"));
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                runs[client as usize][i].add(&v, n);
            }
        }
    }
    pb.finish_and_clear();
    let mut t = Table::new(
        &format!(
            "etcd: N keys under one prefix (one etcd on 127.0.0.1); per N and client, {rounds} \
             client processes (zrpc and go-zero alternate), each timing {pairs} DELETEs of a key \
             whose address the picker holds and the PUTs that restore them"
        ),
        &[
            "keys",
            "client",
            "initial load: resolver has all N, ms",
            "picker holds its set, ms",
            "RSS growth per endpoint, bytes",
            "DELETE -> picker without it, ms p50 / max",
            "PUT -> picker with it, ms p50 / max",
            "-> resolver published, ms p50",
            "etcd answered the request, ms p50",
            "RSS after the updates, KiB",
        ],
    );
    let p50max = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        format!(
            "{} / {}",
            f(percentile(&s, 0.5), 2),
            f(percentile(&s, 1.0), 2)
        )
    };
    for (i, &n) in sizes.iter().enumerate() {
        for client in CLIENTS {
            let r = &runs[client as usize][i];
            if r.load.is_empty() {
                skipped(&mut t, n, client, gz_err.as_deref().unwrap_or("no run"));
                continue;
            }
            t.row(vec![
                n.to_string(),
                client.label().into(),
                f(median(r.load.clone()), 1),
                f(median(r.picker.clone()), 1),
                f(median(r.mem.clone()), 0),
                p50max(&r.del),
                p50max(&r.put),
                f(median(r.published.clone()), 2),
                f(median(r.ack.clone()), 2),
                format!("{:+.0}", median(r.growth_after.clone())),
            ]);
        }
    }
    let notes = vec![
        format!(
            "Writing the keys (transactions of 100 puts, before the clients): {put_s:.1} s. The \
             times run from just before the client's own etcd request (its answer included) to \
             the change; the initial load from building the resolver (zrpc: etcd connection \
             included) to its first set of all N. zrpc's times are the first 20 µs poll of its \
             resolver's and picker's sets that saw the change."
        ),
        "go-zero: the times are stamped inside grpc's calls, by wrapping the registered \
         builders (grpc's public resolver and balancer APIs) around go-zero's own: \
         \"resolver published\" is go-zero's etcd resolver handing grpc its address list (its \
         `discov.Subscriber` listener, which loads all N before the first list), and \"picker\" \
         is that list applied by go-zero's `p2c_ewma` balancer (subconns made and removed). \
         Its resolver hands on a fresh random subset of 32 on every change, so after a PUT the \
         time is to its next list, which holds the restored address only by chance (32 in N). \
         go-zero keeps one etcd connection per host list for the whole process, so its initial \
         load reuses the warm-up client's. Its balancer dials every address of each list at \
         once (nothing listens here: refused, retried after grpc's backoff)."
            .into(),
    ];
    Ok((t, notes))
}

/// The etcd figures of one client at one N, over its runs.
#[derive(Debug, Default)]
struct EtcdRuns {
    load: Vec<f64>,
    picker: Vec<f64>,
    mem: Vec<f64>,
    growth_after: Vec<f64>,
    del: Vec<f64>,
    put: Vec<f64>,
    published: Vec<f64>,
    ack: Vec<f64>,
}

impl EtcdRuns {
    /// Adds one run's JSON lines (its summary and its updates) of a client of `n` keys.
    fn add(&mut self, v: &[serde_json::Value], n: usize) {
        self.load.push(num(&v[0], "load_ms"));
        self.picker.push(num(&v[0], "picker_ms"));
        let g = num(&v[0], "rss1_kib") - num(&v[0], "rss0_kib");
        self.mem.push(g * 1024.0 / n as f64);
        self.growth_after
            .push(num(&v[1], "rss2_kib") - num(&v[0], "rss1_kib"));
        for u in v[1]["updates"].as_array().into_iter().flatten() {
            let applied = num(u, "applied_ms");
            let applied = if applied.is_nan() { 10_000.0 } else { applied };
            match u["op"].as_str() {
                Some("put") => self.put.push(applied),
                _ => self.del.push(applied),
            }
            self.published.push(num(u, "published_ms"));
            self.ack.push(num(u, "ack_ms"));
        }
    }
}

/// Seconds of churn per fleet size, and calls per second meanwhile.
const CHURN_SECS: u64 = 60;
const CHURN_RATE: u64 = 200;

fn churn(ctx: &Ctx<'_>, sizes: &[usize], etcd: &str) -> Result<(Table, Vec<String>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut t = Table::new(
        &format!(
            "Churn: a tenth of the N endpoints replaced every second for {CHURN_SECS} s (a PUT of \
             a new key on a spare listener, then the DELETE of an old key, spread over the \
             second), {CHURN_RATE} calls/s through the client meanwhile; one run per N and \
             client (the first client alternates with N), both on the same listeners"
        ),
        &[
            "endpoints",
            "client",
            "replacements/s",
            "replacements done",
            "calls",
            "failed",
            "client CPU during the churn, % of a core",
            "client RSS at 5 s / end / settled after, MiB",
            "client sockets before / after",
            "resolver's set = etcd's after",
        ],
    );
    let mut notes = Vec::new();
    let pb = ctx.progress(sizes.len() as u64, "scale churn");
    for (round, &n) in sizes.iter().enumerate() {
        pb.inc(1);
        let spares = (n / 10).max(1) + 1;
        let mut cmd = Command::new(&ctx.env.me);
        cmd.args(["scale-serve", "--ports", &(n + spares).to_string()]);
        let mut server = Proc::spawn("zrpc-bench scale-serve", cmd, None, true)?;
        let v = server.wait_json(Duration::from_secs(120), |v| v.get("ports").is_some())?;
        let ports: Vec<u64> = v["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_u64)
            .collect();
        let mut rows = Vec::new();
        for client in order(round) {
            match churn_run(ctx, &rt, client, n, etcd, &ports, &mut notes) {
                Ok(row) => rows.push((client, Some(row))),
                Err(e) if client == Client::GoZero => {
                    notes.push(format!("{n} endpoints, go-zero: {e:#}"));
                    rows.push((client, None));
                }
                Err(e) => return Err(e),
            }
        }
        drop(server);
        rows.sort_by_key(|(c, _)| *c as usize);
        for (client, row) in rows {
            match row {
                Some(row) => t.row(row),
                None => skipped(&mut t, n, client, "the run failed (notes)"),
            }
        }
    }
    pb.finish_and_clear();
    notes.push(
        "The endpoints are bare tonic greeters, one listener each on 127.0.0.1:0, all in one \
         process (`scale-serve`); a replaced endpoint's listener keeps serving, as a server \
         that deregisters and then drains would, so a failed call is the client's doing \
         (picking an endpoint it should not, or finding none), not a server's. The client's \
         CPU holds its calls, the resolver and the picker's updates; the writes to etcd are \
         the harness's. The first row's CPU is mostly the calls'. Each client has a prefix of \
         its own, written afresh on the first N listeners; go-zero's client is `zrpc.NewClient` \
         with go-zero's defaults (`p2c_ewma`, breaker, 2 s timeout), and its set is a \
         `discov.Subscriber` on the same prefix (it shares the resolver's watch)."
            .into(),
    );
    Ok((t, notes))
}

/// One churn run of `client` over `n` of the `ports` (a prefix of its own): its table row.
fn churn_run(
    ctx: &Ctx<'_>,
    rt: &tokio::runtime::Runtime,
    client: Client,
    n: usize,
    etcd: &str,
    ports: &[u64],
    notes: &mut Vec<String>,
) -> Result<Vec<String>> {
    let key = match client {
        Client::Zrpc => format!("scale/churn{n}"),
        Client::GoZero => format!("scale/gzchurn{n}"),
    };
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([etcd], None).await?;
        let all: Vec<usize> = (0..n).collect();
        for chunk in all.chunks(100) {
            let ops: Vec<etcd_client::TxnOp> = chunk
                .iter()
                .map(|&i| {
                    etcd_client::TxnOp::put(
                        format!("{key}/{i}"),
                        format!("127.0.0.1:{}", ports[i]),
                        None,
                    )
                })
                .collect();
            c.txn(etcd_client::Txn::new().and_then(ops)).await?;
        }
        anyhow::Ok(())
    })?;
    let args = [
        "--n".to_owned(),
        n.to_string(),
        "--etcd".into(),
        etcd.to_owned(),
        "--key".into(),
        key.clone(),
        "--warm-key".into(),
        "scale/warm".into(),
        "--churn-secs".into(),
        CHURN_SECS.to_string(),
        "--rate".into(),
        CHURN_RATE.to_string(),
    ];
    let mut p = client.command(ctx, &args)?;
    p.wait_json(Duration::from_secs(120), |v| v.get("rss1_kib").is_some())?;
    let (replaced, errors) = rt.block_on(replace(etcd, &key, ports, n))?;
    let v = p.wait_json(Duration::from_secs(CHURN_SECS + 120), |v| {
        v.get("failed").is_some()
    })?;
    p.finish(Duration::from_secs(10))?;
    let rss: Vec<f64> = v["rss_kib"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    let mib = |k: f64| f(k / 1024.0, 1);
    let failed = num(&v, "failed");
    let who = format!("{n} endpoints, {}", client.label());
    notes.push(format!(
        "{who}: client RSS every 5 s of the churn, MiB: {}.",
        rss.iter().map(|k| mib(*k)).collect::<Vec<_>>().join(", ")
    ));
    if client == Client::GoZero {
        notes.push(format!(
            "{who}: {} address lists handed to grpc from the start of the churn to the end of \
             the run (the churn made {} changes in etcd; the run ends up to 15 s after it), \
             {:.1} s spent inside grpc's handling of them (go-zero's watch waits for it); {} \
             connection attempts to {} addresses since the client was built.",
            v["resolver_updates"],
            2 * replaced,
            num(&v, "in_update_s"),
            v["dials"],
            v["dialed"]
        ));
    }
    if failed > 0.0 {
        notes.push(format!("{who}, failed calls by status: {}", v["codes"]));
    }
    if errors > 0 {
        notes.push(format!("{who}: {errors} replacements failed in etcd."));
    }
    if v["etcd_keys"].as_u64() != Some(n as u64) {
        notes.push(format!(
            "{who}: etcd held {} keys after the churn.",
            v["etcd_keys"]
        ));
    }
    Ok(vec![
        n.to_string(),
        client.label().into(),
        (n / 10).max(1).to_string(),
        format!("{} of {}", replaced, (n / 10).max(1) as u64 * CHURN_SECS),
        f(num(&v, "ok") + failed, 0),
        f(failed, 0),
        f(num(&v, "cpu_share") * 100.0, 1),
        format!(
            "{} / {} / {}",
            mib(rss.get(1).copied().unwrap_or(f64::NAN)),
            mib(rss.last().copied().unwrap_or(f64::NAN)),
            mib(num(&v, "rss_after_kib"))
        ),
        format!("{} / {}", v["sockets_before"], v["sockets_after"]),
        if v["set_matches_etcd"].as_bool() == Some(true) {
            "yes".into()
        } else {
            "NO".into()
        },
    ])
}

/// A tenth of the `n` keys under `key` replaced every second for [`CHURN_SECS`]: a PUT of a new
/// key on a spare port, then the DELETE of an old key, spread over each second (up to 256 in
/// flight). Returns (replacements done, failed).
async fn replace(etcd: &str, key: &str, ports: &[u64], n: usize) -> Result<(u64, u64)> {
    let c = etcd_client::Client::connect([etcd], None).await?;
    // key id -> port index; the spares' port indexes
    let mut active: Vec<(usize, usize)> = (0..n).map(|i| (i, i)).collect();
    let mut spares: Vec<usize> = (n..ports.len()).collect();
    let per_sec = (n / 10).max(1);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move |len: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % len as u64) as usize
    };
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_sec as f64));
    let mut ops = tokio::task::JoinSet::new();
    let (mut done, mut errors) = (0u64, 0u64);
    let mut count = |r: Result<Result<()>, tokio::task::JoinError>| match r {
        Ok(Ok(())) => done += 1,
        _ => errors += 1,
    };
    for next_key in n..n + per_sec * CHURN_SECS as usize {
        tick.tick().await;
        let (old_key, old_port) = active.swap_remove(rand(active.len()));
        let new_port = spares.swap_remove(rand(spares.len()));
        spares.push(old_port);
        active.push((next_key, new_port));
        let (put, del) = (format!("{key}/{next_key}"), format!("{key}/{old_key}"));
        let value = format!("127.0.0.1:{}", ports[new_port]);
        let mut kv = c.kv_client();
        ops.spawn(async move {
            kv.put(put, value, None).await?;
            kv.delete(del, None).await?;
            anyhow::Ok(())
        });
        while let Some(r) = ops.try_join_next() {
            count(r);
        }
        if ops.len() > 256
            && let Some(r) = ops.join_next().await
        {
            count(r);
        }
    }
    while let Some(r) = ops.join_next().await {
        count(r);
    }
    Ok((done, errors))
}
