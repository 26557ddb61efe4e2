//! The status messages of calls zrpc refuses, read back: each starts with go-zero's words
//! (`service overloaded`, `circuit breaker is open`) and names the stage and the figures that
//! refused the call. These read the figures and check that they add up, so a test counting
//! rejections also checks every message it counts.

/// go-zero's message of a breaker rejection: the prefix of zrpc's.
pub const BREAKER_OPEN: &str = "circuit breaker is open";
/// go-zero's message of a shedding rejection: the prefix of zrpc's shedder and limit messages.
pub const OVERLOADED: &str = "service overloaded";

/// A breaker's window in its rejection's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerFigures {
    /// Calls the breaker dropped in its window (this one counted).
    pub dropped: u64,
    /// Every call of the window.
    pub total: u64,
    /// Failed calls of the window.
    pub failed: u64,
    /// Successful calls of the window.
    pub succeeded: u64,
    /// The drop probability, in percent.
    pub chance: u64,
}

/// The figures of a breaker rejection of `name` (the server's: the method,
/// `/pkg.Service/Method`; the client's: `<method> to <target>`); `None` when `message` is not
/// a breaker rejection. Panics when it is one that does not name `name` or whose figures do not
/// add up.
pub fn breaker_open(message: &str, name: &str) -> Option<BreakerFigures> {
    let rest = message.strip_prefix(BREAKER_OPEN)?;
    let figures = rest
        .strip_prefix(&format!(": {name} dropped "))
        .unwrap_or_else(|| {
            panic!("a breaker rejection not naming {name} and its window: {message}")
        });
    let n = numbers(figures);
    let [dropped, total, window, failed, succeeded, chance] = n[..] else {
        panic!("not a breaker's window: {message}");
    };
    assert_eq!(
        figures,
        format!(
            "{dropped} of the last {total} calls in {window}s ({failed} failed, {succeeded} \
             succeeded; drop chance {chance}%)"
        ),
        "{message}"
    );
    assert!(
        dropped >= 1 && dropped + failed + succeeded == total && chance <= 100,
        "figures that do not add up: {message}"
    );
    Some(BreakerFigures {
        dropped,
        total,
        failed,
        succeeded,
        chance,
    })
}

/// The CPU shedder's figures in its rejection's message: `(cpu, threshold, in flight)`;
/// `None` when `message` is not the shedder's. Panics when it is one whose figures do not say
/// why the call was shed (a CPU at or over the threshold, or cooling off, and more calls in
/// flight, now and on average, than the capacity).
pub fn shed(message: &str) -> Option<(u64, u64, u64)> {
    let rest = message.strip_prefix(OVERLOADED)?.strip_prefix(": CPU ")?;
    let (cpu, rest) = rest
        .split_once(" millicpu")
        .unwrap_or_else(|| panic!("{message}"));
    let cpu: u64 = cpu.parse().unwrap_or_else(|_| panic!("{message}"));
    let n = numbers(rest);
    let (threshold, flying, max_flight, avg) = if rest.starts_with(" at threshold") {
        let [f, mi, mf, ai, af] = n[..] else {
            panic!("{message}")
        };
        (cpu, f, mi * 10 + mf, ai * 10 + af)
    } else {
        let [t, f, mi, mf, ai, af] = n[..] else {
            panic!("{message}")
        };
        assert!(
            rest.starts_with(&format!(" over threshold {t}"))
                || rest.starts_with(&format!(
                    ", under threshold {t} but cooling off after recent drops"
                )),
            "{message}"
        );
        (t, f, mi * 10 + mf, ai * 10 + af)
    };
    assert!(
        rest.ends_with(&format!(
            "{flying} calls in flight over {}.{} (average {}.{})",
            max_flight / 10,
            max_flight % 10,
            avg / 10,
            avg % 10
        )),
        "{message}"
    );
    // both passed the capacity (`>=`: the message rounds each to a tenth)
    assert!(
        flying * 10 >= max_flight && avg >= max_flight,
        "shed under the capacity: {message}"
    );
    Some((cpu, threshold, flying))
}

/// The concurrency limit's figures in its rejection's message: `(limit, in flight)` for the
/// limit reached, `(share, in flight)` for a tier's share; `None` when `message` is not the
/// limit's. Panics when it is one whose figures do not say why the call was refused.
pub fn limited(message: &str) -> Option<(u64, u64)> {
    let rest = message.strip_prefix(OVERLOADED)?.strip_prefix(": ")?;
    let n = numbers(rest);
    if let Some(tier) = rest.strip_prefix("the ") {
        let [inflight, share, limit] = n[..] else {
            panic!("{message}")
        };
        let tier = tier.split(' ').next().unwrap_or_default();
        assert_eq!(
            rest,
            format!(
                "the {tier} tier's share of the concurrency limit is in use ({inflight} in \
                 flight, share {share} of limit {limit})"
            )
        );
        assert!(inflight >= share && share < limit, "{message}");
        return Some((share, inflight));
    }
    if rest.starts_with("concurrency limit ") {
        let (limit, inflight) = match n[..] {
            [l, i] => (l, i),
            _ => panic!("{message}"),
        };
        assert!(
            rest == format!("concurrency limit {limit} reached ({inflight} in flight)")
                || rest
                    == format!(
                        "concurrency limit {limit} reached by critical calls ({inflight} \
                         critical in flight)"
                    ),
            "{message}"
        );
        assert!(inflight >= limit, "{message}");
        return Some((limit, inflight));
    }
    let [inflight, bound, limit] = n[..] else {
        return None;
    };
    assert_eq!(
        rest,
        format!(
            "{inflight} calls in flight while the concurrency limit measures the minimum \
             round-trip time (at most {bound} at once; limit {limit})"
        )
    );
    assert!(inflight >= bound, "{message}");
    Some((bound, inflight))
}

/// The unsigned integers of `s`, in order.
fn numbers(s: &str) -> Vec<u64> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter(|n| !n.is_empty())
        .filter_map(|n| n.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_kind_of_rejection() {
        assert_eq!(
            breaker_open(
                "circuit breaker is open: /p.S/M dropped 38 of the last 200 calls in 10s (150 \
                 failed, 12 succeeded; drop chance 81%)",
                "/p.S/M"
            ),
            Some(BreakerFigures {
                dropped: 38,
                total: 200,
                failed: 150,
                succeeded: 12,
                chance: 81
            })
        );
        assert_eq!(breaker_open("forced 13", "/p.S/M"), None);
        assert_eq!(
            shed(
                "service overloaded: CPU 950 millicpu over threshold 900, 40 calls in flight \
                 over 32.4 (average 38.0)"
            ),
            Some((950, 900, 40))
        );
        assert_eq!(
            limited("service overloaded: concurrency limit 12 reached (12 in flight)"),
            Some((12, 12))
        );
        assert_eq!(
            limited(
                "service overloaded: the sheddable tier's share of the concurrency limit is in \
                 use (6 in flight, share 6 of limit 12)"
            ),
            Some((6, 6))
        );
        assert_eq!(limited("service overloaded: CPU 950 millicpu"), None);
    }

    #[test]
    #[should_panic(expected = "do not add up")]
    fn a_breaker_window_that_does_not_add_up_fails() {
        breaker_open(
            "circuit breaker is open: /p.S/M dropped 38 of the last 100 calls in 10s (150 \
             failed, 12 succeeded; drop chance 81%)",
            "/p.S/M",
        );
    }
}
