//! The picker's random source: `rand`'s [`SmallRng`] (xoshiro256++) per thread in production, a
//! seeded generator in tests and in the simulator.
//!
//! P2C needs two uniform indices per draw; a cryptographic generator would cost more than the rest
//! of the pick. One 64-bit draw gives both indices (its two 32-bit halves).
//!
//! [`SeededRng`] keeps its own stream (wyrand, one multiply per number) rather than `SmallRng`'s:
//! the seeded tests and the `zrpc-sim` tables are reproducible bit for bit across releases only if
//! the stream never changes, which `rand` does not promise for `SmallRng` (its docs say the
//! algorithm may change in any release). Switching it showed why that matters: the scenario test
//! `a_failing_server_is_ejected_and_comes_back` (share > 15 %) passes for 10 of 12 seeds with
//! `SmallRng`, its bound sitting inside the seed-to-seed spread (14.9..17.9 %).

use std::cell::RefCell;
use std::hash::{BuildHasher, Hasher};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A source of random numbers for the picker (injectable for deterministic tests).
pub trait RandomSource {
    /// The next 64 random bits.
    fn next_u64(&mut self) -> u64;

    /// A uniform index in `0..n` (`n > 0`; Lemire's multiply-shift, no division).
    fn below(&mut self, n: usize) -> usize {
        below32(self.next_u64() >> 32, n)
    }

    /// Two distinct uniform indices in `0..n` (`n >= 2`): `below(n)`, then `below(n - 1)` shifted
    /// past the first. [`ThreadRng`] takes both from one draw (its two 32-bit halves).
    fn pair(&mut self, n: usize) -> (usize, usize) {
        let a = self.below(n);
        let mut b = self.below(n - 1);
        if b >= a {
            b += 1;
        }
        (a, b)
    }
}

/// `x` (32 random bits) scaled to `0..n`.
#[inline]
fn below32(x: u64, n: usize) -> usize {
    #[allow(clippy::cast_possible_truncation)]
    let i = ((x * n as u64) >> 32) as usize;
    i
}

/// A seeded generator: same seed, same picks, in every release (a fixed algorithm, wyrand).
#[derive(Debug, Clone)]
pub struct SeededRng(u64);

impl SeededRng {
    /// A generator starting from `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        SeededRng(seed)
    }
}

impl RandomSource for SeededRng {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        // wyrand (Wang Yi): the stream the simulator tables and seeded tests were made with
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0).wrapping_mul(u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db));
        #[allow(clippy::cast_possible_truncation)]
        let r = ((t >> 64) as u64) ^ (t as u64);
        r
    }
}

thread_local! {
    static THREAD_RNG: RefCell<SmallRng> = RefCell::new(SmallRng::seed_from_u64(random_seed()));
}

/// A random seed from the standard library's per-process hash keys (no extra dependency).
#[must_use]
pub fn random_seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x5eed);
    h.finish()
}

/// The per-thread generator used by the client (no lock, no allocation).
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadRng;

impl RandomSource for ThreadRng {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        THREAD_RNG.with(|r| r.borrow_mut().next_u64())
    }

    #[inline]
    fn pair(&mut self, n: usize) -> (usize, usize) {
        let x = self.next_u64();
        let a = below32(x >> 32, n);
        let mut b = below32(x & 0xffff_ffff, n - 1);
        if b >= a {
            b += 1;
        }
        (a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_is_in_range_and_covers_it() {
        let mut r = SeededRng::new(7);
        let mut seen = [0u32; 5];
        for _ in 0..10_000 {
            seen[r.below(5)] += 1;
        }
        assert!(seen.iter().all(|&c| c > 1_800 && c < 2_200), "{seen:?}");
    }

    #[test]
    fn pairs_are_distinct_and_uniform() {
        let mut seen = [[0u32; 3]; 3];
        for _ in 0..9_000 {
            let (a, b) = ThreadRng.pair(3);
            assert_ne!(a, b);
            seen[a][b] += 1;
        }
        for (a, row) in seen.iter().enumerate() {
            for (b, &c) in row.iter().enumerate() {
                if a != b {
                    assert!(c > 1_300 && c < 1_700, "{seen:?}");
                }
            }
        }
    }

    #[test]
    fn seeded_is_deterministic() {
        let a: Vec<u64> = (0..4)
            .scan(SeededRng::new(1), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..4)
            .scan(SeededRng::new(1), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
    }
}
