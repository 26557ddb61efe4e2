//! Go `time.Duration` values in config files: `"500ms"`, `"5.5s"`, `"1m30s"`, `"1h"`.
//!
//! Use as `#[serde(with = "zrpc_core::conf::duration")]` on a `std::time::Duration` field, or
//! `#[serde(with = "zrpc_core::conf::duration::option")]` on an `Option<Duration>`.
//!
//! Accepted, like Go's `time.ParseDuration`: a sequence of decimal numbers, each with an optional
//! fraction and a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), e.g. `"1h2m3.5s"`; `"0"` alone.
//! A bare integer (a number in YAML/JSON/TOML, not a string) is nanoseconds, as Go's
//! `time.Duration` is an `int64` of nanoseconds. Negative durations are rejected. Serialization
//! writes Go's `Duration.String()` form (`"1m30s"`, `"500ms"`).

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;

/// A duration string that is not a valid Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {input:?}: {reason} (expected e.g. \"500ms\", \"5.5s\", \"1m30s\", \"1h\")"
)]
pub struct DurationError {
    input: String,
    reason: &'static str,
}

impl DurationError {
    fn new(input: &str, reason: &'static str) -> Self {
        DurationError {
            input: input.to_owned(),
            reason,
        }
    }
}

/// Parses a Go duration string (`"500ms"`, `"5.5s"`, `"1m30s"`, `"0"`).
///
/// # Errors
/// [`DurationError`] for an empty string, a missing or unknown unit, a negative value or overflow.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let s = input.trim();
    let err = |reason| DurationError::new(input, reason);
    let mut rest = s;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if let Some(r) = rest.strip_prefix('-') {
        if r == "0" {
            return Ok(Duration::ZERO);
        }
        return Err(err("negative durations are not allowed"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(err("empty duration"));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        // integer part
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_str, after) = rest.split_at(int_len);
        let (frac_str, after) = match after.strip_prefix('.') {
            Some(a) => {
                let n = a.bytes().take_while(u8::is_ascii_digit).count();
                a.split_at(n)
            }
            None => ("", after),
        };
        if int_str.is_empty() && frac_str.is_empty() {
            return Err(err("expected a number"));
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after.len(), |(i, _)| i);
        let (unit, after) = after.split_at(unit_len);
        let unit_ns: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3600 * 1_000_000_000,
            "" => return Err(err("missing unit")),
            _ => return Err(err("unknown unit")),
        };
        let int: u128 = if int_str.is_empty() {
            0
        } else {
            int_str.parse().map_err(|_| err("number too large"))?
        };
        let mut value = int.checked_mul(unit_ns).ok_or_else(|| err("overflow"))?;
        if !frac_str.is_empty() {
            // fraction * unit, truncated to nanoseconds: digits beyond 18 cannot matter (an
            // hour is 3.6e12 ns), and 18 digits times an hour's nanoseconds fit a u128 (30 did
            // not: the product saturated and `0.99...9h` read as a third of a second)
            let digits = &frac_str[..frac_str.len().min(18)];
            let frac: u128 = digits.parse().map_err(|_| err("bad fraction"))?;
            let scale = 10u128.pow(u32::try_from(digits.len()).unwrap_or(18));
            value = value
                .checked_add(frac.saturating_mul(unit_ns) / scale)
                .ok_or_else(|| err("overflow"))?;
        }
        total = total.checked_add(value).ok_or_else(|| err("overflow"))?;
        rest = after;
    }
    // Go's Duration is an int64 of nanoseconds.
    if total > i64::MAX as u128 {
        return Err(err("overflow"));
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| err("overflow"))?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| err("overflow"))?;
    Ok(Duration::new(secs, nanos))
}

