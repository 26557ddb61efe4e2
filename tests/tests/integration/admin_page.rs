//! The admin page (`GET /admin` on the DevServer) in a real headless browser: a zrpc server
//! whose concurrency limit is full (`CpuThreshold: 0`) and a zrpc client of three greeter
//! servers, one of them slow, both under load, while Debian's `chromium` loads the page, lets
//! its script read `/admin/state` a few times, and dumps the DOM it drew (and a screenshot).
//!
//! Skipped, saying so, where `chromium` is not installed or cannot start (`scripts/test.sh`
//! installs it). `ZRPC_ADMIN_PNG=docs/admin.png` keeps the screenshot.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use zrpc::conf::{ConcurrencyLimitConf, DevServerConf, RpcClientConf};
use zrpc_tests::greeter::{TestGreeter, TestServer, start_server, test_conf};
use zrpc_tests::pb::HelloRequest;
use zrpc_tests::pb::greeter_client::GreeterClient;

/// How long the page's script runs in the browser's virtual time: about six views.
const BUDGET_MS: u64 = 6000;

/// Runs headless chromium with `args` then `url` (killed after 90 s); its stdout, or why it
/// could not run.
async fn chromium(profile: &Path, args: &[&str], url: &str) -> Result<String, String> {
    let mut cmd = std::process::Command::new("timeout");
    cmd.args(["90", "chromium"])
        .args([
            "--headless",
            // the tests run as root in containers, where chromium's sandbox cannot start
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .map_err(|e| format!("chromium's task: {e}"))?
        .map_err(|e| format!("cannot run `timeout chromium`: {e}"))?;
    match out.status.code() {
        Some(0) => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        Some(124) => Err("chromium did not finish within 90 s".to_owned()),
        Some(127) => Err("chromium is not installed".to_owned()),
        _ => Err(format!(
            "chromium failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

/// The text of the first element of class `class` after `from` in `dom`.
fn cell_after<'a>(dom: &'a str, from: usize, class: &str) -> Option<&'a str> {
    let at = from + dom[from..].find(&format!("class=\"{class}"))?;
    let start = at + dom[at..].find('>')? + 1;
    let end = start + dom[start..].find('<')?;
    Some(&dom[start..end])
}

/// The number in the attribute `attr` of the element with id `id`.
fn attr_of(dom: &str, id: &str, attr: &str) -> Option<u64> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let tag_end = at + dom[at..].find('>')?;
    let tag = &dom[..tag_end];
    let start = tag.rfind('<')?;
    let tag = &dom[start..tag_end];
    let v = tag.split(&format!("{attr}=\"")).nth(1)?;
    v[..v.find('"')?].parse().ok()
}

async fn greeter(name: &str, delay: Duration) -> TestServer {
    start_server(test_conf(name), TestGreeter::new().with_delay(delay)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_page_shows_the_live_endpoints_and_values_in_a_headless_browser() {
    let profile = tempfile::tempdir().unwrap();
    if let Err(why) = chromium(profile.path(), &["--dump-dom"], "about:blank").await {
        eprintln!("skipping the admin page test: {why} (scripts/test.sh installs chromium)");
        return;
    }
    // The server: a fixed concurrency limit of 4, 50 ms calls, no CPU shedder, a DevServer.
    let mut limit = ConcurrencyLimitConf::default();
    limit.min_limit = 4;
    limit.max_limit = 4;
    limit.min_rtt_samples = 1;
    let mut conf = test_conf("admin-page.rpc")
        .with_dev_server(DevServerConf::new("127.0.0.1", 0))
        .with_concurrency_limit(limit);
    conf.cpu_threshold = 0;
    let front = start_server(
        conf,
        TestGreeter::new().with_delay(Duration::from_millis(50)),
    )
    .await;
    let dev = front.handle.dev_server_addr().expect("a DevServer");
    // The client: three greeter servers, one slow.
    let backends = [
        greeter("fast-1.rpc", Duration::from_millis(2)).await,
        greeter("fast-2.rpc", Duration::from_millis(2)).await,
        greeter("slow.rpc", Duration::from_millis(200)).await,
    ];
    let addrs: Vec<String> = backends.iter().map(|s| s.addr.to_string()).collect();
    let client = zrpc::client(RpcClientConf::direct(addrs.clone()))
        .await
        .unwrap();

    let running = Arc::new(AtomicBool::new(true));
    let mut load = Vec::new();
    for _ in 0..10 {
        let mut c = GreeterClient::new(client.clone());
        let running = running.clone();
        load.push(tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                let _ = c.say_hello(HelloRequest { name: "x".into() }).await;
            }
        }));
    }
    let front_client = front.client().await;
    for _ in 0..6 {
        let mut c = front_client.clone();
        let running = running.clone();
        load.push(tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                let _ = c.say_hello(HelloRequest { name: "x".into() }).await;
            }
        }));
    }
    // Until the view shows what the load builds: the slow endpoint's latency score past its
    // 200 ms (bounded; the assertions on the page say what failed).
    let slow = addrs[2].clone();
    let shows_slow = |body: &str| {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(body) else {
            return false;
        };
        v["clients"].as_array().into_iter().flatten().any(|c| {
            c["endpoints"].as_array().into_iter().flatten().any(|e| {
                e["addr"] == slow.as_str() && e["ewma_ms"].as_f64().unwrap_or(0.0) >= 200.0
            })
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (_, body) = zrpc_tests::greeter::http_get(dev, "/admin/state")
            .await
            .expect("the admin view");
        if shows_slow(&body) || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await; // poll interval of a bounded wait
    }

    let url = format!("http://{dev}/admin");
    let budget = format!("--virtual-time-budget={BUDGET_MS}");
    let dom = chromium(profile.path(), &[&budget, "--dump-dom"], &url)
        .await
        .expect("chromium dumps the page");
    let png = profile.path().join("admin.png");
    let shot = format!("--screenshot={}", png.display());
    chromium(
        profile.path(),
        &[&budget, "--window-size=1280,1400", &shot],
        &url,
    )
    .await
    .expect("chromium takes a screenshot");
    running.store(false, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }

    // The page read the view several times and drew it.
    let views: u64 = dom
        .split("id=\"polls\">")
        .nth(1)
        .and_then(|s| s[..s.find('<')?].parse().ok())
        .unwrap_or(0);
    assert!(
        views >= 2,
        "the page read /admin/state {views} times:\n{dom}"
    );
    assert!(
        dom.contains("<span id=\"server-name\">admin-page.rpc</span>"),
        "{dom}"
    );
    assert!(dom.contains("<td class=\"limit-value\">4</td>"), "{dom}");
    // the connection of the load's caller, by its address
    assert!(
        dom.contains("<span class=\"muted\" id=\"peers\">127.0.0.1 ("),
        "{dom}"
    );
    // Every endpoint of the client, with its state and latency; the slow one is slower.
    let mut ewma = Vec::new();
    for a in &addrs {
        let at = dom
            .find(&format!("<td class=\"endpoint-addr\">{a}</td>"))
            .unwrap_or_else(|| panic!("endpoint {a} not shown:\n{dom}"));
        let state = cell_after(&dom, at, "endpoint-state").unwrap();
        assert!(
            ["healthy", "probing"].contains(&state),
            "{a} is {state}:\n{dom}"
        );
        let ms: f64 = cell_after(&dom, at, "endpoint-ewma")
            .and_then(|v| v.strip_suffix(" ms")?.parse().ok())
            .unwrap_or_else(|| panic!("no latency for {a}:\n{dom}"));
        ewma.push(ms);
    }
    // the slow one at least its 200 ms; the fast ones (2 ms, more on a busy machine) far below
    assert!(
        ewma[2] >= 200.0 && ewma[2] > 3.0 * ewma[0].max(ewma[1]),
        "latencies {ewma:?}"
    );
    // The charts: the limit over time, each endpoint's latency, the share of calls.
    let limit_points = attr_of(&dom, "limit-chart", "data-points").unwrap_or(0);
    assert!(
        limit_points >= 2 * views,
        "limit chart: {limit_points} points"
    );
    let latency_points = attr_of(&dom, "latency-0", "data-points").unwrap_or(0);
    assert!(
        latency_points >= 3 * views,
        "latency chart: {latency_points} points"
    );
    let calls = attr_of(&dom, "share-0", "data-calls").unwrap_or(0);
    assert!(calls > 0, "the share chart counted no calls:\n{dom}");
    // The screenshot is a PNG.
    let image = std::fs::read(&png).expect("the screenshot");
    assert!(
        image.starts_with(b"\x89PNG") && image.len() > 10_000,
        "{} octets",
        image.len()
    );
    if let Ok(keep) = std::env::var("ZRPC_ADMIN_PNG") {
        std::fs::copy(&png, &keep).expect("keep the screenshot");
    }
    println!(
        "admin page: {views} views of /admin/state, endpoints {addrs:?} at {ewma:?} ms, \
         {calls} calls in the last interval, screenshot {} octets",
        image.len()
    );
}

/// The view's registration: the etcd key, the lease and when etcd last renewed it.
#[tokio::test]
async fn the_admin_view_shows_the_registration_and_its_last_keepalive() {
    let etcd = zrpc_tests::etcd::EtcdServer::start().await;
    let key = zrpc_tests::etcd::unique_key("admin-view");
    let conf = test_conf("admin-view.rpc")
        .with_etcd(etcd.etcd_conf(&key))
        .with_dev_server(DevServerConf::new("127.0.0.1", 0));
    let server = start_server(conf, TestGreeter::new()).await;
    let dev = server.handle.dev_server_addr().expect("a DevServer");
    let view = || async {
        let (status, body) = zrpc_tests::greeter::http_get(dev, "/admin/state")
            .await
            .unwrap();
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()
    };
    let waited = zrpc_tests::wait::within(Duration::from_secs(10), || async {
        view().await["registration"]["state"] == "registered"
    })
    .await;
    assert!(waited.is_some(), "not registered within 10 s");
    let registered = view().await;
    let r = &registered["registration"];
    assert!(
        r["key"].as_str().is_some_and(|k| k.starts_with(&key)),
        "{r}"
    );
    assert!(r["lease"].as_i64().is_some_and(|l| l > 0), "{r}");
    let renewed = r["last_keepalive_unix_ms"]
        .as_u64()
        .expect("a renewal time");
    let taken = registered["taken_at_unix_ms"].as_u64().unwrap();
    assert!(renewed <= taken && taken - renewed < 10_000, "{r}");
    server.shutdown().await.expect("clean shutdown");
}
