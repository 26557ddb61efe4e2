//! Loopback ports for other programs to listen on (go-zero, etcd, redis-server, Toxiproxy).
//!
//! Such a port is found free here and released before the other program binds it. Two things
//! keep a stranger from taking it in between:
//! - it lies below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), where the
//!   kernel never picks a port for `bind(:0)` or `connect()`: the servers tests start on
//!   `127.0.0.1:0` and every client socket stay out of it;
//! - this process hands each port out once: a go-zero server's `ListenOn` cannot be another
//!   test's DevServer port.
//!
//! Taking the ephemeral range instead (bind `:0` and release) lost one CI run in the interop
//! suite: a go-zero server's port was taken by an HTTP/1.1 server before go-zero bound it.

use std::net::TcpListener;
use std::sync::Mutex;

/// Ports tried below the ephemeral range's lower end.
const POOL: u16 = 16_384;

/// The next port to try (an offset into the pool), per process; `None` before the first call.
static NEXT: Mutex<Option<u32>> = Mutex::new(None);

/// A loopback port nothing listens on now, handed out once per process.
///
/// # Panics
/// When no port of the pool can be bound.
pub fn free_port() -> u16 {
    let (low, size) = pool();
    assert!(
        size > 0,
        "no ports below the ephemeral range (it starts at {low})"
    );
    let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
    // A random start per process, so that test binaries run one after another (or by hand
    // side by side) do not begin at the same port.
    let offset = next.get_or_insert_with(|| {
        // std's per-process random hash keys, so no RNG crate for one number.
        let seed = std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), size);
        (seed % u64::from(size)) as u32
    });
    for _ in 0..size {
        let port = low + (*offset % u32::from(size)) as u16;
        *offset = offset.wrapping_add(1);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!(
        "no free loopback port in {low}..{}",
        u32::from(low) + u32::from(size)
    )
}

/// A loopback port nothing listens on (for "the server is down").
pub fn closed_port() -> u16 {
    free_port()
}

/// The pool: the `POOL` ports below the ephemeral range, never below 1024.
fn pool() -> (u16, u16) {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        // Linux's default; other systems use 49152 and up.
        .unwrap_or(32_768);
    let low = ephemeral_low.saturating_sub(POOL).max(1024);
    (low, ephemeral_low - low)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_and_never_repeat() {
        let (low, size) = pool();
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        let distinct: std::collections::HashSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice");
        for p in ports {
            assert!((low..low + size).contains(&p), "{p} outside {low}+{size}");
            assert!(
                TcpListener::bind(("127.0.0.1", p)).is_ok(),
                "{p} is not free"
            );
        }
    }
}
