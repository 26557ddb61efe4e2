//! A serde `Deserializer` over [`Value`] with go-zero's key rules: struct keys match the field
//! names case-insensitively, an unknown key is an error with its path and the closest valid key,
//! and every error carries the key path where it happened.

use std::cell::{Cell, RefCell};
use std::fmt;

use serde::de::{self, Error as _, IntoDeserializer, Visitor};

mod access;

use access::{EntriesDe, EnumDe, SeqDe};

use super::ConfError;
use super::suggest::closest;
use super::value::Value;

/// A deserialization error with the key path where it happened.
#[derive(Debug)]
pub(crate) struct DeError {
    kind: Kind,
    path: Option<String>,
    message: String,
    /// `path` is relative to the value a nested [`super::Embed`] read (see [`DeError::nested`]).
    relative: bool,
}

#[derive(Debug)]
enum Kind {
    Custom,
    Unknown { suggestion: Option<String> },
    Duplicate,
}

impl DeError {
    pub(crate) fn unknown(path: String, suggestion: Option<String>) -> Self {
        DeError {
            kind: Kind::Unknown { suggestion },
            path: Some(path),
            message: String::new(),
            relative: false,
        }
    }

    fn duplicate(path: String) -> Self {
        DeError {
            kind: Kind::Duplicate,
            path: Some(path),
            message: String::new(),
            relative: false,
        }
    }

    /// Attaches `path` unless a deeper one is already set; a [`nested`](DeError::nested) one
    /// gets `path` in front.
    fn at(mut self, path: &str) -> Self {
        match self.path.take() {
            None => self.path = Some(path.to_owned()),
            Some(inner) if self.relative => {
                self.relative = false;
                self.path = Some(match (path.is_empty(), inner.is_empty()) {
                    (_, true) => path.to_owned(),
                    (true, false) => inner,
                    _ if inner.starts_with('[') => format!("{path}{inner}"),
                    _ => format!("{path}.{inner}"),
                });
            }
            Some(inner) => self.path = Some(inner),
        }
        self
    }

    /// An error of a block read on its own (an [`Embed`](super::Embed) inside a config): its
    /// path is relative to the block, and the enclosing deserializer puts the block's path in
    /// front.
    pub(crate) fn nested(mut self) -> Self {
        self.relative = true;
        self
    }

    pub(crate) fn into_conf(self, file: &str) -> ConfError {
        let path = match self.path {
            Some(p) if !p.is_empty() => p,
            _ => "<top level>".to_owned(),
        };
        let file = file.to_owned();
        match self.kind {
            Kind::Unknown { suggestion } => ConfError::UnknownKey {
                file,
                path,
                suggestion,
                note: None,
            },
            Kind::Duplicate => ConfError::DuplicateKey { file, path },
            Kind::Custom => ConfError::InvalidValue {
                file,
                path,
                message: self.message,
            },
        }
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.kind, &self.path) {
            (
                Kind::Unknown {
                    suggestion: Some(s),
                },
                Some(p),
            ) => {
                write!(f, "unknown key `{p}` (did you mean `{s}`?)")
            }
            (Kind::Unknown { .. }, Some(p)) => write!(f, "unknown key `{p}`"),
            (Kind::Duplicate, Some(p)) => write!(f, "duplicate key `{p}`"),
            (_, Some(p)) => write!(f, "`{p}`: {}", self.message),
            (_, None) => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for DeError {}

thread_local! {
    /// A structured error on its way through a `Deserialize` impl that only has `D::Error::custom`.
    static STASH: RefCell<Option<DeError>> = const { RefCell::new(None) };
}

/// Turns `e` into any deserializer's error; when that deserializer is ours, [`de::Error::custom`]
/// gets `e` back whole (kind, path, suggestion), otherwise its message is kept.
pub(crate) fn smuggle<E: de::Error>(e: DeError) -> E {
    let message = e.to_string();
    STASH.with(|s| *s.borrow_mut() = Some(e));
    E::custom(message)
}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        let message = msg.to_string();
        if let Some(stashed) = STASH.with(|s| s.borrow_mut().take())
            && stashed.to_string() == message
        {
            return stashed;
        }
        DeError {
            kind: Kind::Custom,
            path: None,
            message,
            relative: false,
        }
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Deserializes `T` from `value`, with paths relative to the top level.
pub(crate) fn from_value<T: de::DeserializeOwned>(value: &Value) -> Result<T, DeError> {
    T::deserialize(ValueDe {
        value,
        path: "",
        lenient: None,
    })
    .map_err(|e| e.at(""))
}

/// Top-level keys a lenient deserialization skipped, and the fields it knew.
#[derive(Debug, Default)]
pub(crate) struct Skipped {
    pub(crate) keys: RefCell<Vec<String>>,
    pub(crate) fields: Cell<&'static [&'static str]>,
}

/// Like [`from_value`], but unknown keys of the top-level struct are skipped and reported
/// (for [`super::Embed`], where another part may know them).
pub(crate) fn from_value_lenient<T: de::DeserializeOwned>(
    value: &Value,
) -> Result<(T, Skipped), DeError> {
    let skipped = Skipped::default();
    let t = T::deserialize(ValueDe {
        value,
        path: "",
        lenient: Some(&skipped),
    })
    .map_err(|e| e.at(""))?;
    Ok((t, skipped))
}

/// The deserializer for one value at `path`.
struct ValueDe<'a> {
    value: &'a Value,
    path: &'a str,
    /// Set only on the top-level value of a lenient deserialization.
    lenient: Option<&'a Skipped>,
}

