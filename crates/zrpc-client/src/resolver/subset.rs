//! Stable endpoint subsetting (rendezvous / highest-random-weight hashing).
//!
//! go-zero shuffles the endpoint list and keeps the first 32 on *every* update, so one membership change can
//! reshuffle the whole subset and churn every connection. Here each endpoint gets a weight
//! `hash(seed, endpoint)` and a client keeps the `size` endpoints with the highest weights. Adding an endpoint
//! changes the subset only if the newcomer outranks the current lowest member (one in, one out); removing an
//! endpoint changes it only if it was a member (it is replaced by the next best). Each client uses its own seed,
//! so different clients pick different subsets and the load spreads over the whole fleet.

/// go-zero's subset size (`subsetSize = 32`).
pub const DEFAULT_SUBSET_SIZE: usize = 32;

/// Picks at most `size` endpoints of `endpoints` by rendezvous hashing with `seed`.
///
/// Deterministic (same input, same seed -> same output, across processes and platforms); duplicates in the
/// input count once. The result keeps the input order of the selected endpoints (first occurrence). Adding or
/// removing one endpoint changes at most one member of the result.
pub fn select(endpoints: &[String], seed: u64, size: usize) -> Vec<String> {
    // foldhash, not std's SipHash: this runs over every endpoint on each update (`zrpc-bench
    // scale`: 568 -> 470 µs per selection at 10,000 endpoints)
    let mut seen: std::collections::HashSet<&str, foldhash::fast::RandomState> =
        std::collections::HashSet::with_capacity_and_hasher(endpoints.len(), Default::default());
    let distinct: Vec<(usize, &String)> = endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| seen.insert(e.as_str()))
        .collect();
    if distinct.len() <= size {
        return distinct.into_iter().map(|(_, e)| e.clone()).collect();
    }
    // (weight, endpoint) is a total order over distinct endpoints; the endpoint breaks (astronomically rare)
    // weight ties so that the result never depends on the input order.
    let mut ranked: Vec<(u64, &String, usize)> = distinct
        .into_iter()
        .map(|(i, e)| (weight(seed, e.as_bytes()), e, i))
        .collect();
    let by_rank = |a: &(u64, &String, usize), b: &(u64, &String, usize)| {
        b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1))
    };
    if size > 0 {
        ranked.select_nth_unstable_by(size - 1, by_rank);
    }
    ranked.truncate(size);
    ranked.sort_unstable_by_key(|&(_, _, i)| i);
    ranked.into_iter().map(|(_, e, _)| e.clone()).collect()
}

/// The rendezvous weight of `bytes` for `seed`: a fixed 64-bit hash (splitmix64 rounds over 8-byte words).
/// Not `std`'s `RandomState`: it must be the same in every process and release.
pub(crate) fn weight(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = mix(seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        h = mix(h ^ u64::from_le_bytes(word));
    }
    let rest = chunks.remainder();
    let mut word = [0u8; 8];
    word[..rest.len()].copy_from_slice(rest);
    h = mix(h ^ u64::from_le_bytes(word));
    // The length separates "a" from "a\0".
    mix(h ^ (bytes.len() as u64))
}

/// splitmix64's finaliser step (a bijection with full avalanche).
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeSet, HashMap};

    fn eps(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("10.0.{}.{}:8080", i / 250, i % 250))
            .collect()
    }

    #[test]
    fn small_sets_are_kept_whole_in_order_without_duplicates() {
        let input: Vec<String> = ["b:1", "a:1", "b:1", "c:1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(select(&input, 7, 32), vec!["b:1", "a:1", "c:1"]);
        assert!(select(&input, 7, 0).is_empty());
        assert!(select(&[], 7, 32).is_empty());
    }

    #[test]
    fn size_is_respected_and_deterministic() {
        let all = eps(100);
        let a = select(&all, 42, 32);
        assert_eq!(a.len(), 32);
        assert_eq!(a, select(&all, 42, 32));
        // Input order does not change the chosen members.
        let mut reversed = all.clone();
        reversed.reverse();
        let b: BTreeSet<_> = select(&reversed, 42, 32).into_iter().collect();
        assert_eq!(b, a.iter().cloned().collect::<BTreeSet<_>>());
        // Another seed gives another subset.
        assert_ne!(select(&all, 43, 32), a);
    }

    #[test]
    fn hash_is_pinned() {
        // The weights must not change between releases (clients of different versions must agree).
        assert_eq!(weight(0, b""), weight(0, b""));
        assert_ne!(weight(0, b"a"), weight(0, b"a\0"));
        assert_ne!(weight(1, b"a"), weight(0, b"a"));
        assert_eq!(weight(0, b"127.0.0.1:8080"), 0x8fd9_6a67_6402_a374);
    }

    #[test]
    fn load_spreads_over_all_endpoints() {
        // 1000 clients with different seeds, 100 endpoints, subsets of 32: each endpoint should be picked by
        // about 320 clients.
        let all = eps(100);
        let mut count: HashMap<String, usize> = HashMap::new();
        for seed in 0..1000u64 {
            for e in select(&all, seed.wrapping_mul(0x1234_5678_9abc_def1), 32) {
                *count.entry(e).or_default() += 1;
            }
        }
        assert_eq!(count.len(), 100);
        let (min, max) = (count.values().min().unwrap(), count.values().max().unwrap());
        assert!(*min > 240 && *max < 400, "min {min} max {max}");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u32),
        Remove(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<u32>().prop_map(Op::Add),
            any::<usize>().prop_map(Op::Remove)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// 1000 random add/remove sequences: each single change alters at most one member of the subset,
        /// and only the endpoint that was added (or the one that was removed) can enter (or leave) it.
        #[test]
        fn one_change_alters_at_most_one_member(
            seed in any::<u64>(),
            size in prop_oneof![Just(32usize), 1usize..40],
            initial in 0usize..80,
            ops in proptest::collection::vec(op(), 1..40),
        ) {
            let mut current: Vec<String> = eps(initial);
            let mut before: BTreeSet<String> = select(&current, seed, size).into_iter().collect();
            for op in ops {
                let changed: String;
                let added = match op {
                    Op::Add(n) => {
                        changed = format!("10.9.{}.{}:{}", n % 256, (n >> 8) % 256, 1000 + (n >> 16) % 5000);
                        if current.contains(&changed) { continue; }
                        current.push(changed.clone());
                        true
                    }
                    Op::Remove(i) => {
                        if current.is_empty() { continue; }
                        changed = current.remove(i % current.len());
                        false
                    }
                };
                let after: BTreeSet<String> = select(&current, seed, size).into_iter().collect();
                prop_assert_eq!(after.len(), current.len().min(size));
                let left: Vec<_> = before.difference(&after).collect();
                let entered: Vec<_> = after.difference(&before).collect();
                prop_assert!(left.len() <= 1 && entered.len() <= 1, "left {:?} entered {:?}", left, entered);
                if added {
                    prop_assert!(entered.iter().all(|e| **e == changed));
                } else {
                    prop_assert!(left.iter().all(|e| **e == changed));
                }
                before = after;
            }
        }
    }
}
