//! Entry points of the fuzz targets (the repository's `fuzz/` directory, cargo-fuzz) and of the
//! replay of their corpora (`tests/fuzz_corpora.rs`): not public API, no semver promise.
//!
//! Each function drives one of the client's parsers of untrusted input (what the resolvers
//! read from etcd and from the Kubernetes API, and the config loader) on arbitrary octets and
//! asserts its invariants: a panic is a bug found.

/// The client config loader on any text in every format: errors are fine, panics are not.
pub fn client_conf(data: &[u8]) {
    use zrpc_core::conf::{Format, from_str_with_env};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env = |name: &str| (!name.len().is_multiple_of(3)).then(|| name.to_ascii_lowercase());
    for format in [Format::Yaml, Format::Json, Format::Toml] {
        let _ = from_str_with_env::<crate::conf::RpcClientConf, _>(text, format, "fuzz.yaml", env);
    }
}

/// The etcd resolver's endpoint set under any sequence of PUTs, DELETEs and reloads of the
/// values anyone with etcd access can write: its addresses are always those of a plain map of
/// key to trimmed, non-empty UTF-8 value (sorted, deduplicated), and it reports a change
/// exactly when they change.
///
/// `data`: operations, each an octet (low 2 bits: put, delete, reload of what follows; the
/// next 3 bits: the key), then for a put one octet of length and the value.
#[cfg(feature = "etcd")]
pub fn etcd_values(data: &[u8]) {
    use std::collections::{BTreeMap, BTreeSet};

    use crate::resolver::etcd::EndpointSet;

    let mut set = EndpointSet::default();
    let mut model: BTreeMap<Vec<u8>, String> = BTreeMap::new();
    let addresses = |m: &BTreeMap<Vec<u8>, String>| -> Vec<String> {
        let distinct: BTreeSet<&String> = m.values().collect();
        distinct.into_iter().cloned().collect()
    };
    let mut rest = data;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        let key = format!("svc/{}", (op >> 2) & 7).into_bytes();
        let before = addresses(&model);
        let changed = match op & 3 {
            0 | 3 => {
                let n = rest.first().map_or(0, |&n| usize::from(n));
                let value = rest.get(1..).unwrap_or_default();
                let value = &value[..n.min(value.len())];
                rest = &rest[(1 + value.len()).min(rest.len())..];
                match std::str::from_utf8(value).map(str::trim) {
                    Ok(v) if !v.is_empty() => model.insert(key.clone(), v.to_owned()),
                    _ => model.remove(&key),
                };
                set.put(&key, value)
            }
            1 => {
                model.remove(&key);
                set.delete(&key)
            }
            _ => {
                let kvs: Vec<(Vec<u8>, Vec<u8>)> = model
                    .iter()
                    .map(|(k, v)| (k.clone(), format!(" {v}\n").into_bytes()))
                    .collect();
                set.reload(kvs.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
                true
            }
        };
        let after = addresses(&model);
        assert_eq!(
            set.addresses(),
            after,
            "the endpoint set differs from a plain map"
        );
        if op & 3 != 2 {
            assert_eq!(changed, before != after, "a change reported wrongly");
        }
    }
}

/// The Kubernetes resolver on the API's answers: an `EndpointSliceList` (the list) and watch
/// events (one JSON object a line), as its watch applies them. Bad JSON is an error, never a
/// panic; every endpoint it publishes ends in `:port` with a port of the slices.
///
/// `data`: one octet choosing the target's port (none, a number, a name), then the list, a
/// newline, and the watch lines.
#[cfg(feature = "tls")]
pub fn k8s_answers(data: &[u8]) {
    use crate::resolver::K8sPort;
    use crate::resolver::k8s::slices::WatchEvent;
    use crate::resolver::k8s::slices::{EndpointSlice, EndpointSliceList, Slices, Status};

    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let port = match choice % 3 {
        0 => None,
        1 => Some(K8sPort::Number(8080)),
        _ => Some(K8sPort::Name("grpc".to_owned())),
    };
    let mut slices = Slices::new(port);
    let mut lines = rest.split(|&b| b == b'\n');
    if let Ok(list) = serde_json::from_slice::<EndpointSliceList>(lines.next().unwrap_or_default())
    {
        slices.reset(&list.items);
    }
    for line in lines {
        let Ok(event) = serde_json::from_slice::<WatchEvent>(line) else {
            continue;
        };
        if event.kind == "ERROR" {
            let _: Status = serde_json::from_value(event.object).unwrap_or_default();
            continue;
        }
        let Ok(slice) = serde_json::from_value::<EndpointSlice>(event.object) else {
            continue;
        };
        match event.kind.as_str() {
            "ADDED" | "MODIFIED" => slices.upsert(&slice),
            "DELETED" => slices.remove(&slice.metadata.name),
            _ => {}
        }
    }
    let endpoints = slices.endpoints();
    assert!(
        endpoints.windows(2).all(|w| w[0] < w[1]),
        "not sorted and distinct"
    );
    for e in &endpoints {
        let (_, port) = e.rsplit_once(':').expect("an endpoint without a port");
        assert!(port.parse::<u16>().is_ok(), "{e}: not a port");
    }
    let _ = slices.problem();
}
