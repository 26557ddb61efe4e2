//! go-zero style configuration loading (`conf.MustLoad`), and the config types shared by the
//! server and the client.
//!
//! [`load`] reads a YAML, JSON or TOML file (chosen by extension), expands `${VAR}` / `$VAR`
//! from the environment, and deserializes it into any `T: DeserializeOwned + Validate` with
//! go-zero's rules:
//!
//! - keys are **case-insensitive** (`ListenOn`, `listenOn` and `listenon` are the same key);
//! - an **unknown key is an error** naming the file, the key path and the closest valid key
//!   (go-zero silently ignores it);
//! - a wrong type or a bad duration is an error naming the key path and the value;
//! - absent keys take their defaults; then `T::validate()` runs.
//!
//! Durations use Go's syntax (`"500ms"`, `"5.5s"`, `"1m30s"`), see [`duration`].
//! The full key reference is `docs/configuration.md`.

mod de;
pub mod duration;
mod embed;
mod env;
mod error;
mod etcd;
mod features;
mod file;
mod redis;
mod suggest;
mod value;

use std::fmt;
use std::path::Path;

use serde::de::DeserializeOwned;

pub use embed::Embed;
pub use error::ConfError;
#[doc(hidden)]
pub use error::debug_report;
pub use etcd::EtcdConf;

/// What a secret's value reads as wherever a config is shown (`Debug`, the admin view).
#[doc(hidden)]
pub const REDACTED: &str = "<redacted>";

/// A secret as `Debug` shows it: whether it is set, never its value.
#[doc(hidden)]
#[must_use]
pub fn redacted(secret: &str) -> Option<&'static str> {
    (!secret.is_empty()).then_some(REDACTED)
}
#[doc(hidden)]
pub use features::{
    DEFAULT_FEATURES, FEATURES, FeatureSet, UnknownFeature, feature_on, format_compiled,
    with_features,
};
pub use file::ConfFile;
pub use redis::{CacheConf, NodeConf, RedisConf, RedisKeyConf};

/// A config file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// YAML (`.yaml`, `.yml`).
    Yaml,
    /// JSON (`.json`).
    Json,
    /// JSON5 (`.json5`, as go-zero reads since v1.10.1): JSON with comments, trailing commas,
    /// unquoted keys and single-quoted strings. Needs the `json5` cargo feature.
    Json5,
    /// TOML (`.toml`).
    Toml,
}

impl Format {
    /// The format for a file, by extension (case-insensitive).
    ///
    /// # Errors
    /// [`ConfError::Format`] naming the extension when it is not `.yaml`, `.yml`, `.json` or `.toml`.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Format, ConfError> {
        let path = path.as_ref();
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "yaml" | "yml" => Ok(Format::Yaml),
            "json" => Ok(Format::Json),
            "json5" => Ok(Format::Json5),
            "toml" => Ok(Format::Toml),
            _ => Err(ConfError::Format {
                file: path.display().to_string(),
                extension: if ext.is_empty() {
                    String::new()
                } else {
                    format!(".{ext}")
                },
            }),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Yaml => "yaml",
            Format::Json => "json",
            Format::Json5 => "json5",
            Format::Toml => "toml",
        })
    }
}

/// Loads a config file (go-zero `conf.Load` with `conf.UseEnv()`).
///
/// The format is chosen by extension; `${VAR}` / `$VAR` are expanded from the process
/// environment (an unset variable becomes the empty string, as in go-zero; when the empty value
/// makes the load fail, the error names the variable and the key); keys are case-insensitive;
/// unknown keys, wrong types and bad durations are errors naming the file and key path;
/// then [`Validate::validate`] runs, and [`Validate::loaded_from`] gets the file's name. Never
/// panics on bad input.
///
/// # Examples
/// ```no_run
/// use zrpc_core::conf::{self, ConfError, EtcdConf, Validate};
///
/// #[derive(Debug, serde::Deserialize)]
/// #[serde(rename_all = "PascalCase", deny_unknown_fields)]
/// struct Config {
///     etcd: EtcdConf,
/// }
///
/// impl Validate for Config {
///     fn validate(&self) -> Result<(), ConfError> {
///         self.etcd.validate()
///     }
/// }
///
/// let c: Config = conf::load("etc/app.yaml")?;
/// # Ok::<(), ConfError>(())
/// ```
///
/// # Errors
/// [`ConfError`]: unreadable file, unknown extension, syntax error, unknown key, wrong value,
/// or a failed validation.
pub fn load<T: DeserializeOwned + Validate>(path: impl AsRef<Path>) -> Result<T, ConfError> {
    load_with_env(path, |name| std::env::var(name).ok())
}

/// [`load`] with the variables looked up in `env` instead of the process environment.
///
/// # Errors
/// As [`load`].
pub fn load_with_env<T, F>(path: impl AsRef<Path>, env: F) -> Result<T, ConfError>
where
    T: DeserializeOwned + Validate,
    F: Fn(&str) -> Option<String>,
{
    let path = path.as_ref();
    let origin = path.display().to_string();
    let format = Format::from_path(path)?;
    let text = std::fs::read_to_string(path).map_err(|source| ConfError::Io {
        file: origin.clone(),
        source,
    })?;
    from_str_with_env(&text, format, &origin, env)
}

