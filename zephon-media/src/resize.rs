//! `resize`: every image to a fixed size, or its shorter side to a length,
//! with bilinear (antialiased) filtering; also the resampling every
//! geometric operator of this crate shares.

use crate::error::{MediaError, PtrDisplay, Result};
use crate::image::{Image, ImageSample, Pixels};
use crate::map_images::ImageOp;
use fast_image_resize as fr;
use std::cell::RefCell;

/// The region `(left, top, width, height)` of `img` resampled to
/// `out_w × out_h` with a bilinear convolution (its support grows with the
/// downscale factor, as Pillow's and torchvision's antialiased bilinear
/// do). `op` and `ptr` name the sample in errors.
pub(crate) fn resample(
    img: &Image,
    region: (f64, f64, f64, f64),
    out_w: u32,
    out_h: u32,
    op: &'static str,
    ptr: PtrDisplay,
) -> Result<Image> {
    let px = img.u8_or_err(op, ptr)?;
    let pixel_type = match img.channels {
        1 => fr::PixelType::U8,
        2 => fr::PixelType::U8x2,
        3 => fr::PixelType::U8x3,
        4 => fr::PixelType::U8x4,
        c => {
            return Err(unsupported(op, ptr, format!("{c} channels")));
        }
    };
    let (left, top, w, h) = region;
    let unchanged = left == 0.0
        && top == 0.0
        && w == img.width as f64
        && h == img.height as f64
        && out_w == img.width
        && out_h == img.height;
    if unchanged {
        return Ok(img.clone());
    }
    let src = fr::images::ImageRef::new(img.width, img.height, px, pixel_type)
        .map_err(|e| unsupported(op, ptr, e.to_string()))?;
    let mut dst = fr::images::Image::new(out_w, out_h, pixel_type);
    let opts = fr::ResizeOptions::new()
        .resize_alg(fr::ResizeAlg::Convolution(fr::FilterType::Bilinear))
        .crop(left, top, w, h);
    // One resizer per worker thread keeps its scratch buffers.
    thread_local! {
        static RESIZER: RefCell<fr::Resizer> = RefCell::new(fr::Resizer::new());
    }
    RESIZER
        .with(|r| r.borrow_mut().resize(&src, &mut dst, &opts))
        .map_err(|e| unsupported(op, ptr, e.to_string()))?;
    Ok(Image {
        width: out_w,
        height: out_h,
        channels: img.channels,
        pixels: Pixels::U8(dst.into_vec()),
    })
}

pub(crate) fn unsupported(
    op: &'static str,
    ptr: PtrDisplay,
    message: String,
) -> zephon_core::Error {
    MediaError::Unsupported { op, ptr, message }.into()
}

/// The output size of a [`Resize`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeTo {
    /// Exactly `width × height` (the aspect ratio may change).
    Exact {
        /// Output width.
        width: u32,
        /// Output height.
        height: u32,
    },
    /// The shorter side to this length, the other in proportion (rounded
    /// down, as torchvision's `Resize(int)`).
    ShorterSide(u32),
}

/// Resizes every image (8-bit pixels) with bilinear, antialiased
/// filtering. No randomness.
///
/// ```
/// use zephon_media::{Image, ImageOp, ImageSample, Resize};
/// let s = ImageSample { image: Image::new_u8(8, 4, 3, vec![7; 96])?, record: Default::default() };
/// let out = Resize::shorter_side(2).apply(s.clone())?;
/// assert_eq!((out.image.width, out.image.height), (4, 2));
/// assert_eq!(out.image.pixels.as_u8().unwrap(), &[7; 24][..]);
/// let out = Resize::new(3, 3).apply(s)?;
/// assert_eq!((out.image.width, out.image.height), (3, 3));
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resize {
    to: ResizeTo,
}

impl Resize {
    /// To exactly `width × height` (each 1 or more).
    pub fn new(width: u32, height: u32) -> Self {
        Resize {
            to: ResizeTo::Exact { width, height },
        }
    }

    /// The shorter side to `n` (1 or more), keeping the aspect ratio.
    pub fn shorter_side(n: u32) -> Self {
        Resize {
            to: ResizeTo::ShorterSide(n),
        }
    }

    /// The output size.
    pub fn to(&self) -> ResizeTo {
        self.to
    }

    pub(crate) fn check(&self) -> Result<()> {
        let ok = match self.to {
            ResizeTo::Exact { width, height } => width > 0 && height > 0,
            ResizeTo::ShorterSide(n) => n > 0,
        };
        crate::error::check(ok, "resize.size", "sizes must be 1 or more")
    }

    /// The output size of a `w × h` image.
    pub fn output_size(&self, w: u32, h: u32) -> (u32, u32) {
        match self.to {
            ResizeTo::Exact { width, height } => (width, height),
            ResizeTo::ShorterSide(n) => {
                if w <= h {
                    (n, ((n as u64 * h as u64) / w.max(1) as u64).max(1) as u32)
                } else {
                    (((n as u64 * w as u64) / h.max(1) as u64).max(1) as u32, n)
                }
            }
        }
    }
}

impl ImageOp for Resize {
    fn name(&self) -> &'static str {
        "resize"
    }

    fn apply(&self, mut s: ImageSample) -> Result<ImageSample> {
        self.check()?;
        let (w, h) = (s.image.width, s.image.height);
        let (ow, oh) = self.output_size(w, h);
        s.image = resample(
            &s.image,
            (0.0, 0.0, w as f64, h as f64),
            ow,
            oh,
            "resize",
            s.ptr(),
        )?;
        Ok(s)
    }
}
