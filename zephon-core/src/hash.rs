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

/// Positions [`Permutation::fill_gathered`] walks together (a `u16`
/// indexes them).
const FILL_CHUNK: usize = 256;

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
            x = self.feistel(x);
            if x < self.n {
                return x;
            }
        }
    }

    /// Writes [`at`](Self::at)`(from + k)` to `out[k]` for every `k`
    /// (`from + out.len() <= n`): the same values, for a run of positions.
    ///
    /// One position's rounds depend each on the last, so [`at`](Self::at)
    /// waits on every multiply in turn, and its walk back into range is a
    /// branch the processor guesses wrong about as often as right. Here
    /// eight positions are walked side by side without branching, each
    /// lane taking the next position as soon as its own lands in range, so
    /// the rounds of different positions overlap. On x86-64 processors
    /// with AVX2 or AVX-512 the positions go through the rounds as vectors
    /// instead, faster than the lanes (`cargo bench -p zephon-core --bench
    /// permutation` compares the three); every way gives
    /// the same values.
    ///
    /// ```
    /// use zephon_core::hash::Permutation;
    /// let p = Permutation::new(1000, 7);
    /// let mut out = vec![0; 600];
    /// p.fill(300, &mut out);
    /// assert!(out.iter().enumerate().all(|(k, &v)| v == p.at(300 + k as u64)));
    /// ```
    pub fn fill(&self, from: u64, out: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq")
            {
                // SAFETY: the processor has the features the function is
                // compiled for, checked just above.
                return unsafe { self.fill_avx512(from, out) };
            }
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: as above.
                return unsafe { self.fill_avx2(from, out) };
            }
        }
        self.fill_lanes(from, out)
    }

    /// [`fill_gathered`](Self::fill_gathered) with eight 64-bit multiplies
    /// an instruction.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq")]
    unsafe fn fill_avx512(&self, from: u64, out: &mut [u64]) {
        self.fill_gathered(from, out)
    }

    /// [`fill_gathered`](Self::fill_gathered) with four lanes a vector.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn fill_avx2(&self, from: u64, out: &mut [u64]) {
        self.fill_gathered(from, out)
    }

    /// [`fill`](Self::fill) for processors with vector multiplies:
    /// every position's first pass, then the passes of those still out
    /// of range, gathered into a shorter list each time. Each pass is a
    /// plain map over an array, which the compiler turns into vector
    /// multiplies under the target features of its caller. Without them
    /// the walks of [`fill_lanes`](Self::fill_lanes) are faster (measured
    /// by `cargo bench -p zephon-core --bench permutation`).
    #[inline(always)]
    fn fill_gathered(&self, from: u64, out: &mut [u64]) {
        debug_assert!(from + out.len() as u64 <= self.n);
        if self.n <= 1 {
            out.fill(0);
            return;
        }
        let mut slot = [0u16; FILL_CHUNK];
        let mut walk = [0u64; FILL_CHUNK];
        for (c, chunk) in out.chunks_mut(FILL_CHUNK).enumerate() {
            let base = from + (c * FILL_CHUNK) as u64;
            for (k, o) in chunk.iter_mut().enumerate() {
                *o = self.feistel(base + k as u64);
            }
            let mut m = 0;
            for (k, &y) in chunk.iter().enumerate() {
                slot[m] = k as u16;
                walk[m] = y;
                m += (y >= self.n) as usize;
            }
            while m > 0 {
                for y in &mut walk[..m] {
                    *y = self.feistel(*y);
                }
                let mut kept = 0;
                for j in 0..m {
                    let (k, y) = (slot[j], walk[j]);
                    chunk[k as usize] = y;
                    slot[kept] = k;
                    walk[kept] = y;
                    kept += (y >= self.n) as usize;
                }
                m = kept;
            }
        }
    }

    /// [`fill`](Self::fill) with scalar multiplies: eight positions
    /// walked side by side (see `fill`'s notes).
    fn fill_lanes(&self, from: u64, out: &mut [u64]) {
        const LANES: usize = 8;
        let len = out.len();
        debug_assert!(from + len as u64 <= self.n);
        if self.n <= 1 || len < LANES {
            for (k, o) in out.iter_mut().enumerate() {
                *o = self.at(from + k as u64);
            }
            return;
        }
        // Each lane: the slot of `out` it is finding, and the value its
        // next round applies to. A lane writes every value it reaches to
        // its slot; the last, the one in range, is the one that stays.
        let mut slot: [usize; LANES] = std::array::from_fn(|l| l);
        let mut x: [u64; LANES] = std::array::from_fn(|l| from + l as u64);
        let mut next = LANES;
        while next + LANES <= len {
            let y = self.feistel_lanes(&x);
            for l in 0..LANES {
                let y = y[l];
                out[slot[l]] = y;
                let done = y < self.n;
                slot[l] = if done { next } else { slot[l] };
                x[l] = if done { from + next as u64 } else { y };
                next += done as usize;
            }
        }
        for l in 0..LANES {
            let mut y = self.feistel(x[l]);
            while y >= self.n {
                y = self.feistel(y);
            }
            out[slot[l]] = y;
        }
        for (k, o) in out.iter_mut().enumerate().skip(next) {
            *o = self.at(from + k as u64);
        }
    }

    /// [`feistel`](Self::feistel) of each of `x`, round by round across
    /// the lanes, so each round's mixes are independent of each other.
    #[inline(always)]
    fn feistel_lanes<const L: usize>(&self, x: &[u64; L]) -> [u64; L] {
        let mut l: [u64; L] = std::array::from_fn(|i| x[i] >> self.half);
        let mut r: [u64; L] = std::array::from_fn(|i| x[i] & self.mask);
        for k in self.rounds {
            for i in 0..L {
                let f = mix64(r[i] ^ k) & self.mask;
                (l[i], r[i]) = (r[i], l[i] ^ f);
            }
        }
        std::array::from_fn(|i| (l[i] << self.half) | r[i])
    }

    /// One pass of the four rounds over the whole power-of-two range.
    #[inline(always)]
    fn feistel(&self, x: u64) -> u64 {
        self.feistel_lanes(&[x])[0]
    }
}

