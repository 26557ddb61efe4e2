//! `${VAR}` / `$VAR` expansion on the raw config text, like Go's `os.ExpandEnv` (go-zero `conf.UseEnv()`),
//! and the explanation of a load error caused by a variable that expanded to nothing.

use super::value::Value;
use super::{ConfError, Format, value};

/// One `${VAR}` / `$VAR` of the text that expanded to the empty string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EmptyVar {
    /// As written in the file: `${SERVICE_KEY}` or `$PORT`.
    token: String,
    /// The variable name.
    name: String,
    /// The variable is set, to the empty string (else it is not set at all).
    set: bool,
}

/// Expands `${VAR}` and `$VAR` with `lookup`; an unset variable becomes the empty string.
#[cfg(test)]
pub(crate) fn expand(text: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    expand_recording(text, lookup).0
}

/// [`expand`], also returning every reference that expanded to the empty string, in text order.
pub(crate) fn expand_recording(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> (String, Vec<EmptyVar>) {
    let mut empty = Vec::new();
    let out = substitute(text, |token, name| {
        let value = lookup(name);
        if value.as_deref().is_none_or(str::is_empty) {
            empty.push(EmptyVar {
                token: token.to_owned(),
                name: name.to_owned(),
                set: value.is_some(),
            });
        }
        value.unwrap_or_default()
    });
    (out, empty)
}

/// Go's `os.Expand`: a name is `[A-Za-z0-9_]+` or one shell special character (`*#$@!?-` or a
/// digit); a `$` followed by anything else is kept; `${` with no closing `}` drops the `${`.
/// `replace` gets each reference as written and its name.
fn substitute(text: &str, mut replace: impl FnMut(&str, &str) -> String) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            out.push_str(&text[copied..i]);
            let (name, width) = shell_name(&text[i + 1..]);
            if name.is_empty() && width > 0 {
                // bad syntax: eat the characters
            } else if name.is_empty() {
                out.push('$');
            } else {
                out.push_str(&replace(&text[i..=i + width], name));
            }
            i += 1 + width;
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The warnings of a config that loaded with variables that are not set: each reads as an
/// empty value, which may turn something off or open (an unset `${ZRPC_ADMIN_TOKEN}` leaves
/// the DevServer's admin view without a token). A variable set to the empty string is taken
/// as meant.
pub(crate) fn unset_warnings(empty: &[EmptyVar]) -> Vec<String> {
    empty
        .iter()
        .filter(|v| !v.set)
        .map(|v| {
            format!(
                "{} is not set: it reads as an empty value (set it, or write the value itself)",
                v.token
            )
        })
        .collect()
}

/// Rewrites a load error about a key whose value held a variable that expanded to nothing, so
/// that it names the variable: `` `Etcd.Key`: `${SERVICE_KEY}` expanded to an empty value (the
/// environment variable is not set); ... ``. A syntax error gets a note naming such variables.
/// Any other error is returned unchanged.
///
/// The key is found in a second expansion of `text` where each empty reference becomes a marker,
/// so the tree has the loaded shape and the marker shows which variables the value came from.
pub(crate) fn explain(
    err: ConfError,
    text: &str,
    format: Format,
    lookup: impl Fn(&str) -> Option<String>,
    empty: &[EmptyVar],
) -> ConfError {
    if empty.is_empty() {
        return err;
    }
    if let ConfError::Syntax { file, message } = err {
        let note: Vec<String> = empty
            .iter()
            .map(|v| format!("`{}` expanded to an empty value {}", v.token, v.reason()))
            .collect();
        return ConfError::Syntax {
            file,
            message: format!("{message}; {}, which may be the cause", note.join(", ")),
        };
    }
    let Some(explained) = explain_key(&err, text, format, lookup, empty) else {
        return err;
    };
    let cause = match &err {
        ConfError::Missing { .. } => "the key is required".to_owned(),
        ConfError::Invalid { message, .. } | ConfError::InvalidValue { message, .. } => {
            message.clone()
        }
        _ => return err,
    };
    let path = err.path().unwrap_or_default().to_owned();
    ConfError::Invalid {
        file: err.file().to_owned(),
        path,
        message: format!("{explained} (the empty value gave: {cause})"),
    }
}

/// What to say about the empty variables of the value at `err`'s key, if it has any.
fn explain_key(
    err: &ConfError,
    text: &str,
    format: Format,
    lookup: impl Fn(&str) -> Option<String>,
    empty: &[EmptyVar],
) -> Option<String> {
    let path = err.path()?;
    let mut seen = 0usize;
    let marked = substitute(text, |_, name| match lookup(name) {
        Some(v) if !v.is_empty() => v,
        _ => {
            seen += 1;
            marker(seen - 1)
        }
    });
    let tree = value::parse(&marked, format, "").ok()?;
    let Some(Value::Str(raw)) = tree.at_path(path) else {
        return None;
    };
    let here: Vec<&EmptyVar> = empty
        .iter()
        .enumerate()
        .filter(|(i, _)| raw.contains(&marker(*i)))
        .map(|(_, v)| v)
        .collect();
    if here.is_empty() {
        return None;
    }
    let mut written = raw.clone();
    for (i, v) in empty.iter().enumerate() {
        written = written.replace(&marker(i), &v.token);
    }
    let tokens: Vec<String> = here.iter().map(|v| format!("`{}`", v.token)).collect();
    let what = if here.len() == 1 && written.trim() == here[0].token {
        tokens[0].clone()
    } else {
        format!("{} in `{written}`", tokens.join(", "))
    };
    let why = if here.len() == 1 {
        here[0].reason().to_owned()
    } else {
        let each: Vec<String> = here
            .iter()
            .map(|v| {
                let state = if v.set { "is empty" } else { "is not set" };
                format!("{} {state}", v.name)
            })
            .collect();
        format!("({})", each.join(", "))
    };
    let mut names: Vec<&str> = here.iter().map(|v| v.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    Some(format!(
        "{what} expanded to an empty value {why}; set {} in the environment or write the value \
         in the file",
        names.join(", ")
    ))
}

/// The stand-in for the `i`-th empty reference: letters, digits and `_` only, so that it parses
/// as a plain scalar anywhere a value could be in YAML and TOML keys.
fn marker(i: usize) -> String {
    format!("__zrpc_empty_env_{i}__")
}

impl EmptyVar {
    fn reason(&self) -> &'static str {
        if self.set {
            "(the environment variable is set to an empty string)"
        } else {
            "(the environment variable is not set)"
        }
    }
}

fn is_special(c: u8) -> bool {
    matches!(c, b'*' | b'#' | b'$' | b'@' | b'!' | b'?' | b'-') || c.is_ascii_digit()
}

fn is_alnum(c: u8) -> bool {
    c == b'_' || c.is_ascii_alphanumeric()
}

/// Go's `getShellName`: the name after `$` and how many bytes it used.
fn shell_name(s: &str) -> (&str, usize) {
    let b = s.as_bytes();
    if b[0] == b'{' {
        if b.len() > 2 && is_special(b[1]) && b[2] == b'}' {
            return (&s[1..2], 3);
        }
        for (i, &c) in b.iter().enumerate().skip(1) {
            if c == b'}' {
                if i == 1 {
                    return ("", 2); // "${}" is bad syntax
                }
                return (&s[1..i], i + 1);
            }
        }
        return ("", 1); // no closing brace
    }
    if is_special(b[0]) {
        return (&s[0..1], 1);
    }
    let n = b.iter().take_while(|&&c| is_alnum(c)).count();
    (&s[..n], n)
}

#[cfg(test)]
mod tests;
