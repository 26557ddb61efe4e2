//! `zrpcctl etcd ls` and `zrpcctl etcd watch`: what is registered, for zrpc and go-zero alike.
//!
//! Both register a service as `<Key>/<lease ID in decimal>` (or `<Key>/<ID>` with a fixed ID)
//! with the value `host:port`, under a lease of `TTL` seconds (10 by default), see zrpc's
//! `registry` and go-zero's `core/discov/internal/registry.go`. `ls` groups the keys by the part
//! before the last `/` (the service key) and shows each endpoint with its lease's remaining TTL.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, EventType, GetOptions, WatchOptions};

use crate::{Result, fail};

/// How long to wait for etcd before saying it is unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// One registered endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) lease: i64,
    /// Remaining and granted TTL in seconds (`None`: no lease, or it expired meanwhile).
    pub(crate) ttl: Option<(i64, i64)>,
}

async fn connect(hosts: &[String]) -> Result<Client> {
    let options = ConnectOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(CONNECT_TIMEOUT);
    let mut client = Client::connect(hosts, Some(options))
        .await
        .map_err(|e| unreachable(hosts, &e))?;
    // `connect` is lazy about some failures: ask for the status to know etcd answers.
    client.status().await.map_err(|e| unreachable(hosts, &e))?;
    Ok(client)
}

fn unreachable(hosts: &[String], e: &etcd_client::Error) -> Box<dyn std::error::Error> {
    fail(format!(
        "etcd at {} is unreachable: {e} (is it running? pass --etcd host:port[,host:port])",
        hosts.join(",")
    ))
}

/// Every key under `prefix` (all keys when empty), with lease TTLs.
pub(crate) async fn list(hosts: &[String], prefix: &str) -> Result<Vec<Endpoint>> {
    let mut client = connect(hosts).await?;
    let options = if prefix.is_empty() {
        GetOptions::new().with_all_keys()
    } else {
        GetOptions::new().with_prefix()
    };
    let resp = client
        .get(prefix, Some(options))
        .await
        .map_err(|e| fail(format!("etcd get {prefix:?}: {e}")))?;
    let mut out = Vec::new();
    for kv in resp.kvs() {
        let lease = kv.lease();
        let ttl = if lease == 0 {
            None
        } else {
            match client.lease_time_to_live(lease, None).await {
                Ok(t) if t.ttl() >= 0 => Some((t.ttl(), t.granted_ttl())),
                _ => None,
            }
        };
        out.push(Endpoint {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            value: String::from_utf8_lossy(kv.value()).into_owned(),
            lease,
            ttl,
        });
    }
    Ok(out)
}

/// The `ls` table: services (key prefixes) with their endpoints.
pub(crate) fn render(endpoints: &[Endpoint]) -> String {
    if endpoints.is_empty() {
        return "no keys\n".to_owned();
    }
    let mut services: BTreeMap<&str, Vec<&Endpoint>> = BTreeMap::new();
    for e in endpoints {
        let service = e.key.rsplit_once('/').map_or(e.key.as_str(), |(s, _)| s);
        services.entry(service).or_default().push(e);
    }
    let mut out = String::new();
    for (service, eps) in services {
        let _ = writeln!(
            out,
            "{service}  ({} endpoint{})",
            eps.len(),
            if eps.len() == 1 { "" } else { "s" }
        );
        for e in eps {
            let lease = match (e.lease, e.ttl) {
                (0, _) => "no lease".to_owned(),
                (id, Some((ttl, granted))) => format!("lease {id} ({id:x}) ttl {ttl}s/{granted}s"),
                (id, None) => format!("lease {id} ({id:x}) expired"),
            };
            let _ = writeln!(out, "  {:<22} {}  {lease}", e.value, e.key);
        }
    }
    out
}

/// Prints the current endpoints under `key`, then every change until Ctrl-C (or `max_events`).
pub(crate) async fn watch(hosts: &[String], key: &str, max_events: Option<usize>) -> Result<()> {
    let current = list(hosts, key).await?;
    print!("{}", render(&current));
    let mut client = connect(hosts).await?;
    let mut stream = client
        .watch(key, Some(WatchOptions::new().with_prefix()))
        .await
        .map_err(|e| fail(format!("etcd watch {key:?}: {e}")))?;
    println!("watching {key} (Ctrl-C to stop)");
    let mut seen = 0;
    loop {
        let resp = tokio::select! {
            msg = stream.message() => msg.map_err(|e| fail(format!("etcd watch {key:?}: {e}")))?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let Some(resp) = resp else {
            return Err(fail(format!("etcd closed the watch on {key:?}")));
        };
        for event in resp.events() {
            let Some(kv) = event.kv() else { continue };
            let k = String::from_utf8_lossy(kv.key());
            match event.event_type() {
                EventType::Put => println!(
                    "PUT    {k} = {} (lease {})",
                    String::from_utf8_lossy(kv.value()),
                    kv.lease()
                ),
                EventType::Delete => println!("DELETE {k}"),
            }
            seen += 1;
            if max_events.is_some_and(|m| seen >= m) {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_endpoints_by_service_key() {
        let ep = |key: &str, value: &str, lease, ttl| Endpoint {
            key: key.into(),
            value: value.into(),
            lease,
            ttl,
        };
        let table = render(&[
            ep("greeter.rpc/7587", "127.0.0.1:8080", 7587, Some((9, 10))),
            ep("greeter.rpc/7588", "127.0.0.1:8081", 7588, None),
            ep("plain", "x", 0, None),
        ]);
        assert_eq!(
            table,
            "greeter.rpc  (2 endpoints)\n  \
             127.0.0.1:8080         greeter.rpc/7587  lease 7587 (1da3) ttl 9s/10s\n  \
             127.0.0.1:8081         greeter.rpc/7588  lease 7588 (1da4) expired\n\
             plain  (1 endpoint)\n  x                      plain  no lease\n"
        );
        assert_eq!(render(&[]), "no keys\n");
    }
}
