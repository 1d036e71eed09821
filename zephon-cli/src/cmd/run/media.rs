//! The image operators of a recipe: `decode_image`, with the augmentations
//! it runs in the same task, and `collate_images`.
//!
//! ```toml
//! [[ops]]
//! op = "decode_image"
//! field = "jpg"          # the bytes field (required)
//! parallelism = 2        # 1 to 4,096 (default 4)
//! resize_shorter = 256   # the shorter side scaled to this (1 to 8,192)
//! random_crop = 224      # a random resized crop to this square (1 to 8,192)
//! center_crop = 224      # or a centred one (not both)
//! flip = 0.5             # mirrored with this probability (0 to 1)
//! on_error = "skip"      # "fail" (default) or "skip" an image that does not decode
//!
//! [[ops]]
//! op = "batch"
//! size = 64
//!
//! [[ops]]
//! op = "collate_images"
//! layout = "chw"         # "chw" (default) or "hwc"
//! label = "cls"          # an integer label field (optional)
//! ```
//!
//! The crops and flips are seeded by the work source's seed and each
//! sample's identity, so the batches do not depend on the parallelism.

use anyhow::{Result, bail};
use serde::Deserialize;
use zephon_media::{
    CenterCrop, CollateConfig, DecodeConfig, Flip, Layout, OnError, RandomResizedCrop, Resize,
};

/// `op = "decode_image"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecodeImageSpec {
    /// The field holding the encoded image.
    pub field: String,
    /// Decodes in flight (1 to 4,096).
    #[serde(default = "four")]
    pub parallelism: usize,
    /// Most pixels an image may declare (default `DEFAULT_MAX_PIXELS`).
    pub max_pixels: Option<u64>,
    /// `fail` (default) or `skip`.
    #[serde(default = "fail")]
    pub on_error: String,
    /// The shorter side is scaled to this many pixels.
    pub resize_shorter: Option<u32>,
    /// A random resized crop to this square.
    pub random_crop: Option<u32>,
    /// A centred crop to this square.
    pub center_crop: Option<u32>,
    /// Mirrored with this probability.
    pub flip: Option<f64>,
}

fn four() -> usize {
    4
}

fn fail() -> String {
    "fail".into()
}

/// `op = "collate_images"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollateImagesSpec {
    /// `chw` (default) or `hwc`.
    #[serde(default = "chw")]
    pub layout: String,
    /// An integer label field.
    pub label: Option<String>,
}

fn chw() -> String {
    "chw".into()
}

/// The pixel sizes a recipe's image sides may take.
const SIDE: std::ops::RangeInclusive<u32> = 1..=8192;

impl DecodeImageSpec {
    /// The decode and its augmentations, seeded by `seed`; `at` names the
    /// operator in errors.
    pub fn config(&self, seed: u64, at: &str) -> Result<DecodeConfig> {
        let side = |key: &str, v: Option<u32>| -> Result<()> {
            match v {
                Some(n) if !SIDE.contains(&n) => {
                    bail!("{at}: {key} {n} is outside 1..=8192 pixels")
                }
                _ => Ok(()),
            }
        };
        side("resize_shorter", self.resize_shorter)?;
        side("random_crop", self.random_crop)?;
        side("center_crop", self.center_crop)?;
        if self.random_crop.is_some() && self.center_crop.is_some() {
            bail!("{at}: random_crop and center_crop: one crop or the other");
        }
        if let Some(p) = self.flip
            && !(0.0..=1.0).contains(&p)
        {
            bail!("{at}: flip {p} is not a probability (0 to 1)");
        }
        let mut c = DecodeConfig::new(self.field.clone()).on_error(match self.on_error.as_str() {
            "fail" => OnError::Fail,
            "skip" => OnError::Skip,
            o => bail!("{at}: on_error `{o}` is not one of fail, skip"),
        });
        if let Some(n) = self.max_pixels {
            c = c.max_pixels(n);
        }
        if let Some(n) = self.resize_shorter {
            c = c.then(Resize::shorter_side(n));
        }
        if let Some(n) = self.random_crop {
            c = c.then(RandomResizedCrop::new(n, n).seed(seed));
        }
        if let Some(n) = self.center_crop {
            c = c.then(CenterCrop::new(n, n));
        }
        if let Some(p) = self.flip {
            c = c.then(Flip::new(p, seed));
        }
        Ok(c)
    }
}

impl CollateImagesSpec {
    /// The collation; `at` names the operator in errors.
    pub fn config(&self, at: &str) -> Result<CollateConfig> {
        let layout = match self.layout.as_str() {
            "chw" => Layout::Chw,
            "hwc" => Layout::Hwc,
            o => bail!("{at}: layout `{o}` is not one of chw, hwc"),
        };
        let c = CollateConfig::new(layout);
        Ok(match &self.label {
            Some(l) => c.label(l.clone()),
            None => c,
        })
    }
}
