//! Secrets out of the config the admin view shows: the values of keys that hold a password, a
//! token or a secret, and every header of `Telemetry.OtlpHeaders` (where exporters' API keys
//! go), become `<redacted>` when set. `DevServerConf`'s `Debug` hides `AdminToken` the same way.

use serde_json::Value;

/// What a secret's value reads as once redacted (as in the configs' `Debug`).
pub(crate) use zrpc_core::conf::REDACTED;

/// Whether the config key `key` (PascalCase, as in the file) holds a secret.
fn is_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["pass", "password", "token", "secret", "apikey"].contains(&k.as_str())
        || ["token", "password", "secret", "pass"]
            .iter()
            .any(|s| k.ends_with(s))
}

/// Whether every value under the config key `key` is a secret (a map of headers).
fn is_secret_map(key: &str) -> bool {
    key.eq_ignore_ascii_case("OtlpHeaders")
}

/// Replaces, in place, every secret of a config serialized as JSON.
pub(crate) fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if is_secret_map(key) {
                    if let Value::Object(headers) = v {
                        for h in headers.values_mut() {
                            *h = Value::from(REDACTED);
                        }
                    }
                } else if is_secret(key) {
                    if !(v.is_null() || v.as_str().is_some_and(str::is_empty)) {
                        *v = Value::from(REDACTED);
                    }
                } else {
                    redact(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

/// The config as JSON, its secrets redacted.
pub(crate) fn config_json(conf: &crate::conf::RpcServerConf) -> Value {
    let mut v = serde_json::to_value(conf).unwrap_or(Value::Null);
    redact(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_are_redacted_and_the_rest_kept() {
        let yaml = r#"
Name: hello.rpc
ListenOn: 127.0.0.1:8080
Etcd: { Hosts: [127.0.0.1:2379], Key: hello.rpc, User: root, Pass: etcd-pw }
Redis: { Host: 127.0.0.1:6379, Pass: redis-pw, Key: apps }
Auth: true
DevServer: { Enabled: true, AdminToken: admin-secret }
Telemetry: { Endpoint: http://collector:4317, OtlpHeaders: { api-key: otlp-secret } }
"#;
        // read without the checks (a build without `redis-auth` or `otel` refuses those keys)
        let conf: crate::conf::RpcServerConf = serde_yaml_ng::from_str(yaml).unwrap();
        let v = config_json(&conf);
        let text = v.to_string();
        for secret in ["etcd-pw", "redis-pw", "admin-secret", "otlp-secret"] {
            assert!(!text.contains(secret), "{secret} shown: {text}");
        }
        assert_eq!(v["Etcd"]["Pass"], REDACTED);
        assert_eq!(v["Redis"]["Pass"], REDACTED);
        assert_eq!(v["DevServer"]["AdminToken"], REDACTED);
        assert_eq!(v["Telemetry"]["OtlpHeaders"]["api-key"], REDACTED);
        // not secrets: the names and keys of things
        assert_eq!(v["Etcd"]["Key"], "hello.rpc");
        assert_eq!(v["Etcd"]["User"], "root");
        assert_eq!(v["Redis"]["Key"], "apps");
        assert_eq!(v["Name"], "hello.rpc");
    }

    #[test]
    fn unset_secrets_read_as_unset() {
        let mut v = json!({ "Pass": "", "Token": null, "Tokens": [{ "App": "a", "Token": "t" }] });
        redact(&mut v);
        assert_eq!(
            v,
            json!({ "Pass": "", "Token": null, "Tokens": [{ "App": "a", "Token": REDACTED }] })
        );
    }
}
