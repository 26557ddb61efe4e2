//! Server metrics: the DevServer's `/metrics` has go-zero's names, labels and counts;
//! `/healthz` and `/` answer.

use zrpc_server::conf::DevServerConf;
use zrpc_tests::greeter::{SAY_HELLO, TestGreeter, http_get, start_server, test_conf};
use zrpc_tests::pb::HelloRequest;

/// The value of a sample line `name{labels} value` (labels in Prometheus' sorted order).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

#[tokio::test]
async fn server_metrics_scraped_from_the_dev_server() {
    let conf = test_conf("metrics.rpc").with_dev_server(DevServerConf::new("127.0.0.1", 0));
    let srv = start_server(conf, TestGreeter::new()).await;
    let dev = srv.handle.dev_server_addr().expect("dev server runs");
    let mut c = srv.client().await;

    // Codes only this test produces (tests share the process-wide registry).
    for _ in 0..3 {
        let _ = c
            .say_hello(HelloRequest {
                name: "fail:7".into(),
            })
            .await;
    }
    for _ in 0..2 {
        let _ = c
            .say_hello(HelloRequest {
                name: "fail:9".into(),
            })
            .await;
    }
    c.say_hello(HelloRequest { name: "ok".into() })
        .await
        .unwrap();

    let (status, text) = http_get(dev, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(
        text.contains("# TYPE rpc_server_requests_duration_ms histogram"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE rpc_server_requests_code_total counter"),
        "{text}"
    );
    let code =
        |c: &str| format!("rpc_server_requests_code_total{{code=\"{c}\",method=\"{SAY_HELLO}\"}}");
    assert_eq!(sample(&text, &code("7")), Some(3.0), "{text}");
    assert_eq!(sample(&text, &code("9")), Some(2.0), "{text}");
    assert!(sample(&text, &code("0")).unwrap_or(0.0) >= 1.0, "{text}");
    let count = sample(
        &text,
        &format!("rpc_server_requests_duration_ms_count{{method=\"{SAY_HELLO}\"}}"),
    )
    .unwrap_or(0.0);
    assert!(count >= 6.0, "{text}");
    for le in [
        "1", "2", "5", "10", "25", "50", "100", "250", "500", "1000", "2000", "5000", "+Inf",
    ] {
        let bucket =
            format!("rpc_server_requests_duration_ms_bucket{{method=\"{SAY_HELLO}\",le=\"{le}\"}}");
        assert!(text.contains(&bucket), "missing bucket {le}");
    }
    // Shedder gauges of this server (zrpc addition).
    assert!(
        text.contains(&format!(
            "rpc_server_shedder_cpu_millicpu{{server=\"{}\"}}",
            srv.addr
        )),
        "{text}"
    );

    let (status, body) = http_get(dev, "/healthz").await.unwrap();
    assert_eq!((status, body.as_str()), (200, "OK"));
    let (status, body) = http_get(dev, "/").await.unwrap();
    assert_eq!(status, 200);
    assert!(
        body.contains("\"/metrics\"") && body.contains("\"/healthz\""),
        "{body}"
    );
    srv.shutdown().await.expect("clean shutdown");
}

/// Series of `family` in the process-wide registry whose `method` label is `method`.
fn series(family: &str, method: &str) -> usize {
    zrpc_server::metrics::registry()
        .gather()
        .iter()
        .filter(|f| f.name() == family)
        .flat_map(|f| f.get_metric())
        .filter(|m| m.get_label().iter().any(|l| l.value() == method))
        .count()
}

/// Health's `Watch` is a stream: it is recorded in the stream families, never in go-zero's
/// unary ones (a dashboard comparing Go and Rust servers would see its lifetime as latency).
#[tokio::test]
async fn the_health_watch_stream_is_recorded_as_a_stream() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    const WATCH: &str = "/grpc.health.v1.Health/Watch";
    let srv = start_server(test_conf("metrics-watch.rpc"), TestGreeter::new()).await;
    let mut health = HealthClient::new(srv.channel().await);
    let mut updates = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    updates.message().await.unwrap().expect("a first status");
    drop(updates);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while series("rpc_server_streams_code_total", WATCH) == 0
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(series("rpc_server_streams_code_total", WATCH) > 0);
    assert!(series("rpc_server_streams_duration_ms", WATCH) > 0);
    assert_eq!(series("rpc_server_requests_code_total", WATCH), 0);
    assert_eq!(series("rpc_server_requests_duration_ms", WATCH), 0);
    srv.shutdown().await.expect("clean shutdown");
}

/// docs/metrics.md's table: family name -> type column.
fn documented_families() -> std::collections::HashMap<&'static str, &'static str> {
    include_str!("../../../docs/metrics.md")
        .lines()
        .filter_map(|l| {
            let mut cells = l.strip_prefix("| `")?.split(" | ");
            let name = cells.next()?.strip_suffix('`')?;
            Some((name, cells.next()?.trim()))
        })
        .collect()
}

/// Family names given to metric constructors in `crates/*/src`: the string literals that are
/// a whole `rpc_*` or `process_*` name. Catches the collectors registered lazily (connection
/// cuts on the first cut, shedder gauges only with a shedder, retry counters), which a scrape
/// of one test server does not show.
fn families_in_sources() -> Vec<(String, String)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for literal in text.split('"').skip(1).step_by(2) {
                    let is_name = (literal.starts_with("rpc_") || literal.starts_with("process_"))
                        && literal.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
                    if is_name {
                        out.push((literal.to_owned(), path.display().to_string()));
                    }
                }
            }
        }
    }
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates");
    let mut out = Vec::new();
    for krate in std::fs::read_dir(&crates).unwrap().flatten() {
        // the benchmark harness reads other processes' metrics; it exports none
        if krate.file_name() != "zrpc-bench" {
            walk(&krate.path().join("src"), &mut out);
        }
    }
    out
}

