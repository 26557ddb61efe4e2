//! Scaling with the fleet: what a client pays per endpoint at 10, 100, 1,000 and 10,000.
//! - pick cost: the P2C picker over the set the client picks from (its subset) and over all N,
//!   and the subset selection each endpoint-set update runs (in this process, medians of
//!   alternating rounds);
//! - memory: a client process whose direct target lists N endpoints (`scale-client`), RSS
//!   growth per endpoint, no connection opened;
//! - etcd: N keys under one prefix of a real etcd; the initial load, the RSS per endpoint, and
//!   the time from a DELETE or PUT to the picker's set.

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use zrpc_client::sim::{
    DEFAULT_SUBSET_SIZE, EndpointStats, P2cPicker, ThreadRng, subset_select,
};

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
             processes log at info into a sink, as a service at go-zero's default level does.",
            sizes[0],
            sizes[sizes.len() - 1]
        ),
        ..Section::default()
    };
    section.tables.push(pick_cost(ctx, &sizes));
    let (mem, notes) = memory(ctx, &sizes)?;
    section.tables.push(mem);
    section.notes.extend(notes);
    match start_etcd(ctx) {
        Ok((etcd_proc, etcd)) => {
            let (t, notes) = etcd_updates(ctx, &sizes, &etcd)?;
            drop(etcd_proc);
            section.tables.push(t);
            section.notes.extend(notes);
        }
        Err(e) => {
            let mut t = Table::new("etcd", &["keys", "initial load, ms"]);
            t.skipped_row("all", format!("{e:#}"));
            section.tables.push(t);
        }
    }
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

/// ns per pick over `set`: `picks` picks in spans of 64, each span's slots released outside
/// the timed span (as a client releases a slot when its call ends).
fn ns_per_pick(set: &[Arc<EndpointStats>], picker: &P2cPicker, picks: usize) -> f64 {
    refresh(set, picker);
    let clock = picker.clock();
    let mut picked = [0usize; 64];
    let mut total = Duration::ZERO;
    let mut left = picks;
    while left > 0 {
        let k = left.min(picked.len());
        let t = Instant::now();
        for slot in &mut picked[..k] {
            let now = clock.coarse_now();
            *slot = picker
                .pick_at(black_box(set), now, &mut ThreadRng)
                .unwrap_or(0);
        }
        total += t.elapsed();
        for &i in &picked[..k] {
            set[i].on_abandon();
        }
        left -= k;
    }
    total.as_nanos() as f64 / picks as f64
}

/// µs per subset selection over `addrs` (the work of one endpoint-set update).
fn us_per_select(addrs: &[String], seed: u64) -> f64 {
    let reps = (200_000 / addrs.len()).clamp(3, 2_000);
    let t = Instant::now();
    for r in 0..reps {
        black_box(subset_select(
            black_box(addrs),
            seed.wrapping_add(r as u64),
            DEFAULT_SUBSET_SIZE,
        ));
    }
    t.elapsed().as_secs_f64() * 1e6 / reps as f64
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
            "Pick cost: {picks} picks per run (coarse clock read included), median of {rounds} \
             alternating rounds; one thread"
        ),
        &[
            "endpoints",
            "client's picker set (subset)",
            "ns per pick, client's set",
            "client's set vs 10 endpoints (min..max)",
            "ns per pick, P2C over all N (no subset)",
            "all N vs 10 endpoints (min..max)",
            "subset selection per update, µs",
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
    t
}

/// One `scale-client` run: its JSON lines (the summary, then with `updates` the update times).
fn client_run(ctx: &Ctx<'_>, args: &[String], updates: bool) -> Result<Vec<serde_json::Value>> {
    let mut cmd = Command::new(&ctx.env.me);
    cmd.arg("scale-client").arg("--log").args(args);
    let mut p = Proc::spawn("zrpc-bench scale-client", cmd, None, true)?;
    let mut out = vec![p.wait_json(Duration::from_secs(120), |v| v.get("rss1_kib").is_some())?];
    if updates {
        out.push(p.wait_json(Duration::from_secs(300), |v| v.get("updates").is_some())?);
    }
    p.finish(Duration::from_secs(10))?;
    Ok(out)
}

fn num(v: &serde_json::Value, k: &str) -> f64 {
    v.get(k).and_then(serde_json::Value::as_f64).unwrap_or(f64::NAN)
}

