//! [`InteropGreeter`], the zrpc greeter that answers as `gz-server` does.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_stream::Stream;
use tonic::metadata::{KeyAndValueRef, MetadataValue};
use tonic::{Code, Request, Response, Status};

use super::yaml::q;
use crate::pb::greeter_server::Greeter;
use crate::pb::{HelloReply, HelloRequest, HelloStreamRequest};

/// The response header naming the server that answered (`ListenOn`), on both sides.
pub const SERVER_HEADER: &str = "x-server";

/// A greeter that answers as `gz-server` does (see the module docs). Clones share the counter.
#[derive(Debug, Clone)]
pub struct InteropGreeter {
    name: String,
    calls: Arc<AtomicU64>,
}

impl InteropGreeter {
    /// A greeter whose `x-server` header is `name` (its `ListenOn`).
    pub fn new(name: impl Into<String>) -> Self {
        InteropGreeter {
            name: name.into(),
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Handler invocations (unary and streaming).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    fn header(&self) -> MetadataValue<tonic::metadata::Ascii> {
        MetadataValue::try_from(self.name.as_str()).expect("ListenOn is ASCII")
    }

    fn status(&self, code: Code, message: String) -> Status {
        let mut st = Status::new(code, message);
        st.metadata_mut().insert(SERVER_HEADER, self.header());
        st
    }

    fn reply<T>(&self, msg: T) -> Response<T> {
        let mut r = Response::new(msg);
        r.metadata_mut().insert(SERVER_HEADER, self.header());
        r
    }
}

/// Headers that grpc-go keeps out of the incoming metadata (`isReservedHeader`, minus the two
/// it adds back: `content-type` and `user-agent`).
const RESERVED: &[&str] = &[
    "te",
    "grpc-timeout",
    "grpc-encoding",
    "grpc-message",
    "grpc-message-type",
    "grpc-status",
    "grpc-status-details-bin",
];

/// `k=v;...` sorted by key plus `deadline=<ms>|none`, as gz-server's `meta` directive.
fn describe_incoming(md: &tonic::metadata::MetadataMap) -> String {
    let mut pairs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for kv in md.iter() {
        if let KeyAndValueRef::Ascii(k, v) = kv {
            let k = k.as_str();
            if k.starts_with(':') || RESERVED.contains(&k) {
                continue;
            }
            pairs
                .entry(k.to_owned())
                .or_default()
                .push(v.to_str().unwrap_or("").to_owned());
        }
    }
    let mut out: Vec<String> = pairs
        .into_iter()
        .map(|(k, v)| format!("{k}={}", v.join(",")))
        .collect();
    let deadline = md
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)
        .map_or_else(|| "none".to_owned(), |d| d.as_millis().to_string());
    out.push(format!("deadline={deadline}"));
    out.join(";")
}

/// Parses a `grpc-timeout` header value (`<digits><H|M|S|m|u|n>`).
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[tonic::async_trait]
impl Greeter for InteropGreeter {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let meta = describe_incoming(req.metadata());
        let name = req.into_inner().name;
        if name == "panic" {
            panic!("zrpc interop greeter: panic requested");
        }
        if name == "meta" {
            return Ok(self.reply(HelloReply { message: meta }));
        }
        if let Some(n) = name.strip_prefix("code:") {
            let Ok(n) = n.parse::<i32>() else {
                return Err(
                    self.status(Code::InvalidArgument, format!("bad directive {}", q(&name)))
                );
            };
            return Err(self.status(Code::from_i32(n), format!("forced {n}")));
        }
        if let Some(ms) = name.strip_prefix("sleep:") {
            let Ok(ms) = ms.parse::<u64>() else {
                return Err(
                    self.status(Code::InvalidArgument, format!("bad directive {}", q(&name)))
                );
            };
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Ok(self.reply(HelloReply {
            message: format!("hello {name}"),
        }))
    }

    type SayHelloStreamStream = Pin<Box<dyn Stream<Item = Result<HelloReply, Status>> + Send>>;

    async fn say_hello_stream(
        &self,
        req: Request<HelloStreamRequest>,
    ) -> Result<Response<Self::SayHelloStreamStream>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let r = req.into_inner();
        let interval = Duration::from_millis(u64::from(r.interval_ms));
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            for i in 0..r.count {
                if i > 0 && !interval.is_zero() {
                    tokio::time::sleep(interval).await;
                }
                let reply = HelloReply {
                    message: format!("hello {} {i}", r.name),
                };
                if tx.send(Ok(reply)).await.is_err() {
                    return;
                }
            }
        });
        let stream: Self::SayHelloStreamStream =
            Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx));
        Ok(self.reply(stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_values() {
        assert_eq!(
            parse_grpc_timeout("1999998u"),
            Some(Duration::from_micros(1_999_998))
        );
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("x"), None);
        assert_eq!(parse_grpc_timeout(""), None);
    }
}