/// Parses config text (the same rules as [`load`], environment expansion included).
/// `origin` names the source in errors (a file name, or `""`).
///
/// # Errors
/// As [`load`].
pub fn from_str<T: DeserializeOwned + Validate>(
    text: &str,
    format: Format,
    origin: &str,
) -> Result<T, ConfError> {
    from_str_with_env(text, format, origin, |name| std::env::var(name).ok())
}

/// [`from_str`] with the variables looked up in `env`.
///
/// # Errors
/// As [`load`].
pub fn from_str_with_env<T, F>(
    text: &str,
    format: Format,
    origin: &str,
    env: F,
) -> Result<T, ConfError>
where
    T: DeserializeOwned + Validate,
    F: Fn(&str) -> Option<String>,
{
    let (expanded, empty) = env::expand_recording(text, &env);
    let load = || {
        let tree = value::parse(&expanded, format, origin)?;
        let mut conf: T = de::from_value(&tree).map_err(|e| add_note::<T>(e.into_conf(origin)))?;
        conf.validate().map_err(|e| e.with_file(origin))?;
        conf.loaded_from(origin);
        Ok(conf)
    };
    let conf = load().map_err(|e| env::explain(e, text, format, &env, &empty))?;
    for warning in env::unset_warnings(&empty) {
        let warning = format!("config file {origin}: {warning}");
        if tracing::dispatcher::has_been_set() {
            tracing::warn!(target: "zrpc::conf", "{warning}");
        } else {
            // A service loads its config before it sets up its log (the log settings are in
            // the config): the server logs these once it has (`take_load_warnings`).
            LOAD_WARNINGS.lock().push(warning);
        }
    }
    Ok(conf)
}

/// Warnings of config loads made before a log was set up.
static LOAD_WARNINGS: parking_lot::Mutex<Vec<String>> = parking_lot::Mutex::new(Vec::new());

/// The warnings of config loads made before a log was set up, taken (the server logs them once
/// its log is). For zrpc's server: not a stable API.
#[doc(hidden)]
pub fn take_load_warnings() -> Vec<String> {
    std::mem::take(&mut *LOAD_WARNINGS.lock())
}

/// `value` of `path` is one of `options` (go-zero's `options=a|b` tag), else an
/// [`Invalid`](ConfError::Invalid) error listing them. For zrpc's config types: not a stable API.
#[doc(hidden)]
pub fn one_of(path: &str, value: &str, options: &[&str]) -> Result<(), ConfError> {
    if options.contains(&value) {
        Ok(())
    } else {
        Err(ConfError::invalid(
            path,
            format!("{value:?} is not one of {}", options.join("|")),
        ))
    }
}

/// Adds `T`'s [`Validate::unknown_key_note`] to an unknown key at the top level.
fn add_note<T: Validate>(mut e: ConfError) -> ConfError {
    if let ConfError::UnknownKey { path, note, .. } = &mut e
        && note.is_none()
        && !path.contains(['.', '[', '<'])
    {
        *note = T::unknown_key_note().map(str::to_owned);
    }
    e
}

/// A config type that can check itself after loading (go-zero's `Validate() error`).
///
/// [`load`] and [`from_str`] call it after deserializing. Implement it for your own config
/// struct; it usually delegates to the embedded zrpc configs.
pub trait Validate {
    /// Checks ranges, options and combinations of keys.
    ///
    /// # Errors
    /// A [`ConfError`] naming the key path that is wrong.
    fn validate(&self) -> Result<(), ConfError>;

    /// [`validate`](Validate::validate) for a block nested under the key `parent` of a bigger
    /// config, whose errors name the full key path: a service's `Config` with a client block
    /// checks it with `self.user_rpc.validate_at("UserRpc")?`, and a missing `Etcd.Key` in it
    /// is reported as `UserRpc.Etcd.Key`, not as the server's own `Etcd.Key`.
    ///
    /// # Errors
    /// As [`validate`](Validate::validate), with `parent` in front of the key path.
    fn validate_at(&self, parent: &str) -> Result<(), ConfError> {
        self.validate().map_err(|e| e.at(parent))
    }

    /// Called by [`load`] and [`from_str`] once the config is valid, with the file it came
    /// from (`origin`, possibly empty). Default: nothing. zrpc's server and client configs
    /// keep it (a [`ConfFile`]) so that the errors of their start name the file as load errors
    /// do; a config of yours that holds one (a `UserRpc: RpcClientConf` block) passes it on:
    /// `self.user_rpc.loaded_from(file)`.
    fn loaded_from(&mut self, file: &str) {
        let _ = file;
    }

    /// A sentence the loader adds to an unknown-key error at the top level of a file loaded
    /// as this type (default: none). For a type that a file rarely holds alone: `RpcServerConf`
    /// says that a service's own keys go in its own struct, loaded with [`Embed`].
    fn unknown_key_note() -> Option<&'static str>
    where
        Self: Sized,
    {
        None
    }
}

#[cfg(test)]
mod tests;
