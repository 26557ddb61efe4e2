//! The parsed config tree, one shape for YAML, JSON and TOML.

use super::{ConfError, Format};

/// A config value. Maps keep the file's key order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Value>),
    Map(Vec<(String, Value)>),
}

impl Value {
    /// How the value reads in an error message.
    pub(crate) fn describe(&self) -> String {
        match self {
            Value::Null => "null".to_owned(),
            Value::Bool(b) => format!("boolean `{b}`"),
            Value::Int(i) => format!("integer `{i}`"),
            Value::UInt(u) => format!("integer `{u}`"),
            Value::Float(f) => format!("float `{f}`"),
            Value::Str(s) => format!("string {s:?}"),
            Value::Seq(_) => "a list".to_owned(),
            Value::Map(_) => "a map".to_owned(),
        }
    }
}

impl Value {
    /// The value at a key path as errors spell it (`Etcd.Key`, `MethodTimeouts[0].FullMethod`),
    /// keys matched case-insensitively as the loader does.
    pub(crate) fn at_path(&self, path: &str) -> Option<&Value> {
        let mut here = self;
        for segment in path.split('.') {
            let (key, indexes) = segment.split_once('[').unwrap_or((segment, ""));
            if !key.is_empty() {
                let Value::Map(entries) = here else {
                    return None;
                };
                here = entries
                    .iter()
                    .find(|(k, _)| k == key)
                    .or_else(|| entries.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)))
                    .map(|(_, v)| v)?;
            }
            for index in indexes.split('[').filter(|i| !i.is_empty()) {
                let index: usize = index.strip_suffix(']')?.parse().ok()?;
                let Value::Seq(items) = here else {
                    return None;
                };
                here = items.get(index)?;
            }
        }
        Some(here)
    }
}

/// Parses `text` in `format` into a tree.
pub(crate) fn parse(text: &str, format: Format, origin: &str) -> Result<Value, ConfError> {
    let syntax = |message: String| ConfError::Syntax {
        file: origin.to_owned(),
        message,
    };
    match format {
        Format::Yaml => {
            if text.trim().is_empty() {
                return Ok(Value::Map(Vec::new()));
            }
            if text.contains('*') {
                expanded_size(text).map_err(|e| syntax(e.to_string()))?;
            }
            let mut v: serde_yaml_ng::Value =
                serde_yaml_ng::from_str(text).map_err(|e| syntax(e.to_string()))?;
            v.apply_merge().map_err(|e| syntax(e.to_string()))?;
            Ok(from_yaml(v))
        }
        Format::Json => {
            let v: serde_json::Value =
                serde_json::from_str(text).map_err(|e| syntax(e.to_string()))?;
            Ok(from_json(v))
        }
        #[cfg(feature = "json5")]
        Format::Json5 if super::feature_on("json5", true) => {
            json5_depth(text).map_err(syntax)?;
            let v: serde_json::Value = json5::from_str(text).map_err(|e| syntax(e.to_string()))?;
            Ok(from_json(v))
        }
        // JSON5 is a parser of its own that goctl never writes.
        Format::Json5 => {
            Err(
                ConfError::feature_off("<file type>", ".json5", "a JSON5 config file", "json5")
                    .with_file(origin),
            )
        }
        #[cfg(feature = "toml")]
        Format::Toml if super::feature_on("toml", true) => {
            let v: toml::Table =
                toml::from_str(text).map_err(|e| syntax(e.to_string().trim_end().to_owned()))?;
            Ok(from_toml(toml::Value::Table(v)))
        }
        // The TOML parser is 6 crates that few go-zero services need (goctl writes YAML).
        Format::Toml => {
            Err(
                ConfError::feature_off("<file type>", ".toml", "a TOML config file", "toml")
                    .with_file(origin),
            )
        }
    }
}

/// The deepest nesting of a JSON5 file: serde_json's limit. The json5 parser recurses without
/// one, so `[[[[...` a few hundred thousand deep overflowed the stack (an abort, not an error).
#[cfg(feature = "json5")]
const MAX_JSON5_DEPTH: usize = 128;

