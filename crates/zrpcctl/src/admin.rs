//! `zrpcctl registration`: a server's registration through its DevServer's `/admin` routes
//! (state, pause, resume).
//!
//! A plain HTTP/1.1 exchange over one connection (`Connection: close`): the DevServer's port
//! speaks nothing else, and three requests do not need an HTTP client crate.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Result;

/// How long the whole exchange may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The most octets of an answer read.
const MAX_ANSWER: u64 = 64 * 1024;

/// What to do with the registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Action {
    /// Print where it stands.
    Status,
    /// Take the server out of discovery (it keeps serving).
    Pause,
    /// Register it again.
    Resume,
}

/// Runs `action` against the DevServer at `addr` (`host:port`) and returns its JSON answer.
pub(crate) async fn registration(
    addr: &str,
    action: Action,
    token: Option<&str>,
) -> Result<String> {
    let (method, path) = match action {
        Action::Status => ("GET", "/admin/registration".to_owned()),
        Action::Pause => ("POST", "/admin/registration/pause".to_owned()),
        Action::Resume => ("POST", "/admin/registration/resume".to_owned()),
    };
    if method == "POST" && token.is_none() {
        return Err(format!(
            "{path} is a write: give the server's DevServer.AdminToken with --token or \
             ZRPC_ADMIN_TOKEN"
        )
        .into());
    }
    exchange(addr, method, &path, token, MAX_ANSWER).await
}

/// `method path` with `token` at the DevServer `addr`: the body of a 2xx answer (at most `max`
/// octets read), else an error naming the status and the server's reason.
pub(crate) async fn exchange(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    max: u64,
) -> Result<String> {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.take(max).read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| format!("the DevServer at {addr} did not answer within {TIMEOUT:?}"))?
        .map_err(|e| format!("DevServer at {addr}: {e} (is DevServer enabled on that port?)"))?;
    let (status, body) =
        parse(&raw).ok_or_else(|| format!("DevServer at {addr}: not an HTTP/1.1 answer"))?;
    if (200..300).contains(&status) {
        Ok(body)
    } else {
        Err(format!("{method} {path} at {addr}: HTTP {status}: {}", body.trim()).into())
    }
}

/// The status code and body of a whole HTTP/1.1 answer.
fn parse(raw: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_answer() {
        let raw = b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n\r\n{\"error\":\"x\"}\n";
        assert_eq!(parse(raw), Some((401, "{\"error\":\"x\"}\n".to_owned())));
        assert_eq!(parse(b"garbage"), None);
    }

    #[tokio::test]
    async fn a_write_without_a_token_is_refused_before_connecting() {
        // a port nobody listens on: the refusal comes first
        let e = registration("127.0.0.1:1", Action::Pause, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--token") && e.contains("ZRPC_ADMIN_TOKEN"),
            "{e}"
        );
    }
}