fn memory(ctx: &Ctx<'_>, sizes: &[usize]) -> Result<(Table, Vec<String>)> {
    let rounds = ctx.size(1, 3);
    let k = sizes.len();
    let (mut growth, mut held) = (vec![vec![]; k], vec![0.0; k]);
    let pb = ctx.progress((rounds * k) as u64, "scale mem");
    for round in 0..rounds {
        for j in 0..k {
            let i = (j + round) % k;
            pb.inc(1);
            let v = client_run(ctx, &["--n".into(), sizes[i].to_string()], false)?;
            growth[i].push(num(&v[0], "rss1_kib") - num(&v[0], "rss0_kib"));
            held[i] = num(&v[0], "held");
        }
    }
    pb.finish_and_clear();
    let mut t = Table::new(
        &format!(
            "Memory: a client process whose direct target lists N endpoints (127.0.0.1, nothing \
             listening, no call made); RSS growth from building the client to holding its set, \
             median of {rounds} alternating rounds, a fresh process per run"
        ),
        &[
            "endpoints",
            "endpoints in the picker",
            "connections opened",
            "client RSS growth, KiB",
            "per endpoint, bytes",
            "per endpoint beyond the first 10, bytes",
        ],
    );
    let base = median(growth[0].clone());
    for (i, &n) in sizes.iter().enumerate() {
        let g = median(growth[i].clone());
        let beyond = if i == 0 {
            "-".into()
        } else {
            f((g - base) * 1024.0 / (n - sizes[0]) as f64, 0)
        };
        t.row(vec![
            n.to_string(),
            f(held[i], 0),
            "0".into(),
            f(g, 0),
            f(g * 1024.0 / n as f64, 0),
            beyond,
        ]);
    }
    let notes = vec![
        "RSS moves in 4 KiB pages and with the allocator's arenas: at 10 and 100 endpoints the \
         growth is mostly the client's fixed cost, so the per-endpoint figure that matters is the \
         one beyond the first 10 at 1,000 and 10,000."
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
    let mut load = vec![vec![]; k];
    let mut picker = vec![vec![]; k];
    let mut mem = vec![vec![]; k];
    let mut growth_after = vec![vec![]; k];
    let mut del = vec![vec![]; k];
    let mut put = vec![vec![]; k];
    let mut published = vec![vec![]; k];
    let mut ack = vec![vec![]; k];
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
            let v = client_run(ctx, &args, true)?;
            load[i].push(num(&v[0], "load_ms"));
            picker[i].push(num(&v[0], "picker_ms"));
            let g = num(&v[0], "rss1_kib") - num(&v[0], "rss0_kib");
            mem[i].push(g * 1024.0 / n as f64);
            growth_after[i].push(num(&v[1], "rss2_kib") - num(&v[0], "rss1_kib"));
            for u in v[1]["updates"].as_array().into_iter().flatten() {
                let applied = num(u, "applied_ms");
                let applied = if applied.is_nan() { 10_000.0 } else { applied };
                match u["op"].as_str() {
                    Some("put") => put[i].push(applied),
                    _ => del[i].push(applied),
                }
                published[i].push(num(u, "published_ms"));
                ack[i].push(num(u, "ack_ms"));
            }
        }
    }
    pb.finish_and_clear();
    let mut t = Table::new(
        &format!(
            "etcd: N keys under one prefix (one etcd on 127.0.0.1); per N, {rounds} client \
             processes, each timing {pairs} DELETEs of a key whose address the picker holds and \
             the PUTs that restore them"
        ),
        &[
            "keys",
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
        format!("{} / {}", f(percentile(&s, 0.5), 2), f(percentile(&s, 1.0), 2))
    };
    for (i, &n) in sizes.iter().enumerate() {
        t.row(vec![
            n.to_string(),
            f(median(load[i].clone()), 1),
            f(median(picker[i].clone()), 1),
            f(median(mem[i].clone()), 0),
            p50max(&del[i]),
            p50max(&put[i]),
            f(median(published[i].clone()), 2),
            f(median(ack[i].clone()), 2),
            format!("{:+.0}", median(growth_after[i].clone())),
        ]);
    }
    let notes = vec![format!(
        "Writing the keys (transactions of 100 puts, before the clients): {put_s:.1} s. The \
         times run from just before the client's own etcd request (its answer included) to \
         the first 20 µs poll that saw the change; the initial load from starting the \
         resolver (etcd connection included) to its first set of all N."
    )];
    Ok((t, notes))
}
