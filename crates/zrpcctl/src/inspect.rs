//! `zrpcctl inspect <host:port>`: a running process's admin view (`GET /admin/state` on its
//! DevServer) as text for a terminal, or as the raw JSON (`--json`); `--watch` reads it again
//! every second.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::Value;

use crate::Result;

/// The view of a process with many clients and methods stays well under this.
const MAX_ANSWER: u64 = 8 << 20;

/// The admin view of the DevServer at `addr`, as JSON.
pub(crate) async fn fetch(addr: &str, token: Option<&str>) -> Result<Value> {
    let body = crate::admin::exchange(addr, "GET", "/admin/state", token, MAX_ANSWER).await?;
    serde_json::from_str(&body)
        .map_err(|e| format!("DevServer at {addr}: /admin/state is not JSON ({e})").into())
}

/// Prints the view (`json`: as the server sent it), again every second with `watch` (`times`
/// views in all, for ever without).
pub(crate) async fn run(
    addr: &str,
    token: Option<&str>,
    json: bool,
    watch: bool,
    times: Option<u64>,
) -> Result<()> {
    let mut shown = 0u64;
    loop {
        let view = fetch(addr, token).await?;
        let out = if json {
            serde_json::to_string_pretty(&view)? + "\n"
        } else {
            render(&view)
        };
        if watch && !json {
            // clear the screen and go home, as `watch(1)` does
            print!("\x1b[2J\x1b[H");
        }
        print!("{out}");
        shown += 1;
        if !watch || times.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A number of milliseconds as `1.23ms`, `-` when absent.
fn ms(v: &Value) -> String {
    v.as_f64()
        .map_or_else(|| "-".to_owned(), |ms| format!("{ms:.2}ms"))
}

/// A JSON value as a table cell.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.to_owned(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.1}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// Rows under a header, each column as wide as its widest cell.
fn table(out: &mut String, indent: &str, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::from(indent);
        for (c, w) in cells.zip(&widths) {
            let _ = write!(l, "{c:<w$}  ");
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(out, &mut header.iter().copied());
    for row in rows {
        line(out, &mut row.iter().map(String::as_str));
    }
}

/// The view as text.
pub(crate) fn render(v: &Value) -> String {
    let mut out = String::new();
    let features: Vec<String> = v["build"]["features"]
        .as_array()
        .map(|f| f.iter().map(cell).collect())
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "zrpc {} ({}), phase {}",
        cell(&v["build"]["version"]),
        features.join(", "),
        cell(&v["phase"])
    );
    server(
        &mut out,
        &v["server"],
        &v["registration"],
        &v["taken_at_unix_ms"],
    );
    clients(&mut out, &v["clients"]);
    out
}

fn server(out: &mut String, s: &Value, registration: &Value, now_ms: &Value) {
    if s.is_null() {
        out.push_str("server: not serving yet\n");
        return;
    }
    let _ = writeln!(
        out,
        "\nserver {} on {}: {} connections open",
        cell(&s["name"]),
        cell(&s["listen_on"]),
        cell(&s["connections"]["open"])
    );
    let peers: Vec<String> = s["connections"]["peers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let calls = p["open_calls"]
                .as_u64()
                .map_or(String::new(), |n| format!(", {n} calls open"));
            format!("{} ({}{calls})", cell(&p["addr"]), cell(&p["connections"]))
        })
        .collect();
    if !peers.is_empty() {
        let _ = writeln!(out, "peers: {}", peers.join(", "));
    }
    let _ = writeln!(
        out,
        "registration: {}{}{}",
        cell(&registration["state"]),
        registration["key"]
            .as_str()
            .map_or(String::new(), |k| format!(", key {k}")),
        registration["lease"]
            .as_i64()
            .map_or(String::new(), |l| format!(", lease {l:x}")),
    );
    if let (Some(renewed), Some(now)) = (
        registration["last_keepalive_unix_ms"].as_u64(),
        now_ms.as_u64(),
    ) {
        let ago = now.saturating_sub(renewed) as f64 / 1000.0;
        let _ = writeln!(out, "  lease last renewed {ago:.1}s ago");
    }
    match s["limit"].as_array() {
        None => out.push_str("concurrency limit: off\n"),
        Some(limits) => {
            out.push_str("concurrency limit:\n");
            let rows: Vec<Vec<String>> = limits
                .iter()
                .map(|l| {
                    vec![
                        cell(&l["method"]),
                        cell(&l["limit"]),
                        cell(&l["inflight"]),
                        ms(&l["min_rtt_ms"]),
                        ms(&l["sample_rtt_ms"]),
                        cell(&l["measuring"]),
                    ]
                })
                .collect();
            table(
                out,
                "  ",
                &[
                    "METHOD",
                    "LIMIT",
                    "IN FLIGHT",
                    "MIN RTT",
                    "SAMPLE RTT",
                    "MEASURING",
                ],
                &rows,
            );
        }
    }
    let sh = &s["shedder"];
    if sh.is_null() {
        out.push_str("shedder: off (CpuThreshold 0)\n");
    } else {
        let _ = writeln!(
            out,
            "shedder: CPU {} of threshold {} millicpu{}, {} in flight (average {}), capacity {}, \
             min response time {}",
            cell(&sh["cpu_millicpu"]),
            cell(&sh["threshold_millicpu"]),
            if sh["hot"] == true { " (hot)" } else { "" },
            cell(&sh["inflight"]),
            cell(&sh["avg_inflight"]),
            cell(&sh["max_flight"]),
            ms(&sh["min_rt_ms"]),
        );
    }
    breakers(out, "", &s["breakers"]);
    let d = &s["drops"];
    let total = reasons(&d["total"]);
    // a window shorter than its name while the readings it needs are younger
    let recent = |name: &str, full: u64, w: &Value| match w["seconds"].as_u64() {
        None => format!("{name}: no earlier reading"),
        Some(s) if s < full => format!("{name}: {} (over {s}s)", reasons(&w["by_reason"])),
        Some(_) => format!("{name}: {}", reasons(&w["by_reason"])),
    };
    let _ = writeln!(
        out,
        "drops: {total}; {}; {}",
        recent("last 1m", 60, &d["last_1m"]),
        recent("last 10m", 600, &d["last_10m"])
    );
}

/// `limit 12, tier 3`, or `none`.
fn reasons(v: &Value) -> String {
    let list: Vec<String> = v
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, n)| n.as_u64().unwrap_or(0) > 0)
                .map(|(r, n)| format!("{r} {n}"))
                .collect()
        })
        .unwrap_or_default();
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}

