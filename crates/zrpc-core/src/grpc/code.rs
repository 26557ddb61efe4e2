//! Numeric gRPC status codes, as carried in the `grpc-status` header/trailer.
//!
//! The values are those of the gRPC spec (and of `tonic::Code as i32`).

/// Not an error.
pub const OK: i32 = 0;
/// The operation was cancelled (typically by the caller).
pub const CANCELLED: i32 = 1;
/// Unknown error.
pub const UNKNOWN: i32 = 2;
/// The client specified an invalid argument.
pub const INVALID_ARGUMENT: i32 = 3;
/// The deadline expired before the operation could complete.
pub const DEADLINE_EXCEEDED: i32 = 4;
/// Some requested entity was not found.
pub const NOT_FOUND: i32 = 5;
/// Some entity that we attempted to create already exists.
pub const ALREADY_EXISTS: i32 = 6;
/// The caller does not have permission.
pub const PERMISSION_DENIED: i32 = 7;
/// Some resource has been exhausted (also: the server shed the request).
pub const RESOURCE_EXHAUSTED: i32 = 8;
/// The system is not in a state required for the operation.
pub const FAILED_PRECONDITION: i32 = 9;
/// The operation was aborted.
pub const ABORTED: i32 = 10;
/// The operation was attempted past the valid range.
pub const OUT_OF_RANGE: i32 = 11;
/// The operation is not implemented or supported.
pub const UNIMPLEMENTED: i32 = 12;
/// Internal error (also: a handler panicked).
pub const INTERNAL: i32 = 13;
/// The service is currently unavailable (also: a circuit breaker is open).
pub const UNAVAILABLE: i32 = 14;
/// Unrecoverable data loss or corruption.
pub const DATA_LOSS: i32 = 15;
/// The request does not have valid authentication credentials.
pub const UNAUTHENTICATED: i32 = 16;

/// Whether `code` is an acceptable outcome: go-zero's `codes.Acceptable`
/// (`zrpc/internal/codes/accept.go`), the one failure classification of zrpc.
///
/// [`DEADLINE_EXCEEDED`], [`INTERNAL`], [`UNAVAILABLE`], [`DATA_LOSS`], [`UNIMPLEMENTED`] and
/// [`RESOURCE_EXHAUSTED`] are failures; every other code, including [`OK`], [`UNKNOWN`],
/// [`CANCELLED`] and values outside the spec, is acceptable. The breakers count failures against
/// a method, the balancer against an endpoint's success score, and tracing marks their spans as
/// errors.
///
/// # Examples
///
/// ```
/// use zrpc_core::grpc::code;
///
/// assert!(code::is_acceptable(code::OK));
/// assert!(code::is_acceptable(code::NOT_FOUND));
/// assert!(!code::is_acceptable(code::UNAVAILABLE));
/// ```
#[inline]
#[must_use]
pub fn is_acceptable(code: i32) -> bool {
    !matches!(
        code,
        DEADLINE_EXCEEDED | INTERNAL | UNAVAILABLE | DATA_LOSS | UNIMPLEMENTED | RESOURCE_EXHAUSTED
    )
}

/// The canonical upper-snake name of a code (`"DEADLINE_EXCEEDED"`), `"UNKNOWN"` for
/// values outside the spec.
#[must_use]
pub fn name(code: i32) -> &'static str {
    match code {
        OK => "OK",
        CANCELLED => "CANCELLED",
        INVALID_ARGUMENT => "INVALID_ARGUMENT",
        DEADLINE_EXCEEDED => "DEADLINE_EXCEEDED",
        NOT_FOUND => "NOT_FOUND",
        ALREADY_EXISTS => "ALREADY_EXISTS",
        PERMISSION_DENIED => "PERMISSION_DENIED",
        RESOURCE_EXHAUSTED => "RESOURCE_EXHAUSTED",
        FAILED_PRECONDITION => "FAILED_PRECONDITION",
        ABORTED => "ABORTED",
        OUT_OF_RANGE => "OUT_OF_RANGE",
        UNIMPLEMENTED => "UNIMPLEMENTED",
        INTERNAL => "INTERNAL",
        UNAVAILABLE => "UNAVAILABLE",
        DATA_LOSS => "DATA_LOSS",
        UNAUTHENTICATED => "UNAUTHENTICATED",
        _ => "UNKNOWN",
    }
}

/// The code as a decimal string without allocating (`"0"`..`"16"`); other values give `"2"`
/// (Unknown). Used as the `code` label of the Prometheus counters.
#[must_use]
pub fn as_str(code: i32) -> &'static str {
    const NAMES: [&str; 17] = [
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i))
        .copied()
        .unwrap_or("2")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_str_is_the_decimal_value() {
        for c in 0..=16 {
            assert_eq!(as_str(c), c.to_string());
        }
        assert_eq!(as_str(-1), "2");
        assert_eq!(as_str(17), "2");
        assert_eq!(name(DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
    }

    #[test]
    fn acceptable_codes_match_go_zero() {
        for code in 0..=16 {
            let failure = matches!(code, 4 | 8 | 12 | 13 | 14 | 15);
            assert_eq!(is_acceptable(code), !failure, "code {code}");
        }
        assert!(is_acceptable(-1));
    }
}
