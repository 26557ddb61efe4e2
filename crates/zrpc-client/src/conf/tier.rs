//! zrpc addition: the priority tier the client sends with its calls (`Tier`, `MethodTiers`),
//! as `zrpc-tier` metadata. A server with a concurrency limit sheds the lower tiers first
//! under overload (`docs/overload.md`); other servers ignore the metadata.
//!
//! ```yaml
//! Tier: sheddable              # every call of this client (absent: none is sent)
//! MethodTiers:                 # these methods' calls, whatever Tier says
//!   - FullMethod: /pay.Pay/Charge
//!     Tier: critical
//! ```

use serde::{Deserialize, Serialize};
use zrpc_core::conf::ConfError;
use zrpc_core::limit::Tier;

/// One `MethodTiers` entry: the tier of one method's calls.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct MethodTierConf {
    /// `/package.Service/Method`.
    pub full_method: String,
    /// `critical`, `default` or `sheddable`.
    pub tier: Tier,
}

impl MethodTierConf {
    /// The tier of `full_method`'s calls.
    pub fn new(full_method: impl Into<String>, tier: Tier) -> Self {
        MethodTierConf {
            full_method: full_method.into(),
            tier,
        }
    }
}

/// Each entry names a method as `/package.Service/Method`, once.
pub(crate) fn validate(entries: &[MethodTierConf]) -> Result<(), ConfError> {
    for (i, e) in entries.iter().enumerate() {
        let m = &e.full_method;
        let shaped = m
            .strip_prefix('/')
            .and_then(|rest| rest.split_once('/'))
            .is_some_and(|(service, method)| {
                !service.is_empty() && !method.is_empty() && !method.contains('/')
            });
        if !shaped {
            return Err(ConfError::invalid(
                format!("MethodTiers[{i}].FullMethod"),
                format!("expected /package.Service/Method, got {m:?}"),
            ));
        }
        if entries[..i].iter().any(|o| &o.full_method == m) {
            return Err(ConfError::invalid(
                format!("MethodTiers[{i}].FullMethod"),
                format!("{m:?} is named twice; keep one entry"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::RpcClientConf;

    fn yaml(text: &str) -> Result<RpcClientConf, ConfError> {
        zrpc_core::conf::from_str_with_env(text, zrpc_core::conf::Format::Yaml, "c.yaml", |_| None)
    }

    #[test]
    fn tiers_load_per_client_and_per_method() {
        let c = yaml(
            "Endpoints: [127.0.0.1:1]\nTier: Sheddable\nMethodTiers:\n  - FullMethod: \
             /pay.Pay/Charge\n    Tier: critical\n",
        )
        .unwrap();
        assert_eq!(c.tier, Some(Tier::Sheddable));
        assert_eq!(
            c.method_tiers,
            [MethodTierConf::new("/pay.Pay/Charge", Tier::Critical)]
        );
        let c = yaml("Endpoints: [127.0.0.1:1]\n").unwrap();
        assert_eq!((c.tier, c.method_tiers.len()), (None, 0), "none by default");
    }

    #[test]
    fn bad_tiers_and_methods_are_named() {
        for (text, key, what) in [
            ("Tier: urgent", "Tier", "\"urgent\" is not a tier"),
            (
                "MethodTiers:\n  - FullMethod: /a.B/C\n    Tier: top",
                "MethodTiers",
                "\"top\" is not a tier",
            ),
            (
                "MethodTiers:\n  - FullMethod: a.B/C\n    Tier: critical",
                "MethodTiers[0].FullMethod",
                "expected /package.Service/Method",
            ),
            (
                "MethodTiers:\n  - {FullMethod: /a.B/C, Tier: critical}\n  - {FullMethod: /a.B/C, \
                 Tier: sheddable}",
                "MethodTiers[1].FullMethod",
                "named twice",
            ),
        ] {
            let err = yaml(&format!("Endpoints: [127.0.0.1:1]\n{text}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key) && err.contains(what), "{text}: {err}");
        }
    }
}
