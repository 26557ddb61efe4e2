//! zrpc addition: per-method retry and hedging policies (`MethodConfig`) and the client's retry
//! budget (`RetryBudget`). go-zero has no client retries; leave both out and a go-zero YAML loads
//! unchanged, with no retry beyond the transparent one of a request that never reached a server.
//!
//! The shape is gRPC's service config (`methodConfig`, gRFC A6) in go-zero's YAML style:
//!
//! ```yaml
//! MethodConfig:
//!   - Name:
//!       - Service: greet.Greeter      # every method of the service
//!       - Service: user.Users
//!         Method: Get                 # one method
//!     RetryPolicy:
//!       MaxAttempts: 3
//!       InitialBackoff: 50ms
//!       MaxBackoff: 1s
//!       BackoffMultiplier: 2
//!       RetryableStatusCodes: [UNAVAILABLE]
//!   - Name:
//!       - Service: search.Search
//!     HedgingPolicy:
//!       MaxAttempts: 2
//!       HedgingDelay: 30ms
//!       NonFatalStatusCodes: [UNAVAILABLE]
//! RetryBudget:          # optional: these are the defaults
//!   Ratio: 0.1
//!   MinPerSecond: 10
//!   Window: 10s
//! ```

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zrpc_core::conf::{ConfError, Validate, duration};
use zrpc_core::grpc::code;

/// The most attempts a policy may ask for (gRFC A6's cap).
pub(crate) const MAX_POLICY_ATTEMPTS: u32 = 5;

/// One `MethodConfig` entry: the methods it names and their retry or hedging policy.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct MethodConf {
    /// The methods: a `Service` alone names all its methods; an entry with neither names every
    /// method of every service (the default policy).
    pub name: Vec<MethodName>,
    /// Retry a failed call (mutually exclusive with `HedgingPolicy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicyConf>,
    /// Send more copies of a slow call (mutually exclusive with `RetryPolicy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hedging_policy: Option<HedgingPolicyConf>,
}

impl MethodConf {
    /// An entry retrying the methods `names` under `policy`.
    pub fn retry(names: impl IntoIterator<Item = MethodName>, policy: RetryPolicyConf) -> Self {
        MethodConf {
            name: names.into_iter().collect(),
            retry_policy: Some(policy),
            hedging_policy: None,
        }
    }

    /// An entry hedging the methods `names` under `policy`.
    pub fn hedging(names: impl IntoIterator<Item = MethodName>, policy: HedgingPolicyConf) -> Self {
        MethodConf {
            name: names.into_iter().collect(),
            retry_policy: None,
            hedging_policy: Some(policy),
        }
    }
}

/// A method or a service of a [`MethodConf`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct MethodName {
    /// The fully qualified service (`greet.Greeter`); empty = every service.
    pub service: String,
    /// The method (`SayHello`); empty = every method of the service.
    pub method: String,
}

impl MethodName {
    /// Names `method` of `service` (an empty method: all of them).
    pub fn new(service: impl Into<String>, method: impl Into<String>) -> Self {
        MethodName {
            service: service.into(),
            method: method.into(),
        }
    }
}

/// gRFC A6's retry policy: a failed attempt is sent again, after a back-off, to another endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RetryPolicyConf {
    /// Attempts in all, the first included (2..=5; default 3).
    pub max_attempts: u32,
    /// The first back-off's ceiling (default 50ms); each delay is random below its ceiling.
    #[serde(with = "duration")]
    pub initial_backoff: Duration,
    /// The largest ceiling (default 1s).
    #[serde(with = "duration")]
    pub max_backoff: Duration,
    /// The ceiling's growth per retry (>= 1; default 2).
    pub backoff_multiplier: f64,
    /// The codes that are retried (default `[UNAVAILABLE]`); names as in gRPC (`UNAVAILABLE`,
    /// any case) or numbers.
    pub retryable_status_codes: StatusCodes,
}

