//! One trace across Go and Rust: a go-zero v1.10.3 client calls a zrpc service (a process of its
//! own, `zrpc_relay`), whose handler calls a go-zero server with zrpc's client; all three export
//! their spans to one collector that the test runs (`zrpc_tests::otlp`), with each of go-zero's
//! batchers in turn: OTLP/gRPC, OTLP/HTTP, Zipkin, and `file` (one span file per process, where
//! zrpc's lines must also have the shape of go-zero's).
//!
//! - With `Telemetry` on the zrpc service: four spans, one trace id, each span's parent the one
//!   before it (go-zero client -> zrpc server -> zrpc client -> go-zero server).
//! - Without: the zrpc service exports nothing and passes the caller's trace context on as it
//!   came, so the go-zero server's span is the child of the go-zero client's.
//!
//! Both ways the go-zero server receives the client's baggage merged with the relay's own
//! (`user=alice` and `hop=relay`) beside the relay's own metadata, and the relay's log lines of
//! the call (its handler's line and the stat line at its end) carry the trace id under go-zero's
//! key, `trace`.

use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use zrpc_tests::gozero::{GzClient, GzServer, Programs, ServerYaml, wait_tcp};
use zrpc_tests::gozero_or_skip;
use zrpc_tests::otlp::{Collector, SpanRecord, file_spans};
use zrpc_tests::ports::free_port;

const SERVER: i32 = 2;
const CLIENT: i32 = 3;

/// How every process of the chain exports its spans: go-zero's `Telemetry.Batcher` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Batcher {
    OtlpGrpc,
    OtlpHttp,
    Zipkin,
    File,
}

/// Where the spans go: the collector, or a directory of span files (one per process).
struct Sink {
    batcher: Batcher,
    collector: Collector,
    files: tempfile::TempDir,
}

impl Sink {
    async fn start(batcher: Batcher) -> Sink {
        Sink {
            batcher,
            collector: Collector::start().await,
            files: tempfile::tempdir().unwrap(),
        }
    }

    /// The `Telemetry` block of the process `name`.
    fn telemetry(&self, name: &str) -> String {
        let (batcher, endpoint) = match self.batcher {
            Batcher::OtlpGrpc => ("otlpgrpc", self.collector.addr.to_string()),
            Batcher::OtlpHttp => ("otlphttp", self.collector.http_addr.to_string()),
            Batcher::Zipkin => (
                "zipkin",
                format!("http://{}/api/v2/spans", self.collector.http_addr),
            ),
            Batcher::File => ("file", self.file(name).display().to_string()),
        };
        format!(
            "Telemetry:\n  Name: {name}\n  Endpoint: {endpoint}\n  Sampler: 1.0\n  Batcher: {batcher}\n"
        )
    }

    fn file(&self, name: &str) -> std::path::PathBuf {
        self.files.path().join(format!("{name}.json"))
    }

    /// The spans of every process, once `want` arrived (or 20 s passed).
    async fn spans(&self, want: usize) -> Vec<SpanRecord> {
        if self.batcher != Batcher::File {
            self.collector
                .wait_for(Duration::from_secs(20), |s| s.len() >= want)
                .await;
            return self.collector.spans();
        }
        // the processes have exited, their files flushed
        ["gz-client", "relay.rpc", "gz-server"]
            .iter()
            .flat_map(|name| file_spans(&self.file(name)).0)
            .collect()
    }
}

