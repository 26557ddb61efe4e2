//! A real Redis for the auth tests: `redis-server` (Debian's, installed by `scripts/test.sh`; or
//! the binary named by `ZRPC_TEST_REDIS_BIN`) on a free loopback port, without persistence
//! (`--save '' --appendonly no`), killed on drop (only our PID); [`RedisServer::kill`] and
//! [`RedisServer::restart`] (same port, empty) make an outage.
//!
//! Without the binary, [`RedisServer::start`] prints `SKIPPED: redis-server not found` and returns
//! None (tests return early); with `CI=true` a missing binary is a panic.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::ports::free_port;

/// Environment variable naming the redis-server binary (default `redis-server` on `PATH`).
pub const BIN_ENV: &str = "ZRPC_TEST_REDIS_BIN";

/// A `redis-server` started for one test.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    bin: String,
    args: Vec<String>,
    /// `127.0.0.1:<port>`.
    pub addr: String,
    password: Option<String>,
}

impl RedisServer {
    /// Starts `redis-server` and waits until it answers `PING`.
    pub async fn start() -> Option<RedisServer> {
        Self::start_with(&[]).await
    }

    /// Starts `redis-server` with `requirepass <password>`.
    pub async fn start_with_password(password: &str) -> Option<RedisServer> {
        let mut r = Self::start_with(&["--requirepass", password]).await?;
        r.password = Some(password.to_owned());
        r.wait_ready().await;
        Some(r)
    }

    async fn start_with(extra: &[&str]) -> Option<RedisServer> {
        let bin = std::env::var(BIN_ENV).unwrap_or_else(|_| "redis-server".to_owned());
        let port = free_port();
        let mut args: Vec<String> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
        args.extend(["--save", "", "--appendonly", "no"].map(str::to_owned));
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let spawned = spawn(&bin, &args);
        let child = match spawned {
            Ok(c) => c,
            Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
                panic!("cannot run {bin} (CI=true needs it): {e}")
            }
            Err(e) => {
                eprintln!("SKIPPED: redis-server not found ({bin}: {e}), Redis auth tests not run");
                return None;
            }
        };
        let r = RedisServer {
            child,
            bin,
            args,
            addr: format!("127.0.0.1:{port}"),
            password: None,
        };
        if extra.is_empty() {
            r.wait_ready().await;
        }
        Some(r)
    }

    /// Kills the server (SIGKILL): Redis is down until [`restart`](Self::restart).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again on the same port (empty: there is no persistence).
    pub async fn restart(&mut self) {
        self.kill();
        self.child = spawn(&self.bin, &self.args)
            .unwrap_or_else(|e| panic!("restart {} on {}: {e}", self.bin, self.addr));
        self.wait_ready().await;
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(reply) = self.try_command(&["PING"]).await
                && reply.starts_with("+PONG")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("redis-server does not answer PING on {}", self.addr);
    }

    /// Runs one command (RESP, after `AUTH` when a password is set) and returns the raw reply.
    pub async fn command(&self, args: &[&str]) -> String {
        self.try_command(args)
            .await
            .unwrap_or_else(|e| panic!("redis {} {args:?}: {e}", self.addr))
    }

    /// `HSET key field value`.
    pub async fn hset(&self, key: &str, field: &str, value: &str) {
        let reply = self.command(&["HSET", key, field, value]).await;
        assert!(reply.starts_with(':'), "HSET on {}: {reply}", self.addr);
    }

    /// How many commands named `cmd` (lower case, e.g. `hget`) the server has run.
    pub async fn calls(&self, cmd: &str) -> u64 {
        let info = self.command(&["INFO", "commandstats"]).await;
        let prefix = format!("cmdstat_{cmd}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    async fn try_command(&self, args: &[&str]) -> std::io::Result<String> {
        let mut req = String::new();
        if let Some(p) = &self.password {
            req.push_str(&encode(&["AUTH", p]));
        }
        req.push_str(&encode(args));
        let mut s = tokio::net::TcpStream::connect(&self.addr).await?;
        s.write_all(req.as_bytes()).await?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        // One reply per command sent; AUTH answers `+OK\r\n` first.
        let want_lines = usize::from(self.password.is_some()) + 1;
        loop {
            let n = tokio::time::timeout_at(deadline, s.read(&mut buf[got..]))
                .await
                .map_err(|_| std::io::Error::other("redis did not answer in 2 s"))??;
            got += n;
            let text = String::from_utf8_lossy(&buf[..got]).into_owned();
            if n == 0 || complete(&text, want_lines) {
                let reply = if self.password.is_some() {
                    text.split_once("\r\n")
                        .map_or(text.clone(), |(_, r)| r.to_owned())
                } else {
                    text
                };
                return Ok(reply);
            }
        }
    }
}

fn spawn(bin: &str, args: &[String]) -> std::io::Result<Child> {
    Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

fn encode(args: &[&str]) -> String {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    req
}

/// Whether `text` holds `n` whole replies (simple ones, or one bulk string at the end).
fn complete(text: &str, n: usize) -> bool {
    let mut rest = text;
    for _ in 0..n {
        let Some((line, after)) = rest.split_once("\r\n") else {
            return false;
        };
        rest = after;
        if let Some(len) = line.strip_prefix('$').and_then(|l| l.parse::<usize>().ok()) {
            if rest.len() < len + 2 {
                return false;
            }
            rest = &rest[len + 2..];
        }
    }
    true
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
