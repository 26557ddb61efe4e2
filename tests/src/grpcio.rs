//! grpcio (Python's gRPC, on gRPC core) as a second foreign stack: `tests/python/grpcio_server.py`
//! serves `grpc.testing.TestService/UnaryCall` as gRPC's interop server does (`response_size`,
//! `response_compressed`), in a child process: [`GrpcioServer`]; and grpcio clients, the scripts
//! of `tests/python` that print their result as one JSON value: [`run_client`].

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long the server may take to listen after its start.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `grpcio_server.py` (killed on drop).
#[derive(Debug)]
pub struct GrpcioServer {
    child: Child,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
}

impl GrpcioServer {
    /// Starts the server and reads its port from its first line.
    ///
    /// # Panics
    /// When `python3` or grpcio is missing (`scripts/test.sh` installs it), or no port within
    /// 20 s.
    pub async fn start() -> GrpcioServer {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/grpcio_server.py");
        let mut child = Command::new("python3")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start python3 {script}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let first = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        });
        let line = match tokio::time::timeout(START_TIMEOUT, first).await {
            Ok(Ok(Ok(line))) => line,
            other => {
                let _ = child.kill();
                panic!(
                    "{script} gave no port within {START_TIMEOUT:?} (is grpcio installed?): {other:?}"
                )
            }
        };
        let port = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| v["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or_else(|| panic!("{script}: no port in {line:?}"));
        GrpcioServer { child, port }
    }
}

impl Drop for GrpcioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `bytes` as lowercase hex (how the client scripts take a request and give a reply).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs `tests/python/<script>` with `args` on a blocking thread (a server under test runs on
/// the caller's runtime) and returns the JSON value it printed.
///
/// # Panics
/// When `python3` or grpcio is missing (`scripts/test.sh` installs it), the script fails, or
/// its output is not JSON.
pub async fn run_client(script: &str, args: Vec<String>) -> serde_json::Value {
    let path = format!("{}/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let out =
        tokio::task::spawn_blocking(move || Command::new("python3").arg(path).args(args).output())
            .await
            .expect("the python3 runner thread")
            .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} failed (is grpcio installed? scripts/test.sh installs it): {stderr}"
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}