impl Default for RetryPolicyConf {
    fn default() -> Self {
        RetryPolicyConf {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
            backoff_multiplier: 2.0,
            retryable_status_codes: StatusCodes(vec![code::UNAVAILABLE]),
        }
    }
}

/// gRFC A6's hedging policy: while no answer came, another copy of the call goes to another
/// endpoint every `HedgingDelay`; the first answer that is not a non-fatal failure wins and the
/// others are cancelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct HedgingPolicyConf {
    /// Copies in all, the first included (2..=5; default 2).
    pub max_attempts: u32,
    /// The wait before each further copy (default 50ms; set it near the method's p95 latency).
    #[serde(with = "duration")]
    pub hedging_delay: Duration,
    /// Failures after which the next copy goes at once rather than ending the call (default
    /// `[UNAVAILABLE]`).
    pub non_fatal_status_codes: StatusCodes,
}

impl RetryPolicyConf {
    /// Sets `MaxAttempts`.
    #[must_use]
    pub fn with_max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Sets `InitialBackoff` and `MaxBackoff`.
    #[must_use]
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self
    }

    /// Sets `RetryableStatusCodes`.
    #[must_use]
    pub fn with_codes(mut self, codes: impl IntoIterator<Item = i32>) -> Self {
        self.retryable_status_codes = StatusCodes(codes.into_iter().collect());
        self
    }
}

impl HedgingPolicyConf {
    /// Sets `MaxAttempts`.
    #[must_use]
    pub fn with_max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Sets `HedgingDelay`.
    #[must_use]
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.hedging_delay = delay;
        self
    }
}

impl Default for HedgingPolicyConf {
    fn default() -> Self {
        HedgingPolicyConf {
            max_attempts: 2,
            hedging_delay: Duration::from_millis(50),
            non_fatal_status_codes: StatusCodes(vec![code::UNAVAILABLE]),
        }
    }
}

/// The client's retry budget: retries and hedges of all its calls, within the last `Window`, are
/// at most `Ratio` times its calls plus `MinPerSecond` per second. When it is spent, failures
/// reach the caller: a failing service never sees more than `1 + Ratio` requests per call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RetryBudgetConf {
    /// Retries per call (0..=1; default 0.1).
    pub ratio: f64,
    /// Retries per second allowed whatever the traffic (default 10), so that a client with few
    /// calls can retry too.
    pub min_per_second: u32,
    /// The window the rule counts over (default 10s).
    #[serde(with = "duration")]
    pub window: Duration,
}

impl Default for RetryBudgetConf {
    fn default() -> Self {
        RetryBudgetConf {
            ratio: 0.1,
            min_per_second: 10,
            window: Duration::from_secs(10),
        }
    }
}

impl RetryBudgetConf {
    /// `ratio` retries per call plus `min_per_second`, over `window`.
    pub fn new(ratio: f64, min_per_second: u32, window: Duration) -> Self {
        RetryBudgetConf {
            ratio,
            min_per_second,
            window,
        }
    }

    pub(crate) fn is_default(&self) -> bool {
        *self == RetryBudgetConf::default()
    }
}

/// A list of gRPC status codes, read from names (`UNAVAILABLE`, `Unavailable`) or numbers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatusCodes(pub Vec<i32>);

impl StatusCodes {
    /// Whether `c` is in the list.
    #[must_use]
    pub fn contains(&self, c: i32) -> bool {
        self.0.contains(&c)
    }
}

/// The code named `name` (gRPC's upper-snake names, any case, `_` optional), or a number.
fn parse_code(name: &str) -> Option<i32> {
    if let Ok(n) = name.trim().parse::<i32>() {
        return (0..=16).contains(&n).then_some(n);
    }
    let wanted: String = name
        .trim()
        .chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_uppercase)
        .collect();
    (0..=16).find(|&c| code::name(c).replace('_', "") == wanted)
}

impl Serialize for StatusCodes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|&c| code::name(c)))
    }
}

