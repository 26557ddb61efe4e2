//! The picker's random source: a tiny wyrand generator, per thread in production, seeded in tests.
//!
//! P2C needs two uniform indices per draw; a ChaCha-based generator would cost more than the rest of
//! the pick. wyrand is one multiply per number and its state is one `u64`.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};

/// A source of random numbers for the picker (injectable for deterministic tests).
pub trait RandomSource {
    /// The next 64 random bits.
    fn next_u64(&mut self) -> u64;

    /// A uniform index in `0..n` (`n > 0`; Lemire's multiply-shift, no division).
    fn below(&mut self, n: usize) -> usize {
        let n = n as u64;
        let x = self.next_u64() >> 32;
        #[allow(clippy::cast_possible_truncation)]
        let i = ((x * n) >> 32) as usize;
        i
    }
}

#[inline]
fn wyrand(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0xa076_1d64_78bd_642f);
    let t = u128::from(*state).wrapping_mul(u128::from(*state ^ 0xe703_7ed1_a0b4_28db));
    #[allow(clippy::cast_possible_truncation)]
    let r = ((t >> 64) as u64) ^ (t as u64);
    r
}

/// A seeded generator: same seed, same picks.
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
    fn next_u64(&mut self) -> u64 {
        wyrand(&mut self.0)
    }
}

thread_local! {
    /// 0 = not yet seeded.
    static THREAD_STATE: Cell<u64> = const { Cell::new(0) };
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
        THREAD_STATE.with(|s| {
            let mut v = s.get();
            if v == 0 {
                v = random_seed() | 1;
            }
            let r = wyrand(&mut v);
            s.set(v);
            r
        })
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
