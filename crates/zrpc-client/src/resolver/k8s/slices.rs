//! The EndpointSlice objects (the few fields discovery needs) and the merged endpoint set of a
//! Service's slices.
//!
//! A handful of serde structs instead of `k8s-openapi` (about a million generated lines) for the
//! five fields read here; unknown fields are ignored, as Kubernetes clients must.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::resolver::K8sPort;

/// `discovery.k8s.io/v1` `EndpointSlice` (only what is read).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EndpointSlice {
    #[serde(default)]
    pub(crate) metadata: ObjectMeta,
    #[serde(default)]
    pub(crate) address_type: String,
    #[serde(default)]
    pub(crate) endpoints: Option<Vec<Endpoint>>,
    #[serde(default)]
    pub(crate) ports: Option<Vec<EndpointPort>>,
}

/// `metadata` of an object or a list.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ObjectMeta {
    #[serde(default)]
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) resource_version: String,
}

/// One endpoint of a slice.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Endpoint {
    #[serde(default)]
    pub(crate) addresses: Vec<String>,
    #[serde(default)]
    pub(crate) conditions: Conditions,
}

/// `conditions` of an endpoint; absent = unknown.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Conditions {
    pub(crate) ready: Option<bool>,
    pub(crate) terminating: Option<bool>,
}

/// A port of a slice.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct EndpointPort {
    pub(crate) name: Option<String>,
    pub(crate) port: Option<i32>,
    pub(crate) protocol: Option<String>,
}

/// `EndpointSliceList`.
#[derive(Debug, Deserialize)]
pub(crate) struct EndpointSliceList {
    #[serde(default)]
    pub(crate) metadata: ObjectMeta,
    #[serde(default)]
    pub(crate) items: Vec<EndpointSlice>,
}

/// One line of a watch stream.
#[derive(Debug, Deserialize)]
pub(crate) struct WatchEvent {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) object: serde_json::Value,
}

/// The `Status` object of an `ERROR` event or an error response.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Status {
    #[serde(default)]
    pub(crate) code: u16,
    #[serde(default)]
    pub(crate) message: String,
}

/// What one slice contributes.
#[derive(Debug, Default, PartialEq, Eq)]
struct SliceAddrs {
    addrs: Vec<String>,
    problem: Option<String>,
}

/// The slices of one Service, by name, reduced to their usable addresses.
///
/// Each slice is kept on its own and replaced or removed as a whole, so an update to one slice
/// never drops the others' endpoints (go-zero's handler replaces the whole set with the updated
/// slice's addresses, PR #5659).
#[derive(Debug)]
pub(crate) struct Slices {
    port: Option<K8sPort>,
    by_name: BTreeMap<String, SliceAddrs>,
}

impl Slices {
    pub(crate) fn new(port: Option<K8sPort>) -> Self {
        Slices {
            port,
            by_name: BTreeMap::new(),
        }
    }

    /// Replaces everything with a fresh list.
    pub(crate) fn reset(&mut self, items: &[EndpointSlice]) {
        self.by_name.clear();
        for s in items {
            self.upsert(s);
        }
    }

    /// An added or modified slice.
    pub(crate) fn upsert(&mut self, slice: &EndpointSlice) {
        let addrs = slice_addrs(slice, self.port.as_ref());
        self.by_name.insert(slice.metadata.name.clone(), addrs);
    }

    /// A deleted slice.
    pub(crate) fn remove(&mut self, name: &str) {
        self.by_name.remove(name);
    }

    /// The number of slices.
    pub(crate) fn len(&self) -> usize {
        self.by_name.len()
    }

    /// The union of every slice's addresses, sorted and deduplicated.
    pub(crate) fn endpoints(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .by_name
            .values()
            .flat_map(|s| s.addrs.iter().cloned())
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// The first problem a slice has (a port that cannot be chosen), if any.
    pub(crate) fn problem(&self) -> Option<String> {
        self.by_name.values().find_map(|s| s.problem.clone())
    }
}

/// The `addr:port` of every ready, non-terminating endpoint of `slice`.
///
/// Readiness: `ready` absent means ready (the API's documented reading); `terminating: true` is
/// skipped even when `ready` is true (a Service with `publishNotReadyAddresses`). The first
/// address of an endpoint is used (the others are fungible, as kube-proxy does).
fn slice_addrs(slice: &EndpointSlice, want: Option<&K8sPort>) -> SliceAddrs {
    let endpoints = slice.endpoints.as_deref().unwrap_or_default();
    let ready: Vec<&str> = endpoints
        .iter()
        .filter(|e| e.conditions.ready != Some(false) && e.conditions.terminating != Some(true))
        .filter_map(|e| e.addresses.first().map(String::as_str))
        .collect();
    if ready.is_empty() {
        return SliceAddrs::default();
    }
    let name = &slice.metadata.name;
    let ports = slice.ports.as_deref().unwrap_or_default();
    let port = match want {
        Some(K8sPort::Number(n)) => Ok(*n),
        Some(K8sPort::Name(wanted)) => ports
            .iter()
            .find(|p| p.name.as_deref() == Some(wanted.as_str()))
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| {
                format!(
                    "EndpointSlice {name} has no port named {wanted:?} (its ports: {})",
                    describe(ports)
                )
            }),
        None => {
            let tcp: Vec<&EndpointPort> = ports
                .iter()
                .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP" && p.port.is_some())
                .collect();
            match tcp.as_slice() {
                [one] => one
                    .port
                    .and_then(|p| u16::try_from(p).ok())
                    .ok_or_else(|| format!("EndpointSlice {name} has an invalid port")),
                [] => Err(format!(
                    "EndpointSlice {name} has no TCP port: give one in the target \
                     (k8s://namespace/service:port)"
                )),
                _ => Err(format!(
                    "EndpointSlice {name} has several ports ({}): name one in the target \
                     (k8s://namespace/service:name)",
                    describe(ports)
                )),
            }
        }
    };
    match port {
        Ok(port) => {
            let v6 = slice.address_type == "IPv6";
            SliceAddrs {
                addrs: ready
                    .into_iter()
                    .map(|a| {
                        if v6 {
                            format!("[{a}]:{port}")
                        } else {
                            format!("{a}:{port}")
                        }
                    })
                    .collect(),
                problem: None,
            }
        }
        Err(problem) => SliceAddrs {
            addrs: Vec::new(),
            problem: Some(problem),
        },
    }
}

