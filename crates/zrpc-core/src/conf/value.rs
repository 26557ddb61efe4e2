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
        Format::Toml => {
            let v: toml::Table =
                toml::from_str(text).map_err(|e| syntax(e.to_string().trim_end().to_owned()))?;
            Ok(from_toml(toml::Value::Table(v)))
        }
    }
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

fn yaml_key(k: serde_yaml_ng::Value) -> String {
    use serde_yaml_ng::Value as Y;
    match k {
        Y::String(s) => s,
        Y::Bool(b) => b.to_string(),
        Y::Number(n) => n.to_string(),
        Y::Null => "null".to_owned(),
        Y::Tagged(t) => yaml_key(t.value),
        other => serde_yaml_ng::to_string(&other)
            .unwrap_or_default()
            .trim()
            .to_owned(),
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