impl<'de> Deserialize<'de> for StatusCodes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Item {
            Number(i64),
            Name(String),
        }
        let items = Vec::<Item>::deserialize(d)?;
        items
            .into_iter()
            .map(|item| match item {
                Item::Number(n) => i32::try_from(n)
                    .ok()
                    .filter(|n| (0..=16).contains(n))
                    .ok_or_else(|| format!("{n} is not a gRPC status code (0..=16)")),
                Item::Name(s) => parse_code(&s).ok_or_else(|| {
                    format!("unknown gRPC status code {s:?} (expected e.g. UNAVAILABLE, RESOURCE_EXHAUSTED or 14)")
                }),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(StatusCodes)
            .map_err(serde::de::Error::custom)
    }
}

fn check_attempts(key: &str, n: u32) -> Result<(), ConfError> {
    if (2..=MAX_POLICY_ATTEMPTS).contains(&n) {
        return Ok(());
    }
    Err(ConfError::invalid(
        key,
        format!(
            "{n} attempts: use 2..={MAX_POLICY_ATTEMPTS} (the first attempt included; gRPC caps \
             policies at {MAX_POLICY_ATTEMPTS})"
        ),
    ))
}

fn check_codes(key: &str, codes: &StatusCodes) -> Result<(), ConfError> {
    if codes.0.is_empty() {
        return Err(ConfError::invalid(
            key,
            "empty: list the codes, e.g. [UNAVAILABLE]",
        ));
    }
    if codes.contains(code::OK) {
        return Err(ConfError::invalid(key, "OK is not a failure"));
    }
    Ok(())
}

impl RetryPolicyConf {
    /// Validates the policy, its keys named under `at`.
    fn check(&self, at: &str) -> Result<(), ConfError> {
        check_attempts(&format!("{at}.MaxAttempts"), self.max_attempts)?;
        if self.initial_backoff.is_zero() || self.max_backoff < self.initial_backoff {
            return Err(ConfError::invalid(
                format!("{at}.InitialBackoff"),
                format!(
                    "{:?} with MaxBackoff {:?}: both must be above zero and InitialBackoff <= MaxBackoff",
                    self.initial_backoff, self.max_backoff
                ),
            ));
        }
        if !(self.backoff_multiplier.is_finite() && self.backoff_multiplier >= 1.0) {
            return Err(ConfError::invalid(
                format!("{at}.BackoffMultiplier"),
                format!("{}: use a number >= 1", self.backoff_multiplier),
            ));
        }
        check_codes(
            &format!("{at}.RetryableStatusCodes"),
            &self.retryable_status_codes,
        )
    }
}

impl HedgingPolicyConf {
    /// Validates the policy, its keys named under `at`.
    fn check(&self, at: &str) -> Result<(), ConfError> {
        check_attempts(&format!("{at}.MaxAttempts"), self.max_attempts)?;
        if self.non_fatal_status_codes.contains(code::OK) {
            return Err(ConfError::invalid(
                format!("{at}.NonFatalStatusCodes"),
                "OK is not a failure",
            ));
        }
        Ok(())
    }
}

impl Validate for RetryBudgetConf {
    fn validate(&self) -> Result<(), ConfError> {
        if !(self.ratio.is_finite() && (0.0..=1.0).contains(&self.ratio)) {
            return Err(ConfError::invalid(
                "RetryBudget.Ratio",
                format!(
                    "{}: use 0..=1 (0.1 lets retries add at most 10% to the calls)",
                    self.ratio
                ),
            ));
        }
        if self.window.is_zero() {
            return Err(ConfError::invalid(
                "RetryBudget.Window",
                "0: use a duration such as 10s",
            ));
        }
        Ok(())
    }
}