fn describe(ports: &[EndpointPort]) -> String {
    if ports.is_empty() {
        return "none".into();
    }
    ports
        .iter()
        .map(|p| {
            format!(
                "{}={}",
                p.name.as_deref().unwrap_or(""),
                p.port.map_or_else(|| "?".into(), |n| n.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(name: &str, eps: serde_json::Value, ports: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "resourceVersion": "1"},
            "addressType": "IPv4",
            "endpoints": eps,
            "ports": ports,
        }))
        .unwrap()
    }

    fn grpc() -> serde_json::Value {
        json!([{"name": "grpc", "port": 8080, "protocol": "TCP"}])
    }

    #[test]
    fn only_ready_and_not_terminating_endpoints() {
        let s = slice(
            "a",
            json!([
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.3"], "conditions": {}},
                {"addresses": ["10.0.0.4"], "conditions": {"ready": true, "terminating": true}},
                {"addresses": [], "conditions": {"ready": true}},
            ]),
            grpc(),
        );
        let mut all = Slices::new(None);
        all.upsert(&s);
        assert_eq!(all.endpoints(), ["10.0.0.1:8080", "10.0.0.3:8080"]);
    }

    #[test]
    fn slices_merge_and_update_on_their_own() {
        let mut all = Slices::new(Some(K8sPort::Name("grpc".into())));
        let a = slice("a", json!([{"addresses": ["10.0.0.1"]}]), grpc());
        let b = slice("b", json!([{"addresses": ["10.0.0.2"]}]), grpc());
        all.reset(&[a, b]);
        assert_eq!(all.endpoints(), ["10.0.0.1:8080", "10.0.0.2:8080"]);
        // an update of b alone keeps a's endpoints
        all.upsert(&slice("b", json!([{"addresses": ["10.0.0.3"]}]), grpc()));
        assert_eq!(all.endpoints(), ["10.0.0.1:8080", "10.0.0.3:8080"]);
        all.remove("a");
        assert_eq!(all.endpoints(), ["10.0.0.3:8080"]);
        assert_eq!(all.len(), 1);
    }

    #[test]
    fn port_by_number_name_or_the_only_one() {
        let two = json!([{"name": "grpc", "port": 8080}, {"name": "metrics", "port": 9101}]);
        let eps = json!([{"addresses": ["fd00::1"]}]);
        let mut s = slice("a", eps, two);
        s.address_type = "IPv6".into();
        let ends = |port| {
            let mut all = Slices::new(port);
            all.upsert(&s);
            (all.endpoints(), all.problem())
        };
        assert_eq!(
            ends(Some(K8sPort::Number(9000))).0,
            ["[fd00::1]:9000"],
            "a number is dialled as given"
        );
        assert_eq!(
            ends(Some(K8sPort::Name("metrics".into()))).0,
            ["[fd00::1]:9101"]
        );
        let (eps, problem) = ends(None);
        assert!(eps.is_empty());
        assert!(
            problem
                .unwrap()
                .contains("several ports (grpc=8080, metrics=9101)")
        );
        let (_, problem) = ends(Some(K8sPort::Name("http".into())));
        assert!(problem.unwrap().contains("no port named \"http\""));
        let one = slice("b", json!([{"addresses": ["10.0.0.1"]}]), grpc());
        let mut all = Slices::new(None);
        all.upsert(&one);
        assert_eq!(all.endpoints(), ["10.0.0.1:8080"]);
    }

    #[test]
    fn null_fields_are_empty() {
        let s: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "a"}, "addressType": "IPv4", "endpoints": null, "ports": null
        }))
        .unwrap();
        let mut all = Slices::new(None);
        all.upsert(&s);
        assert!(all.endpoints().is_empty());
        assert_eq!(all.problem(), None);
    }
}
