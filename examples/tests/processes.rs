//! The examples as real processes against a real etcd: three `greeter-server`s register, a
//! `greeter-client` discovers them and every server answers; then one server gets SIGTERM in the
//! middle of a client run and the client sees zero failed calls (the server deregisters, waits
//! `WrapUpTime` while clients drop it, then drains).
//!
//! etcd comes from the test harness (`zrpc_tests::etcd`): a local `etcd` binary on free loopback
//! ports, or the cluster named by `ZRPC_TEST_ETCD_ENDPOINTS`.

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
