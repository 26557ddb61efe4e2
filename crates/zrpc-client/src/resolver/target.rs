//! Parsing of go-zero's target strings (reference §3.4, `zrpc/resolver/internal/targets`).
//!
//! | form | meaning |
//! |---|---|
//! | `direct:///h1:p1,h2:p2` | fixed endpoints (the authority is ignored) |
//! | `etcd:///h1:2379,h2:2379?key=<url-encoded key>` | etcd discovery (go-zero >= 1.10.2) |
//! | `etcd://h1:2379/key`, `discov://h1,h2/key` | legacy etcd forms: hosts in the authority, key in the path |
//! | `dns:///host:port` (authority ignored) | DNS, re-resolved periodically |
//! | `k8s://namespace/service:port`, `k8s:///service:port` (namespace `default`) | Kubernetes EndpointSlices; the port is a number, a port name (zrpc addition) or absent |
//! | `host:port` (no scheme) | one fixed endpoint (grpc-go's `passthrough`) |

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// A parsed client target.
///
/// # Examples
///
/// ```
/// use zrpc_client::resolver::Target;
///
/// let t: Target = "etcd:///127.0.0.1:2379?key=user.rpc".parse().unwrap();
/// assert_eq!(
///     t,
///     Target::Etcd { hosts: vec!["127.0.0.1:2379".into()], key: "user.rpc".into() }
/// );
/// assert!("ftp://ns/svc:8080".parse::<Target>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Target {
    /// Fixed endpoints (`host:port` each).
    Direct {
        /// The endpoints, in the order given.
        endpoints: Vec<String>,
    },
    /// etcd discovery of the values under `key/`.
    Etcd {
        /// etcd endpoints.
        hosts: Vec<String>,
        /// The service key (without the trailing `/`).
        key: String,
    },
    /// DNS name re-resolved periodically.
    Dns {
        /// Host name (or IP literal).
        host: String,
        /// Port.
        port: u16,
    },
    /// Kubernetes discovery: the ready endpoints of a Service's EndpointSlices.
    K8s {
        /// The namespace (`default` when the target's authority is empty).
        namespace: String,
        /// The Service name.
        service: String,
        /// The port to dial on each endpoint; `None` = the slices' only port.
        port: Option<K8sPort>,
    },
}

/// The port of a `k8s://` target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum K8sPort {
    /// A port number, dialled as given on every endpoint address (go-zero's meaning).
    Number(u16),
    /// A port name, looked up in each EndpointSlice's `ports` (a zrpc addition: the slices
    /// carry the container port, which may differ from the Service port).
    Name(String),
}

impl fmt::Display for K8sPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            K8sPort::Number(n) => write!(f, "{n}"),
            K8sPort::Name(name) => f.write_str(name),
        }
    }
}

