//! `zrpc-bench scale-client`: one zrpc client whose target lists N endpoints, in a process of its
//! own so that its resident memory is its own. JSON lines on stdout:
//! - `{"rss0_kib", "rss1_kib", "held", "load_ms", "picker_ms"}` once the client holds its set;
//! - with `--etcd`, then `{"updates": [...]}`: each a DELETE or a PUT of a key whose address is in
//!   the picker's set, timed from just before the etcd request to the resolver's publish and to
//!   the picker's set without (or with) the address.
//!
//! Addresses are `127.0.0.1:<BASE_PORT + i>` (key `<key>/<i>` in etcd). Nothing listens there and
//! no call is made: a client connects lazily, so no connection is ever opened.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

/// The first endpoint's port.
pub(crate) const BASE_PORT: u32 = 20_000;

/// The address of endpoint `i`.
pub(crate) fn address(i: usize) -> String {
    format!("127.0.0.1:{}", BASE_PORT as usize + i)
}

/// The `scale-client` arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ScaleClientArgs {
    /// Endpoints in the target.
    #[arg(long)]
    n: usize,
    /// etcd host (discovery of the keys under `--key`); direct target when empty.
    #[arg(long, default_value = "")]
    etcd: String,
    /// etcd key holding the N endpoints.
    #[arg(long, default_value = "")]
    key: String,
    /// etcd key holding 10 endpoints (the warm-up client).
    #[arg(long, default_value = "")]
    warm_key: String,
    /// Update pairs (a DELETE, then the PUT that restores the key) to time.
    #[arg(long, default_value_t = 0)]
    updates: usize,
    /// Log at info into a sink (what a service logging at go-zero's default level pays).
    #[arg(long)]
    log: bool,
    /// Churn: seconds of calls (plus one) while the harness replaces a tenth of the endpoints
    /// every second.
    #[arg(long, default_value_t = 0)]
    churn_secs: u64,
    /// Churn: calls per second (open loop, `SayHello`) during the churn.
    #[arg(long, default_value_t = 200)]
    rate: u64,
}

