//! The simulator's random source.

use zrpc_client::sim::RandomSource;

/// A seeded generator whose stream never changes: wyrand (Wang Yi), one multiply per number.
///
/// Written here rather than taken from `rand` because the simulator's tables (`docs/balancing.md`)
/// and scenario tests must come out the same bit for bit in every release and on every platform:
/// `rand` promises no such thing for `SmallRng` (its docs: the algorithm may change in any release,
/// and it is xoshiro128++ on 32-bit targets). The client picks with `SmallRng`. The scenario test
/// `a_failing_server_is_ejected_and_comes_back` (share > 15 %) shows why it matters: with
/// `SmallRng` it passes for 10 of 12 seeds, its bound sitting inside the seed-to-seed spread
/// (14.9..17.9 %), so a silent change of stream could fail it.
#[derive(Debug, Clone)]
pub(crate) struct SimRng(u64);

impl SimRng {
    /// A generator starting from `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        SimRng(seed)
    }
}

impl RandomSource for SimRng {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0).wrapping_mul(u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db));
        #[allow(clippy::cast_possible_truncation)]
        let r = ((t >> 64) as u64) ^ (t as u64);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_fixed() {
        // the first numbers of seed 1: a change here changes every simulator table
        let mut r = SimRng::new(1);
        let first: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(first, EXPECTED);
    }

    #[test]
    fn below_is_in_range_and_covers_it() {
        let mut r = SimRng::new(7);
        let mut seen = [0u32; 5];
        for _ in 0..10_000 {
            seen[r.below(5)] += 1;
        }
        assert!(seen.iter().all(|&c| c > 1_800 && c < 2_200), "{seen:?}");
    }

    const EXPECTED: [u64; 3] = [0xcdef1695e1f8ed2c, 0x61d6d24b1c9aad40, 0x8cf880c22eebfadf];
}