/// Every family zrpc exports is a row of docs/metrics.md, with its type: those a server, its
/// DevServer and a zrpc client show on `/metrics` after a call, and every family name in the
/// crates' sources.
#[tokio::test]
async fn every_metric_family_is_in_the_docs_table() {
    let documented = documented_families();
    assert!(documented.len() > 20, "table parsed: {documented:?}");

    let conf = test_conf("metrics-doc.rpc").with_dev_server(DevServerConf::new("127.0.0.1", 0));
    let srv = start_server(conf, TestGreeter::new()).await;
    let dev = srv.handle.dev_server_addr().expect("dev server runs");
    let client = zrpc_client::Client::new(zrpc_client::conf::RpcClientConf::direct([srv
        .addr
        .to_string()]))
    .await
    .unwrap();
    // kept alive while scraping: the endpoint gauges are those of live clients
    zrpc_tests::pb::greeter_client::GreeterClient::new(client.clone())
        .say_hello(HelloRequest { name: "doc".into() })
        .await
        .unwrap();
    let (status, text) = http_get(dev, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    let mut scraped = 0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        scraped += 1;
        assert_eq!(
            documented.get(name).copied(),
            Some(kind),
            "{name} ({kind}) is served on /metrics: add it to docs/metrics.md"
        );
    }
    for family in [
        "rpc_server_requests_code_total",
        "rpc_client_requests_code_total",
        "rpc_client_endpoint_lag_ms",
    ] {
        assert!(text.contains(&format!("# TYPE {family} ")), "{family}");
    }
    #[cfg(target_os = "linux")]
    assert!(text.contains("# TYPE process_resident_memory_bytes gauge"));
    assert!(scraped >= 5, "{text}");

    for (name, file) in families_in_sources() {
        assert!(
            documented.contains_key(name.as_str()),
            "{name} (in {file}) is missing from docs/metrics.md"
        );
    }
    drop(client);
    srv.shutdown().await.expect("clean shutdown");
}
