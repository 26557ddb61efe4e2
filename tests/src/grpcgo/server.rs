//! grpc-go's stock interop server, or `gzip-interop`'s, as a child process: [`GrpcGoServer`].

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{GrpcGoPrograms, InteropCerts};

/// How long the server may take to listen after its start.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `grpc-go-server` (killed on drop).
#[derive(Debug)]
pub struct GrpcGoServer {
    child: Child,
    /// The port it listens on (every interface; the tests dial 127.0.0.1).
    pub port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl GrpcGoServer {
    /// Starts `grpc-go-server --port=0` (with TLS from `certs` when given) and waits for its
    /// `interop server listening on` log line, which names the port.
    ///
    /// # Panics
    /// When it cannot start, exits, or does not log its port within 20 s.
    pub async fn start(p: &GrpcGoPrograms, certs: Option<&InteropCerts>) -> GrpcGoServer {
        Self::spawn(&p.server, &[], certs).await
    }

    /// Starts `gzip-interop --mode=server --port=0` (on 127.0.0.1), as [`GrpcGoServer::start`].
    ///
    /// # Panics
    /// As [`GrpcGoServer::start`].
    pub async fn start_gzip(p: &GrpcGoPrograms, certs: Option<&InteropCerts>) -> GrpcGoServer {
        Self::spawn(&p.gzip, &["--mode=server"], certs).await
    }

    async fn spawn(program: &Path, args: &[&str], certs: Option<&InteropCerts>) -> GrpcGoServer {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .arg("--port=0")
            // its listening line is logged at INFO
            .env("GRPC_GO_LOG_SEVERITY_LEVEL", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(c) = certs {
            cmd.arg("--use_tls=true")
                .arg(format!("--tls_cert_file={}", c.server.cert_str()))
                .arg(format!("--tls_key_file={}", c.server.key_str()));
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (port_tx, port_rx) = tokio::sync::oneshot::channel();
        let sink = log.clone();
        // reads its log to the end (a full pipe would stall it), and finds the port
        std::thread::spawn(move || {
            let mut port_tx = Some(port_tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(port) = listening_port(&line)
                    && let Some(tx) = port_tx.take()
                {
                    let _ = tx.send(port);
                }
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
        let port = match tokio::time::timeout(START_TIMEOUT, port_rx).await {
            Ok(Ok(port)) => port,
            _ => {
                let status = child.try_wait().ok().flatten();
                let _ = child.kill();
                panic!(
                    "{} did not log its port within {START_TIMEOUT:?} (exit: {status:?}); its log:\n{}",
                    program.display(),
                    log.lock().unwrap_or_else(|e| e.into_inner()).join("\n")
                )
            }
        };
        GrpcGoServer { child, port, log }
    }

    /// Its log lines so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for GrpcGoServer {
    fn drop(&mut self) {
        // our own child, by its handle
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The port of `... interop server listening on [::]:46807`.
fn listening_port(line: &str) -> Option<u16> {
    let (_, addr) = line.split_once("interop server listening on ")?;
    addr.trim().rsplit(':').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_port_of_the_listening_line() {
        let line = "2026/12/03 10:25:00 INFO: [interop] interop server listening on [::]:46807";
        assert_eq!(super::listening_port(line), Some(46807));
        assert_eq!(super::listening_port("INFO: [core] something else"), None);
    }
}
