//! The address a server publishes in etcd (go-zero `figureOutListenOn`, `core/netx/ip.go`), plus an
//! explicit advertise address that go-zero lacks (#1822, #3120, #4617).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

/// Environment variable read when `ListenOn` has no concrete host (Kubernetes downward API).
pub const POD_IP_ENV: &str = "POD_IP";

/// The `host:port` a server registers in etcd.
///
/// In order:
/// 1. `explicit` (the zrpc `AdvertiseAddr` setting), when set and non-empty: used as given; when it has
///    no port, the bound port is appended (`10.0.0.5` -> `10.0.0.5:8080`).
/// 2. `listen_on` when its host is concrete (not empty, `0.0.0.0`, `::` or `[::]`): its host with its
///    port, or with the bound port when it asked for port 0.
/// 3. Otherwise the host is the `POD_IP` environment variable, else the host's primary non-loopback
///    IPv4 (the source address of the default route, found without sending anything, else the first
///    local address in `/proc/net/fib_trie`), else loopback; the port is the bound one.
///
/// IPv6 hosts are bracketed (`[fd00::1]:8080`).
pub fn advertise_addr(listen_on: &str, bound: SocketAddr, explicit: Option<&str>) -> String {
    let pod_ip = std::env::var(POD_IP_ENV).ok();
    figure_out(listen_on, bound, explicit, pod_ip.as_deref(), internal_ipv4)
}

/// [`advertise_addr`] with the environment and the interface lookup passed in (for tests).
pub(crate) fn figure_out(
    listen_on: &str,
    bound: SocketAddr,
    explicit: Option<&str>,
    pod_ip: Option<&str>,
    internal_ip: impl FnOnce() -> Option<Ipv4Addr>,
) -> String {
    if let Some(explicit) = explicit.map(str::trim).filter(|s| !s.is_empty()) {
        return match split_host_port(explicit) {
            Some((host, port)) if !port.is_empty() => join(host, port),
            Some((host, _)) => join(host, &bound.port().to_string()),
            None => join(explicit, &bound.port().to_string()),
        };
    }
    let (host, port) = split_host_port(listen_on.trim()).unwrap_or((listen_on.trim(), ""));
    let port = match port.parse::<u16>() {
        Ok(p) if p != 0 => p.to_string(),
        _ => bound.port().to_string(),
    };
    if !is_wildcard(host) {
        return join(host, &port);
    }
    if let Some(ip) = pod_ip.map(str::trim).filter(|s| !s.is_empty()) {
        return join(ip, &port);
    }
    match internal_ip() {
        Some(ip) => join(&ip.to_string(), &port),
        None if bound.is_ipv6() => join("::1", &port),
        None => join("127.0.0.1", &port),
    }
}

fn is_wildcard(host: &str) -> bool {
    match host.trim_start_matches('[').trim_end_matches(']') {
        "" => true,
        h => h.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified()),
    }
}

/// Splits `host:port`, `[v6]:port`, `[v6]`, `:port`; a bare IPv6 literal (`fd00::1`) has no port.
fn split_host_port(s: &str) -> Option<(&str, &str)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return Some((host, after.strip_prefix(':').unwrap_or("")));
    }
    if s.parse::<IpAddr>().is_ok() {
        return Some((s, ""));
    }
    s.rsplit_once(':')
}

/// `host:port`, bracketing IPv6 literals.
fn join(host: &str, port: &str) -> String {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The host's primary non-loopback IPv4 (go-zero `netx.InternalIp`).
fn internal_ipv4() -> Option<Ipv4Addr> {
    route_source_ipv4().or_else(|| {
        let trie = std::fs::read_to_string("/proc/net/fib_trie").ok()?;
        local_ipv4s_from_fib_trie(&trie).into_iter().next()
    })
}

/// The source address the kernel would use for the default route: `connect()` on a UDP socket only
/// selects a route and sends nothing. 198.18.0.1 is a benchmarking address (RFC 2544), never answered.
fn route_source_ipv4() -> Option<Ipv4Addr> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    socket.connect((Ipv4Addr::new(198, 18, 0, 1), 9)).ok()?;
    match socket.local_addr().ok()?.ip() {
        IpAddr::V4(ip) if !ip.is_loopback() && !ip.is_unspecified() => Some(ip),
        _ => None,
    }
}