impl Target {
    /// Parses a target string.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTarget`] naming the part that is wrong (scheme, hosts, key, port...).
    pub fn parse(text: &str) -> Result<Target, Error> {
        let bad = |reason: String| Error::InvalidTarget {
            target: text.to_owned(),
            reason,
        };
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(bad("empty target".into()));
        }
        let Some((scheme, rest)) = trimmed.split_once("://") else {
            // grpc-go's passthrough: a bare `host:port`.
            check_addr(trimmed).map_err(bad)?;
            return Ok(Target::Direct {
                endpoints: vec![trimmed.to_owned()],
            });
        };
        let (authority, path_and_query) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        match scheme.to_ascii_lowercase().as_str() {
            "direct" => {
                let endpoints = split_list(path);
                if endpoints.is_empty() {
                    return Err(bad(
                        "no endpoints in the path (expected direct:///host:port,host:port)".into(),
                    ));
                }
                for e in &endpoints {
                    check_addr(e).map_err(bad)?;
                }
                Ok(Target::Direct { endpoints })
            }
            "etcd" | "discov" if authority.is_empty() => {
                // etcd:///h1,h2?key=k
                let hosts = split_list(path);
                if hosts.is_empty() {
                    return Err(bad("empty etcd hosts".into()));
                }
                let key = query
                    .and_then(|q| {
                        q.split('&')
                            .filter_map(|kv| kv.split_once('='))
                            .find(|(k, _)| *k == "key")
                            .map(|(_, v)| v)
                    })
                    .ok_or_else(|| {
                        bad("missing `key` query parameter (expected etcd:///hosts?key=k)".into())
                    })
                    .and_then(|v| query_unescape(v).map_err(bad))?;
                if key.is_empty() {
                    return Err(bad("empty etcd key".into()));
                }
                Ok(Target::Etcd { hosts, key })
            }
            "etcd" | "discov" => {
                // legacy: etcd://h1,h2/key
                let hosts = split_list(authority);
                let key = path.trim_end_matches('/');
                if key.is_empty() {
                    return Err(bad("empty etcd key (expected etcd://hosts/key)".into()));
                }
                Ok(Target::Etcd {
                    hosts,
                    key: key.to_owned(),
                })
            }
            "dns" => {
                let (host, port) = path.rsplit_once(':').ok_or_else(|| {
                    bad(format!(
                        "dns target {path:?} has no port (expected dns:///host:port)"
                    ))
                })?;
                let host = host.trim_start_matches('[').trim_end_matches(']');
                if host.is_empty() {
                    return Err(bad("empty host in dns target".into()));
                }
                let port = port
                    .parse::<u16>()
                    .map_err(|_| bad(format!("invalid port {port:?} in dns target")))?;
                Ok(Target::Dns {
                    host: host.to_owned(),
                    port,
                })
            }
            "k8s" => parse_k8s(authority, path).map_err(bad),
            other => Err(bad(format!(
                "unsupported scheme {other:?} (supported: direct, etcd, discov, dns, k8s)"
            ))),
        }
    }

    /// The service name used in go-zero's dial error: the last path segment (the etcd key's last
    /// component, the DNS host, or the endpoint list).
    #[must_use]
    pub fn service_name(&self) -> String {
        match self {
            Target::Direct { endpoints } => endpoints.join(","),
            Target::Etcd { key, .. } => key.rsplit('/').next().unwrap_or(key).to_owned(),
            Target::Dns { host, .. } => host.clone(),
            Target::K8s { service, .. } => service.clone(),
        }
    }
}

/// `k8s://namespace/service[:port]` (go-zero's `kube.ParseTarget`; it knows no other spelling, so
/// neither does zrpc). Names are checked as Kubernetes does (RFC 1123 labels) so that a typo is
/// an error here, not an empty watch.
fn parse_k8s(authority: &str, path: &str) -> Result<Target, String> {
    let namespace = if authority.is_empty() {
        "default"
    } else {
        authority
    };
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        return Err("no service (expected k8s://namespace/service:port)".into());
    }
    let (service, port) = match path.split_once(':') {
        Some((s, p)) => (s, Some(p)),
        None => (path, None),
    };
    check_label("namespace", namespace)?;
    if service.contains('.') {
        return Err(format!(
            "service {service:?} contains a dot: write the namespace in the authority \
             (k8s://namespace/service:port), not service.namespace"
        ));
    }
    check_label("service", service)?;
    let port = match port {
        None => None,
        Some("") => return Err("empty port after ':' (expected a number or a port name)".into()),
        Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(K8sPort::Number(n)),
            _ => return Err(format!("invalid port {p:?} (1-65535 or a port name)")),
        },
        Some(p) => {
            check_label("port name", p)?;
            Some(K8sPort::Name(p.to_owned()))
        }
    };
    Ok(Target::K8s {
        namespace: namespace.to_owned(),
        service: service.to_owned(),
        port,
    })
}

/// An RFC 1123 label: 1-63 of `a-z0-9-`, starting and ending alphanumeric.
fn check_label(what: &str, s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid {what} {s:?} (a Kubernetes name: 1-63 lowercase letters, digits or '-', \
             starting and ending with a letter or digit)"
        ))
    }
}

impl FromStr for Target {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Target::parse(s)
    }
}

/// At most this many endpoints (or etcd hosts) are spelt out in a target's [name](Target::name).
const NAMED_ENTRIES: usize = 3;

impl Target {
    /// The target's name in status messages, logs, breaker names and metric labels: its
    /// canonical form, with a list of more than a few endpoints (or etcd hosts) cut to the first
    /// ones, how many more and a hash of the whole, so that two targets never share a name. A
    /// message or label that carries it stays small whatever the fleet: spelt out, a client of
    /// 1,000 direct endpoints put ~16 KB into every error it reported, which a service passing
    /// the status on sends in a `grpc-message` header, past common header-size limits.
    pub(crate) fn name(&self) -> String {
        match self {
            Target::Direct { endpoints } if endpoints.len() > NAMED_ENTRIES => {
                format!("direct:///{}", self.abridged(endpoints))
            }
            Target::Etcd { hosts, key } if hosts.len() > NAMED_ENTRIES => {
                format!("etcd:///{}?key={}", self.abridged(hosts), query_escape(key))
            }
            _ => self.to_string(),
        }
    }

