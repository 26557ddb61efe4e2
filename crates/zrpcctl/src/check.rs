//! `zrpcctl conf check <file>`: loads a server or client config exactly as the server and
//! client do at start (`zrpc::conf::load`, then every start-up check that needs no network,
//! `zrpc::preflight`), so the errors are the same ones, naming the file, key and value, all of
//! them rather than the first.
//!
//! A server file may also hold the service's own keys next to zrpc's (`DataSource`, `UserRpc`:
//! go-zero's embedded `zrpc.RpcServerConf`, a scaffold's `src/config.rs`). Those are checked as
//! the service's binary loads them, `conf::Embed<RpcServerConf, _>`: zrpc's keys fully, and each
//! of the others named, with the zrpc key it may be a typo of.
//!
//! zrpcctl is built with every zrpc feature, but a service's build may leave some out, and a
//! key that needs a feature the build leaves out is refused at its start (`Tls`,
//! `Reflection: true`, `Telemetry.Endpoint`, ...). So the file is checked as a build with the
//! features given as cargo takes them (`--features`, `--no-default-features`,
//! `--all-features`; zrpc's default features when none is given), through
//! `zrpc::conf::with_features`, which only turns off what zrpcctl has.

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::IgnoredAny;
use zrpc::conf::{ConfError, Embed, FeatureSet, Format, Validate};

use crate::{Result, fail};

/// Which config a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Kind {
    /// `RpcServerConf` (has `ListenOn`).
    Server,
    /// `RpcClientConf`.
    Client,
}

/// The kind a file most likely holds: a server config has `ListenOn`.
pub(crate) fn guess(text: &str) -> Kind {
    if text.to_ascii_lowercase().contains("listenon") {
        Kind::Server
    } else {
        Kind::Client
    }
}

/// The zrpc features to check as, from cargo's flags: `features` (names separated by commas
/// or spaces, `default` allowed) on top of zrpc's default features, or of none with
/// `no_default`; every feature with `all`.
///
/// # Errors
/// A name that is not a zrpc feature (listing those that are), or one this zrpcctl was built
/// without.
pub(crate) fn feature_set(features: &[String], no_default: bool, all: bool) -> Result<FeatureSet> {
    let mut set = if all {
        FeatureSet::all()
    } else if no_default {
        FeatureSet::none()
    } else {
        FeatureSet::defaults()
    };
    for name in features
        .iter()
        .flat_map(|f| f.split([',', ' ']))
        .filter(|f| !f.is_empty())
    {
        if name == "default" {
            for d in zrpc::conf::DEFAULT_FEATURES {
                set.insert(d)?;
            }
        } else {
            set.insert(name)?;
        }
    }
    let compiled = zrpc::conf::compiled_features();
    if let Some(missing) = set.names().into_iter().find(|f| !compiled.contains(f)) {
        return Err(fail(format!(
            "this zrpcctl was built without zrpc's `{missing}` feature, so it cannot check as a \
             build with it (reinstall zrpcctl with every zrpc feature, as its Cargo.toml has)"
        )));
    }
    Ok(set)
}

/// The line saying which features a file was checked as.
pub(crate) fn checked_as(features: &FeatureSet) -> String {
    let names = features.names();
    let which = if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    };
    let default = if *features == FeatureSet::defaults() {
        " (zrpc's defaults; change with --features, --no-default-features, --all-features)"
    } else {
        ""
    };
    format!("checked as a build with zrpc features: {which}{default}")
}

/// Checks `path` as a build with the zrpc `features` would load and start it; returns the lines
/// to print (warnings for keys accepted but not acted on). An error ends with the features it
/// was checked as.
pub(crate) fn check(
    path: &Path,
    kind: Option<Kind>,
    features: &FeatureSet,
) -> Result<(Kind, Vec<String>)> {
    zrpc::conf::with_features(features, || check_as_built(path, kind))
        .map_err(|e| fail(format!("{e}\nnote: {}", checked_as(features))))
}

