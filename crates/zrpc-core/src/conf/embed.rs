//! `Embed<Base, Extra>`: go-zero's struct embedding (`type Config struct { zrpc.RpcServerConf; ... }`)
//! without losing case-insensitive keys and unknown-key errors.

use serde::{Deserialize, Deserializer};

use super::de::{DeError, from_value_lenient, smuggle};
use super::suggest::closest;
use super::value::Value;
use super::{ConfError, Validate};

/// Two config structs read from the same keys, like a Go struct that embeds another.
///
/// In go-zero an application config embeds `zrpc.RpcServerConf` and adds its own keys next to
/// it. Here `Embed<RpcServerConf, AppConf>` reads the file into both: every key must be known to
/// at least one of them (otherwise it is an unknown-key error with the closest key of either),
/// keys match case-insensitively in both, and [`Validate`] runs on both.
///
/// `#[serde(flatten)]` also works, but serde then matches the flattened keys case-sensitively and
/// cannot report unknown keys; prefer `Embed`. For more than two parts, put the extra ones in the
/// `Extra` struct (it may hold several fields, e.g. `GreetRpc: RpcClientConf`).
///
/// # Examples
/// ```no_run
/// use serde::Deserialize;
/// use zrpc_core::conf::{self, ConfError, Embed, EtcdConf, Validate};
///
/// #[derive(Debug, Default, Deserialize)]
/// #[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
/// struct AppConf {
///     greeting: String,
/// }
///
/// impl Validate for AppConf {
///     fn validate(&self) -> Result<(), ConfError> {
///         Ok(())
///     }
/// }
///
/// #[derive(Debug, Default, Deserialize)]
/// #[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
/// struct Registry {
///     etcd: EtcdConf,
/// }
///
/// impl Validate for Registry {
///     fn validate(&self) -> Result<(), ConfError> {
///         self.etcd.validate()
///     }
/// }
///
/// // Etcd: {...} and Greeting: hi in one file
/// let c: Embed<Registry, AppConf> = conf::load("etc/app.yaml")?;
/// println!("{} {:?}", c.extra.greeting, c.base.etcd.hosts);
/// # Ok::<(), ConfError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Embed<Base, Extra> {
    /// The embedded config (e.g. `RpcServerConf`).
    pub base: Base,
    /// The application's own keys.
    pub extra: Extra,
}

impl<'de, Base, Extra> Deserialize<'de> for Embed<Base, Extra>
where
    Base: serde::de::DeserializeOwned,
    Extra: serde::de::DeserializeOwned,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read on its own, each part's errors have paths relative to this block: `nested`
        // has the enclosing deserializer (when it is zrpc's) put the block's path in front.
        let tree = Value::deserialize(d)?;
        let nested = |e: DeError| smuggle::<D::Error>(e.nested());
        let (base, base_skipped) = from_value_lenient::<Base>(&tree).map_err(nested)?;
        let (extra, extra_skipped) = from_value_lenient::<Extra>(&tree).map_err(nested)?;
        let extra_keys = extra_skipped.keys.borrow();
        if let Some(key) = base_skipped
            .keys
            .borrow()
            .iter()
            .find(|k| extra_keys.contains(k))
        {
            let fields: Vec<&'static str> = base_skipped
                .fields
                .get()
                .iter()
                .chain(extra_skipped.fields.get())
                .copied()
                .collect();
            let suggestion = closest(key, &fields).map(str::to_owned);
            return Err(nested(DeError::unknown(key.clone(), suggestion)));
        }
        Ok(Embed { base, extra })
    }
}

impl<Base: Validate, Extra: Validate> Validate for Embed<Base, Extra> {
    fn validate(&self) -> Result<(), ConfError> {
        self.base.validate()?;
        self.extra.validate()
    }

    fn loaded_from(&mut self, file: &str) {
        self.base.loaded_from(file);
        self.extra.loaded_from(file);
    }

    /// The application's note (`Extra`'s): it knows where its own keys go. `Base`'s note is
    /// for a file loaded as `Base` alone.
    fn unknown_key_note() -> Option<&'static str> {
        Extra::unknown_key_note()
    }
}
