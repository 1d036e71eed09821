//! `center_crop`: the centre `width × height` of every image, padded with
//! zeros where the image is smaller (torchvision's `CenterCrop`).

use crate::error::Result;
use crate::image::{Image, ImageSample, Pixels};
use crate::map_images::ImageOp;

/// Crops the centre `width × height` of every image; where the image is
/// smaller the crop is padded with zeros, as torchvision's `CenterCrop`
/// pads. The offset is `round((size - crop) / 2)`, ties to even as Python rounds. 8-bit or `f32` pixels.
/// No randomness.
///
/// ```
/// use zephon_media::{CenterCrop, Image, ImageOp, ImageSample};
/// let s = ImageSample { image: Image::new_u8(3, 1, 1, vec![1, 2, 3])?, record: Default::default() };
/// assert_eq!(CenterCrop::new(1, 1).apply(s.clone())?.image.pixels.as_u8(), Some(&[2][..]));
/// let padded = CenterCrop::new(5, 1).apply(s)?;
/// assert_eq!(padded.image.pixels.as_u8(), Some(&[0, 1, 2, 3, 0][..]));
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CenterCrop {
    width: u32,
    height: u32,
}

impl CenterCrop {
    /// The centre `width × height` (each 1 or more).
    pub fn new(width: u32, height: u32) -> Self {
        CenterCrop { width, height }
    }

    /// A square of `n`.
    pub fn square(n: u32) -> Self {
        Self::new(n, n)
    }

    pub(crate) fn check(&self) -> Result<()> {
        crate::error::check(
            self.width > 0 && self.height > 0,
            "center_crop.size",
            "sizes must be 1 or more",
        )
    }
}

/// The region of `img` at (`left`, `top`) of `w × h`, zeros outside it.
pub(crate) fn crop_pad(img: &Image, left: i64, top: i64, w: u32, h: u32) -> Image {
    #[allow(clippy::too_many_arguments)]
    fn copy<T: Copy + Default>(
        src: &[T],
        iw: i64,
        ih: i64,
        c: usize,
        left: i64,
        top: i64,
        w: u32,
        h: u32,
    ) -> Vec<T> {
        let mut out = vec![T::default(); w as usize * h as usize * c];
        let x0 = left.max(0);
        let x1 = (left + w as i64).min(iw);
        if x1 <= x0 {
            return out;
        }
        for oy in 0..h as i64 {
            let y = top + oy;
            if y < 0 || y >= ih {
                continue;
            }
            let s = ((y * iw + x0) as usize) * c;
            let n = (x1 - x0) as usize * c;
            let d = ((oy * w as i64 + (x0 - left)) as usize) * c;
            out[d..d + n].copy_from_slice(&src[s..s + n]);
        }
        out
    }
    let (iw, ih, c) = (img.width as i64, img.height as i64, img.channels as usize);
    let pixels = match &img.pixels {
        Pixels::U8(p) => Pixels::U8(copy(p, iw, ih, c, left, top, w, h)),
        Pixels::F32(p) => Pixels::F32(copy(p, iw, ih, c, left, top, w, h)),
    };
    Image {
        width: w,
        height: h,
        channels: img.channels,
        pixels,
    }
}

impl ImageOp for CenterCrop {
    fn name(&self) -> &'static str {
        "center_crop"
    }

    fn apply(&self, mut s: ImageSample) -> Result<ImageSample> {
        self.check()?;
        let img = &s.image;
        if (img.width, img.height) == (self.width, self.height) {
            return Ok(s);
        }
        let top = ((img.height as f64 - self.height as f64) / 2.0).round_ties_even() as i64;
        let left = ((img.width as f64 - self.width as f64) / 2.0).round_ties_even() as i64;
        s.image = crop_pad(img, left, top, self.width, self.height);
        Ok(s)
    }
}