impl ValueDe<'_> {
    fn invalid_type(&self, expected: &str) -> DeError {
        DeError::custom(format!(
            "invalid type: {}, expected {expected}",
            self.value.describe()
        ))
    }
}

macro_rules! int_method {
    ($name:ident) => {
        fn $name<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            if let Value::Str(s) = self.value {
                let t = s.trim();
                if let Ok(i) = t.parse::<i64>() {
                    return visitor.visit_i64(i);
                }
                if let Ok(u) = t.parse::<u64>() {
                    return visitor.visit_u64(u);
                }
            }
            self.deserialize_any(visitor)
        }
    };
}

macro_rules! float_method {
    ($name:ident) => {
        fn $name<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            if let Value::Str(s) = self.value {
                if let Ok(f) = s.trim().parse::<f64>() {
                    return visitor.visit_f64(f);
                }
            }
            self.deserialize_any(visitor)
        }
    };
}

impl<'de> de::Deserializer<'de> for ValueDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Int(i) => visitor.visit_i64(*i),
            Value::UInt(u) => visitor.visit_u64(*u),
            Value::Float(f) => visitor.visit_f64(*f),
            Value::Str(s) => visitor.visit_str(s),
            Value::Seq(items) => visitor.visit_seq(SeqDe {
                items: items.iter().enumerate(),
                path: self.path,
            }),
            Value::Map(entries) => visitor.visit_map(EntriesDe::new(
                entries.iter().map(|(k, v)| (k.as_str(), v)).collect(),
                self.path,
            )),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if let Value::Str(s) = self.value {
            match s.trim() {
                "true" | "True" | "TRUE" => return visitor.visit_bool(true),
                "false" | "False" | "FALSE" => return visitor.visit_bool(false),
                _ => {}
            }
        }
        self.deserialize_any(visitor)
    }

    int_method!(deserialize_i8);
    int_method!(deserialize_i16);
    int_method!(deserialize_i32);
    int_method!(deserialize_i64);
    int_method!(deserialize_i128);
    int_method!(deserialize_u8);
    int_method!(deserialize_u16);
    int_method!(deserialize_u32);
    int_method!(deserialize_u64);
    int_method!(deserialize_u128);
    float_method!(deserialize_f32);
    float_method!(deserialize_f64);

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.value {
            Value::Bool(b) => visitor.visit_string(b.to_string()),
            Value::Int(i) => visitor.visit_string(i.to_string()),
            Value::UInt(u) => visitor.visit_string(u.to_string()),
            Value::Float(f) => visitor.visit_string(f.to_string()),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.value {
            Value::Null => visitor.visit_seq(SeqDe {
                items: [].iter().enumerate(),
                path: self.path,
            }),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.value {
            Value::Null => visitor.visit_map(EntriesDe::new(Vec::new(), self.path)),
            Value::Map(_) => self.deserialize_any(visitor),
            _ => Err(self.invalid_type("a map")),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let entries: &[(String, Value)] = match self.value {
            Value::Map(entries) => entries,
            Value::Null => &[],
            _ => return Err(self.invalid_type("a map of keys")),
        };
        if let Some(l) = self.lenient {
            l.fields.set(fields);
        }
        let mut resolved: Vec<(&'static str, &Value)> = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            let field = fields
                .iter()
                .find(|f| **f == key)
                .or_else(|| fields.iter().find(|f| f.eq_ignore_ascii_case(key)));
            match field {
                Some(f) => {
                    if resolved.iter().any(|(seen, _)| seen == f) {
                        return Err(DeError::duplicate(child(self.path, f)));
                    }
                    resolved.push((f, value));
                }
                None if self.lenient.is_some() => {
                    if let Some(l) = self.lenient {
                        l.keys.borrow_mut().push(key.clone());
                    }
                }
                None => {
                    return Err(DeError::unknown(
                        child(self.path, key),
                        closest(key, fields).map(str::to_owned),
                    ));
                }
            }
        }
        // A key with no value (`Pass:` in YAML, `null` in JSON) counts as absent, as in go-zero:
        // the field keeps its default.
        resolved.retain(|(_, v)| !matches!(v, Value::Null));
        visitor.visit_map(EntriesDe::new(resolved, self.path))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match self.value {
            Value::Str(s) => {
                let variant = resolve_variant(s, variants)?;
                visitor.visit_enum(IntoDeserializer::<DeError>::into_deserializer(variant))
            }
            Value::Map(entries) if entries.len() == 1 => {
                let (key, value) = &entries[0];
                let variant = resolve_variant(key, variants)?;
                let path = child(self.path, variant);
                visitor
                    .visit_enum(EnumDe {
                        variant,
                        value,
                        path: &path,
                    })
                    .map_err(|e| e.at(&path))
            }
            _ => Err(self.invalid_type(&format!("one of {}", variants.join(", ")))),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        char bytes byte_buf unit unit_struct tuple tuple_struct identifier
    }
}

fn resolve_variant(s: &str, variants: &'static [&'static str]) -> Result<&'static str, DeError> {
    if let Some(v) = variants.iter().find(|v| **v == s) {
        return Ok(v);
    }
    if let Some(v) = variants.iter().find(|v| v.eq_ignore_ascii_case(s)) {
        return Ok(v);
    }
    let hint = closest(s, variants)
        .map(|c| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default();
    Err(DeError::custom(format!(
        "unknown value {s:?}, expected one of {}{hint}",
        variants.join(", ")
    )))
}
