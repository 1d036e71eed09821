//! Stable, platform-independent hashing used to seed every random choice.
//!
//! Randomness in Zephon is a pure function of a seed and the identity of the
//! elements involved, never of a counter or of timing: that is what makes the
//! output independent of parallelism, runners and rank counts.

/// SplitMix64 finaliser: a fast, well-mixed bijection on `u64`.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Combines a running hash with one more value.
#[inline]
pub fn combine(h: u64, v: u64) -> u64 {
    mix64(h ^ mix64(v))
}

/// Hashes a short list of values (seed, dataset, pass, ...) into one key.
pub fn key(parts: &[u64]) -> u64 {
    parts
        .iter()
        .fold(0x5A17_E9D0_C0DE_u64, |h, &v| combine(h, v))
}

/// A stable hash of bytes (xxh3), for checksums of record contents.
pub fn bytes(data: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(data)
}

/// A pseudo-random permutation of `0..n`, evaluated at `i` without
/// materialising it: a 4-round Feistel network over the smallest even power of
/// two covering `n`, with cycle walking back into range. `O(1)` memory, so a
/// global shuffle of a billion samples costs nothing up front and any position
/// can be recomputed from a checkpoint. [`Permutation`] is the same
/// permutation with its set-up done once, for many positions.
pub fn permute(i: u64, n: u64, key: u64) -> u64 {
    Permutation::new(n, key).at(i)
}

/// The permutation [`permute`] evaluates, its width and round keys worked
/// out once: evaluating it at many positions of one shard or block then
/// costs four mixes a position (and a walk), not eight.
///
/// ```
/// use zephon_core::hash::{Permutation, permute};
/// let p = Permutation::new(1000, 7);
/// assert!((0..1000).all(|i| p.at(i) == permute(i, 1000, 7)));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Permutation {
    n: u64,
    half: u32,
    mask: u64,
    rounds: [u64; 4],
}

impl Permutation {
    /// The permutation of `0..n` keyed by `key`.
    pub fn new(n: u64, key: u64) -> Self {
        let bits = (64 - n.saturating_sub(1).leading_zeros()).max(2);
        let bits = bits + (bits & 1);
        let half = bits / 2;
        Permutation {
            n,
            half,
            mask: (1u64 << half) - 1,
            rounds: [0u64, 1, 2, 3].map(|round| combine(key, round)),
        }
    }

    /// Where position `i` (`< n`) goes.
    #[inline]
    pub fn at(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        if self.n <= 1 {
            return 0;
        }
        let mut x = i;
        loop {
            let mut l = x >> self.half;
            let mut r = x & self.mask;
            for k in self.rounds {
                let f = mix64(r ^ k) & self.mask;
                (l, r) = (r, l ^ f);
            }
            x = (l << self.half) | r;
            if x < self.n {
                return x;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permute_is_a_bijection() {
        for n in [1u64, 2, 3, 7, 64, 100, 1000, 4097] {
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let j = permute(i, n, 42) as usize;
                assert!(!seen[j], "n={n}: {j} hit twice");
                seen[j] = true;
            }
        }
    }

    #[test]
    fn permute_depends_on_key() {
        let a: Vec<u64> = (0..100).map(|i| permute(i, 100, 1)).collect();
        let b: Vec<u64> = (0..100).map(|i| permute(i, 100, 2)).collect();
        assert_ne!(a, b);
        assert_ne!(a, (0..100).collect::<Vec<_>>());
    }
}