/// Checks the nesting of `text`'s lists and objects, outside strings and comments.
#[cfg(feature = "json5")]
fn json5_depth(text: &str) -> Result<(), String> {
    let (mut depth, mut line) = (0usize, 1usize);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            '"' | '\'' => {
                // a string: to its closing quote, escapes skipped
                while let Some(s) = chars.next() {
                    match s {
                        // an escape (its character consumed by the guard), or a line
                        // continuation
                        '\\' if chars.next() == Some('\n') => line += 1,
                        '\n' => line += 1,
                        s if s == c => break,
                        _ => {}
                    }
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                for s in chars.by_ref() {
                    if s == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut star = false;
                for s in chars.by_ref() {
                    if s == '\n' {
                        line += 1;
                    }
                    if star && s == '/' {
                        break;
                    }
                    star = s == '*';
                }
            }
            '[' | '{' => {
                depth += 1;
                if depth > MAX_JSON5_DEPTH {
                    return Err(format!(
                        "nested more than {MAX_JSON5_DEPTH} deep at line {line}"
                    ));
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The most values a YAML file may expand to, its aliases replayed: far more than any config,
/// far less than the memory a few kilobytes of aliases of aliases can ask for.
const MAX_EXPANDED_VALUES: usize = 1_000_000;

/// Checks, without building anything, that `text` expands to at most [`MAX_EXPANDED_VALUES`]
/// values. serde_yaml_ng stops aliases that grow exponentially, not quadratic ones: a list of
/// 5,000 aliases of a 5,000-item list is 25 KB of text and 25 million values (gigabytes as a
/// tree). Only run on a text that may hold an alias (`*`).
fn expanded_size(text: &str) -> Result<usize, serde_yaml_ng::Error> {
    use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess};
    use serde::de::{VariantAccess, Visitor};
    use std::cell::Cell;

    /// Counts the values of one node and its children.
    #[derive(Clone, Copy)]
    struct Count<'a>(&'a Cell<usize>);

    impl Count<'_> {
        fn one<E: de::Error>(self) -> Result<(), E> {
            let n = self.0.get() + 1;
            self.0.set(n);
            if n > MAX_EXPANDED_VALUES {
                return Err(E::custom(format!(
                    "the file expands to more than {MAX_EXPANDED_VALUES} values (aliases of \
                     large anchors?)"
                )));
            }
            Ok(())
        }
    }

    impl<'de> DeserializeSeed<'de> for Count<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Count<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("any YAML value")
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
            self.one()
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
            self.one()
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
            self.one()
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
            self.one()
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
            self.one()
        }
        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            self.one()
        }
        fn visit_none<E: de::Error>(self) -> Result<(), E> {
            self.one()
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            self.one()?;
            while seq.next_element_seed(self)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            self.one()?;
            while map.next_key_seed(self)?.is_some() {
                map.next_value_seed(self)?;
            }
            Ok(())
        }
        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
            // a tagged value (`!tag value`)
            let ((), variant) = data.variant_seed(self)?;
            variant.newtype_variant_seed(self)
        }
    }

    let count = Cell::new(0);
    Count(&count).deserialize(serde_yaml_ng::Deserializer::from_str(text))?;
    Ok(count.get())
}

fn from_yaml(v: serde_yaml_ng::Value) -> Value {
    use serde_yaml_ng::Value as Y;
    match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => number(n.as_i64(), n.as_u64(), n.as_f64()),
        Y::String(s) => Value::Str(s),
        Y::Sequence(seq) => Value::Seq(seq.into_iter().map(from_yaml).collect()),
        Y::Mapping(map) => Value::Map(
            map.into_iter()
                .map(|(k, v)| (yaml_key(k), from_yaml(v)))
                .collect(),
        ),
        Y::Tagged(t) => from_yaml(t.value),
    }
}

/// A key as text. A sequence or mapping used as a key (it matches no field, so it only ever
/// appears in an unknown-key error) is written in YAML's flow style here rather than by the
/// YAML emitter, which nothing else needs and every binary would carry.
fn yaml_key(k: serde_yaml_ng::Value) -> String {
    use serde_yaml_ng::Value as Y;
    match k {
        Y::String(s) => s,
        Y::Bool(b) => b.to_string(),
        Y::Number(n) => n.to_string(),
        Y::Null => "null".to_owned(),
        Y::Tagged(t) => yaml_key(t.value),
        Y::Sequence(seq) => {
            let items: Vec<String> = seq.into_iter().map(yaml_key).collect();
            format!("[{}]", items.join(", "))
        }
        Y::Mapping(map) => {
            let entries: Vec<String> = map
                .into_iter()
                .map(|(k, v)| format!("{}: {}", yaml_key(k), yaml_key(v)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

fn from_json(v: serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(b),
        J::Number(n) => number(n.as_i64(), n.as_u64(), n.as_f64()),
        J::String(s) => Value::Str(s),
        J::Array(a) => Value::Seq(a.into_iter().map(from_json).collect()),
        J::Object(o) => Value::Map(o.into_iter().map(|(k, v)| (k, from_json(v))).collect()),
    }
}

#[cfg(feature = "toml")]
fn from_toml(v: toml::Value) -> Value {
    use toml::Value as T;
    match v {
        T::String(s) => Value::Str(s),
        T::Integer(i) => Value::Int(i),
        T::Float(f) => Value::Float(f),
        T::Boolean(b) => Value::Bool(b),
        T::Datetime(d) => Value::Str(d.to_string()),
        T::Array(a) => Value::Seq(a.into_iter().map(from_toml).collect()),
        T::Table(t) => Value::Map(t.into_iter().map(|(k, v)| (k, from_toml(v))).collect()),
    }
}

fn number(i: Option<i64>, u: Option<u64>, f: Option<f64>) -> Value {
    match (i, u, f) {
        (Some(i), _, _) => Value::Int(i),
        (None, Some(u), _) => Value::UInt(u),
        (_, _, Some(f)) => Value::Float(f),
        _ => Value::Null,
    }
}

/// Captures any self-describing input as a [`Value`] (used by [`super::Embed`]).
impl<'de> serde::Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> serde::de::Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any config value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::UInt(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }

    fn visit_newtype_struct<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Seq(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry::<Value, Value>()? {
            let key = match k {
                Value::Str(s) => s,
                Value::Bool(b) => b.to_string(),
                Value::Int(i) => i.to_string(),
                Value::UInt(u) => u.to_string(),
                Value::Float(f) => f.to_string(),
                other => other.describe(),
            };
            entries.push((key, v));
        }
        Ok(Value::Map(entries))
    }
}