pub(crate) fn run(args: ScaleClientArgs) -> Result<()> {
    if args.log {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .init();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(main(args))
}

fn conf(args: &ScaleClientArgs, key: &str, n: usize) -> zrpc::RpcClientConf {
    if args.etcd.is_empty() {
        zrpc::RpcClientConf::direct((0..n).map(address))
    } else {
        zrpc::RpcClientConf::etcd([args.etcd.clone()], key.to_owned())
    }
}

/// Polls `done` every 20 µs (from a thread of its own: the runtime's workers stay free) until it
/// holds or `limit` passes; the time it held first.
fn poll(limit: Duration, done: impl Fn() -> bool) -> Option<Instant> {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return Some(Instant::now());
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// This process's resident memory once it stopped moving (three readings 100 ms apart within
/// 8 KiB), KiB.
async fn settled_rss_kib() -> f64 {
    let pid = i32::try_from(std::process::id()).unwrap_or(0);
    let read = || crate::proc::rss_mb_of(pid) * 1024.0;
    let mut last = read();
    let mut same = 0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = read();
        same = if (now - last).abs() <= 8.0 {
            same + 1
        } else {
            0
        };
        last = now;
        if same >= 3 {
            break;
        }
    }
    last
}

async fn main(args: ScaleClientArgs) -> Result<()> {
    let subset = zrpc_client::sim::DEFAULT_SUBSET_SIZE;
    // A client of 10 endpoints built and dropped first: the one-time costs (metrics registry,
    // the etcd client's first connection, the runtime's and allocator's arenas) are not the N's.
    {
        let warm = zrpc::Client::new(conf(&args, &args.warm_key, 10)).await?;
        let w = warm.clone();
        let held = tokio::task::spawn_blocking(move || {
            poll(Duration::from_secs(10), || w.endpoints().len() == 10)
        })
        .await?;
        held.context("the warm-up client never held its 10 endpoints")?;
    }
    // the etcd client that writes the updates, connected before the first reading
    let mut etcd = if args.etcd.is_empty() {
        None
    } else {
        Some(etcd_client::Client::connect([args.etcd.as_str()], None).await?)
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss0 = settled_rss_kib().await;

    let want = args.n.min(subset);
    let started = Instant::now();
    // The resolver first (the client shares its etcd watch): its publish is timed apart.
    let target = if args.etcd.is_empty() {
        None
    } else {
        let t = zrpc::resolver::Target::parse(&format!("etcd:///{}?key={}", args.etcd, args.key))?;
        Some(zrpc::resolver::resolve(&t)?)
    };
    let client = zrpc::Client::new(conf(&args, &args.key, args.n)).await?;
    let (c, r) = (client.clone(), target.clone());
    let n = args.n;
    let (loaded, picked) = tokio::task::spawn_blocking(move || {
        let loaded = match &r {
            Some(r) => poll(Duration::from_secs(60), || {
                r.updates().borrow().as_ref().is_some_and(|s| s.len() == n)
            }),
            None => Some(Instant::now()),
        };
        let picked = poll(Duration::from_secs(60), || c.endpoints().len() == want);
        (loaded, picked)
    })
    .await?;
    let (Some(loaded), Some(picked)) = (loaded, picked) else {
        bail!("the client did not hold its {want} endpoints within 60 s");
    };
    let ms = |t: Instant| t.duration_since(started).as_secs_f64() * 1000.0;
    let rss1 = settled_rss_kib().await;
    println!(
        "{}",
        json!({
            "rss0_kib": rss0,
            "rss1_kib": rss1,
            "held": client.endpoints().len(),
            "load_ms": ms(loaded),
            "picker_ms": ms(picked),
        })
    );
    let (Some(resolution), Some(etcd)) = (target, etcd.as_mut()) else {
        return Ok(());
    };
    if args.churn_secs > 0 {
        let out = churn(&args, &client, &resolution, etcd).await?;
        println!("{out}");
        return Ok(());
    }
    let mut updates = Vec::new();
    for round in 0..args.updates {
        let held = client.endpoints();
        let addr = held[round % held.len()].addr.clone();
        let port: usize = addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .context("endpoint port")?;
        let key = format!("{}/{}", args.key, port - BASE_PORT as usize);
        for put in [false, true] {
            let before = resolution.updates().borrow().clone();
            let (c, r, a) = (client.clone(), resolution.clone(), addr.clone());
            let watcher = tokio::task::spawn_blocking(move || {
                let published = poll(Duration::from_secs(10), || {
                    let now = r.updates().borrow().clone();
                    match (&now, &before) {
                        (Some(x), Some(y)) => !Arc::ptr_eq(x, y),
                        _ => false,
                    }
                });
                let applied = poll(Duration::from_secs(10), || {
                    c.endpoints().iter().any(|e| e.addr == a) == put
                });
                (published, applied)
            });
            let sent = Instant::now();
            if put {
                etcd.put(key.as_str(), addr.as_str(), None).await?;
            } else {
                etcd.delete(key.as_str(), None).await?;
            }
            let acked = Instant::now();
            let (published, applied) = watcher.await?;
            let ms = |t: Option<Instant>| t.map(|t| t.duration_since(sent).as_secs_f64() * 1000.0);
            updates.push(json!({
                "op": if put { "put" } else { "delete" },
                "ack_ms": acked.duration_since(sent).as_secs_f64() * 1000.0,
                "published_ms": ms(published),
                "applied_ms": ms(applied),
            }));
            // the next change starts from a quiet watch
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let rss2 = settled_rss_kib().await;
    println!("{}", json!({ "updates": updates, "rss2_kib": rss2 }));
    Ok(())
}

fn rss_kib() -> f64 {
    crate::proc::rss_mb_of(i32::try_from(std::process::id()).unwrap_or(0)) * 1024.0
}

/// Calls at `--rate` for `--churn-secs` + 1 s while the harness replaces a tenth of the keys
/// every second; then the resolver's set is compared with a fresh read of the prefix.
async fn churn(
    args: &ScaleClientArgs,
    client: &zrpc::Client,
    resolution: &zrpc::resolver::Resolution,
    etcd: &mut etcd_client::Client,
) -> Result<serde_json::Value> {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use zrpc_tests::pb::HelloRequest;
    use zrpc_tests::pb::greeter_client::GreeterClient;

    let failed = Arc::new(AtomicU64::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let codes = Arc::new(codes::Codes::default());
    let sockets_before = sockets();
    let pid = i32::try_from(std::process::id()).unwrap_or(0);
    let cpu0 = crate::proc::cpu_us_of(pid);
    let started = Instant::now();
    let until = started + Duration::from_secs(args.churn_secs + 1);
    let mut rss = vec![rss_kib()];
    let mut sampled = started;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate.max(1) as f64));
    let mut calls = tokio::task::JoinSet::new();
    while Instant::now() < until {
        tick.tick().await;
        let mut g = GreeterClient::new(client.clone());
        let (failed, ok, codes) = (failed.clone(), ok.clone(), codes.clone());
        calls.spawn(async move {
            let req = HelloRequest {
                name: "churn".into(),
            };
            match g.say_hello(req).await {
                Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    codes.add(&e);
                    failed.fetch_add(1, Ordering::Relaxed)
                }
            };
        });
        while calls.try_join_next().is_some() {}
        if sampled.elapsed() >= Duration::from_secs(5) {
            sampled = Instant::now();
            rss.push(rss_kib());
        }
    }
    while calls.join_next().await.is_some() {}
    let secs = started.elapsed().as_secs_f64();
    let cpu = (crate::proc::cpu_us_of(pid) - cpu0) / 1e6 / secs;
    let resp = etcd
        .get(
            format!("{}/", args.key),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await?;
    let mut want: Vec<String> = resp
        .kvs()
        .iter()
        .filter_map(|kv| kv.value_str().ok().map(str::to_owned))
        .collect();
    want.sort_unstable();
    want.dedup();
    let matches = poll_async(Duration::from_secs(10), || {
        resolution
            .updates()
            .borrow()
            .as_ref()
            .is_some_and(|s| **s == want)
    })
    .await;
    let rss_after = settled_rss_kib().await;
    let codes: BTreeMap<String, u64> = codes.take();
    Ok(json!({
        "ok": ok.load(Ordering::Relaxed),
        "failed": failed.load(Ordering::Relaxed),
        "codes": codes,
        "cpu_share": cpu,
        "rss_kib": rss,
        "rss_after_kib": rss_after,
        "set_matches_etcd": matches,
        "etcd_keys": want.len(),
        "held": client.endpoints().len(),
        "sockets_before": sockets_before,
        "sockets_after": sockets(),
    }))
}

/// This process's open sockets (its connections: etcd's, the endpoints'), each counted once
/// however many descriptors it has.
fn sockets() -> usize {
    let links: std::collections::HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .filter(|l| l.starts_with("socket:"))
        .collect();
    links.len()
}

/// [`poll`] from a task: checks every millisecond.
async fn poll_async(limit: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

mod codes {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// Failed calls by status code, with the first message of each.
    #[derive(Debug, Default)]
    pub(super) struct Codes(Mutex<BTreeMap<String, u64>>);

    impl Codes {
        pub(super) fn add(&self, s: &tonic::Status) {
            let mut m = self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let first = !m.keys().any(|k| k.starts_with(&format!("{:?}", s.code())));
            let key = if first {
                format!(
                    "{:?}: {}",
                    s.code(),
                    s.message().chars().take(200).collect::<String>()
                )
            } else {
                m.keys()
                    .find(|k| k.starts_with(&format!("{:?}", s.code())))
                    .cloned()
                    .unwrap_or_default()
            };
            *m.entry(key).or_default() += 1;
        }

        pub(super) fn take(&self) -> BTreeMap<String, u64> {
            std::mem::take(
                &mut *self
                    .0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            )
        }
    }
}
