//! `flip`: a horizontal flip with probability `p`, drawn from the seed and
//! the sample's identity.

use crate::error::Result;
use crate::image::{ImageSample, Pixels};
use crate::map_images::ImageOp;
use crate::rng::SampleRng;
use zephon_core::Identity;

/// Tells this operator's draws apart from other operators' with one seed.
const SALT: u64 = 0x464c_4950; // "FLIP"

/// Mirrors each image left to right with probability `p` (torchvision's
/// `RandomHorizontalFlip`), the draw a function of `(seed, sample
/// identity)` only: the same samples are flipped at any parallelism,
/// runner or rank count. 8-bit or `f32` pixels.
///
/// ```
/// use zephon_media::{Flip, Image, ImageOp, ImageSample};
/// let s = ImageSample { image: Image::new_u8(3, 1, 1, vec![1, 2, 3])?, record: Default::default() };
/// assert_eq!(Flip::new(1.0, 0).apply(s.clone())?.image.pixels.as_u8(), Some(&[3, 2, 1][..]));
/// assert_eq!(Flip::new(0.0, 0).apply(s)?.image.pixels.as_u8(), Some(&[1, 2, 3][..]));
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Flip {
    p: f64,
    seed: u64,
}

impl Flip {
    /// Flips with probability `p` (0 to 1), seeded by `seed`.
    pub fn new(p: f64, seed: u64) -> Self {
        Flip { p, seed }
    }

    pub(crate) fn check(&self) -> Result<()> {
        crate::error::check(
            (0.0..=1.0).contains(&self.p),
            "flip.p",
            format!("{} is not a probability (0 to 1)", self.p),
        )
    }

    /// Whether the sample of identity `identity` is flipped.
    pub fn flips(&self, identity: u64) -> bool {
        SampleRng::new(self.seed, SALT, identity).next_f64() < self.p
    }
}

fn mirror<T: Copy>(px: &mut [T], width: usize, c: usize) {
    if width == 0 || c == 0 {
        return;
    }
    for row in px.chunks_exact_mut(width * c) {
        for x in 0..width / 2 {
            let (a, b) = (x * c, (width - 1 - x) * c);
            for k in 0..c {
                row.swap(a + k, b + k);
            }
        }
    }
}

impl ImageOp for Flip {
    fn name(&self) -> &'static str {
        "flip"
    }

    fn apply(&self, mut s: ImageSample) -> Result<ImageSample> {
        self.check()?;
        if !self.flips(s.identity()) {
            return Ok(s);
        }
        let (w, c) = (s.image.width as usize, s.image.channels as usize);
        match &mut s.image.pixels {
            Pixels::U8(p) => mirror(p, w, c),
            Pixels::F32(p) => mirror(p, w, c),
        }
        Ok(s)
    }
}