    /// The first entries of `list`, then how many more and a hash of the whole target.
    fn abridged(&self, list: &[String]) -> String {
        use std::hash::{Hash, Hasher};
        // std's SipHash with its fixed keys: the same name for the same target in a process,
        // which is all a name needs (breakers and metrics are per process).
        let mut h = std::hash::DefaultHasher::new();
        self.to_string().hash(&mut h);
        format!(
            "{},...(+{} more, #{:016x})",
            list[..NAMED_ENTRIES].join(","),
            list.len() - NAMED_ENTRIES,
            h.finish()
        )
    }
}

impl fmt::Display for Target {
    /// The canonical form: `direct:///a,b`, `etcd:///h1,h2?key=k`, `dns:///host:port`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Direct { endpoints } => write!(f, "direct:///{}", endpoints.join(",")),
            Target::Etcd { hosts, key } => {
                write!(f, "etcd:///{}?key={}", hosts.join(","), query_escape(key))
            }
            Target::Dns { host, port } if host.contains(':') => write!(f, "dns:///[{host}]:{port}"),
            Target::Dns { host, port } => write!(f, "dns:///{host}:{port}"),
            Target::K8s {
                namespace,
                service,
                port: Some(port),
            } => write!(f, "k8s://{namespace}/{service}:{port}"),
            Target::K8s {
                namespace,
                service,
                port: None,
            } => write!(f, "k8s://{namespace}/{service}"),
        }
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

fn check_addr(addr: &str) -> Result<(), String> {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(format!(
            "endpoint {addr:?} has no port (expected host:port)"
        ));
    };
    if host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .is_empty()
    {
        return Err(format!("endpoint {addr:?} has an empty host"));
    }
    port.parse::<u16>()
        .map(|_| ())
        .map_err(|_| format!("endpoint {addr:?} has an invalid port {port:?}"))
}

/// Go's `url.QueryUnescape`: `%XX` and `+` as space.
fn query_unescape(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("invalid escape at byte {i} of key {s:?}"))?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("key {s:?} is not UTF-8 once unescaped"))
}

