//! What the etcd resolver publishes when no key is registered any more.
//!
//! A partition between the servers and etcd expires every lease within one TTL (go-zero's 10 s)
//! while the servers run and answer. go-zero's clients follow the keys down to an empty set and
//! then fail every call (grpc-go's `produced zero addresses`); a client that only refused the
//! empty set would still have followed the expiries one by one and would send every call to the
//! server whose lease happened to expire last. So once endpoints were known, an empty prefix
//! publishes every endpoint whose key went away within one TTL before (and at least the set
//! published last), until a key appears again. Endpoints that really went away refuse their
//! connections, and the balancer avoids them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a vanished endpoint may come back with the others: go-zero's lease TTL, the window
/// in which a partition expires every lease.
pub(super) const HOLD: Duration = Duration::from_secs(10);

/// The published set over the live one (see the module docs). Time is a parameter.
#[derive(Debug, Default)]
pub(super) struct Kept {
    live: Vec<String>,
    /// Addresses whose last key went away, and when.
    gone: HashMap<String, Instant>,
    published: Vec<String>,
}

impl Kept {
    /// The set to publish when the registered addresses are `live` (sorted) at `now`.
    pub(super) fn next(&mut self, live: Vec<String>, now: Instant) -> Vec<String> {
        for a in &self.live {
            if !live.contains(a) {
                self.gone.insert(a.clone(), now);
            }
        }
        for a in &live {
            self.gone.remove(a);
        }
        self.gone
            .retain(|_, went| now.saturating_duration_since(*went) <= HOLD);
        self.live.clone_from(&live);
        let next = if !live.is_empty() || self.published.is_empty() {
            live
        } else {
            let mut held: Vec<String> = self
                .gone
                .keys()
                .chain(self.published.iter())
                .cloned()
                .collect();
            held.sort_unstable();
            held.dedup();
            held
        };
        self.published.clone_from(&next);
        next
    }

    /// Whether the published set is kept while no key is registered.
    pub(super) fn holding(&self) -> bool {
        self.live.is_empty() && !self.published.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(addrs: &[&str]) -> Vec<String> {
        addrs.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn a_first_empty_read_is_published_empty() {
        let mut k = Kept::default();
        assert!(k.next(v(&[]), Instant::now()).is_empty());
        assert!(!k.holding());
    }

    #[test]
    fn leases_expiring_one_by_one_bring_every_server_back_when_the_last_goes() {
        let t0 = Instant::now();
        let mut k = Kept::default();
        assert_eq!(
            k.next(v(&["a:1", "b:2", "c:3"]), t0),
            v(&["a:1", "b:2", "c:3"])
        );
        // the leases expire 1 s apart: the live set shrinks, as the keys say
        let t1 = t0 + Duration::from_secs(20);
        assert_eq!(k.next(v(&["b:2", "c:3"]), t1), v(&["b:2", "c:3"]));
        assert_eq!(
            k.next(v(&["c:3"]), t1 + Duration::from_secs(1)),
            v(&["c:3"])
        );
        // the last one goes: all three are published again, not only the last
        let empty = t1 + Duration::from_secs(2);
        assert_eq!(k.next(v(&[]), empty), v(&["a:1", "b:2", "c:3"]));
        assert!(k.holding());
        // a key appears: the live set is published
        let back = empty + Duration::from_secs(30);
        assert_eq!(k.next(v(&["b:2"]), back), v(&["b:2"]));
        assert!(!k.holding());
    }

    #[test]
    fn an_endpoint_gone_longer_than_a_ttl_is_not_brought_back() {
        let t0 = Instant::now();
        let mut k = Kept::default();
        k.next(v(&["a:1", "b:2"]), t0);
        // a deregistered long ago
        k.next(v(&["b:2"]), t0 + Duration::from_secs(1));
        let later = t0 + Duration::from_secs(60);
        assert_eq!(k.next(v(&[]), later), v(&["b:2"]));
    }
}