/// [`check`] inside the feature override.
fn check_as_built(path: &Path, kind: Option<Kind>) -> Result<(Kind, Vec<String>)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| fail(format!("{}: cannot read the file: {e}", path.display())))?;
    let kind = kind.unwrap_or_else(|| guess(&text));
    let mut notes = Vec::new();
    match kind {
        Kind::Server => {
            let conf = match zrpc::conf::load::<zrpc::RpcServerConf>(path) {
                Ok(conf) => conf,
                Err(ConfError::UnknownKey { path: key, .. }) if !key.contains(['.', '[']) => {
                    let Embed { base, extra }: Embed<zrpc::RpcServerConf, OtherKeys> =
                        zrpc::conf::load(path)?;
                    notes.extend(extra.0.keys().filter_map(|k| service_key_note(k)));
                    base
                }
                Err(e) => return Err(e.into()),
            };
            // what a start would refuse before it needs the network, every problem at once
            let errors = zrpc::preflight(&conf);
            if !errors.is_empty() {
                let lines: Vec<String> = errors
                    .iter()
                    .map(|e| format!("{}: {e}", path.display()))
                    .collect();
                return Err(fail(lines.join("\n")));
            }
            notes.extend(conf.ignored_keys().iter().map(|k| format!("warning: {k}")));
        }
        Kind::Client => {
            let _conf: zrpc::RpcClientConf = zrpc::conf::load(path).map_err(|e| {
                fail(format!(
                    "{e}\n(checked as a client config; pass --server if it is a server's)"
                ))
            })?;
        }
    }
    Ok((kind, notes))
}

/// Every top-level key of a file, for the part of a service config that is not zrpc's.
#[derive(Debug)]
struct OtherKeys(BTreeMap<String, IgnoredAny>);

impl<'de> serde::Deserialize<'de> for OtherKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        BTreeMap::deserialize(d).map(OtherKeys)
    }
}

impl Validate for OtherKeys {
    fn validate(&self) -> std::result::Result<(), ConfError> {
        Ok(())
    }
}

/// A line about `key` when `RpcServerConf` does not know it (`None` for zrpc's own keys).
fn service_key_note(key: &str) -> Option<String> {
    let json = format!(
        "{{\"{}\": null}}",
        key.replace('\\', "\\\\").replace('"', "\\\"")
    );
    let probe =
        zrpc::conf::from_str_with_env::<zrpc::RpcServerConf, _>(&json, Format::Json, "", |_| None);
    let Err(ConfError::UnknownKey { suggestion, .. }) = probe else {
        return None;
    };
    let typo = suggestion
        .map(|s| format!(" (or a typo: did you mean `{s}`?)"))
        .unwrap_or_default();
    Some(format!(
        "note: `{key}` is not a zrpc server key: the service's own{typo}; it loads only if the \
         service's Config has it (src/config.rs in a zrpcctl crate)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guesses_the_kind_from_listen_on() {
        assert_eq!(guess("Name: a\nListenOn: :8080\n"), Kind::Server);
        assert_eq!(guess("{\"listenOn\": \":1\"}"), Kind::Server);
        assert_eq!(guess("Target: direct:///127.0.0.1:1\n"), Kind::Client);
    }

    #[test]
    fn a_service_config_checks_zrpc_keys_and_names_the_others() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("shop.yaml");
        let base = "Name: shop.rpc\nListenOn: 127.0.0.1:8080\n";
        std::fs::write(&file, format!("{base}DataSource: db\nTimout: 100\n"))?;
        let (kind, notes) = check(&file, None, &FeatureSet::defaults())?;
        assert_eq!(kind, Kind::Server);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].contains("`DataSource` is not a zrpc server key"),
            "{notes:?}"
        );
        assert!(notes[1].contains("did you mean `Timeout`?"), "{notes:?}");
        // zrpc's own keys are still checked in full.
        std::fs::write(&file, format!("{base}DataSource: db\nTimeout: soon\n"))?;
        let e = check(&file, None, &FeatureSet::defaults())
            .err()
            .ok_or("a bad Timeout passed")?;
        assert!(e.to_string().contains("Timeout"), "{e}");
        Ok(())
    }
}
