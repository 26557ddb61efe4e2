//! Priority tiers: how important a call is to its caller, carried in the call's metadata.

use std::fmt;
use std::str::FromStr;

/// The metadata key a caller sets to mark a call's tier: `zrpc-tier: critical`.
///
/// Values are [`Tier`]'s names (`critical`, `default`, `sheddable`, any case); a call without
/// the key, or with an unknown value, is of the [`Tier::Default`] tier.
pub const TIER_KEY: &str = "zrpc-tier";

/// How important a call is, after the criticality of the Google SRE book ("Handling
/// Overload": critical, then sheddable traffic). Under overload the lower tiers are shed first:
/// a critical call is admitted while fewer critical calls than the concurrency limit are in
/// flight, a call of another tier while fewer calls of every tier are in flight than its share
/// of the limit ([`share`](Self::share)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum Tier {
    /// Calls that may be shed (prefetches, batch work, retries of best-effort work): half of
    /// the limit.
    Sheddable,
    /// What a caller that sets no tier gets (every go-zero caller): three quarters of the limit.
    #[default]
    Default,
    /// Calls whose failure a user sees: the whole limit.
    Critical,
}

impl Tier {
    /// Every tier, lowest first.
    pub const ALL: [Tier; 3] = [Tier::Sheddable, Tier::Default, Tier::Critical];

    /// The tier's name, as in metadata and config (`critical`, `default`, `sheddable`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Tier::Sheddable => "sheddable",
            Tier::Default => "default",
            Tier::Critical => "critical",
        }
    }

    /// The share of the concurrency limit calls of this tier may use, as `(numerator,
    /// denominator)`: 1/2, 3/4 and 1.
    ///
    /// Under overload the calls of the default tier fill the limit up to three quarters, and
    /// get no place while the calls in flight, critical ones included, are at their share or
    /// above: a critical call takes the place of the next call of a lower tier (strict
    /// priority), and the room above the default tier's share absorbs bursts of critical calls
    /// (trunk reservation). Critical calls are counted against the whole limit by
    /// themselves, so that lower tiers can never crowd them out; while they stay a minority
    /// the calls in flight stay near three quarters of the limit. The limit adapts to the
    /// latency of the calls in flight, whatever their tier, so a server whose callers set no
    /// tier runs as many calls as it would without tiers; its limit reads a third higher.
    #[must_use]
    pub const fn share(self) -> (u32, u32) {
        match self {
            Tier::Sheddable => (1, 2),
            Tier::Default => (3, 4),
            Tier::Critical => (1, 1),
        }
    }

    /// The tier a metadata value names: `None` for anything else (callers treat that as
    /// [`Tier::Default`]).
    #[must_use]
    pub fn from_metadata(value: &[u8]) -> Option<Tier> {
        Tier::ALL
            .into_iter()
            .find(|t| value.eq_ignore_ascii_case(t.as_str().as_bytes()))
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownTier(String);

impl fmt::Display for UnknownTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a tier (critical, default or sheddable)",
            self.0
        )
    }
}

impl std::error::Error for UnknownTier {}

impl FromStr for Tier {
    type Err = UnknownTier;

    /// A tier by its name, any case.
    fn from_str(s: &str) -> Result<Tier, UnknownTier> {
        Tier::from_metadata(s.trim().as_bytes()).ok_or_else(|| UnknownTier(s.to_owned()))
    }
}

impl serde::Serialize for Tier {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Tier {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Tier, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_in_any_case_and_others_do_not() {
        assert_eq!(Tier::from_metadata(b"CRITICAL"), Some(Tier::Critical));
        assert_eq!(Tier::from_metadata(b"sheddable"), Some(Tier::Sheddable));
        assert_eq!(Tier::from_metadata(b"Default"), Some(Tier::Default));
        assert_eq!(Tier::from_metadata(b"critical-plus"), None);
        assert_eq!(Tier::from_metadata(b""), None);
        assert_eq!(" critical ".parse::<Tier>(), Ok(Tier::Critical));
        let err = "urgent".parse::<Tier>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"urgent\" is not a tier (critical, default or sheddable)"
        );
    }

    #[test]
    fn higher_tiers_get_larger_shares() {
        let shares: Vec<f64> = Tier::ALL
            .iter()
            .map(|t| {
                let (n, d) = t.share();
                f64::from(n) / f64::from(d)
            })
            .collect();
        assert!(shares.windows(2).all(|w| w[0] < w[1]), "{shares:?}");
        assert_eq!(Tier::Critical.share(), (1, 1));
        assert_eq!(Tier::default(), Tier::Default);
    }
}
