//! The YAML of the Go programs: [`ServerYaml`], [`ClientYaml`] and its [`Discovery`].

use std::net::SocketAddr;

use crate::ports::free_port;

/// A YAML double-quoted string (JSON strings are valid YAML).
pub(super) fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

fn yaml_list(indent: &str, items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("{indent}- {}\n", q(i)))
        .collect()
}

/// A go-zero `RpcServerConf` YAML for `gz-server` (also loadable by `zrpc::conf::load`).
#[derive(Debug, Clone)]
pub struct ServerYaml {
    /// `Name`.
    pub name: String,
    /// `ListenOn` port (host `127.0.0.1`).
    pub port: u16,
    /// `DevServer.Port` (host `127.0.0.1`); None = no DevServer block.
    pub dev_port: Option<u16>,
    /// `Etcd.Hosts` and `Etcd.Key`; None = no registration.
    pub etcd: Option<(Vec<String>, String)>,
    /// `Timeout` in ms (None = go-zero's default 2000).
    pub timeout: Option<u64>,
    /// `CpuThreshold` (0 = shedding off).
    pub cpu_threshold: u64,
    /// Extra top-level YAML appended verbatim (e.g. `Auth: true\n`).
    pub extra: String,
}

impl ServerYaml {
    /// A server on a free port with a DevServer on another, registered under `key` in `hosts`.
    pub fn new(name: &str, hosts: &[String], key: &str) -> Self {
        ServerYaml {
            name: name.to_owned(),
            port: free_port(),
            dev_port: Some(free_port()),
            etcd: Some((hosts.to_vec(), key.to_owned())),
            timeout: None,
            cpu_threshold: 0,
            extra: String::new(),
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn listen_on(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The DevServer address, if any.
    pub fn dev_addr(&self) -> Option<SocketAddr> {
        self.dev_port.map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
    }

    /// The YAML text.
    pub fn render(&self) -> String {
        let mut y = format!(
            "Name: {}\nListenOn: {}\nCpuThreshold: {}\nLog:\n  Mode: console\n  Level: error\n",
            q(&self.name),
            q(&self.listen_on()),
            self.cpu_threshold
        );
        if let Some(t) = self.timeout {
            y.push_str(&format!("Timeout: {t}\n"));
        }
        if let Some(p) = self.dev_port {
            y.push_str(&format!(
                "DevServer:\n  Enabled: true\n  Host: 127.0.0.1\n  Port: {p}\n  MetricsPath: /metrics\n  HealthPath: /healthz\n"
            ));
        }
        if let Some((hosts, key)) = &self.etcd {
            y.push_str(&format!(
                "Etcd:\n  Hosts:\n{}  Key: {}\n",
                yaml_list("    ", hosts),
                q(key)
            ));
        }
        y.push_str(&self.extra);
        y
    }
}

/// How a client finds its servers.
#[derive(Debug, Clone)]
pub enum Discovery {
    /// `Etcd: {Hosts, Key}`.
    Etcd(Vec<String>, String),
    /// `Endpoints: [...]`.
    Endpoints(Vec<String>),
    /// `Target: ...`.
    Target(String),
}

impl Discovery {
    /// The same discovery as a zrpc `RpcClientConf`.
    pub fn zrpc_conf(&self) -> zrpc_client::conf::RpcClientConf {
        use zrpc_client::conf::RpcClientConf;
        match self {
            Discovery::Etcd(hosts, key) => RpcClientConf::etcd(hosts.iter().cloned(), key.clone()),
            Discovery::Endpoints(eps) => RpcClientConf::direct(eps.iter().cloned()),
            Discovery::Target(t) => RpcClientConf::target(t.clone()),
        }
    }

    /// A short description for printed figures.
    pub fn describe(&self) -> String {
        match self {
            Discovery::Etcd(hosts, _) => format!("Etcd.Hosts={hosts:?}"),
            Discovery::Endpoints(eps) => format!("Endpoints={eps:?}"),
            Discovery::Target(t) => format!("Target={t}"),
        }
    }
}

/// go-zero's target for etcd hosts and a key: `etcd:///h1,h2?key=<QueryEscape(key)>`.
pub fn etcd_target(hosts: &[String], key: &str) -> String {
    format!("etcd:///{}?key={}", hosts.join(","), query_escape(key))
}

/// Go's `url.QueryEscape`.
pub fn query_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A gz-client YAML: `{Name, Log, Greeter: RpcClientConf}`.
#[derive(Debug, Clone)]
pub struct ClientYaml {
    /// Where the servers are.
    pub discovery: Discovery,
    /// `Greeter.Timeout` in ms (None = default 2000).
    pub timeout: Option<u64>,
    /// `Greeter.App` and `Greeter.Token`.
    pub credential: Option<(String, String)>,
    /// Extra YAML under `Greeter:` (each line indented by two spaces).
    pub extra: String,
}

impl ClientYaml {
    /// A client with `discovery` and go-zero defaults.
    pub fn new(discovery: Discovery) -> Self {
        ClientYaml {
            discovery,
            timeout: None,
            credential: None,
            extra: String::new(),
        }
    }

    /// Sets `Greeter.Timeout`.
    #[must_use]
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout = Some(ms);
        self
    }

    /// Sets `Greeter.App` / `Greeter.Token`.
    #[must_use]
    pub fn credential(mut self, app: &str, token: &str) -> Self {
        self.credential = Some((app.to_owned(), token.to_owned()));
        self
    }

    /// The YAML text.
    pub fn render(&self) -> String {
        let mut y = "Name: gz-client\nLog:\n  Mode: console\n  Level: error\nGreeter:\n".to_owned();
        match &self.discovery {
            Discovery::Etcd(hosts, key) => y.push_str(&format!(
                "  Etcd:\n    Hosts:\n{}    Key: {}\n",
                yaml_list("      ", hosts),
                q(key)
            )),
            Discovery::Endpoints(eps) => {
                y.push_str(&format!("  Endpoints:\n{}", yaml_list("    ", eps)));
            }
            Discovery::Target(t) => y.push_str(&format!("  Target: {}\n", q(t))),
        }
        if let Some(t) = self.timeout {
            y.push_str(&format!("  Timeout: {t}\n"));
        }
        if let Some((app, token)) = &self.credential {
            y.push_str(&format!("  App: {}\n  Token: {}\n", q(app), q(token)));
        }
        y.push_str(&self.extra);
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_escape_as_go() {
        assert_eq!(query_escape("zrpc-test/a b/1"), "zrpc-test%2Fa+b%2F1");
    }

    #[test]
    fn yaml_renders() {
        let y = ServerYaml::new("a", &["127.0.0.1:1".to_owned()], "k/1").render();
        assert!(
            y.contains("Etcd:\n  Hosts:\n    - \"127.0.0.1:1\"\n  Key: \"k/1\"\n"),
            "{y}"
        );
        let c = ClientYaml::new(Discovery::Endpoints(vec!["127.0.0.1:2".into()]))
            .credential("a", "b")
            .render();
        assert!(
            c.contains("Greeter:\n  Endpoints:\n    - \"127.0.0.1:2\"\n  App: \"a\"\n"),
            "{c}"
        );
    }
}