/// Validates the `MethodConfig` list: each entry names methods and has exactly one policy; no
/// method is named twice.
pub(crate) fn validate_methods(list: &[MethodConf]) -> Result<(), ConfError> {
    let mut seen = std::collections::HashSet::new();
    for (i, m) in list.iter().enumerate() {
        let at = |key: &str| format!("MethodConfig[{i}].{key}");
        match (&m.retry_policy, &m.hedging_policy) {
            (Some(r), None) => r.check(&at("RetryPolicy"))?,
            (None, Some(h)) => h.check(&at("HedgingPolicy"))?,
            (Some(_), Some(_)) => {
                return Err(ConfError::invalid(
                    at("HedgingPolicy"),
                    "an entry has RetryPolicy or HedgingPolicy, not both",
                ));
            }
            (None, None) => {
                return Err(ConfError::invalid(
                    at("RetryPolicy"),
                    "set RetryPolicy or HedgingPolicy (an entry without a policy does nothing)",
                ));
            }
        }
        if m.name.is_empty() {
            return Err(ConfError::invalid(
                at("Name"),
                "empty: list the methods, e.g. [{Service: greet.Greeter, Method: SayHello}], or \
                 [{}] for every method",
            ));
        }
        for (j, n) in m.name.iter().enumerate() {
            if n.service.is_empty() && !n.method.is_empty() {
                return Err(ConfError::invalid(
                    at(&format!("Name[{j}].Service")),
                    format!(
                        "empty with Method {:?}: name the method's service",
                        n.method
                    ),
                ));
            }
            if n.service.starts_with('/') || n.method.contains('/') {
                return Err(ConfError::invalid(
                    at(&format!("Name[{j}]")),
                    format!(
                        "{:?}/{:?}: give the service (greet.Greeter) and the method (SayHello) \
                         apart, without slashes",
                        n.service, n.method
                    ),
                ));
            }
            if !seen.insert((n.service.as_str(), n.method.as_str())) {
                return Err(ConfError::invalid(
                    at(&format!("Name[{j}]")),
                    format!(
                        "{}/{} is named by an earlier entry too",
                        n.service, n.method
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::RpcClientConf;
    use zrpc_core::conf::{Format, from_str};

    fn load(extra: &str) -> Result<RpcClientConf, ConfError> {
        from_str(
            &format!("Endpoints: [\"127.0.0.1:1\"]\n{extra}"),
            Format::Yaml,
            "client.yaml",
        )
    }

    #[test]
    fn a_go_zero_config_has_no_policy_and_the_default_budget() {
        let c = load("").unwrap();
        assert!(c.method_config.is_empty());
        assert_eq!(c.retry_budget, RetryBudgetConf::default());
    }

    #[test]
    fn policies_load_from_go_zero_style_yaml() {
        let c = load(
            "MethodConfig:\n  - Name:\n      - Service: greet.Greeter\n      - Service: user.Users\n        Method: Get\n    RetryPolicy:\n      MaxAttempts: 4\n      InitialBackoff: 10ms\n      MaxBackoff: 200ms\n      BackoffMultiplier: 1.5\n      RetryableStatusCodes: [UNAVAILABLE, resource_exhausted, 13]\n  - Name: [{}]\n    HedgingPolicy:\n      HedgingDelay: 30ms\nRetryBudget:\n  Ratio: 0.2\n  Window: 5s\n",
        )
        .unwrap();
        let r = c.method_config[0].retry_policy.as_ref().unwrap();
        assert_eq!(r.max_attempts, 4);
        assert_eq!(r.initial_backoff, Duration::from_millis(10));
        assert_eq!(
            r.retryable_status_codes,
            StatusCodes(vec![
                code::UNAVAILABLE,
                code::RESOURCE_EXHAUSTED,
                code::INTERNAL
            ])
        );
        assert_eq!(
            c.method_config[0].name[1],
            MethodName::new("user.Users", "Get")
        );
        let h = c.method_config[1].hedging_policy.as_ref().unwrap();
        assert_eq!(
            (h.max_attempts, h.hedging_delay),
            (2, Duration::from_millis(30))
        );
        assert_eq!(c.method_config[1].name, vec![MethodName::default()]);
        assert_eq!(
            c.retry_budget,
            RetryBudgetConf::new(0.2, 10, Duration::from_secs(5))
        );
    }

    #[test]
    fn bad_policies_are_refused_with_the_key_and_the_way_out() {
        let cases = [
            (
                "MethodConfig:\n  - Name: [{Service: a.B}]\n",
                "MethodConfig[0].RetryPolicy",
                "set RetryPolicy or HedgingPolicy",
            ),
            (
                "MethodConfig:\n  - Name: [{Service: a.B}]\n    RetryPolicy: {}\n    HedgingPolicy: {}\n",
                "MethodConfig[0].HedgingPolicy",
                "not both",
            ),
            (
                "MethodConfig:\n  - Name: [{Service: a.B}]\n    RetryPolicy:\n      MaxAttempts: 9\n",
                "MethodConfig[0].RetryPolicy.MaxAttempts",
                "use 2..=5",
            ),
            (
                "MethodConfig:\n  - Name: [{Method: Get}]\n    RetryPolicy: {}\n",
                "MethodConfig[0].Name[0].Service",
                "name the method's service",
            ),
            (
                "MethodConfig:\n  - Name: [{Service: /a.B/Get}]\n    RetryPolicy: {}\n",
                "MethodConfig[0].Name[0]",
                "without slashes",
            ),
            (
                "MethodConfig:\n  - Name: [{Service: a.B}]\n    RetryPolicy: {}\n  - Name: [{Service: a.B}]\n    HedgingPolicy: {}\n",
                "MethodConfig[1].Name[0]",
                "named by an earlier entry",
            ),
            (
                "MethodConfig:\n  - Name: [{Service: a.B}]\n    RetryPolicy:\n      RetryableStatusCodes: []\n",
                "MethodConfig[0].RetryPolicy.RetryableStatusCodes",
                "list the codes",
            ),
            (
                "MethodConfig:\n  - Name: [{Service: a.B}]\n    RetryPolicy:\n      BackoffMultiplier: 0.5\n",
                "MethodConfig[0].RetryPolicy.BackoffMultiplier",
                ">= 1",
            ),
            (
                "RetryBudget:\n  Ratio: 2\n",
                "RetryBudget.Ratio",
                "use 0..=1",
            ),
            ("RetryBudget:\n  Window: 0s\n", "RetryBudget.Window", "10s"),
        ];
        for (yaml, key, hint) in cases {
            let e = load(yaml).unwrap_err();
            let text = e.to_string();
            assert_eq!(e.path(), Some(key), "{yaml}: {text}");
            assert!(
                text.contains(hint) && text.contains("client.yaml"),
                "{text}"
            );
        }
        let e = load(
            "MethodConfig:\n  - Name: [{Service: a.B}]\n    RetryPolicy:\n      RetryableStatusCodes: [UNAVAILIBLE]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("UNAVAILIBLE") && e.contains("expected e.g. UNAVAILABLE"),
            "{e}"
        );
        let e = load(
            "MethodConfig:\n  - Name: [{Service: a.B}]\n    RetryPolicy:\n      MaxAttempt: 3\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("MaxAttempt"), "{e}");
    }

    #[test]
    fn code_names_are_grpcs_in_any_case() {
        assert_eq!(parse_code("UNAVAILABLE"), Some(code::UNAVAILABLE));
        assert_eq!(parse_code("Unavailable"), Some(code::UNAVAILABLE));
        assert_eq!(
            parse_code("deadline_exceeded"),
            Some(code::DEADLINE_EXCEEDED)
        );
        assert_eq!(
            parse_code("DeadlineExceeded"),
            Some(code::DEADLINE_EXCEEDED)
        );
        assert_eq!(parse_code("14"), Some(14));
        assert_eq!(parse_code("17"), None);
        assert_eq!(parse_code("NOPE"), None);
    }
}
