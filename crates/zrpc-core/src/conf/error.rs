//! The one error type of the config loader and of every `validate()`.

use std::fmt;

/// Why a config could not be loaded or is not valid.
///
/// Every variant carries the file it came from (`file`, empty when the config was built in code
/// or parsed from a string without an origin) and, where it applies, the key path in go-zero's
/// spelling (`Middlewares.StatConf.SlowThreshold`, `MethodTimeouts[0].FullMethod`).
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum ConfError {
    /// The file could not be read.
    #[error("{}cannot read the file: {source}", Origin(file))]
    Io {
        /// The file.
        file: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file extension is not one of `.yaml`, `.yml`, `.json`, `.toml`.
    #[error(
        "{}unrecognized file type `{extension}` (expected .yaml, .yml, .json, .json5 or .toml)",
        Origin(file)
    )]
    Format {
        /// The file.
        file: String,
        /// The extension found (empty when there is none).
        extension: String,
    },
    /// The text is not valid YAML / JSON / TOML.
    #[error("{}syntax error: {message}", Origin(file))]
    Syntax {
        /// The file.
        file: String,
        /// The parser's message (with line and column where the parser gives them).
        message: String,
    },
    /// A key that the config type does not have.
    #[error(
        "{}unknown key `{path}`{}{}",
        Origin(file),
        Hint(suggestion.as_deref()),
        Note(note.as_deref())
    )]
    UnknownKey {
        /// The file.
        file: String,
        /// The key path, e.g. `Middlewares.Tiemout`.
        path: String,
        /// The closest valid key at that level, if one is close enough.
        suggestion: Option<String>,
        /// For a key at the top level: what the config type says about keys it does not have
        /// ([`Validate::unknown_key_note`](super::Validate::unknown_key_note)), e.g. where a
        /// service's own keys go.
        note: Option<String>,
    },
    /// A key given twice at one level (keys are case-insensitive, so `Name` and `name` clash).
    #[error("{}duplicate key `{path}` (keys are case-insensitive)", Origin(file))]
    DuplicateKey {
        /// The file.
        file: String,
        /// The key path.
        path: String,
    },
    /// A value of the wrong type or shape (a string where a number is expected, a bad duration...).
    #[error("{}invalid value for `{path}`: {message}", Origin(file))]
    InvalidValue {
        /// The file.
        file: String,
        /// The key path.
        path: String,
        /// What is wrong, including the value found.
        message: String,
    },
    /// A required key is missing or empty.
    #[error("{}field `{path}` is not set", Origin(file))]
    Missing {
        /// The file.
        file: String,
        /// The key path.
        path: String,
    },
    /// A value parsed but failed validation (range, options, combinations of keys).
    #[error("{}`{path}`: {message}", Origin(file))]
    Invalid {
        /// The file.
        file: String,
        /// The key path.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Debug prints the friendly message (as `anyhow` does), so `fn main() -> Result<(), E>` and
/// `Box<dyn Error>` show what went wrong and where, not the variant's fields.
impl fmt::Debug for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_report(self, f)
    }
}

/// Writes `err`'s message followed by the causes its message does not already contain, one
/// per line (`Caused by: ...`). The `Debug` impl of every zrpc error type calls it, so that
/// `main` returning an error prints a sentence instead of `UnknownKey { file: .. }`.
#[doc(hidden)]
pub fn debug_report(
    err: &(dyn std::error::Error + 'static),
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    let message = err.to_string();
    f.write_str(&message)?;
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            write!(f, "\n\nCaused by: {text}")?;
        }
        source = cause.source();
    }
    Ok(())
}

impl ConfError {
    /// A validation error at `path` (the file is filled in by the loader).
    pub fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfError::Invalid {
            file: String::new(),
            path: path.into(),
            message: message.into(),
        }
    }

    /// `path` set to `value` asks for `what`, which the cargo feature `feature` of zrpc adds and
    /// this build leaves out: an [`Invalid`](ConfError::Invalid) error naming the key, the value
    /// and the feature to enable, so a config is refused at load instead of silently ignored.
    pub fn feature_off(path: impl Into<String>, value: &str, what: &str, feature: &str) -> Self {
        ConfError::invalid(
            path,
            format!(
                "{value:?} asks for {what}, which this build of zrpc leaves out: enable the \
                 `{feature}` cargo feature of zrpc (zrpc = {{ ..., features = [\"{feature}\"] }})"
            ),
        )
    }

    /// A missing required key at `path` (the file is filled in by the loader).
    pub fn missing(path: impl Into<String>) -> Self {
        ConfError::Missing {
            file: String::new(),
            path: path.into(),
        }
    }

    /// The file the error is about (empty when unknown).
    pub fn file(&self) -> &str {
        match self {
            ConfError::Io { file, .. }
            | ConfError::Format { file, .. }
            | ConfError::Syntax { file, .. }
            | ConfError::UnknownKey { file, .. }
            | ConfError::DuplicateKey { file, .. }
            | ConfError::InvalidValue { file, .. }
            | ConfError::Missing { file, .. }
            | ConfError::Invalid { file, .. } => file,
        }
    }

    /// The key path the error is about, if it is about one key.
    pub fn path(&self) -> Option<&str> {
        match self {
            ConfError::UnknownKey { path, .. }
            | ConfError::DuplicateKey { path, .. }
            | ConfError::InvalidValue { path, .. }
            | ConfError::Missing { path, .. }
            | ConfError::Invalid { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The error of a block nested under `parent` in the file: its key path gains `parent` in
    /// front (`Etcd.Key` under `UserRpc` is `UserRpc.Etcd.Key`). What
    /// [`Validate::validate_at`](super::Validate::validate_at) returns.
    #[must_use]
    pub fn at(mut self, parent: &str) -> Self {
        if let ConfError::UnknownKey { path, .. }
        | ConfError::DuplicateKey { path, .. }
        | ConfError::InvalidValue { path, .. }
        | ConfError::Missing { path, .. }
        | ConfError::Invalid { path, .. } = &mut self
        {
            *path = if path.is_empty() {
                parent.to_owned()
            } else if path.starts_with('[') {
                format!("{parent}{path}")
            } else {
                format!("{parent}.{path}")
            };
        }
        self
    }

    /// Sets the file the error is about, unless one is already set.
    #[must_use]
    pub fn with_file(mut self, origin: &str) -> Self {
        let slot = match &mut self {
            ConfError::Io { file, .. }
            | ConfError::Format { file, .. }
            | ConfError::Syntax { file, .. }
            | ConfError::UnknownKey { file, .. }
            | ConfError::DuplicateKey { file, .. }
            | ConfError::InvalidValue { file, .. }
            | ConfError::Missing { file, .. }
            | ConfError::Invalid { file, .. } => file,
        };
        if slot.is_empty() {
            *slot = origin.to_owned();
        }
        self
    }
}

/// `config file <name>: ` or nothing.
struct Origin<'a>(&'a str);

impl fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, "config file {}: ", self.0)
        }
    }
}

/// ` (did you mean `X`?)` or nothing.
struct Hint<'a>(Option<&'a str>);

impl fmt::Display for Hint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(s) => write!(f, " (did you mean `{s}`?)"),
            None => Ok(()),
        }
    }
}

/// `; <note>` or nothing.
struct Note<'a>(Option<&'a str>);

impl fmt::Display for Note<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(s) => write!(f, "; {s}"),
            None => Ok(()),
        }
    }
}
