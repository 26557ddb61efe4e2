//! Metrics parity: after the same calls from the same go-zero client, the go-zero server's and
//! the zrpc server's DevServer `/metrics` have the same families, label names, buckets, numeric
//! code labels and counts.
//!
//! zrpc's registry is process-wide (as go-zero's is) and other tests in this binary call zrpc
//! servers too, so exact counts on the zrpc side use a code no other test produces (`code:6`,
//! AlreadyExists); `code="0"` counts are exact on the go-zero side and at least k on zrpc's.

use std::collections::BTreeSet;

use zrpc_server::conf::DevServerConf;
use zrpc_tests::etcd::{EtcdCluster, unique_key};
use zrpc_tests::gozero::{
    ClientYaml, Discovery, GzClient, GzServer, ServerYaml, family_help, family_type, sample,
    samples, scrape, start_zrpc, wait_registered, zrpc_conf,
};
use zrpc_tests::gozero_or_skip;

use crate::support::REGISTER_WAIT;

const K: u64 = 12;
const METHOD: &str = "/greeter.Greeter/SayHello";
const DURATION: &str = "rpc_server_requests_duration_ms";
const CODES: &str = "rpc_server_requests_code_total";
const BUCKETS: [&str; 13] = [
    "1", "2", "5", "10", "25", "50", "100", "250", "500", "1000", "2000", "5000", "+Inf",
];

fn label_names(text: &str, name: &str) -> BTreeSet<Vec<String>> {
    samples(text, name)
        .into_iter()
        .filter(|(l, _)| l.get("method").map(String::as_str) == Some(METHOD))
        .map(|(l, _)| l.into_keys().collect())
        .collect()
}

fn buckets(text: &str) -> Vec<String> {
    samples(text, &format!("{DURATION}_bucket"))
        .into_iter()
        .filter(|(l, _)| l.get("method").map(String::as_str) == Some(METHOD))
        .filter_map(|(l, _)| l.get("le").cloned())
        .collect()
}

fn code_count(text: &str, code: &str) -> u64 {
    sample(
        text,
        &format!("{CODES}{{code=\"{code}\",method=\"{METHOD}\"}}"),
    )
    .unwrap_or(0.0) as u64
}

#[tokio::test]
async fn metrics_parity_go_zero_vs_zrpc_server() {
    let p = gozero_or_skip!();
    let cluster = EtcdCluster::start(1).await;
    let hosts = cluster.endpoints();
    let (gz_key, zr_key) = (unique_key("metrics-gz"), unique_key("metrics-zrpc"));
    let gz = GzServer::start(p, &ServerYaml::new("gz.rpc", &hosts, &gz_key), &[]).await;
    let conf = zrpc_conf("zrpc.rpc", Some(cluster.etcd_conf(&zr_key)))
        .with_dev_server(DevServerConf::new("127.0.0.1", 0));
    let zr = start_zrpc(conf).await;
    let etcd = cluster.client().await;
    assert!(wait_registered(&etcd, &gz_key, &gz.addr, REGISTER_WAIT).await);
    assert!(wait_registered(&etcd, &zr_key, &zr.listen_on(), REGISTER_WAIT).await);
    assert!(gz.wait_healthy(REGISTER_WAIT).await, "gz-server /healthz");

    // K OK calls and K AlreadyExists calls from the same go-zero client config to each server.
    for key in [&gz_key, &zr_key] {
        let yaml = ClientYaml::new(Discovery::Etcd(hosts.clone(), key.clone()));
        let ok = GzClient::new(p, &yaml).n(K).run().await;
        ok.assert_all_ok("metrics OK calls", Some(K));
        let failing = GzClient::new(p, &yaml).n(K).name("code:6").run().await;
        assert_eq!(
            failing.summary.codes.get("AlreadyExists"),
            Some(&K),
            "{}",
            failing.explain()
        );
    }

    let g = gz.metrics().await;
    let z = scrape(zr.dev_addr().expect("zrpc DevServer"), "/metrics").await;
    for (side, text) in [("go-zero", &g), ("zrpc", &z)] {
        println!("metrics parity, {side} server /metrics (rpc_server_*):");
        for l in text.lines().filter(|l| {
            l.contains("rpc_server_requests_") && (l.starts_with('#') || l.contains(METHOD))
        }) {
            println!("  {l}");
        }
    }
    for family in [DURATION, CODES] {
        assert_eq!(
            family_type(&g, family),
            family_type(&z, family),
            "TYPE of {family}"
        );
        assert_eq!(
            family_help(&g, family),
            family_help(&z, family),
            "HELP of {family}"
        );
        assert!(family_type(&g, family).is_some(), "go-zero has {family}");
    }
    assert_eq!(family_type(&g, DURATION).as_deref(), Some("histogram"));
    assert_eq!(family_type(&g, CODES).as_deref(), Some("counter"));
    for name in [
        CODES.to_owned(),
        format!("{DURATION}_bucket"),
        format!("{DURATION}_sum"),
        format!("{DURATION}_count"),
    ] {
        assert_eq!(
            label_names(&g, &name),
            label_names(&z, &name),
            "label names of {name}"
        );
        assert!(!label_names(&g, &name).is_empty(), "go-zero has {name}");
    }
    assert_eq!(
        buckets(&g),
        BUCKETS.map(str::to_owned).to_vec(),
        "go-zero buckets"
    );
    assert_eq!(buckets(&z), buckets(&g), "zrpc buckets");

    // Numeric code labels and counts.
    assert_eq!(code_count(&g, "0"), K, "go-zero code=0");
    assert_eq!(code_count(&g, "6"), K, "go-zero code=6");
    assert_eq!(code_count(&z, "6"), K, "zrpc code=6");
    assert!(code_count(&z, "0") >= K, "zrpc code=0");
    let count = |t: &str| {
        sample(t, &format!("{DURATION}_count{{method=\"{METHOD}\"}}")).unwrap_or(0.0) as u64
    };
    assert_eq!(count(&g), 2 * K, "go-zero histogram count");
    assert!(count(&z) >= 2 * K, "zrpc histogram count");
    for text in [&g, &z] {
        let codes: BTreeSet<String> = samples(text, CODES)
            .into_iter()
            .filter_map(|(l, _)| l.get("code").cloned())
            .collect();
        assert!(
            codes.iter().all(|c| c.parse::<u32>().is_ok()),
            "numeric codes: {codes:?}"
        );
    }
    println!(
        "metrics parity: go-zero code=0 {} code=6 {} count {}; zrpc code=6 {} (code=0 and count are process-wide: {} / {})",
        code_count(&g, "0"),
        code_count(&g, "6"),
        count(&g),
        code_count(&z, "6"),
        code_count(&z, "0"),
        count(&z)
    );
}