/// Go's `url.QueryEscape`.
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Target {
        Target::parse(s).unwrap()
    }

    fn err(s: &str) -> String {
        Target::parse(s).unwrap_err().to_string()
    }

    #[test]
    fn parses_all_schemes() {
        assert_eq!(
            p("direct:///127.0.0.1:1,127.0.0.1:2"),
            Target::Direct {
                endpoints: vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()]
            }
        );
        assert_eq!(
            p("direct://ignored/a:1"),
            Target::Direct {
                endpoints: vec!["a:1".into()]
            }
        );
        assert_eq!(
            p("etcd:///h1:2379,h2:2379?key=user.rpc"),
            Target::Etcd {
                hosts: vec!["h1:2379".into(), "h2:2379".into()],
                key: "user.rpc".into()
            }
        );
        assert_eq!(
            p("etcd:///h1:2379?key=a%2Fb+c"),
            Target::Etcd {
                hosts: vec!["h1:2379".into()],
                key: "a/b c".into()
            }
        );
        assert_eq!(
            p("etcd://h1:2379/user.rpc"),
            Target::Etcd {
                hosts: vec!["h1:2379".into()],
                key: "user.rpc".into()
            }
        );
        assert_eq!(
            p("discov://h1,h2/a/b"),
            Target::Etcd {
                hosts: vec!["h1".into(), "h2".into()],
                key: "a/b".into()
            }
        );
        assert_eq!(
            p("dns:///svc.local:8080"),
            Target::Dns {
                host: "svc.local".into(),
                port: 8080
            }
        );
        assert_eq!(
            p("dns://8.8.8.8/svc:80"),
            Target::Dns {
                host: "svc".into(),
                port: 80
            }
        );
        assert_eq!(
            p("127.0.0.1:9"),
            Target::Direct {
                endpoints: vec!["127.0.0.1:9".into()]
            }
        );
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "direct:///a:1,b:2",
            "etcd:///h1:2379,h2:2379?key=a%2Fb",
            "dns:///svc:80",
            "k8s://ns/svc:8080",
            "k8s://ns/svc:grpc",
            "k8s://default/svc",
        ] {
            assert_eq!(p(s).to_string(), s);
            assert_eq!(p(&p(s).to_string()), p(s));
        }
    }

    #[test]
    fn errors_name_the_wrong_part() {
        assert!(err("ftp://ns/svc:80").contains("unsupported scheme \"ftp\""));
        assert!(err("k8s://ns/").contains("no service"));
        assert!(err("k8s://ns/svc.other:80").contains("contains a dot"));
        assert!(err("k8s://Ns/svc:80").contains("invalid namespace \"Ns\""));
        assert!(err("k8s://ns/svc_1:80").contains("invalid service \"svc_1\""));
        assert!(err("k8s://ns/svc:").contains("empty port"));
        assert!(err("k8s://ns/svc:70000").contains("invalid port \"70000\""));
        assert!(err("k8s://ns/svc:0").contains("invalid port \"0\""));
        assert!(err("k8s://ns/svc:-x").contains("invalid port name"));
        assert!(err("direct:///").contains("no endpoints"));
        assert!(err("direct:///a:1,b").contains("\"b\" has no port"));
        assert!(err("direct:///a:x").contains("invalid port \"x\""));
        assert!(err("etcd:///h1:2379").contains("missing `key`"));
        assert!(err("etcd:///?key=k").contains("empty etcd hosts"));
        assert!(err("etcd:///h:1?key=").contains("empty etcd key"));
        assert!(err("etcd://h:1/").contains("empty etcd key"));
        assert!(err("dns:///svc").contains("has no port"));
        assert!(err("dns:///svc:99999").contains("invalid port"));
        assert!(err("").contains("empty target"));
        assert!(err("etcd:///h:1?key=%zz").contains("invalid escape"));
    }

    #[test]
    fn parses_k8s_like_go_zero() {
        let k8s = |ns: &str, svc: &str, port: Option<K8sPort>| Target::K8s {
            namespace: ns.into(),
            service: svc.into(),
            port,
        };
        assert_eq!(
            p("k8s://prod/user-rpc:8080"),
            k8s("prod", "user-rpc", Some(K8sPort::Number(8080)))
        );
        assert_eq!(
            p("k8s:///user-rpc:8080"),
            k8s("default", "user-rpc", Some(K8sPort::Number(8080)))
        );
        assert_eq!(p("k8s://prod/user-rpc"), k8s("prod", "user-rpc", None));
        assert_eq!(
            p("K8S://prod/user-rpc:grpc"),
            k8s("prod", "user-rpc", Some(K8sPort::Name("grpc".into())))
        );
        assert_eq!(p("k8s://prod/user-rpc:1").service_name(), "user-rpc");
    }

    #[test]
    fn service_name_is_last_segment() {
        assert_eq!(p("etcd://h/a/b/user.rpc").service_name(), "user.rpc");
        assert_eq!(p("dns:///svc:1").service_name(), "svc");
    }

    #[test]
    fn a_long_target_is_named_by_its_first_endpoints_a_count_and_a_hash() {
        let list = |n: u16| {
            (0..n)
                .map(|i| format!("127.0.0.1:{}", 40000 + i))
                .collect::<Vec<_>>()
                .join(",")
        };
        let few = Target::parse(&format!("direct:///{}", list(3))).unwrap();
        assert_eq!(few.name(), few.to_string());
        let many = Target::parse(&format!("direct:///{}", list(1000))).unwrap();
        let name = many.name();
        assert!(
            name.starts_with(
                "direct:///127.0.0.1:40000,127.0.0.1:40001,127.0.0.1:40002,...(+997 more, #"
            ),
            "{name}"
        );
        assert!(name.len() < 120, "{} bytes: {name}", name.len());
        assert_eq!(many.name(), name, "the same target, the same name");
        // another list of the same length and the same first endpoints: another name
        let other = Target::parse(&format!("direct:///{},127.0.0.1:1", list(999))).unwrap();
        assert_ne!(other.name(), name);
        let etcd = Target::parse("etcd:///e1:2379,e2:2379,e3:2379,e4:2379?key=user.rpc").unwrap();
        let name = etcd.name();
        assert!(
            name.starts_with("etcd:///e1:2379,e2:2379,e3:2379,...(+1 more, #")
                && name.ends_with("?key=user.rpc"),
            "{name}"
        );
    }
}