/// Formats like Go's `Duration.String()`: `"0s"`, `"1.5µs"`, `"500ms"`, `"5.5s"`, `"1m30s"`, `"1h0m0s"`.
pub fn format(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".to_owned();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", frac(ns, 1_000));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", frac(ns, 1_000_000));
    }
    let hours = ns / 3_600_000_000_000;
    let mins = (ns / 60_000_000_000) % 60;
    let secs = frac(ns % 60_000_000_000, 1_000_000_000);
    if hours > 0 {
        format!("{hours}h{mins}m{secs}s")
    } else if mins > 0 {
        format!("{mins}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

/// `value / unit` as a decimal without trailing zeros.
fn frac(value: u128, unit: u128) -> String {
    let int = value / unit;
    let rem = value % unit;
    if rem == 0 {
        return int.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{rem:0width$}");
    format!("{int}.{}", digits.trim_end_matches('0'))
}

/// Serializes a duration as a Go duration string.
///
/// # Errors
/// Only those of the serializer.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*d))
}

/// Deserializes a Go duration string, or an integer number of nanoseconds.
///
/// # Errors
/// A bad duration string, a negative number, or another type.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    d.deserialize_any(DurationVisitor)
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as \"500ms\", \"5.5s\" or \"1m30s\" (or integer nanoseconds)")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        parse(v).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
        Ok(Duration::from_nanos(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
        u64::try_from(v).map(Duration::from_nanos).map_err(|_| {
            E::custom(format!(
                "invalid duration {v}: negative durations are not allowed"
            ))
        })
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Duration, E> {
        if v.is_finite() && v >= 0.0 && v < i64::MAX as f64 {
            // Truncation to whole nanoseconds is intended.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Ok(Duration::from_nanos(v as u64))
        } else {
            Err(E::custom(format!("invalid duration {v}: out of range")))
        }
    }
}

/// The same for `Option<Duration>` (`null` or absent = `None`).
pub mod option {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes `Some(d)` as a Go duration string and `None` as none.
    ///
    /// # Errors
    /// Only those of the serializer.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&super::format(*d)),
            None => s.serialize_none(),
        }
    }

    /// Deserializes `null` as `None`, anything else like [`super::deserialize`].
    ///
    /// # Errors
    /// As [`super::deserialize`].
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "super")] Duration);
        Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("5.5s").unwrap(), Duration::from_millis(5500));
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert_eq!(parse("1h2m3.5s").unwrap(), Duration::from_millis(3_723_500));
        assert_eq!(parse("1.5µs").unwrap(), Duration::from_nanos(1500));
        assert_eq!(parse("10us").unwrap(), Duration::from_micros(10));
        assert_eq!(parse("100ns").unwrap(), Duration::from_nanos(100));
        assert_eq!(parse(".5s").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("+2s").unwrap(), Duration::from_secs(2));
        // A long fraction of a large unit: truncated to nanoseconds, as Go's parser gives.
        assert_eq!(
            parse("0.999999999999999999999999999999h").unwrap(),
            Duration::from_nanos(3_599_999_999_999)
        );
    }

    #[test]
    fn rejects_bad_durations() {
        for bad in [
            "",
            "5",
            "5 sec",
            "5sec",
            "s",
            "-1s",
            "1.s.",
            "1d",
            "abc",
            "9999999999h",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should fail");
        }
        let msg = parse("5 sec").unwrap_err().to_string();
        assert!(msg.contains("\"5 sec\""), "{msg}");
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(Duration::from_millis(500)), "500ms");
        assert_eq!(format(Duration::from_millis(5500)), "5.5s");
        assert_eq!(format(Duration::from_secs(90)), "1m30s");
        assert_eq!(format(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(format(Duration::from_nanos(1500)), "1.5µs");
        assert_eq!(format(Duration::from_nanos(7)), "7ns");
    }

    #[test]
    fn format_round_trips() {
        for ns in [
            1u64,
            999,
            1_000,
            1_500_000,
            2_000_000_000,
            90_000_000_123,
            7_200_000_000_000,
        ] {
            let d = Duration::from_nanos(ns);
            assert_eq!(parse(&format(d)).unwrap(), d);
        }
    }
}
