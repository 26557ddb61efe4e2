//! Which optional parts of zrpc (cargo features of the `zrpc` crate) the config checks treat as
//! present, so that a tool built with every feature (`zrpcctl conf check`) can check a config
//! as a build with fewer features would, without recompiling.
//!
//! Every check of a key that needs a feature asks [`feature_on`]`("tls", cfg!(feature = "tls"))`
//! instead of `cfg!` alone. With no override (every normal program) the answer is the `cfg!`
//! value. Inside [`with_features`] it is also off when the override leaves the feature out: an
//! override only turns off what is compiled in, never on. The override is per thread and scoped
//! to the closure; only the config load, validation and preflight paths consult it.

use std::cell::Cell;
use std::fmt;

/// The cargo features of the `zrpc` crate (crates/zrpc/Cargo.toml), in the order they are
/// listed there.
pub const FEATURES: &[&str] = &[
    "etcd",
    "devserver",
    "otel",
    "reflection",
    "env-filter",
    "toml",
    "json5",
    "redis-auth",
    "tls",
    "gzip",
    "deflate",
    "zstd",
    "client",
];

/// The `default` features of the `zrpc` crate.
pub const DEFAULT_FEATURES: &[&str] = &["etcd", "devserver", "gzip", "client"];

// one bit each in `FeatureSet`
const _: () = assert!(FEATURES.len() <= 16);

/// A set of [`FEATURES`].
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct FeatureSet(u16);

/// A feature name that is not one of [`FEATURES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFeature(pub String);

impl fmt::Display for UnknownFeature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown zrpc feature `{}` (zrpc's features: {})",
            self.0,
            FEATURES.join(", ")
        )
    }
}

impl std::error::Error for UnknownFeature {}

fn bit(name: &str) -> Option<u16> {
    FEATURES.iter().position(|f| *f == name).map(|i| 1 << i)
}

impl FeatureSet {
    /// No feature (`--no-default-features`).
    pub const fn none() -> Self {
        FeatureSet(0)
    }

    /// Every feature (`--all-features`).
    pub fn all() -> Self {
        FeatureSet((1 << FEATURES.len()) - 1)
    }

    /// The `default` features.
    pub fn defaults() -> Self {
        let mut set = FeatureSet::none();
        for name in DEFAULT_FEATURES {
            set.0 |= bit(name).unwrap_or(0);
        }
        set
    }

    /// Adds `name`.
    ///
    /// # Errors
    /// [`UnknownFeature`] when `name` is not one of [`FEATURES`].
    pub fn insert(&mut self, name: &str) -> Result<(), UnknownFeature> {
        let b = bit(name).ok_or_else(|| UnknownFeature(name.to_owned()))?;
        self.0 |= b;
        Ok(())
    }

    /// Whether `name` is in the set (an unknown name never is).
    pub fn contains(&self, name: &str) -> bool {
        bit(name).is_some_and(|b| self.0 & b != 0)
    }

    /// The names in the set, in [`FEATURES`] order.
    pub fn names(&self) -> Vec<&'static str> {
        FEATURES
            .iter()
            .copied()
            .filter(|f| self.contains(f))
            .collect()
    }
}

impl fmt::Debug for FeatureSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.names()).finish()
    }
}

thread_local! {
    static OVERRIDE: Cell<Option<FeatureSet>> = const { Cell::new(None) };
}

/// Puts the previous override back when dropped (also when the closure panics).
struct Restore(Option<FeatureSet>);

impl Drop for Restore {
    fn drop(&mut self) {
        OVERRIDE.with(|o| o.set(self.0));
    }
}

/// Runs `f` with the config checks of this thread treating only the features in `set` as
/// present (those compiled in, that is: an override never turns a feature on). The previous
/// state is restored when `f` returns or panics.
pub fn with_features<R>(set: &FeatureSet, f: impl FnOnce() -> R) -> R {
    let _restore = Restore(OVERRIDE.with(|o| o.replace(Some(*set))));
    f()
}

/// Whether this crate was built with the config-file format `name` (`toml`, `json5`): the
/// facade turns these on here, so the crates above cannot ask `cfg!` themselves (the admin
/// view's list of build features).
#[doc(hidden)]
#[must_use]
pub fn format_compiled(name: &str) -> bool {
    (name == "toml" && cfg!(feature = "toml")) || (name == "json5" && cfg!(feature = "json5"))
}

/// Whether the config checks treat the feature `name` as present: `compiled` (the caller's
/// `cfg!(feature = "...")`) and, inside [`with_features`], in its set.
pub fn feature_on(name: &str, compiled: bool) -> bool {
    debug_assert!(bit(name).is_some(), "not a zrpc feature: {name}");
    compiled && OVERRIDE.with(|o| o.get().is_none_or(|set| set.contains(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_override_the_answer_is_cfg() {
        assert_eq!(
            feature_on("tls", cfg!(feature = "tls")),
            cfg!(feature = "tls")
        );
        assert_eq!(
            feature_on("toml", cfg!(feature = "toml")),
            cfg!(feature = "toml")
        );
        for name in FEATURES {
            assert!(feature_on(name, true), "{name}");
            assert!(!feature_on(name, false), "{name}");
        }
    }

    #[test]
    fn the_override_turns_off_only_and_is_scoped() {
        let mut set = FeatureSet::defaults();
        set.insert("tls").unwrap();
        let inside = with_features(&set, || {
            // nested: the inner set wins, then the outer one is back
            let nested = with_features(&FeatureSet::none(), || feature_on("tls", true));
            (
                feature_on("tls", true),
                feature_on("etcd", true),
                feature_on("reflection", true),
                feature_on("tls", false),
                nested,
                feature_on("tls", true),
            )
        });
        assert_eq!(inside, (true, true, false, false, false, true));
        assert!(feature_on("reflection", true), "not restored");

        let caught = std::panic::catch_unwind(|| {
            with_features(&FeatureSet::none(), || panic!("in the closure"))
        });
        assert!(caught.is_err());
        assert!(feature_on("etcd", true), "not restored after a panic");
    }

    #[test]
    fn sets_and_names() {
        assert_eq!(FeatureSet::defaults().names(), DEFAULT_FEATURES);
        assert_eq!(FeatureSet::all().names(), FEATURES);
        assert!(FeatureSet::none().names().is_empty());
        let e = FeatureSet::none().insert("tsl").unwrap_err().to_string();
        assert!(e.contains("`tsl`") && e.contains("redis-auth, tls"), "{e}");
    }
}