/// go-zero records `rpc_server_requests_*` for unary calls only (its stream chain is trace,
/// recover and breaker): server streams leave no series. zrpc must not add one under go-zero's
/// names (dashboards summing `rpc_server_requests_code_total` would count streams).
#[tokio::test]
async fn metrics_parity_streams_leave_no_series_in_go_zero_families() {
    let p = gozero_or_skip!();
    let cluster = EtcdCluster::start(1).await;
    let hosts = cluster.endpoints();
    let (gz_key, zr_key) = (
        unique_key("metrics-stream-gz"),
        unique_key("metrics-stream-zrpc"),
    );
    let gz = GzServer::start(p, &ServerYaml::new("gz.rpc", &hosts, &gz_key), &[]).await;
    let conf = zrpc_conf("zrpc.rpc", Some(cluster.etcd_conf(&zr_key)))
        .with_dev_server(DevServerConf::new("127.0.0.1", 0));
    let zr = start_zrpc(conf).await;
    for key in [&gz_key, &zr_key] {
        let run = GzClient::new(
            p,
            &ClientYaml::new(Discovery::Etcd(hosts.clone(), key.clone())),
        )
        .n(5)
        .stream(3)
        .run()
        .await;
        run.assert_all_ok("streams", Some(5));
    }
    let stream_method = "/greeter.Greeter/SayHelloStream";
    let g = gz.metrics().await;
    let z = scrape(zr.dev_addr().expect("zrpc DevServer"), "/metrics").await;
    let series = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.starts_with("rpc_server_requests_") && l.contains(stream_method))
            .map(str::to_owned)
            .collect()
    };
    println!(
        "metrics of 5 server streams: go-zero {} series {:?}; zrpc {} series {:?}",
        series(&g).len(),
        series(&g),
        series(&z).len(),
        series(&z)
            .iter()
            .filter(|l| l.contains("code_total"))
            .collect::<Vec<_>>()
    );
    assert!(
        series(&g).is_empty(),
        "go-zero records streams: {:?}",
        series(&g)
    );
    assert!(
        series(&z).is_empty(),
        "zrpc records streams under go-zero's names: {:?}",
        series(&z)
    );
    // zrpc records them in its own families instead (process-wide: other tests of this binary
    // stream too, so at least our 5).
    let prefix = format!("rpc_server_streams_code_total{{code=\"0\",method=\"{stream_method}\"}} ");
    let count = z
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(
        count.is_some_and(|n| n >= 5),
        "want `{prefix}` >= 5 in zrpc's metrics, got {count:?}:\n{}",
        z.lines()
            .filter(|l| l.starts_with("rpc_server_streams"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
