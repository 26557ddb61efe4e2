//! `${VAR}` / `$VAR` expansion on the raw config text, like Go's `os.ExpandEnv` (go-zero `conf.UseEnv()`).

/// Expands `${VAR}` and `$VAR` with `lookup`; an unset variable becomes the empty string.
///
/// Follows Go's `os.Expand`: a name is `[A-Za-z0-9_]+` or one shell special character
/// (`*#$@!?-` or a digit); a `$` followed by anything else is kept; `${` with no closing `}`
/// drops the `${`.
pub(crate) fn expand(text: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
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
                out.push_str(&lookup(name).unwrap_or_default());
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
mod tests {
    use super::expand;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("10.0.0.1".to_owned()),
            "PORT" => Some("8080".to_owned()),
            _ => None,
        }
    }

    #[test]
    fn expands_like_go() {
        assert_eq!(
            expand("ListenOn: ${HOST}:$PORT", env),
            "ListenOn: 10.0.0.1:8080"
        );
        assert_eq!(expand("a ${UNSET} b $UNSET c", env), "a  b  c");
        assert_eq!(expand("cost $ 5", env), "cost $ 5");
        assert_eq!(expand("end $", env), "end $");
        assert_eq!(expand("${HOST", env), "HOST");
        assert_eq!(expand("x${}y", env), "xy");
        assert_eq!(expand("$$", env), "");
        assert_eq!(expand("héllo ${PORT}é", env), "héllo 8080é");
        assert_eq!(expand("no vars", env), "no vars");
    }
}
