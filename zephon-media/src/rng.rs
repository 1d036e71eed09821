//! The random numbers of augmentations: a pure function of the operator's
//! seed and the sample's identity, never of a thread, worker or counter.

use zephon_core::hash::{key, mix64};

/// A small generator (SplitMix64) over `(seed, salt, identity)`: the same
/// three give the same sequence on any machine, thread or rank.
#[derive(Clone, Debug)]
pub struct SampleRng {
    state: u64,
}

impl SampleRng {
    /// The generator of one operator (`salt` tells operators apart, so that
    /// a crop and a flip with one seed draw independently) for one sample.
    ///
    /// ```
    /// use zephon_media::rng::SampleRng;
    /// let mut a = SampleRng::new(7, 1, 42);
    /// let mut b = SampleRng::new(7, 1, 42);
    /// assert_eq!(a.next_f64(), b.next_f64());
    /// assert!((0.0..1.0).contains(&SampleRng::new(7, 2, 42).next_f64()));
    /// ```
    pub fn new(seed: u64, salt: u64, identity: u64) -> Self {
        SampleRng {
            state: key(&[seed, salt, identity]),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Uniform integer in `0..n` (0 for `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}
