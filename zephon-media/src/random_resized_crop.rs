//! `random_resized_crop`: torchvision's `RandomResizedCrop`, with every
//! draw a function of the seed and the sample's identity.

use crate::error::Result;
use crate::image::ImageSample;
use crate::map_images::ImageOp;
use crate::resize::resample;
use crate::rng::SampleRng;
use zephon_core::Identity;

/// Tells this operator's draws apart from other operators' with one seed.
const SALT: u64 = 0x5252_4352_4f50; // "RRCROP"

/// A random crop of a random area and aspect ratio, resized to
/// `width × height` with bilinear, antialiased filtering, as torchvision's
/// `RandomResizedCrop`: up to 10 tries draw an area fraction uniformly in
/// `scale` and an aspect ratio log-uniformly in `ratio`, the first box that
/// fits the image is taken at a uniform position, and after 10 misses the
/// centre crop of the whole image clamped to `ratio` is.
///
/// Every draw comes from [`SampleRng`] seeded by `(seed, sample identity)`:
/// the sample's lineage (dataset, shard, sample index), not the thread,
/// worker, rank or arrival order, so any parallelism, runner or rank
/// count gives every sample the same crop. The pass is not part of a
/// pointer: a sample seen in two passes gets the same crop unless the
/// seed is changed per pass ([`RandomResizedCrop::seed`]).
///
/// ```
/// use zephon_media::{Image, ImageOp, ImageSample, RandomResizedCrop};
/// let s = ImageSample { image: Image::new_u8(64, 48, 3, vec![9; 64 * 48 * 3])?, record: Default::default() };
/// let op = RandomResizedCrop::new(16, 16).seed(5);
/// let a = op.apply(s.clone())?;
/// assert_eq!((a.image.width, a.image.height), (16, 16));
/// assert_eq!(op.crop_box(64, 48, 7), op.crop_box(64, 48, 7));
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomResizedCrop {
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
    seed: u64,
}

impl RandomResizedCrop {
    /// Crops resized to `width × height` (each 1 or more), with
    /// torchvision's defaults: scale `(0.08, 1.0)`, ratio `(3/4, 4/3)`, seed 0.
    pub fn new(width: u32, height: u32) -> Self {
        RandomResizedCrop {
            width,
            height,
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
            seed: 0,
        }
    }

    /// The range of the crop's area as a fraction of the image's
    /// (`0 < lo <= hi`).
    pub fn scale(mut self, lo: f64, hi: f64) -> Self {
        self.scale = (lo, hi);
        self
    }

    /// The range of the crop's aspect ratio, width over height
    /// (`0 < lo <= hi`).
    pub fn ratio(mut self, lo: f64, hi: f64) -> Self {
        self.ratio = (lo, hi);
        self
    }

    /// The seed the draws are made from, with each sample's identity.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        let (s0, s1) = self.scale;
        let (r0, r1) = self.ratio;
        crate::error::check(
            self.width > 0 && self.height > 0,
            "random_resized_crop.size",
            "sizes must be 1 or more",
        )?;
        crate::error::check(
            s0 > 0.0 && s0 <= s1 && s1.is_finite(),
            "random_resized_crop.scale",
            format!("({s0}, {s1}): need 0 < lo <= hi, finite"),
        )?;
        crate::error::check(
            r0 > 0.0 && r0 <= r1 && r1.is_finite(),
            "random_resized_crop.ratio",
            format!("({r0}, {r1}): need 0 < lo <= hi, finite"),
        )
    }

    /// The crop box `(left, top, width, height)` of a `w × h` image for the
    /// sample of identity `identity`.
    pub fn crop_box(&self, w: u32, h: u32, identity: u64) -> (u32, u32, u32, u32) {
        let mut rng = SampleRng::new(self.seed, SALT, identity);
        let area = w as f64 * h as f64;
        let (lr0, lr1) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..10 {
            let target = area * rng.uniform(self.scale.0, self.scale.1);
            let aspect = rng.uniform(lr0, lr1).exp();
            let cw = (target * aspect).sqrt().round();
            let ch = (target / aspect).sqrt().round();
            if cw > 0.0 && ch > 0.0 && cw <= w as f64 && ch <= h as f64 {
                let (cw, ch) = (cw as u32, ch as u32);
                let top = rng.below((h - ch + 1) as u64) as u32;
                let left = rng.below((w - cw + 1) as u64) as u32;
                return (left, top, cw, ch);
            }
        }
        // Fallback: the whole image, clamped to the ratio range, centred.
        let in_ratio = w as f64 / h as f64;
        let (cw, ch) = if in_ratio < self.ratio.0 {
            (w, ((w as f64 / self.ratio.0).round() as u32).clamp(1, h))
        } else if in_ratio > self.ratio.1 {
            (((h as f64 * self.ratio.1).round() as u32).clamp(1, w), h)
        } else {
            (w, h)
        };
        ((w - cw) / 2, (h - ch) / 2, cw, ch)
    }
}

impl ImageOp for RandomResizedCrop {
    fn name(&self) -> &'static str {
        "random_resized_crop"
    }

    fn apply(&self, mut s: ImageSample) -> Result<ImageSample> {
        self.check()?;
        let (left, top, cw, ch) = self.crop_box(s.image.width, s.image.height, s.identity());
        s.image = resample(
            &s.image,
            (left as f64, top as f64, cw as f64, ch as f64),
            self.width,
            self.height,
            "random_resized_crop",
            s.ptr(),
        )?;
        Ok(s)
    }
}