/// The relay process; SIGTERM on drop (it drains and flushes its spans).
struct Relay {
    child: Child,
    addr: String,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Relay {
    async fn start(downstream: &str, telemetry: Option<String>) -> Relay {
        let dir = tempfile::tempdir().unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let server = dir.path().join("relay.yaml");
        let client = dir.path().join("downstream.yaml");
        let log = dir.path().join("stdout.log");
        std::fs::write(
            &server,
            format!(
                "Name: relay.rpc\nListenOn: {addr}\nCpuThreshold: 0\nLog:\n  Mode: console\n  \
                 Level: info\nShutdown:\n  WrapUpTime: 0s\nMiddlewares:\n  StatConf:\n    \
                 LogRequestContent: true\n{}",
                telemetry.unwrap_or_default()
            ),
        )
        .unwrap();
        std::fs::write(&client, format!("Endpoints:\n- {downstream}\n")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_zrpc_relay"))
            .arg(&server)
            .arg(&client)
            .stdin(Stdio::null())
            .stdout(File::create(&log).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        assert!(
            wait_tcp(&addr, Duration::from_secs(20)).await,
            "relay at {addr}"
        );
        Relay {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    /// SIGTERM, then its log lines once it exited (the collector, on this test's runtime,
    /// keeps serving its last export meanwhile).
    async fn stop(&mut self) -> Vec<String> {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(status.success(), "relay exited with {status}");
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one run of the chain gave.
struct Chain {
    spans: Vec<SpanRecord>,
    /// The go-zero server's view of the metadata (gz-server's `meta` reply).
    meta: String,
    relay_log: Vec<String>,
}

async fn run_chain(p: &Programs, zrpc_telemetry: bool, sink: &Sink) -> Chain {
    let gz_yaml = ServerYaml {
        name: "gz-server".into(),
        port: free_port(),
        dev_port: None,
        etcd: None,
        timeout: None,
        cpu_threshold: 0,
        extra: sink.telemetry("gz-server"),
    };
    let gz = GzServer::start(p, &gz_yaml, &[]).await;
    let mut relay = Relay::start(
        &gz.addr,
        zrpc_telemetry.then(|| sink.telemetry("relay.rpc")),
    )
    .await;
    let client_yaml = format!(
        "Name: gz-client\nLog:\n  Mode: console\n  Level: error\n{}Greeter:\n  Endpoints:\n  - {}\n",
        sink.telemetry("gz-client"),
        relay.addr
    );
    let run = GzClient::with_yaml(p, client_yaml)
        .n(1)
        .name("meta")
        .arg("-baggage", "user=alice")
        .verbose()
        .run()
        .await;
    run.assert_all_ok("go-zero client -> zrpc relay -> go-zero server", Some(1));
    let meta = run.calls[0].message.clone();
    let relay_log = relay.stop().await;
    let _ = gz.stop().await;
    let want = if zrpc_telemetry { 4 } else { 2 };
    Chain {
        spans: sink.spans(want).await,
        meta,
        relay_log,
    }
}

fn one<'a>(spans: &'a [SpanRecord], service: &str, kind: i32) -> &'a SpanRecord {
    let found: Vec<&SpanRecord> = spans
        .iter()
        .filter(|s| s.service == service && s.kind == kind)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {service} span of kind {kind}: {spans:#?}"
    );
    found[0]
}

fn print(label: &str, chain: &Chain) {
    println!("{label}:");
    for s in &chain.spans {
        println!(
            "  {:<9} {:<6} trace {} span {} parent {:<16} {}",
            s.service,
            if s.kind == SERVER { "server" } else { "client" },
            s.trace_id,
            s.span_id,
            if s.parent.is_empty() { "-" } else { &s.parent },
            s.name
        );
    }
}

/// What the two runs share: one trace id, the metadata the go-zero server saw, the relay's log.
fn check_common(chain: &Chain) -> &SpanRecord {
    let root = one(&chain.spans, "gz-client", CLIENT);
    assert!(
        root.parent.is_empty(),
        "the go-zero client starts the trace"
    );
    for s in &chain.spans {
        assert_eq!(
            s.trace_id, root.trace_id,
            "one trace id: {:#?}",
            chain.spans
        );
    }
    // the go-zero server got the trace, the client's baggage merged with the relay's, and the
    // relay's own metadata
    assert!(
        chain
            .meta
            .contains(&format!("traceparent=00-{}-", root.trace_id)),
        "{}",
        chain.meta
    );
    assert!(chain.meta.contains("x-relay=zrpc"), "{}", chain.meta);
    let baggage = chain
        .meta
        .split(';')
        .find_map(|kv| kv.strip_prefix("baggage="))
        .unwrap_or_else(|| panic!("no baggage: {}", chain.meta));
    let mut members: Vec<&str> = baggage.split(',').map(str::trim).collect();
    members.sort_unstable();
    assert_eq!(members, ["hop=relay", "user=alice"], "{}", chain.meta);
    // the relay's log lines of the call (its handler's, and the call's stat line at its end)
    // carry the trace id under go-zero's key
    for what in [
        "relaying to the downstream greeter",
        "- /greeter.Greeter/SayHello",
    ] {
        let line = chain
            .relay_log
            .iter()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no relay line with {what:?}: {:#?}", chain.relay_log));
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["trace"], root.trace_id.as_str(), "{line}");
        println!("  relay log line: {line}");
    }
    root
}

/// The four spans of a chain whose every process exports with `batcher`.
async fn one_trace_with_telemetry_on_the_zrpc_service(p: &Programs, batcher: Batcher) -> Sink {
    let sink = Sink::start(batcher).await;
    let chain = run_chain(p, true, &sink).await;
    print(
        &format!("go-zero client -> zrpc (Telemetry) -> go-zero server, {batcher:?}"),
        &chain,
    );
    let root = check_common(&chain);
    assert_eq!(
        chain.spans.len(),
        4,
        "{:#?}\nrelay log:\n{}",
        chain.spans,
        chain.relay_log.join("\n")
    );
    let relay_server = one(&chain.spans, "relay.rpc", SERVER);
    let relay_client = one(&chain.spans, "relay.rpc", CLIENT);
    let gz_server = one(&chain.spans, "gz-server", SERVER);
    assert_eq!(relay_server.parent, root.span_id);
    assert_eq!(relay_client.parent, relay_server.span_id);
    assert_eq!(gz_server.parent, relay_client.span_id);
    sink
}

#[tokio::test]
async fn one_trace_across_go_and_rust_with_telemetry_on_the_zrpc_service() {
    let p = gozero_or_skip!();
    one_trace_with_telemetry_on_the_zrpc_service(p, Batcher::OtlpGrpc).await;
}

#[tokio::test]
async fn one_trace_across_go_and_rust_over_otlp_http() {
    let p = gozero_or_skip!();
    one_trace_with_telemetry_on_the_zrpc_service(p, Batcher::OtlpHttp).await;
}

#[tokio::test]
async fn one_trace_across_go_and_rust_over_zipkin() {
    let p = gozero_or_skip!();
    one_trace_with_telemetry_on_the_zrpc_service(p, Batcher::Zipkin).await;
}

/// The `file` batcher: one trace across the three span files, and zrpc's lines in the shape of
/// go-zero's (the same keys at every level, and attributes typed as Go types them).
#[tokio::test]
async fn one_trace_across_go_and_rust_in_span_files_of_go_zeros_shape() {
    let p = gozero_or_skip!();
    let sink = one_trace_with_telemetry_on_the_zrpc_service(p, Batcher::File).await;
    let server_line = |name: &str| {
        let (_, lines) = file_spans(&sink.file(name));
        lines
            .into_iter()
            .find(|l| l["SpanKind"] == SERVER)
            .unwrap_or_else(|| panic!("no server span in {name}'s file"))
    };
    let (go, rust) = (&server_line("gz-server"), &server_line("relay.rpc"));
    println!("go-zero's line: {go}\nzrpc's line:    {rust}");
    assert_eq!(shape(go), shape(rust), "go-zero: {go}\nzrpc: {rust}");
    // the same first attributes, typed alike
    let first = |v: &serde_json::Value| v["Attributes"][0].clone();
    assert_eq!(first(go)["Key"], "rpc.system");
    assert_eq!(first(rust), first(go));
    let status_code = |v: &serde_json::Value| {
        v["Attributes"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["Key"] == "rpc.grpc.status_code"))
            .map(|a| a["Value"].clone())
    };
    assert_eq!(
        status_code(rust),
        status_code(go),
        "the status code attribute, typed as go-zero's"
    );
    assert_eq!(
        rust["Parent"]["Remote"], true,
        "the caller's context came over the wire"
    );
    assert_eq!(rust["Status"]["Code"], "Unset");
}

/// The keys of a JSON object, recursively; a list (or Go's `null` for an empty one) and a
/// scalar each stand for their kind.
fn shape(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => serde_json::Value::Array(
            m.iter()
                .map(|(k, v)| serde_json::json!([k, shape(v)]))
                .collect(),
        ),
        serde_json::Value::Array(_) | serde_json::Value::Null => "list".into(),
        _ => "scalar".into(),
    }
}
