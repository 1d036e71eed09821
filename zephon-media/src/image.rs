//! [`Image`], [`ImageSample`] and the pixel [`Layout`].

use crate::error::{MediaError, PtrDisplay, Result};
use zephon_core::{Identity, LaneId, Laned, Record};

/// Pixel values: 8-bit as decoded, or `f32` after
/// [`normalize`](crate::MediaPipelineExt::normalize).
#[derive(Clone, PartialEq)]
pub enum Pixels {
    /// 8-bit channels, as decoded.
    U8(Vec<u8>),
    /// Floating point channels (normalized).
    F32(Vec<f32>),
}

impl Pixels {
    /// Number of channel values.
    pub fn len(&self) -> usize {
        match self {
            Pixels::U8(v) => v.len(),
            Pixels::F32(v) => v.len(),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The 8-bit values, if these are 8-bit.
    pub fn as_u8(&self) -> Option<&[u8]> {
        match self {
            Pixels::U8(v) => Some(v),
            Pixels::F32(_) => None,
        }
    }

    /// The `f32` values, if these are floating point.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            Pixels::F32(v) => Some(v),
            Pixels::U8(_) => None,
        }
    }

    /// A stable digest of the values (floats by their bits).
    pub fn digest(&self) -> u64 {
        use zephon_core::hash::{bytes, combine};
        match self {
            Pixels::U8(v) => combine(1, bytes(v)),
            Pixels::F32(v) => v.chunks(1024).fold(2, |h, c| {
                let b: Vec<u8> = c.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
                combine(h, bytes(&b))
            }),
        }
    }
}

impl std::fmt::Debug for Pixels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pixels::U8(v) => write!(f, "U8({} values)", v.len()),
            Pixels::F32(v) => write!(f, "F32({} values)", v.len()),
        }
    }
}

/// An image: `height` rows of `width` pixels of `channels` values each,
/// row-major and interleaved (HWC), in one contiguous buffer.
///
/// ```
/// use zephon_media::{Image, Pixels};
/// let img = Image::new_u8(2, 1, 3, vec![255, 0, 0, 0, 0, 255])?;
/// assert_eq!(img.pixel_u8(1, 0), Some(&[0, 0, 255][..]));
/// assert!(Image::new_u8(2, 2, 3, vec![0; 5]).is_err());
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Values per pixel: 3 (RGB) or 1 (gray).
    pub channels: u8,
    /// `height * width * channels` values, HWC.
    pub pixels: Pixels,
}

impl Image {
    /// An 8-bit image; an error unless `pixels` holds exactly
    /// `width * height * channels` values.
    pub fn new_u8(width: u32, height: u32, channels: u8, pixels: Vec<u8>) -> Result<Self> {
        let want = width as usize * height as usize * channels as usize;
        crate::error::check(
            pixels.len() == want && channels > 0,
            "image.pixels",
            format!(
                "{} values for {width}x{height}x{channels} ({want} expected)",
                pixels.len()
            ),
        )?;
        Ok(Image {
            width,
            height,
            channels,
            pixels: Pixels::U8(pixels),
        })
    }

    /// The values of pixel (`x`, `y`) of an 8-bit image.
    pub fn pixel_u8(&self, x: u32, y: u32) -> Option<&[u8]> {
        if x >= self.width || y >= self.height {
            return None;
        }
        let c = self.channels as usize;
        let i = (y as usize * self.width as usize + x as usize) * c;
        self.pixels.as_u8().map(|p| &p[i..i + c])
    }

    /// The 8-bit values, or an error naming `op` for an `f32` image (a
    /// geometric operator placed after `normalize`).
    pub(crate) fn u8_or_err(&self, op: &'static str, ptr: PtrDisplay) -> Result<&[u8]> {
        self.pixels.as_u8().ok_or_else(|| {
            MediaError::Unsupported {
                op,
                ptr,
                message: "takes 8-bit pixels; place `normalize` after it".into(),
            }
            .into()
        })
    }

    /// A stable digest of the size and the values.
    pub fn digest(&self) -> u64 {
        zephon_core::hash::key(&[
            self.width as u64,
            self.height as u64,
            self.channels as u64,
            self.pixels.digest(),
        ])
    }
}

/// A decoded image travelling with the record it came from: the record
/// keeps the lane, the lineage (the sample's identity, which seeds every
/// random choice) and the other fields (label, caption, key); the image's
/// bytes field is taken out of it.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageSample {
    /// The image.
    pub image: Image,
    /// The source record, without the decoded bytes field.
    pub record: Record,
}

impl ImageSample {
    /// The sample's source pointer, for messages.
    pub(crate) fn ptr(&self) -> PtrDisplay {
        PtrDisplay(self.record.source().copied())
    }

    /// A stable digest of the image and the record.
    pub fn digest(&self) -> u64 {
        zephon_core::hash::combine(self.image.digest(), self.record.digest())
    }
}

impl Laned for ImageSample {
    fn lane(&self) -> LaneId {
        self.record.lane
    }
}

impl Identity for ImageSample {
    /// The record's identity (its lineage): what random choices are seeded
    /// from.
    fn identity(&self) -> u64 {
        self.record.identity()
    }
}

/// How a batch lays its pixels out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Layout {
    /// N×H×W×C: channels interleaved (as decoded; what TensorFlow and JAX
    /// take).
    #[default]
    Hwc,
    /// N×C×H×W: one plane per channel (what PyTorch and Burn models take).
    Chw,
}
