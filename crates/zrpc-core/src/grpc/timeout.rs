//! The `grpc-timeout` request header: `1*8DIGIT unit`, unit one of `H M S m u n`
//! (gRPC over HTTP/2 spec).

use std::time::Duration;

/// The header name.
pub const GRPC_TIMEOUT: &str = "grpc-timeout";

/// The header name as a [`http::HeaderName`]: look the header up and insert it with this, as a
/// `&str` key is parsed and validated on every use.
pub const GRPC_TIMEOUT_HEADER: http::HeaderName = http::HeaderName::from_static(GRPC_TIMEOUT);

/// Parses a `grpc-timeout` value. `None` when malformed (more than 8 digits, unknown unit).
#[must_use]
pub fn parse(value: &[u8]) -> Option<Duration> {
    let (unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    // At most 8 digits: no overflow. By hand, not `str::parse`: the value is ASCII digits and
    // one unit, so a UTF-8 check and a general integer parser would be work for nothing.
    let mut n: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(d - b'0');
    }
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The caller's timeout from request headers, if present and well formed.
#[must_use]
pub fn from_headers(headers: &http::HeaderMap) -> Option<Duration> {
    super::find_header(headers, &GRPC_TIMEOUT_HEADER).and_then(|v| parse(v.as_bytes()))
}

/// Formats a duration as a `grpc-timeout` value, choosing the finest unit whose value fits
/// in 8 digits (rounding up so the receiver never sees a longer deadline than intended...
/// except when truncation to the coarsest unit is unavoidable).
#[must_use]
pub fn format(d: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let nanos = d.as_nanos();
    let units: [(u128, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    for (div, unit) in units {
        let v = nanos.div_ceil(div);
        if v <= MAX {
            return format!("{v}{unit}");
        }
    }
    format!("{MAX}H")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_units() {
        assert_eq!(parse(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse(b"3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse(b"5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse(b"500m"), Some(Duration::from_millis(500)));
        assert_eq!(parse(b"7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse(b"9n"), Some(Duration::from_nanos(9)));
    }

    #[test]
    fn rejects_malformed() {
        assert_eq!(parse(b""), None);
        assert_eq!(parse(b"m"), None);
        assert_eq!(parse(b"123456789m"), None);
        assert_eq!(parse(b"12x"), None);
        assert_eq!(parse(b"-1S"), None);
        assert_eq!(parse(b"1 S"), None);
        assert_eq!(parse(b"+1S"), None);
        assert_eq!(parse(b"99999999S"), Some(Duration::from_secs(99_999_999)));
    }

    #[test]
    fn format_round_trips() {
        for d in [
            Duration::from_nanos(1),
            Duration::from_millis(250),
            Duration::from_secs(2),
            Duration::from_secs(86_400 * 30),
        ] {
            let s = format(d);
            let back = parse(s.as_bytes()).unwrap_or_default();
            assert!(back >= d, "{s}");
        }
        assert_eq!(format(Duration::from_millis(250)), "250000u");
    }
}