/// Local (`/32 host LOCAL`) non-loopback IPv4 addresses listed in `/proc/net/fib_trie`, in order.
pub(crate) fn local_ipv4s_from_fib_trie(trie: &str) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut last_ip: Option<Ipv4Addr> = None;
    for line in trie.lines() {
        let t = line.trim();
        if let Some(ip) = t
            .strip_prefix("|-- ")
            .and_then(|s| s.parse::<Ipv4Addr>().ok())
        {
            last_ip = Some(ip);
        } else if t.starts_with("/32 host LOCAL")
            && let Some(ip) = last_ip.take()
            && !ip.is_loopback()
            && !out.contains(&ip)
        {
            out.push(ip);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn fo(listen: &str, b: &str, explicit: Option<&str>, pod: Option<&str>) -> String {
        figure_out(listen, bound(b), explicit, pod, || {
            Some(Ipv4Addr::new(10, 1, 2, 3))
        })
    }

    #[test]
    fn concrete_listen_on_is_used_as_is() {
        assert_eq!(
            fo("127.0.0.1:8080", "127.0.0.1:8080", None, Some("9.9.9.9")),
            "127.0.0.1:8080"
        );
        assert_eq!(
            fo("svc.local:9000", "10.0.0.1:9000", None, None),
            "svc.local:9000"
        );
    }

    #[test]
    fn port_zero_takes_the_bound_port() {
        assert_eq!(
            fo("127.0.0.1:0", "127.0.0.1:43210", None, None),
            "127.0.0.1:43210"
        );
        assert_eq!(fo("0.0.0.0:0", "0.0.0.0:5555", None, None), "10.1.2.3:5555");
    }

    #[test]
    fn wildcard_uses_pod_ip_then_internal_ip() {
        assert_eq!(
            fo("0.0.0.0:8080", "0.0.0.0:8080", None, Some("172.16.0.9")),
            "172.16.0.9:8080"
        );
        assert_eq!(
            fo("0.0.0.0:8080", "0.0.0.0:8080", None, None),
            "10.1.2.3:8080"
        );
        assert_eq!(fo(":8080", "0.0.0.0:8080", None, Some("")), "10.1.2.3:8080");
        assert_eq!(fo("[::]:8080", "[::]:8080", None, None), "10.1.2.3:8080");
    }

    #[test]
    fn explicit_advertise_addr_wins() {
        assert_eq!(
            fo(
                "0.0.0.0:8080",
                "0.0.0.0:8080",
                Some("lb.example:443"),
                Some("1.1.1.1")
            ),
            "lb.example:443"
        );
        assert_eq!(
            fo("127.0.0.1:8080", "127.0.0.1:8080", Some("10.0.0.5"), None),
            "10.0.0.5:8080"
        );
        assert_eq!(
            fo("0.0.0.0:0", "0.0.0.0:7000", Some("fd00::5"), None),
            "[fd00::5]:7000"
        );
        assert_eq!(
            fo("127.0.0.1:1", "127.0.0.1:1", Some("  "), None),
            "127.0.0.1:1"
        );
    }

    #[test]
    fn ipv6_is_bracketed() {
        assert_eq!(fo("[::1]:8080", "[::1]:8080", None, None), "[::1]:8080");
        assert_eq!(
            fo("[::]:8080", "[::]:8080", None, Some("fd00::7")),
            "[fd00::7]:8080"
        );
        let none = figure_out("[::]:0", bound("[::]:9000"), None, None, || None);
        assert_eq!(none, "[::1]:9000");
    }

    #[test]
    fn fib_trie_lists_local_non_loopback_addresses() {
        let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n\
                    \x20    +-- 127.0.0.0/8 2 0 2\n           |-- 127.0.0.1\n              /32 host LOCAL\n\
                    \x20       |-- 127.255.255.255\n           /32 link BROADCAST\n\
                    \x20    +-- 192.0.2.0/24 2 0 2\n           |-- 192.0.2.0\n              /24 link UNICAST\n\
                    \x20          |-- 192.0.2.2\n              /32 host LOCAL\n\
                    Local:\n           |-- 192.0.2.2\n              /32 host LOCAL\n";
        assert_eq!(
            local_ipv4s_from_fib_trie(trie),
            vec![Ipv4Addr::new(192, 0, 2, 2)]
        );
    }
}
