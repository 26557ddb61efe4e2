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
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a vanished endpoint may come back with the others: go-zero's lease TTL, the window
/// in which a partition expires every lease.
pub(super) const HOLD: Duration = Duration::from_secs(10);

/// The published set over the live one (see the module docs). Time is a parameter.
///
/// Linear in the set per update: sorted sets are compared by a merge walk (a scan per address
/// took ~85 ms per update at 10,000 endpoints), and the published set is the one the channel
/// holds, not a copy.
#[derive(Debug, Default)]
pub(super) struct Kept {
    /// The live set was empty at the last update while a set was published.
    holding: bool,
    /// Addresses whose last key went away, and when.
    gone: HashMap<String, Instant>,
    /// Sorted; the live set too unless `holding`.
    published: Arc<Vec<String>>,
}

impl Kept {
    /// The set to publish when the registered addresses are `live` (sorted) at `now`.
    pub(super) fn next(&mut self, live: Vec<String>, now: Instant) -> Arc<Vec<String>> {
        if !self.holding {
            // the previous live set is the published one
            for a in missing(&self.published, &live) {
                self.gone.insert(a.clone(), now);
            }
        }
        if !self.gone.is_empty() {
            for a in &live {
                self.gone.remove(a);
            }
            self.gone
                .retain(|_, went| now.saturating_duration_since(*went) <= HOLD);
        }
        self.holding = live.is_empty() && !self.published.is_empty();
        self.published = if self.holding {
            let mut held: Vec<String> = self
                .gone
                .keys()
                .chain(self.published.iter())
                .cloned()
                .collect();
            held.sort_unstable();
            held.dedup();
            Arc::new(held)
        } else {
            Arc::new(live)
        };
        Arc::clone(&self.published)
    }

    /// Whether the published set is kept while no key is registered.
    pub(super) fn holding(&self) -> bool {
        self.holding
    }
}

/// The members of `old` not in `new` (both sorted).
pub(super) fn missing<'a>(
    old: &'a [String],
    new: &'a [String],
) -> impl Iterator<Item = &'a String> {
    let mut rest = new.iter().peekable();
    old.iter().filter(move |a| {
        while rest.next_if(|b| b < a).is_some() {}
        rest.peek() != Some(a)
    })
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
            *k.next(v(&["a:1", "b:2", "c:3"]), t0),
            v(&["a:1", "b:2", "c:3"])
        );
        // the leases expire 1 s apart: the live set shrinks, as the keys say
        let t1 = t0 + Duration::from_secs(20);
        assert_eq!(*k.next(v(&["b:2", "c:3"]), t1), v(&["b:2", "c:3"]));
        assert_eq!(
            *k.next(v(&["c:3"]), t1 + Duration::from_secs(1)),
            v(&["c:3"])
        );
        // the last one goes: all three are published again, not only the last
        let empty = t1 + Duration::from_secs(2);
        assert_eq!(*k.next(v(&[]), empty), v(&["a:1", "b:2", "c:3"]));
        assert!(k.holding());
        // a key appears: the live set is published
        let back = empty + Duration::from_secs(30);
        assert_eq!(*k.next(v(&["b:2"]), back), v(&["b:2"]));
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
        assert_eq!(*k.next(v(&[]), later), v(&["b:2"]));
    }

    #[test]
    fn missing_walks_two_sorted_sets() {
        let old = v(&["a", "b", "c", "e"]);
        let new = v(&["b", "d", "e", "f"]);
        let got: Vec<&String> = missing(&old, &new).collect();
        assert_eq!(got, [&old[0], &old[2]]);
        assert_eq!(missing(&old, &[]).count(), 4);
        assert_eq!(missing(&[], &old).count(), 0);
    }

    /// The rules as first written (a scan of the new set per old address), the model the
    /// linear version must match.
    #[derive(Default)]
    struct Model {
        live: Vec<String>,
        gone: HashMap<String, Instant>,
        published: Vec<String>,
    }

    impl Model {
        fn next(&mut self, live: Vec<String>, now: Instant) -> Vec<String> {
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

        fn holding(&self) -> bool {
            self.live.is_empty() && !self.published.is_empty()
        }
    }

    proptest::proptest! {
        /// Random live sets (empty ones often) a few seconds apart: the same published sets
        /// as the model.
        #[test]
        fn matches_the_model(
            steps in proptest::collection::vec(
                (proptest::collection::btree_set(0u8..12, 0..6), 0u64..8),
                1..40,
            ),
        ) {
            let t0 = Instant::now();
            let (mut k, mut m) = (Kept::default(), Model::default());
            let mut at = t0;
            for (set, secs) in steps {
                at += Duration::from_secs(secs);
                let live: Vec<String> = set.iter().map(|i| format!("10.0.0.{i}:80")).collect();
                proptest::prop_assert_eq!(&*k.next(live.clone(), at), &m.next(live, at));
                proptest::prop_assert_eq!(k.holding(), m.holding());
            }
        }
    }
}
