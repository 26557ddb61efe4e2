//! The picker's random source: `rand`'s [`SmallRng`] (xoshiro256++), one per thread in production
//! ([`ThreadRng`]), seeded (`SmallRng::seed_from_u64`) in tests.
//!
//! P2C needs two uniform indices per draw; a cryptographic generator would cost more than the rest
//! of the pick. One 64-bit draw gives both indices (its two 32-bit halves).
//!
//! The simulator (`zrpc-sim`) owns its generator: its tables must stay the same bit for bit across
//! `rand` releases and platforms, which `rand` does not promise for `SmallRng`.

use std::cell::RefCell;

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
    /// past the first. [`ThreadRng`] and `SmallRng` take both from one draw (its two 32-bit halves).
    fn pair(&mut self, n: usize) -> (usize, usize) {
        let a = self.below(n);
        let b = self.below(n - 1);
        (a, skip(a, b))
    }
}

/// `b` (in `0..n - 1`) shifted past `a`: the second index of a pair. An addition, not a branch:
/// `b >= a` is a coin flip the branch predictor would miss about half the time.
#[inline]
fn skip(a: usize, b: usize) -> usize {
    b + usize::from(b >= a)
}

/// `x` (32 random bits) scaled to `0..n`.
#[inline]
fn below32(x: u64, n: usize) -> usize {
    #[allow(clippy::cast_possible_truncation)]
    let i = ((x * n as u64) >> 32) as usize;
    i
}

/// Two distinct indices in `0..n` (`n >= 2`) from the two 32-bit halves of `x`.
#[inline]
fn pair_of(x: u64, n: usize) -> (usize, usize) {
    let a = below32(x >> 32, n);
    let b = below32(x & 0xffff_ffff, n - 1);
    (a, skip(a, b))
}

/// `rand`'s small generator; seed it with `SmallRng::seed_from_u64` for reproducible picks (within
/// one `rand` release).
impl RandomSource for SmallRng {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        Rng::next_u64(self)
    }

    #[inline]
    fn pair(&mut self, n: usize) -> (usize, usize) {
        pair_of(Rng::next_u64(self), n)
    }
}

thread_local! {
    static THREAD_RNG: RefCell<SmallRng> = RefCell::new(SmallRng::seed_from_u64(random_seed()));
}

pub(crate) use zrpc_core::random_seed;

/// A uniform draw in `[0, 1)` from the per-thread generator (for jitter).
pub(crate) fn unit() -> f64 {
    // the top 53 bits: every f64 in [0, 1) with that spacing, equally likely
    (ThreadRng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// The per-thread generator used by the client (no lock, no allocation).
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadRng;

impl RandomSource for ThreadRng {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        THREAD_RNG.with(|r| Rng::next_u64(&mut *r.borrow_mut()))
    }

    #[inline]
    fn pair(&mut self, n: usize) -> (usize, usize) {
        pair_of(self.next_u64(), n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_is_in_range_and_covers_it() {
        let mut r = SmallRng::seed_from_u64(7);
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
            .scan(SmallRng::seed_from_u64(1), |r, _| {
                Some(RandomSource::next_u64(r))
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .scan(SmallRng::seed_from_u64(1), |r, _| {
                Some(RandomSource::next_u64(r))
            })
            .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn small_rng_pairs_are_distinct_and_cover_every_ordered_pair() {
        let mut r = SmallRng::seed_from_u64(3);
        let mut seen = [[0u32; 4]; 4];
        for _ in 0..12_000 {
            let (a, b) = r.pair(4);
            assert_ne!(a, b);
            seen[a][b] += 1;
        }
        for (a, row) in seen.iter().enumerate() {
            for (b, &c) in row.iter().enumerate() {
                if a != b {
                    assert!(c > 800 && c < 1_200, "{seen:?}");
                }
            }
        }
    }
}
