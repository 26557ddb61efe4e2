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

/// The kind a file most likely holds: a server config has `ListenOn`, or a top-level key that
/// is a typo of it (`ListnOn`, which the start reports as such).
pub(crate) fn guess(text: &str, top_keys: &[String]) -> Kind {
    let listen_on = |k: &String| zrpc_suggestion(k).as_deref() == Some("ListenOn");
    if text.to_ascii_lowercase().contains("listenon") || top_keys.iter().any(listen_on) {
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
    zrpc::conf::with_features(features, || check_as_built(path, kind, features))
        .map_err(|e| fail(format!("{e}\nnote: {}", checked_as(features))))
}

/// [`check`] inside the feature override.
fn check_as_built(
    path: &Path,
    kind: Option<Kind>,
    features: &FeatureSet,
) -> Result<(Kind, Vec<String>)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| fail(format!("{}: cannot read the file: {e}", path.display())))?;
    let top_keys: Vec<String> = zrpc::conf::load::<OtherKeys>(path)
        .map(|k| k.0.into_keys().collect())
        .unwrap_or_default();
    let kind = kind.unwrap_or_else(|| guess(&text, &top_keys));
    let mut notes = Vec::new();
    match kind {
        Kind::Server => {
            let conf = match zrpc::conf::load::<zrpc::RpcServerConf>(path) {
                Ok(conf) => conf,
                Err(ConfError::UnknownKey { path: key, .. }) if !key.contains(['.', '[']) => {
                    // the keys first, as the service's load meets an unknown key before
                    // validating anything
                    let service = ServiceKeys::find(path);
                    for key in &top_keys {
                        notes.extend(service_key(path, key, service.as_ref())?);
                    }
                    let Embed { base, .. }: Embed<zrpc::RpcServerConf, OtherKeys> =
                        zrpc::conf::load(path)?;
                    base
                }
                Err(e) => return Err(e.into()),
            };
            // what a start would refuse before it needs the network, every problem at once
            // (each names the file, as a start's errors do)
            let errors = zrpc::preflight(&conf);
            if !errors.is_empty() {
                let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
                return Err(fail(lines.join("\n")));
            }
            notes.extend(conf.ignored_keys().iter().map(|k| format!("warning: {k}")));
        }
        Kind::Client => {
            // a build without the client cannot load one (`zrpc::RpcClientConf` is not there)
            if !features.contains("client") {
                return Err(fail(format!(
                    "{}: a client config, and this build of zrpc has no client: enable the \
                     `client` cargo feature of zrpc (pass --server if it is a server's config)",
                    path.display()
                )));
            }
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

/// The zrpc server key `key` is a typo of, if it is not one itself (`None` for zrpc's own keys
/// and for keys close to none).
fn zrpc_suggestion(key: &str) -> Option<String> {
    let json = format!(
        "{{\"{}\": null}}",
        key.replace('\\', "\\\\").replace('"', "\\\"")
    );
    let probe =
        zrpc::conf::from_str_with_env::<zrpc::RpcServerConf, _>(&json, Format::Json, "", |_| None);
    match probe {
        Err(ConfError::UnknownKey { suggestion, .. }) => suggestion,
        _ => None,
    }
}

/// Whether `key` is one of zrpc's server keys.
fn is_zrpc_key(key: &str) -> bool {
    let json = format!("{{\"{}\": null}}", key.replace(['\\', '"'], ""));
    !matches!(
        zrpc::conf::from_str_with_env::<zrpc::RpcServerConf, _>(&json, Format::Json, "", |_| None),
        Err(ConfError::UnknownKey { .. })
    )
}

/// The fields of a zrpcctl crate's `Config` (its `src/config.rs`, found from the config file's
/// directory upwards), as keys: what the service's own load accepts next to zrpc's.
#[derive(Debug)]
struct ServiceKeys {
    source: std::path::PathBuf,
    /// Each field's key and its type as written (`zrpc::RpcClientConf`).
    fields: Vec<(String, String)>,
}

impl ServiceKeys {
    fn find(config: &Path) -> Option<Self> {
        let dir = std::path::absolute(config).ok()?;
        let source = dir
            .ancestors()
            .skip(1)
            .map(|d| d.join("src/config.rs"))
            .find(|p| p.is_file())?;
        let text = std::fs::read_to_string(&source).ok()?;
        let fields = config_fields(&text)?;
        Some(ServiceKeys { source, fields })
    }
}

/// The keys of `pub struct Config`'s fields in a scaffold's `src/config.rs`, with their types
/// (`pub data_source: String` is `DataSource`, `String`; `#[serde(skip)]` fields are not keys).
/// `None` when there is no such struct.
fn config_fields(text: &str) -> Option<Vec<(String, String)>> {
    let body = text.split("pub struct Config {").nth(1)?;
    let mut keys = Vec::new();
    let mut skip = false;
    for line in body.lines().map(str::trim) {
        if line.starts_with('}') {
            break;
        }
        if line.starts_with("#[serde(skip") {
            skip = true;
            continue;
        }
        let Some((name, ty)) = line.strip_prefix("pub ").and_then(|l| l.split_once(':')) else {
            continue;
        };
        if !std::mem::take(&mut skip) {
            let ty = ty.trim().trim_end_matches(',').trim().to_owned();
            keys.push((pascal(name.trim().trim_start_matches("r#")), ty));
        }
    }
    Some(keys)
}

/// `data_source` -> `DataSource` (serde's `rename_all = "PascalCase"`).
fn pascal(snake: &str) -> String {
    snake
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Judges a top-level `key` that `RpcServerConf` does not know as the service's own load does.
/// With the crate's `Config` found, a key it lacks is an error (the start refuses it); without
/// it, a key that is a typo of a zrpc key is an error (a service's own key would not be named
/// so) and any other is a note.
fn service_key(file: &Path, key: &str, service: Option<&ServiceKeys>) -> Result<Option<String>> {
    if is_zrpc_key(key) {
        return Ok(None);
    }
    let typo = zrpc_suggestion(key);
    if let Some(service) = service {
        if let Some((_, ty)) = service
            .fields
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
        {
            check_block(file, key, ty)?;
            return Ok(None);
        }
        let hint = typo
            .map(|s| format!(" (did you mean `{s}`?)"))
            .unwrap_or_default();
        return Err(fail(format!(
            "config file {}: unknown key `{key}`{hint}; neither zrpc's RpcServerConf nor the \
             service's `Config` ({}) has it, so the service refuses it at start",
            file.display(),
            service.source.display()
        )));
    }
    if let Some(s) = typo {
        return Err(fail(format!(
            "config file {}: unknown key `{key}` (did you mean `{s}`?); a start refuses it \
             (a service's own key is a field of its Config, src/config.rs in a zrpcctl crate)",
            file.display()
        )));
    }
    Ok(Some(format!(
        "note: `{key}` is not a zrpc server key: the service's own; it loads only if the \
         service's Config has it (src/config.rs in a zrpcctl crate; none found above {})",
        file.display()
    )))
}

/// Checks the service's own block `key` of `file` when its field's type `ty` is one of zrpc's
/// config types (`zrpc::RpcClientConf`, `RedisConf`, `RedisKeyConf`, `CacheConf`, `EtcdConf`):
/// its keys as the service's load reads them (an unknown key inside it is refused with its full
/// path, `UserRpc.Etcd.Kye`), then the type's own validation at that path, which the scaffold's
/// `Config::validate` runs (`self.user_rpc.validate_at("UserRpc")`). A block of another type
/// is the service's own business: its keys are not looked into.
fn check_block(file: &Path, key: &str, ty: &str) -> Result<()> {
    // The type as written, without its path (`zrpc::conf::RedisConf` is `RedisConf`).
    let name = ty.rsplit("::").next().unwrap_or(ty).trim();
    BLOCK.with(|b| key.clone_into(&mut b.borrow_mut()));
    let checked = match name {
        "RpcClientConf" => zrpc::conf::load::<Block<zrpc::RpcClientConf>>(file).map(drop),
        "RedisConf" => zrpc::conf::load::<Block<zrpc::conf::RedisConf>>(file).map(drop),
        "RedisKeyConf" => zrpc::conf::load::<Block<zrpc::conf::RedisKeyConf>>(file).map(drop),
        "CacheConf" => zrpc::conf::load::<Block<zrpc::conf::CacheConf>>(file).map(drop),
        "EtcdConf" => zrpc::conf::load::<Block<zrpc::conf::EtcdConf>>(file).map(drop),
        _ => Ok(()),
    };
    checked.map_err(|e| fail(format!("{e}; the service refuses it at start")))
}

thread_local! {
    /// The key [`Block`] reads (serde's `Deserialize` takes no argument; zrpcctl checks one
    /// block at a time).
    static BLOCK: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// The value of one top-level key of a file (the key in [`BLOCK`], matched case-insensitively
/// as the loader matches keys), read as `T`; the file's other keys are skipped.
struct Block<T>(Option<T>);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Block<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit<T>(String, std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = Block<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of keys")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> std::result::Result<Block<T>, M::Error> {
                let mut found = None;
                while let Some(k) = map.next_key::<String>()? {
                    if k.eq_ignore_ascii_case(&self.0) {
                        found = Some(map.next_value::<T>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Block(found))
            }
        }
        let key = BLOCK.with(|b| b.borrow().clone());
        d.deserialize_map(Visit(key, std::marker::PhantomData))
    }
}

impl<T: Validate> Validate for Block<T> {
    fn validate(&self) -> std::result::Result<(), ConfError> {
        let key = BLOCK.with(|b| b.borrow().clone());
        self.0.as_ref().map_or(Ok(()), |v| v.validate_at(&key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guesses_the_kind_from_listen_on() {
        let none: &[String] = &[];
        assert_eq!(guess("Name: a\nListenOn: :8080\n", none), Kind::Server);
        assert_eq!(guess("{\"listenOn\": \":1\"}", none), Kind::Server);
        assert_eq!(guess("Target: direct:///127.0.0.1:1\n", none), Kind::Client);
        // a typo of ListenOn is a server config with a typo, as the start reports it
        let keys = ["Name".to_owned(), "ListnOn".to_owned()];
        assert_eq!(guess("Name: a\nListnOn: :8080\n", &keys), Kind::Server);
    }

    #[test]
    fn a_typo_of_listen_on_is_reported_as_the_start_reports_it() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, "Name: a.rpc\nListnOn: 127.0.0.1:8080\n")?;
        let e = check(&file, None, &FeatureSet::defaults())
            .err()
            .ok_or("ListnOn passed")?
            .to_string();
        assert!(
            e.contains("unknown key `ListnOn` (did you mean `ListenOn`?)"),
            "{e}"
        );
        Ok(())
    }

    #[test]
    fn a_service_config_checks_zrpc_keys_and_names_the_others() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("shop.yaml");
        let base = "Name: shop.rpc\nListenOn: 127.0.0.1:8080\n";
        std::fs::write(&file, format!("{base}DataSource: db\n"))?;
        let (kind, notes) = check(&file, None, &FeatureSet::defaults())?;
        assert_eq!(kind, Kind::Server);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("`DataSource` is not a zrpc server key"),
            "{notes:?}"
        );
        // A typo of a zrpc key is refused, as the start refuses it.
        for (typo, meant) in [("Timout: 100", "Timeout"), ("DevSever: {}", "DevServer")] {
            std::fs::write(&file, format!("{base}DataSource: db\n{typo}\n"))?;
            let e = check(&file, None, &FeatureSet::defaults())
                .err()
                .ok_or("a typo passed")?
                .to_string();
            assert!(e.contains(&format!("did you mean `{meant}`?")), "{e}");
        }
        // zrpc's own keys are still checked in full.
        std::fs::write(&file, format!("{base}DataSource: db\nTimeout: soon\n"))?;
        let e = check(&file, None, &FeatureSet::defaults())
            .err()
            .ok_or("a bad Timeout passed")?;
        assert!(e.to_string().contains("Timeout"), "{e}");
        Ok(())
    }

    /// A zrpcctl crate whose `src/config.rs` is the scaffold's with the commented field `field`
    /// (as written there, uncommented) turned on, and the path of its `etc/shop.yaml`.
    fn scaffold_with(field: &str) -> Result<(tempfile::TempDir, std::path::PathBuf)> {
        let krate = tempfile::tempdir()?;
        std::fs::create_dir_all(krate.path().join("src"))?;
        std::fs::create_dir_all(krate.path().join("etc"))?;
        let config = crate::templates::config_rs("shop");
        let commented = field.replacen("pub ", "// pub ", 1);
        assert!(
            config.contains(&commented),
            "{commented} is not in the template"
        );
        std::fs::write(
            krate.path().join("src/config.rs"),
            config.replace(&commented, field),
        )?;
        let file = krate.path().join("etc/shop.yaml");
        Ok((krate, file))
    }

    #[test]
    fn a_scaffolded_config_is_judged_by_its_config_struct() -> Result<()> {
        let (_krate, file) = scaffold_with("    pub data_source: String,")?;
        let base = "Name: shop.rpc\nListenOn: 127.0.0.1:8080\n";
        std::fs::write(&file, format!("{base}datasource: db\n"))?;
        let (_, notes) = check(&file, None, &FeatureSet::defaults())?;
        assert!(notes.is_empty(), "{notes:?}");
        // `Cache` is neither zrpc's nor a field of this Config: the start refuses it
        std::fs::write(&file, format!("{base}DataSource: db\nCache: []\n"))?;
        let e = check(&file, None, &FeatureSet::defaults())
            .err()
            .ok_or("Cache passed")?
            .to_string();
        assert!(
            e.contains("unknown key `Cache`") && e.contains("src/config.rs"),
            "{e}"
        );
        Ok(())
    }

    #[test]
    fn a_zrpc_block_of_the_service_is_checked_inside_with_its_full_path() -> Result<()> {
        let (_krate, file) = scaffold_with("    pub user_rpc: zrpc::RpcClientConf,")?;
        let base = "Name: shop.rpc\nListenOn: 127.0.0.1:8080\n";
        let check_with = |block: &str| {
            std::fs::write(&file, format!("{base}{block}"))?;
            check(&file, None, &FeatureSet::defaults()).map(|(_, notes)| notes)
        };
        let notes = check_with("userRpc: {Etcd: {Hosts: [127.0.0.1:2379], Key: user.rpc}}\n")?;
        assert!(notes.is_empty(), "{notes:?}");
        // a typo inside the block, which a look at the top-level keys cannot see
        let e = check_with("UserRpc: {Etcd: {Hosts: [127.0.0.1:2379], Kye: user.rpc}}\n")
            .err()
            .ok_or("a typo inside UserRpc passed")?
            .to_string();
        assert!(
            e.contains("unknown key `UserRpc.Etcd.Kye` (did you mean `Key`?)")
                && e.contains("shop.yaml"),
            "{e}"
        );
        // the block's own validation, at its path
        let e = check_with("UserRpc: {Etcd: {Hosts: [127.0.0.1:2379]}}\n")
            .err()
            .ok_or("UserRpc without a Key passed")?
            .to_string();
        assert!(e.contains("`UserRpc.Etcd.Key`"), "{e}");
        Ok(())
    }
}
