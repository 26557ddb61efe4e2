//! Keys that need an optional part of zrpc (a cargo feature): a build without it refuses the
//! config at load, naming the key, its value and the feature, instead of ignoring the key.

use zrpc_core::conf::{ConfError, feature_on};

use super::{RpcServerConf, ServerTlsConf};

/// The first key of `conf` that asks for a cargo feature this build leaves out (or that
/// [`with_features`](zrpc_core::conf::with_features) leaves out).
pub(crate) fn check(conf: &RpcServerConf) -> Result<(), ConfError> {
    if !feature_on("otel", cfg!(feature = "otel"))
        && let Some(t) = conf
            .telemetry
            .as_ref()
            .filter(|t| !t.endpoint.is_empty() && !t.disabled)
    {
        return Err(ConfError::feature_off(
            "Telemetry.Endpoint",
            &t.endpoint,
            "OTLP trace export",
            "otel",
        ));
    }
    if !feature_on("etcd", cfg!(feature = "etcd")) && conf.etcd.is_configured() {
        return Err(ConfError::feature_off(
            "Etcd.Hosts",
            &conf.etcd.hosts.join(","),
            "registration in etcd",
            "etcd",
        ));
    }
    if !feature_on("reflection", cfg!(feature = "reflection")) && conf.reflection {
        return Err(ConfError::feature_off(
            "Reflection",
            "true",
            "gRPC reflection",
            "reflection",
        ));
    }
    if !feature_on("tls", cfg!(feature = "tls"))
        && let Some(tls) = &conf.tls
    {
        return Err(tls_off(tls));
    }
    zrpc_core::grpc::compression::setting::check_built("Compression", conf.compression)?;
    if !feature_on("devserver", cfg!(feature = "devserver"))
        && conf.dev_server.as_ref().is_some_and(|d| d.enabled)
    {
        return Err(ConfError::feature_off(
            "DevServer.Enabled",
            "true",
            "the DevServer (/metrics, /healthz)",
            "devserver",
        ));
    }
    Ok(())
}

/// The error for a `Tls` block in a build without the `tls` feature.
pub(crate) fn tls_off(tls: &ServerTlsConf) -> ConfError {
    ConfError::feature_off("Tls.CertFile", &tls.cert_file, "TLS", "tls")
}

#[cfg(test)]
mod tests {
    use zrpc_core::conf::{EtcdConf, Format, Validate, from_str_with_env};

    use crate::conf::RpcServerConf;

    const BASE: &str = "Name: a.rpc\nListenOn: 127.0.0.1:0\n";

    /// Loads `BASE` + `extra`: `Ok` with `feature` on, else the error, which must name `key`,
    /// `value` and `feature`.
    fn loads_only_with(on: bool, extra: &str, key: &str, value: &str, feature: &str) {
        let text = format!("{BASE}{extra}");
        let r = from_str_with_env::<RpcServerConf, _>(&text, Format::Yaml, "a.yaml", |_| None);
        if on {
            r.unwrap();
            return;
        }
        let e = r.unwrap_err().to_string();
        for part in [key, value, &format!("`{feature}` cargo feature")] {
            assert!(e.contains(part), "{part:?} not in {e}");
        }
    }

    #[test]
    fn telemetry_endpoint_needs_otel() {
        loads_only_with(
            cfg!(feature = "otel"),
            "Telemetry:\n  Endpoint: otel-collector:4317\n",
            "Telemetry.Endpoint",
            "otel-collector:4317",
            "otel",
        );
        // no endpoint, or export disabled: nothing to export, any build loads it
        let mut c = RpcServerConf::new("a", "127.0.0.1:0");
        c.telemetry = Some(Default::default());
        c.validate().unwrap();
    }

    #[test]
    fn etcd_needs_etcd() {
        loads_only_with(
            cfg!(feature = "etcd"),
            "Etcd:\n  Hosts: [127.0.0.1:2379]\n  Key: a.rpc\n",
            "Etcd.Hosts",
            "127.0.0.1:2379",
            "etcd",
        );
        let c = RpcServerConf::new("a", "127.0.0.1:0").with_etcd(EtcdConf::new(["e:2379"], "k"));
        assert_eq!(c.validate().is_ok(), cfg!(feature = "etcd"));
    }

    #[test]
    fn reflection_needs_reflection() {
        loads_only_with(
            cfg!(feature = "reflection"),
            "Reflection: true\n",
            "Reflection",
            "true",
            "reflection",
        );
        // dev mode turns reflection on where the build has it; it loads in any build
        from_str_with_env::<RpcServerConf, _>(
            &format!("{BASE}Mode: dev\n"),
            Format::Yaml,
            "a.yaml",
            |_| None,
        )
        .unwrap();
    }

    #[test]
    fn tls_needs_tls() {
        loads_only_with(
            cfg!(feature = "tls"),
            "Tls:\n  CertFile: /etc/zrpc/server.pem\n  KeyFile: /etc/zrpc/server.key\n",
            "Tls.CertFile",
            "/etc/zrpc/server.pem",
            "tls",
        );
        // a config built in code is refused by its validation too (Server::new validates)
        let c = RpcServerConf::new("a", "127.0.0.1:0")
            .with_tls(crate::conf::ServerTlsConf::new("s.pem", "s.key"));
        assert_eq!(c.validate().is_ok(), cfg!(feature = "tls"));
    }

    #[test]
    fn etcd_tls_needs_tls() {
        let mut etcd = EtcdConf::new(["e:2379"], "k");
        etcd.cert_file = "/etc/zrpc/etcd.pem".into();
        etcd.cert_key_file = "/etc/zrpc/etcd.key".into();
        etcd.ca_cert_file = "/etc/zrpc/ca.pem".into();
        let e = RpcServerConf::new("a", "127.0.0.1:0")
            .with_etcd(etcd)
            .validate()
            .map_err(|e| e.to_string());
        if cfg!(feature = "tls") && cfg!(feature = "etcd") {
            e.unwrap();
        } else if !cfg!(feature = "tls") {
            let e = e.unwrap_err();
            for part in ["Etcd.CertFile", "/etc/zrpc/etcd.pem", "`tls` cargo feature"] {
                assert!(e.contains(part), "{part:?} not in {e}");
            }
        }
    }

    #[test]
    fn dev_server_needs_devserver() {
        loads_only_with(
            cfg!(feature = "devserver"),
            "DevServer:\n  Enabled: true\n",
            "DevServer.Enabled",
            "true",
            "devserver",
        );
        loads_only_with(true, "DevServer:\n  Enabled: false\n", "", "", "");
    }
}