fn breakers(out: &mut String, indent: &str, b: &Value) {
    match b.as_array() {
        None => {
            let _ = writeln!(out, "{indent}breakers: off");
        }
        Some(list) if list.is_empty() => {
            let _ = writeln!(out, "{indent}breakers: none yet");
        }
        Some(list) => {
            let _ = writeln!(out, "{indent}breakers:");
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|b| {
                    let ratio = b["drop_ratio"].as_f64().unwrap_or(0.0);
                    vec![
                        cell(&b["method"]),
                        if ratio > 0.0 { "open" } else { "closed" }.to_owned(),
                        format!("{:.0}%", ratio * 100.0),
                        cell(&b["accepts"]),
                        cell(&b["failures"]),
                        cell(&b["drops"]),
                        cell(&b["total"]),
                    ]
                })
                .collect();
            table(
                out,
                &format!("{indent}  "),
                &[
                    "METHOD", "STATE", "DROP", "ACCEPTS", "FAILURES", "DROPS", "TOTAL",
                ],
                &rows,
            );
        }
    }
}

fn clients(out: &mut String, c: &Value) {
    let list = c.as_array().map(Vec::as_slice).unwrap_or_default();
    let _ = writeln!(out, "\nclients: {}", list.len());
    for client in list {
        let r = &client["resolver"];
        let resolver = if let Some(p) = r["problem"].as_str() {
            format!("resolver problem: {p}")
        } else if r["ready"] == true {
            format!("resolver: {} endpoints", cell(&r["endpoints"]))
        } else {
            "resolver: no answer yet".to_owned()
        };
        let _ = writeln!(
            out,
            "  {} ({}), {resolver}",
            cell(&client["target"]),
            cell(&client["balancer"])
        );
        let rows: Vec<Vec<String>> = client["endpoints"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|e| {
                vec![
                    cell(&e["addr"]),
                    cell(&e["state"]),
                    ms(&e["ewma_ms"]),
                    cell(&e["inflight"]),
                    e["success"]
                        .as_f64()
                        .map_or_else(|| "-".to_owned(), |s| format!("{s:.0}")),
                    cell(&e["requests"]),
                ]
            })
            .collect();
        table(
            out,
            "    ",
            &["ENDPOINT", "STATE", "EWMA", "IN FLIGHT", "SUCCESS", "CALLS"],
            &rows,
        );
        breakers(out, "    ", &client["breakers"]);
        if let Some(left) = client["retry_budget"]["remaining"].as_f64() {
            let _ = writeln!(out, "    retry budget: {left:.1} retries left");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn renders_a_server_refusing_calls_and_a_client_with_a_slow_endpoint() {
        let view = json!({
            "build": { "version": "0.1.0", "features": ["devserver", "etcd"] },
            "phase": "serving",
            "taken_at_unix_ms": 1_000_000_u64,
            "registration": { "paused": false, "state": "registered", "key": "hello.rpc/7", "lease": 7,
                              "last_keepalive_unix_ms": 997_500_u64 },
            "server": {
                "name": "hello.rpc", "listen_on": "127.0.0.1:8080",
                "connections": { "open": 3, "peers": [
                    { "addr": "10.0.0.1", "connections": 2, "open_calls": 5 },
                    { "addr": "10.0.0.2", "connections": 1, "open_calls": null },
                ] },
                "limit": [{ "method": "*", "limit": 12, "inflight": 12, "min_rtt_ms": 1.0,
                            "sample_rtt_ms": 2.5, "measuring": false }],
                "shedder": null,
                "breakers": [],
                "drops": { "total": { "limit": 40, "tier": 0 }, "last_1m": null,
                           "last_10m": { "seconds": 30, "by_reason": { "limit": 40 } } },
            },
            "clients": [{
                "target": "direct:///a:1,b:2", "balancer": "p2c_ewma",
                "resolver": { "ready": true, "problem": null, "endpoints": 2 },
                "endpoints": [
                    { "addr": "a:1", "state": "healthy", "ewma_ms": 1.25, "inflight": 1, "success": 1000.0, "requests": 90 },
                    { "addr": "b:2", "state": "probing", "ewma_ms": 50.0, "inflight": 0, "success": 1000.0, "requests": 10 },
                ],
                "breakers": null,
                "retry_budget": { "remaining": 10.0 },
            }],
        });
        let text = render(&view);
        for line in [
            "zrpc 0.1.0 (devserver, etcd), phase serving",
            "server hello.rpc on 127.0.0.1:8080: 3 connections open",
            "peers: 10.0.0.1 (2, 5 calls open), 10.0.0.2 (1)",
            "registration: registered, key hello.rpc/7, lease 7",
            "  lease last renewed 2.5s ago",
            "  METHOD  LIMIT  IN FLIGHT  MIN RTT  SAMPLE RTT  MEASURING",
            "  *       12     12         1.00ms   2.50ms      no",
            "shedder: off (CpuThreshold 0)",
            "breakers: none yet",
            "drops: limit 40; last 1m: no earlier reading; last 10m: limit 40 (over 30s)",
            "  direct:///a:1,b:2 (p2c_ewma), resolver: 2 endpoints",
            "    a:1       healthy  1.25ms   1          1000     90",
            "    b:2       probing  50.00ms  0          1000     10",
            "    breakers: off",
            "    retry budget: 10.0 retries left",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
