//! Limit: the adaptive concurrency limit and its priority tiers (zrpc addition; go-zero sheds
//! on CPU only). The algorithm is `zrpc_core::limit` (Envoy's gradient controller).
//!
//! One [`ConcurrencyLimit`] per server, or one per method (`ConcurrencyLimit.PerMethod`). A
//! call's tier is its `zrpc-tier` metadata (`critical`, `default`, `sheddable`); a call without
//! it (every go-zero caller) or with another value is of the default tier. A rejected call gets
//! `ResourceExhausted "service overloaded: ..."`, go-zero's words as the CPU shedder's, followed
//! by the bound that refused it and its figures (`concurrency limit 12 reached (12 in
//! flight)`, `the sheddable tier's share of the concurrency limit is in use (...)`), and counts in
//! `rpc_server_dropped_total{reason="limit"}` (the limit was reached) or `{reason="tier"}`
//! (the tier's share of it was); each reason is logged at most once per second.
//!
//! An admitted call's round-trip time, from its admission to its final status, is a sample
//! of the limit unless its failure was the caller's (its request never arrived whole, see
//! [`CallFacts`](crate::call::CallFacts)) or the caller cancelled it: a caller must not be able to move the
//! limit with calls the server never worked on. `DeadlineExceeded` is a sample, the slowest
//! kind. Known streaming methods and health/reflection are never limited.
//!
//! The stage runs after the breaker and before the CPU shedder: a call the shedder drops
//! (`ResourceExhausted`, its request unread) is no sample, and the breaker sees the limit's
//! rejections as it sees the shedder's, as failures of the caller.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use http::{HeaderMap, HeaderName};
use parking_lot::RwLock;
use zrpc_core::grpc::code;
use zrpc_core::limit::{
    ConcurrencyLimit, LimitConfig, LimitPermit, RejectReason, Rejected, TIER_KEY, Tier,
};

use super::{Admission, Call, End, Env, Rejection, Stage};
use crate::call::Blame;
use crate::layers::util::{DropLog, find};
use crate::metrics::DropReason;

/// The `zrpc-tier` metadata key.
pub(crate) const TIER: HeaderName = HeaderName::from_static(TIER_KEY);

/// At most this many methods get a limit of their own (`PerMethod`); the calls of methods
/// past it share one.
pub(crate) const MAX_METHODS: usize = 1024;

/// The `method` label of the server's limit (and, per method, of the methods past the cap).
pub(crate) const ALL_METHODS: &str = "*";

/// Settings of the limit stage.
#[derive(Debug, Clone)]
pub(crate) struct LimitSettings {
    /// The limit's parameters.
    pub(crate) config: LimitConfig,
    /// One limit per method.
    pub(crate) per_method: bool,
}

/// One limit for the server, or one per method.
// Not the shedder's count in flight (`stage::shedding`), on purpose: a limit counts the calls it
// admitted, per method and tier (the count is its admission test); the shedder, all accepted.
#[derive(Debug)]
enum Limits {
    Server(Arc<ConcurrencyLimit>),
    PerMethod {
        config: LimitConfig,
        map: RwLock<HashMap<Box<str>, Arc<ConcurrencyLimit>, foldhash::fast::RandomState>>,
        /// The methods the descriptor sets name: a limit of their own from their first call.
        described: std::collections::HashSet<Box<str>, foldhash::fast::RandomState>,
        /// For the paths not known to name a method (yet), and the methods past
        /// [`MAX_METHODS`].
        overflow: Arc<ConcurrencyLimit>,
    },
}

#[derive(Debug)]
pub(crate) struct Shared {
    limits: Limits,
    limit_log: DropLog,
    tier_log: DropLog,
}

impl Shared {
    /// Admits a call to `path` with `headers` at `now`: its record, or its rejection
    /// (logged with the reason, at most once a second per reason).
    #[inline]
    pub(crate) fn admit(
        self: &Arc<Self>,
        headers: &HeaderMap,
        path: &str,
        now: Instant,
    ) -> Admission {
        let tier = tier_of(headers);
        match &self.limits {
            Limits::Server(limit) => self.acquire(limit, tier, path, now, None),
            Limits::PerMethod { .. } => match self.of_method(path, now) {
                Ok(limit) => self.acquire(&limit, tier, path, now, None),
                // a path that may name a method: its service's answer tells
                Err(overflow) => {
                    let learn = Some((Arc::clone(self), Box::from(path)));
                    self.acquire(&overflow, tier, path, now, learn)
                }
            },
        }
    }

    fn acquire(
        &self,
        limit: &Arc<ConcurrencyLimit>,
        tier: Tier,
        path: &str,
        now: Instant,
        learn: Option<(Arc<Shared>, Box<str>)>,
    ) -> Admission {
        match limit.acquire(tier, now) {
            Ok(permit) => Admission::built_in(LimitRecord { permit, learn }),
            Err(rejected) => self.rejected(tier, path, &rejected),
        }
    }

    /// Logs a rejection; its answer (go-zero's "service overloaded", then the bound and its
    /// figures), counted under its reason.
    #[cold]
    fn rejected(&self, tier: Tier, method: &str, rejected: &Rejected) -> Admission {
        let (reason, log) = match rejected.reason() {
            RejectReason::Tier => (DropReason::Tier, &self.tier_log),
            _ => (DropReason::Limit, &self.limit_log),
        };
        let message = rejected.to_string();
        if let Some(dropped) = log.due() {
            let (limit, inflight) = (rejected.limit(), rejected.inflight());
            tracing::warn!(
                target: "zrpc::limit",
                method,
                %tier,
                limit,
                inflight,
                dropped,
                "[RPC] dropped, {message} ({dropped} such drops in the last second)"
            );
        }
        Admission::reject(Rejection::of(code::RESOURCE_EXHAUSTED, message).dropped(reason.label()))
    }

