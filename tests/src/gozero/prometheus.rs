//! Reading Prometheus text (DevServer `/metrics`).

use std::collections::BTreeMap;

/// The value of the sample `series` (`name{labels}` in Prometheus' sorted label order).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|v| v.strip_prefix(' '))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    })
}

/// The `# TYPE` of `family`.
pub fn family_type(text: &str, family: &str) -> Option<String> {
    let prefix = format!("# TYPE {family} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|t| t.trim().to_owned()))
}

/// The `# HELP` text of `family`.
pub fn family_help(text: &str, family: &str) -> Option<String> {
    let prefix = format!("# HELP {family} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|t| t.trim().to_owned()))
}

/// The samples of metric `name` (exact name, e.g. `rpc_server_requests_duration_ms_bucket`) as
/// label maps with values.
pub fn samples(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once("} ") {
                Some((l, v)) => (l, v),
                None => continue,
            },
            None => match rest.strip_prefix(' ') {
                Some(v) => ("", v),
                None => continue,
            },
        };
        let mut map = BTreeMap::new();
        for pair in split_labels(labels) {
            if let Some((k, v)) = pair.split_once('=') {
                map.insert(k.to_owned(), v.trim_matches('"').to_owned());
            }
        }
        if let Some(v) = value.split_whitespace().next().and_then(|v| v.parse().ok()) {
            out.push((map, v));
        }
    }
    out
}

/// Splits `a="x",b="y,z"` at the commas outside quotes.
fn split_labels(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, ch) in s.char_indices() {
        match ch {
            '\\' if quoted && !escaped => {
                escaped = true;
                continue;
            }
            '"' if !escaped => quoted = !quoted,
            ',' if !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        escaped = false;
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_samples() {
        let text = "# TYPE x counter\nx{code=\"0\",method=\"/a,b\"} 3\nx_sum 1.5\n";
        let s = samples(text, "x");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0.get("method").map(String::as_str), Some("/a,b"));
        assert_eq!(s[0].1, 3.0);
        assert_eq!(sample(text, "x_sum"), Some(1.5));
        assert_eq!(family_type(text, "x").as_deref(), Some("counter"));
    }
}