/// The CRC32C (Castagnoli, as iSCSI and ext4 use) of `data`: the one
/// checksum of the project's files, checkpoints and cache blocks alike
/// (hardware-accelerated where the CPU has it).
///
/// ```
/// assert_eq!(zephon_core::hash::crc32c(b"123456789"), 0xe306_9283);
/// ```
pub fn crc32c(data: &[u8]) -> u32 {
    ::crc32c::crc32c(data)
}

/// The CRC32C of the bytes `crc` is the CRC32C of followed by `data`, so a
/// sum can be computed piece by piece: `crc32c_append(crc32c(a), b)` is
/// `crc32c` of `a` then `b`.
///
/// ```
/// use zephon_core::hash::{crc32c, crc32c_append};
/// assert_eq!(crc32c_append(crc32c(b"zeph"), b"on"), crc32c(b"zephon"));
/// ```
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    ::crc32c::crc32c_append(crc, data)
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

    /// Checkpoints and resumed runs rely on the same seed giving the same
    /// order in every version: these values were worked out from the
    /// definition (SplitMix64 rounds, cycle walking) by a separate
    /// implementation.
    #[test]
    fn the_permutation_never_changes() {
        let first: Vec<u64> = (0..10).map(|i| permute(i, 1000, 42)).collect();
        assert_eq!(first, [869, 164, 311, 140, 271, 309, 449, 526, 304, 316]);
        let p = Permutation::new(100_000, 7);
        let mut last = [0; 10];
        p.fill(99_990, &mut last);
        let want = [
            55749, 26393, 78740, 20750, 49406, 75682, 37895, 60553, 6196, 62445,
        ];
        assert_eq!(last, want);
        let mut all = vec![0; 100_000];
        p.fill(0, &mut all);
        assert_eq!(all[99_990..], want);
    }

    /// `fill` and both of its ways (whichever this processor dispatches
    /// to, and the other) give what `at` gives, across chunk edges.
    #[test]
    fn fill_gives_what_at_gives() {
        type Fill = fn(&Permutation, u64, &mut [u64]);
        let ways: [(&str, Fill); 3] = [
            ("fill", Permutation::fill),
            ("lanes", Permutation::fill_lanes),
            ("gathered", Permutation::fill_gathered),
        ];
        let chunk = FILL_CHUNK as u64;
        for n in [1u64, 2, 3, 7, 8, 9, 16, 17, 64, 100, 1000, 4097, 100_000] {
            let p = Permutation::new(n, n ^ 99);
            let edge = (chunk - 1).min(n);
            for (from, len) in [
                (0, n),
                (0, n.min(7)),
                (n / 3, n - n / 3),
                (n / 2, n / 4),
                (n - edge, edge),
                (0, (2 * chunk + 1).min(n)),
            ] {
                for (way, fill) in ways {
                    let mut out = vec![u64::MAX; len as usize];
                    fill(&p, from, &mut out);
                    for (k, &v) in out.iter().enumerate() {
                        assert_eq!(v, p.at(from + k as u64), "{way}: n={n} from={from} k={k}");
                    }
                }
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