    /// The limit of `path` (per method), made on the first call of a described method; `Err`
    /// with the shared one for a path not known to name a method, or past [`MAX_METHODS`].
    fn of_method(
        &self,
        path: &str,
        now: Instant,
    ) -> Result<Arc<ConcurrencyLimit>, Arc<ConcurrencyLimit>> {
        let Limits::PerMethod {
            map,
            described,
            overflow,
            ..
        } = &self.limits
        else {
            unreachable!("only per method")
        };
        if let Some(l) = map.read().get(path) {
            return Ok(Arc::clone(l));
        }
        if described.contains(path) {
            return self.learn(path, now).ok_or_else(|| Arc::clone(overflow));
        }
        Err(Arc::clone(overflow))
    }

    /// Gives `path` a limit of its own, unless [`MAX_METHODS`] have one: a method the
    /// descriptor sets name, or whose service answered a call. A caller's made-up paths get
    /// none (each would be a limit and five gauge series for good), as in the metrics stage.
    fn learn(&self, path: &str, now: Instant) -> Option<Arc<ConcurrencyLimit>> {
        let Limits::PerMethod { config, map, .. } = &self.limits else {
            return None;
        };
        let mut map = map.write();
        if map.len() >= MAX_METHODS && !map.contains_key(path) {
            return None;
        }
        Some(Arc::clone(map.entry(Box::from(path)).or_insert_with(
            || Arc::new(ConcurrencyLimit::new(config.clone(), now)),
        )))
    }

    /// Every limit with its `method` label, for the gauges.
    pub(crate) fn limits(&self) -> Vec<(String, Arc<ConcurrencyLimit>)> {
        match &self.limits {
            Limits::Server(l) => vec![(ALL_METHODS.to_owned(), Arc::clone(l))],
            Limits::PerMethod { map, overflow, .. } => {
                let mut all: Vec<_> = map
                    .read()
                    .iter()
                    .map(|(m, l)| (m.to_string(), Arc::clone(l)))
                    .collect();
                all.push((ALL_METHODS.to_owned(), Arc::clone(overflow)));
                all
            }
        }
    }
}

/// A call's tier: its `zrpc-tier` metadata, the default tier when absent or unknown.
#[inline]
pub(crate) fn tier_of(headers: &HeaderMap) -> Tier {
    find(headers, &TIER)
        .and_then(|v| Tier::from_metadata(v.as_bytes()))
        .unwrap_or_default()
}

/// The limit stage's settings; `None` = off (no `ConcurrencyLimit`).
#[derive(Debug, Clone)]
pub(crate) struct LimitStage {
    shared: Option<Arc<Shared>>,
}

impl LimitStage {
    /// A limit stage whose limits start at `now` (the clock the stage is fed from); per method,
    /// the `described` methods have a limit of their own from their first call.
    pub(crate) fn new(settings: Option<LimitSettings>, described: &[String], now: Instant) -> Self {
        Self {
            shared: settings.map(|s| {
                let limits = if s.per_method {
                    Limits::PerMethod {
                        overflow: Arc::new(ConcurrencyLimit::new(s.config.clone(), now)),
                        config: s.config,
                        map: RwLock::default(),
                        described: described.iter().map(|m| Box::from(m.as_str())).collect(),
                    }
                } else {
                    Limits::Server(Arc::new(ConcurrencyLimit::new(s.config, now)))
                };
                Arc::new(Shared {
                    limits,
                    limit_log: DropLog::new(),
                    tier_log: DropLog::new(),
                })
            }),
        }
    }

    /// The limits and their settings, when the stage is on.
    pub(crate) fn shared(&self) -> Option<Arc<Shared>> {
        self.shared.clone()
    }
}

/// The stage, when `ConcurrencyLimit` is present and enabled; its gauges are registered
/// with the server (`gauges`).
pub(crate) fn build(env: &Env<'_>) -> Option<Box<dyn Stage>> {
    env.limit
        .shared
        .is_some()
        .then(|| Box::new(env.limit.clone()) as _)
}

impl Stage for LimitStage {
    fn admit(&self, call: &mut Call<'_>) -> Admission {
        match &self.shared {
            // Unary calls of the user's services (not health, reflection, streams).
            Some(shared) if call.kind().is_user_unary() => {
                let now = call.now().into_std();
                shared.admit(call.headers(), call.method(), now)
            }
            _ => Admission::pass(),
        }
    }

    fn name(&self) -> &'static str {
        "limit"
    }
}

/// Reports the call's round-trip time to its limit.
#[derive(Debug)]
pub(crate) struct LimitRecord {
    permit: LimitPermit,
    /// Per method, a call of a path not known to name a method: the limits, and the path to
    /// give a limit of its own once its service answered.
    learn: Option<(Arc<Shared>, Box<str>)>,
}

impl LimitRecord {
    /// A sample, unless the handler never ran (a later stage rejected the call: its request
    /// was never read), the caller caused the failure or cancelled the call.
    pub(crate) fn finish(self, end: &End<'_>) {
        if end.handled && end.code != code::CANCELLED && end.blame() != Blame::Caller {
            self.permit.sample(end.now.into_std());
        }
        if let Some((shared, path)) = self.learn
            && end.names_a_method()
        {
            shared.learn(&path, end.now.into_std());
        }
    }
}

pub(crate) mod conf;
pub(crate) mod gauges;
#[cfg(test)]
mod tests;
