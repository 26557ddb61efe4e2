//! The examples as real processes against a real etcd: three `greeter-server`s register, a
//! `greeter-client` discovers them and every server answers; then one server gets SIGTERM in the
//! middle of a client run and the client sees zero failed calls (the server deregisters, waits
//! `WrapUpTime` while clients drop it, then drains).
//!
//! etcd comes from the test harness (`zrpc_tests::etcd`): a local `etcd` binary on free loopback
//! ports, or the cluster named by `ZRPC_TEST_ETCD_ENDPOINTS`.
// clippy.toml lets tests unwrap, but only inside `#[test]` fns and `cfg(test)` modules: a test
// crate's helpers are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use etcd_client::GetOptions;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use zrpc_tests::etcd::{EtcdServer, unique_key};

const SERVER: &str = env!("CARGO_BIN_EXE_greeter-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_greeter-client");

/// A child process killed on drop (a failed assertion must not leave servers behind).
struct Proc {
    child: Option<Child>,
}

impl Proc {
    fn spawn(cmd: &mut Command) -> Proc {
        Proc {
            child: Some(cmd.spawn().expect("spawn example binary")),
        }
    }

    fn child(&mut self) -> &mut Child {
        self.child.as_mut().unwrap()
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.as_ref().unwrap().id()).unwrap())
    }

    /// The exit status and the captured output of a process that has exited.
    fn output(mut self) -> Output {
        self.child.take().unwrap().wait_with_output().unwrap()
    }

    fn sigterm(&self) {
        kill(self.pid(), Signal::SIGTERM).unwrap();
    }

    /// Waits up to `within` for the process to exit.
    async fn wait(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child().try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn etcd_yaml(etcd: &EtcdServer, key: &str) -> String {
    let hosts: String = etcd
        .endpoints()
        .iter()
        .map(|h| format!("    - {h}\n"))
        .collect();
    format!("Etcd:\n  Hosts:\n{hosts}  Key: {key}\n")
}

/// The addresses registered under `key/`, once there are `n` of them.
async fn wait_registered(etcd: &EtcdServer, key: &str, n: usize) -> Vec<String> {
    let mut client = etcd.client().await;
    let prefix = format!("{key}/");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = client
            .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
            .await
            .unwrap();
        let mut addrs: Vec<String> = resp
            .kvs()
            .iter()
            .map(|kv| kv.value_str().unwrap().to_owned())
            .collect();
        addrs.sort();
        if addrs.len() == n {
            return addrs;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} servers under {prefix}, found {addrs:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A loopback address with a port that was free a moment ago.
fn free_loopback_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

fn client_command(config: &str, calls: usize, concurrency: usize) -> Command {
    let mut cmd = Command::new(CLIENT);
    cmd.args([
        "-f",
        config,
        "-n",
        &calls.to_string(),
        "-c",
        &concurrency.to_string(),
    ])
    .args(["--wait-secs", "10"])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    cmd
}

fn describe(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greeter_processes_discover_each_other_and_survive_a_sigterm() {
    let etcd = EtcdServer::start().await;
    let key = unique_key("greeter-processes");
    let dir = tempfile::tempdir().unwrap();
    let server_yaml = write(
        dir.path(),
        "greeter-server.yaml",
        &format!(
            "Name: greeter.rpc\nListenOn: 127.0.0.1:8080\n{}Shutdown:\n  WrapUpTime: 1s\n  WaitTime: 5s\n",
            etcd_yaml(&etcd, &key)
        ),
    );
    let client_yaml = write(dir.path(), "greeter-client.yaml", &etcd_yaml(&etcd, &key));

    // Each server on its own free port, so the test knows which process is which address.
    let addrs: Vec<String> = (0..3).map(|_| free_loopback_addr()).collect();
    let mut servers: Vec<Proc> = addrs
        .iter()
        .map(|addr| {
            Proc::spawn(
                Command::new(SERVER)
                    .args(["-f", &server_yaml, "--listen", addr, "--delay-ms", "3"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )
        })
        .collect();
    let mut registered = wait_registered(&etcd, &key, 3).await;
    let mut expected = addrs.clone();
    expected.sort();
    registered.sort();
    assert_eq!(registered, expected, "registered addresses");

    // 1. Every server answers.
    let out = client_command(&client_yaml, 300, 6).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "client failed: {}", describe(&out));
    assert!(report.contains("failures: 0"), "{}", describe(&out));
    for addr in &addrs {
        assert!(
            report.contains(addr.as_str()),
            "server {addr} did not answer any call: {}",
            describe(&out)
        );
    }

    // 2. SIGTERM one server in the middle of a run: zero failed calls.
    let mut run = Proc::spawn(&mut client_command(&client_yaml, 4000, 6));
    // Stop the server once the client is calling (it says so on stderr after its warm-up).
    let stderr = run.child().stderr.take().unwrap();
    let (calling_tx, calling_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("calling ") {
                let _ = calling_tx.send(());
            }
            eprintln!("greeter-client: {line}");
        }
    });
    calling_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("greeter-client did not start calling");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        run.child().try_wait().unwrap().is_none(),
        "client finished too early to test the stop"
    );
    servers[0].sigterm();
    let stopped = servers[0].wait(Duration::from_secs(10)).await;
    assert!(
        stopped.is_some_and(|s| s.success()),
        "server did not exit cleanly after SIGTERM: {stopped:?}"
    );
    assert!(
        run.wait(Duration::from_secs(60)).await.is_some(),
        "client did not finish"
    );
    let out = run.output();
    assert!(
        out.status.success(),
        "calls failed around the SIGTERM: {}",
        describe(&out)
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("failures: 0"), "{}", describe(&out));
    // The stopped server was in rotation when it got SIGTERM, and the others took over.
    for addr in &addrs {
        assert!(
            report.contains(addr.as_str()),
            "{addr} missing: {}",
            describe(&out)
        );
    }
    eprintln!("client run across the SIGTERM of {}:\n{report}", addrs[0]);
    let mut left = wait_registered(&etcd, &key, 2).await;
    left.sort();
    let mut expected: Vec<String> = addrs[1..].to_vec();
    expected.sort();
    assert_eq!(
        left, expected,
        "the stopped server deregistered, the others stayed"
    );
}

/// What a caller saw of one freeze.
struct FreezeRun {
    calls: u64,
    /// (start, end, error) of each failed call, the instants relative to the freeze.
    failures: Vec<(Duration, Duration, String)>,
    /// The last time the victim's pick count grew, relative to the freeze (20 ms samples).
    last_pick: Option<Duration>,
}

/// Calls through `client` with `callers` closed loops; freezes `victim` (SIGSTOP) after 2 s for
/// `freeze`, thaws it, and calls on for `after`.
async fn freeze_run(
    client: &zrpc::Client,
    callers: usize,
    victim: (&Proc, &str),
    freeze: Duration,
    after: Duration,
) -> FreezeRun {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let ok = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..callers {
        let mut greeter = zrpc_examples::pb::greeter_client::GreeterClient::new(client.clone());
        let (stop, failures, ok) = (stop.clone(), failures.clone(), ok.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                let name = format!("{w}-{i}");
                match greeter
                    .say_hello(zrpc_examples::pb::HelloRequest { name })
                    .await
                {
                    Ok(_) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => failures.lock().unwrap().push((
                        start,
                        Instant::now(),
                        e.message().to_owned(),
                    )),
                }
                i += 1;
            }
        }));
    }
    let picks = || {
        client
            .endpoints()
            .iter()
            .find(|e| e.addr == victim.1)
            .map_or(0, |e| e.requests)
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(picks() > 0, "the victim took no call before the freeze");
    kill(victim.0.pid(), Signal::SIGSTOP).unwrap();
    let frozen = Instant::now();
    let mut samples = vec![(frozen, picks())];
    while frozen.elapsed() < freeze {
        tokio::time::sleep(Duration::from_millis(20)).await;
        samples.push((Instant::now(), picks()));
    }
    kill(victim.0.pid(), Signal::SIGCONT).unwrap();
    tokio::time::sleep(after).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let since = |t: Instant| t.saturating_duration_since(frozen);
    let failures: Vec<_> = failures
        .lock()
        .unwrap()
        .iter()
        .map(|(s, e, m)| (since(*s), since(*e), m.clone()))
        .collect();
    FreezeRun {
        calls: ok.load(Ordering::Relaxed) + failures.len() as u64,
        last_pick: samples
            .windows(2)
            .rfind(|w| w[1].1 > w[0].1)
            .map(|w| since(w[1].0)),
        failures,
    }
}

