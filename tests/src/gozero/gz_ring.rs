//! `gz-ring`: where go-zero's `consistent_hash` ring (go-zero `core/hash`) sends each key.

use std::io::Write;
use std::process::{Command, Stdio};

use serde::Deserialize;

use super::Programs;

/// One line of `gz-ring`.
#[derive(Debug, Clone, Deserialize)]
struct Owner {
    key: String,
    addr: String,
}

/// go-zero's server for each of `keys` on the ring of `addrs`: `(key, addr)` in key order.
///
/// # Panics
/// When `gz-ring` cannot run or fails.
pub fn go_zero_owners(p: &Programs, addrs: &[String], keys: &[String]) -> Vec<(String, String)> {
    let mut child = Command::new(&p.ring)
        .arg("-addrs")
        .arg(addrs.join(","))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", p.ring.display()));
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = keys.join("\n") + "\n";
    // gz-ring reads all of it before it exits: write from a thread while its output is read
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("gz-ring output");
    writer
        .join()
        .expect("writer thread")
        .expect("write keys to gz-ring");
    assert!(
        out.status.success(),
        "gz-ring failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let o: Owner = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            (o.key, o.addr)
        })
        .collect()
}
