//! One run of grpc-go's stock interop client ([`run_grpcgo_client`]) or of `gzip-interop`'s
//! ([`run_gzip_client`], [`grpcgo_unary_status`]).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{GrpcGoPrograms, InteropCerts, SERVER_NAME};

/// How long one client run may take (its own cases end within seconds).
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// How a `grpc-go-client` run ended.
#[derive(Debug)]
pub struct ClientRun {
    /// Exit code (None: killed, or timed out).
    pub code: Option<i32>,
    /// Its stdout and stderr (grpc-go logs its verdict on stderr).
    pub output: String,
}

impl ClientRun {
    /// The run passed (exit 0).
    pub fn passed(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `grpc-go-client --test_case=<case>` against `127.0.0.1:<port>`, over TLS verifying the
/// server as [`SERVER_NAME`] when `certs` is given, with `extra` flags. A run past 60 s is killed
/// and reported with `code: None`.
///
/// # Panics
/// When the program cannot be started.
pub async fn run_grpcgo_client(
    p: &GrpcGoPrograms,
    case: &str,
    port: u16,
    certs: Option<&InteropCerts>,
    extra: &[&str],
) -> ClientRun {
    run(&p.client, case, port, certs, extra).await
}

/// Runs `gzip-interop --mode=client --test_case=<case>` (a compression case) as
/// [`run_grpcgo_client`] runs grpc-go's client.
///
/// # Panics
/// When the program cannot be started.
pub async fn run_gzip_client(
    p: &GrpcGoPrograms,
    case: &str,
    port: u16,
    certs: Option<&InteropCerts>,
) -> ClientRun {
    run(&p.gzip, case, port, certs, &["--mode=client"]).await
}

/// What a grpc-go client answers to one `UnaryCall` asking for `size` octets (gzip-compressed
/// when `compressed`) from `127.0.0.1:<port>`, receiving at most `max_recv` octets (`None`:
/// grpc-go's default, 4 MiB): the status code and message (`gzip-interop`'s `unary_status`).
///
/// # Panics
/// When the program cannot be started, fails, or prints no status.
pub async fn grpcgo_unary_status(
    p: &GrpcGoPrograms,
    port: u16,
    size: usize,
    compressed: bool,
    max_recv: Option<usize>,
) -> (i32, String) {
    let mut extra = vec![
        "--mode=client".to_owned(),
        format!("--response_size={size}"),
    ];
    if compressed {
        extra.push("--response_compressed".to_owned());
    }
    if let Some(m) = max_recv {
        extra.push(format!("--max_recv_size={m}"));
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let run = run(&p.gzip, "unary_status", port, None, &extra).await;
    assert!(run.passed(), "gzip-interop unary_status: {}", run.output);
    let line = run
        .output
        .lines()
        .find_map(|l| l.strip_prefix("status "))
        .unwrap_or_else(|| panic!("no status line in: {}", run.output));
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("bad status line {line}: {e}"));
    let code = v["code"].as_i64().and_then(|c| i32::try_from(c).ok());
    let message = v["message"].as_str().map(str::to_owned);
    match (code, message) {
        (Some(c), Some(m)) => (c, m),
        _ => panic!("bad status line: {line}"),
    }
}

async fn run(
    program: &Path,
    case: &str,
    port: u16,
    certs: Option<&InteropCerts>,
    extra: &[&str],
) -> ClientRun {
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut cmd = Command::new(program);
    cmd.arg("--server_host=127.0.0.1")
        .arg(format!("--server_port={port}"))
        .arg(format!("--test_case={case}"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(c) = certs {
        cmd.arg("--use_tls=true")
            .arg("--use_test_ca=true")
            .arg(format!("--ca_file={}", c.ca.cert_str()))
            .arg(format!("--server_host_override={SERVER_NAME}"));
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
    let pid = child.id();
    let wait = tokio::task::spawn_blocking(move || child.wait_with_output());
    match tokio::time::timeout(RUN_TIMEOUT, wait).await {
        Ok(Ok(Ok(out))) => ClientRun {
            code: out.status.code(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        },
        Ok(result) => ClientRun {
            code: None,
            output: format!("waiting for {name} failed: {result:?}"),
        },
        Err(_) => {
            // our own child, by its PID: the blocking wait then returns and the thread ends
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            ClientRun {
                code: None,
                output: format!("{name} did not finish within {RUN_TIMEOUT:?} (killed)"),
            }
        }
    }
}