/// A server frozen with SIGSTOP for 20 s under load (three servers in etcd, 8 callers, go-zero's
/// 2 s timeout) costs only the calls it held when it froze: the balancer stops choosing it as
/// soon as it stops answering, it is probed out of band from then on (never with a caller's
/// request), and its silent connection is closed after the probe's second, so the calls it held
/// fail then rather than at their deadlines. With a retry policy for `UNAVAILABLE` those calls
/// go to another server: no call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_server_costs_only_the_calls_it_holds() {
    const CALLERS: usize = 8;
    const FREEZE: Duration = Duration::from_secs(20);
    let etcd = EtcdServer::start().await;
    let key = unique_key("greeter-frozen");
    let dir = tempfile::tempdir().unwrap();
    let server_yaml = write(
        dir.path(),
        "greeter-server.yaml",
        &format!(
            "Name: greeter.rpc\nListenOn: 127.0.0.1:8080\nCpuThreshold: 0\n{}",
            etcd_yaml(&etcd, &key)
        ),
    );
    let addrs: Vec<String> = (0..3).map(|_| free_loopback_addr()).collect();
    let servers: Vec<Proc> = addrs
        .iter()
        .map(|addr| {
            Proc::spawn(
                Command::new(SERVER)
                    .args(["-f", &server_yaml, "--listen", addr])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )
        })
        .collect();
    wait_registered(&etcd, &key, 3).await;
    let victim = (&servers[0], addrs[0].as_str());

    // go-zero's config: no retry policy
    let plain = zrpc::client(zrpc::RpcClientConf::etcd(etcd.endpoints(), key.clone()))
        .await
        .unwrap();
    let run = freeze_run(&plain, CALLERS, victim, FREEZE, Duration::from_secs(1)).await;
    eprintln!(
        "no policy, frozen {FREEZE:?}: {} failed of {} calls; last call sent to the victim {:?} \
         after the freeze; failures (start, end, message): {:?}",
        run.failures.len(),
        run.calls,
        run.last_pick,
        run.failures
    );
    let first_failure = run.failures.iter().map(|f| f.1).min();
    if let (Some(first), Some(last)) = (first_failure, run.last_pick) {
        assert!(
            last <= first + Duration::from_secs(1),
            "a call was sent to the frozen server {:?} after its first failure",
            last.saturating_sub(first)
        );
    }
    // only calls it held: sent before it stopped being chosen, failed within the probe's
    // second (before their 2 s deadline), at most one per caller
    assert!(run.failures.len() <= CALLERS, "{:?}", run.failures);
    // No pick after the freeze: the victim was dropped as it froze.
    let dropped = run.last_pick.unwrap_or(Duration::ZERO);
    for (start, end, message) in &run.failures {
        assert!(
            *start <= dropped + Duration::from_millis(20),
            "a call sent after the victim was dropped failed: {message}"
        );
        assert!(
            *end < Duration::from_millis(1900),
            "a held call failed only at its deadline ({end:?}): {message}"
        );
    }
    drop(plain);
    // the thawed server answers again before the second freeze
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut conf = zrpc::RpcClientConf::etcd(etcd.endpoints(), key.clone());
    conf.method_config = vec![zrpc::conf::MethodConf::retry(
        [zrpc::conf::MethodName::new("greeter.Greeter", "")],
        zrpc::conf::RetryPolicyConf::default(),
    )];
    let retrying = zrpc::client(conf).await.unwrap();
    let run = freeze_run(&retrying, CALLERS, victim, FREEZE, Duration::from_secs(1)).await;
    eprintln!(
        "retry policy, frozen {FREEZE:?}: {} failed of {} calls; last call sent to the victim \
         {:?} after the freeze; failures: {:?}",
        run.failures.len(),
        run.calls,
        run.last_pick,
        run.failures
    );
    assert!(run.failures.len() <= 2, "{:?}", run.failures);
    drop(servers);
}
