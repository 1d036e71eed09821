//! [`probe_image`]: an image's format and size from its header alone,
//! without decoding its pixels (what `zephon inspect` reports).

use image::{ImageFormat, ImageReader};
use std::io::Cursor;

/// What an image's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    /// `jpeg`, `png` or `webp`.
    pub format: &'static str,
    /// Width in pixels, as stored (before any EXIF orientation).
    pub width: u32,
    /// Height in pixels, as stored.
    pub height: u32,
}

/// The format and size of the image in `bytes`, read from its header
/// only; `Err` says why the bytes are not a JPEG, PNG or WebP image whose
/// header reads (a decoder's panic on crafted bytes included).
///
/// ```
/// use zephon_media::probe_image;
/// // A 640 x 480 PNG.
/// let mut png = Vec::new();
/// image::RgbImage::new(640, 480)
///     .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
///     .unwrap();
/// let info = probe_image(&png).unwrap();
/// assert_eq!((info.format, info.width, info.height), ("png", 640, 480));
/// assert!(probe_image(b"not an image").is_err());
/// ```
pub fn probe_image(bytes: &[u8]) -> Result<ImageInfo, String> {
    let probe = || -> Result<ImageInfo, String> {
        let reader = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| e.to_string())?;
        let format = match reader.format() {
            Some(ImageFormat::Jpeg) => "jpeg",
            Some(ImageFormat::Png) => "png",
            Some(ImageFormat::WebP) => "webp",
            _ => return Err("not a JPEG, PNG or WebP image".into()),
        };
        let (width, height) = reader.into_dimensions().map_err(|e| e.to_string())?;
        Ok(ImageInfo {
            format,
            width,
            height,
        })
    };
    std::panic::catch_unwind(probe).unwrap_or_else(|p| {
        Err(format!(
            "the decoder failed on these bytes ({})",
            zephon_core::error::panic_message(&*p)
        ))
    })
}
