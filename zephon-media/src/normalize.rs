//! `normalize`: 8-bit pixels to `f32`, `(x / 255 - mean) / std` per channel.

use crate::error::Result;
use crate::image::{ImageSample, Pixels};
use crate::map_images::ImageOp;
use crate::resize::unsupported;

/// ImageNet's channel means (RGB), as torchvision's examples use them.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet's channel standard deviations (RGB).
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// Converts 8-bit pixels to `f32` as torchvision's `ToTensor` then
/// `Normalize` do: `(x / 255 - mean[c]) / std[c]`. `mean` and `std` have
/// one value per channel, or one for all. Place it last among the image
/// operators: crops and resizes take 8-bit pixels. No randomness.
///
/// ```
/// use zephon_media::{Image, ImageOp, ImageSample, Normalize};
/// let s = ImageSample { image: Image::new_u8(1, 1, 3, vec![0, 255, 51])?, record: Default::default() };
/// let out = Normalize::new(vec![0.0, 0.5, 0.0], vec![1.0, 0.5, 0.5]).apply(s)?;
/// assert_eq!(out.image.pixels.as_f32(), Some(&[0.0, 1.0, 0.4][..]));
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Normalize {
    mean: Vec<f32>,
    std: Vec<f32>,
}

impl Normalize {
    /// With these means and standard deviations (each finite, `std` not 0).
    pub fn new(mean: Vec<f32>, std: Vec<f32>) -> Self {
        Normalize { mean, std }
    }

    /// ImageNet's means and standard deviations.
    pub fn imagenet() -> Self {
        Self::new(IMAGENET_MEAN.to_vec(), IMAGENET_STD.to_vec())
    }

    pub(crate) fn check(&self) -> Result<()> {
        crate::error::check(
            !self.mean.is_empty()
                && self.mean.len() == self.std.len()
                && self.mean.iter().all(|m| m.is_finite())
                && self.std.iter().all(|s| s.is_finite() && *s != 0.0),
            "normalize.mean_std",
            format!(
                "mean {:?} and std {:?}: need as many of each, finite, std not 0",
                self.mean, self.std
            ),
        )
    }
}

impl ImageOp for Normalize {
    fn name(&self) -> &'static str {
        "normalize"
    }

    fn apply(&self, mut s: ImageSample) -> Result<ImageSample> {
        self.check()?;
        let c = s.image.channels as usize;
        if self.mean.len() != 1 && self.mean.len() != c {
            return Err(unsupported(
                "normalize",
                s.ptr(),
                format!("{} means for an image of {c} channels", self.mean.len()),
            ));
        }
        let px = s.image.u8_or_err("normalize", s.ptr())?;
        let per = |v: &[f32], i: usize| if v.len() == 1 { v[0] } else { v[i] };
        let mean: Vec<f32> = (0..c).map(|i| per(&self.mean, i)).collect();
        let std: Vec<f32> = (0..c).map(|i| per(&self.std, i)).collect();
        let mut out = Vec::with_capacity(px.len());
        for p in px.chunks_exact(c) {
            for i in 0..c {
                out.push((p[i] as f32 / 255.0 - mean[i]) / std[i]);
            }
        }
        s.image.pixels = Pixels::F32(out);
        Ok(s)
    }
}
