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

pub mod duration;
mod error;
mod etcd;

pub use error::ConfError;
pub use etcd::EtcdConf;

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
}
