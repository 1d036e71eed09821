//! `decode_image`: an image field of each record (bytes, or a path) to
//! pixels, on worker threads, output order = input order.

use crate::error::{KeyDisplay, MediaError, PtrDisplay, Result};
use crate::image::{Image, ImageSample};
use crate::map_images::{Compose, ImageOp, MapImages};
use crate::stats::MediaStats;
use futures::Stream;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits};
use pin_project::pin_project;
use std::fmt;
use std::io::Cursor;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use zephon_core::obs::{Explain, StageDescription};
use zephon_core::{Record, Value};

/// The default [`DecodeConfig::max_pixels`]: 64 Mi pixels (8192×8192),
/// 192 MiB as RGB. Larger than any training image, small enough that a
/// header claiming more is refused before its buffer exists.
pub const DEFAULT_MAX_PIXELS: u64 = 64 << 20;

/// The channels a decoded image is given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Channels {
    /// Three channels, RGB (the default): gray is replicated, CMYK JPEGs
    /// converted, alpha dropped (not composited), 16-bit scaled to 8.
    #[default]
    Rgb,
    /// One channel, luma (Rec. 709 weights for colour sources), alpha
    /// dropped, 16-bit scaled to 8.
    Gray,
}

impl Channels {
    /// Values per pixel.
    pub fn count(self) -> u8 {
        match self {
            Channels::Rgb => 3,
            Channels::Gray => 1,
        }
    }
}

/// What to do with a sample whose bytes do not decode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnError {
    /// The error, naming the sample, is the stream's item (the default).
    #[default]
    Fail,
    /// The sample is dropped and counted in [`MediaStats::skipped`]. Which
    /// samples are dropped depends on their bytes only, so the skip is as
    /// deterministic as the rest of the pipeline.
    Skip,
}

/// Why bytes did not decode: what [`DecodeConfig::decode`] returns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeFailure {
    /// Truncated, corrupt, or not a supported format.
    #[error("{0}")]
    Corrupt(String),
    /// The header declares more pixels than allowed (nothing allocated).
    #[error("{width}x{height} is more than max_pixels {max_pixels}")]
    TooLarge {
        /// Declared width.
        width: u32,
        /// Declared height.
        height: u32,
        /// The limit.
        max_pixels: u64,
    },
}

/// How [`DecodeImage`] decodes.
///
/// JPEG (baseline and progressive, through `zune-jpeg`; CMYK converted to
/// RGB), PNG (8 and 16-bit, palette, gray, alpha) and WebP (lossy and
/// lossless) are recognised by their bytes, not by the member's name: a
/// `.png` member holding a JPEG decodes as the JPEG it is, and bytes of no
/// supported format are an error naming the sample. The EXIF orientation
/// of JPEG and WebP is applied unless [`DecodeConfig::orientation`] turns
/// it off (PNG's is not read). JPEG is decoded at full size: DCT-domain
/// downscaling is not offered by the decoder.
///
/// ```
/// use zephon_media::{Channels, DecodeConfig, OnError};
/// let c = DecodeConfig::new("jpg").channels(Channels::Gray).on_error(OnError::Skip).max_pixels(1 << 20);
/// assert!(c.decode(b"not an image").is_err());
/// ```
#[derive(Clone, Debug)]
pub struct DecodeConfig {
    field: String,
    channels: Channels,
    max_pixels: u64,
    on_error: OnError,
    orientation: bool,
    then: Compose,
}

impl DecodeConfig {
    /// Decodes the field `field`: [`Value::Bytes`] holds the encoded image,
    /// a text value is the path of a local file holding it.
    pub fn new(field: impl Into<String>) -> Self {
        DecodeConfig {
            field: field.into(),
            channels: Channels::Rgb,
            max_pixels: DEFAULT_MAX_PIXELS,
            on_error: OnError::Fail,
            orientation: true,
            then: Compose::new(),
        }
    }

    /// The channels of the decoded image (default [`Channels::Rgb`]).
    pub fn channels(mut self, c: Channels) -> Self {
        self.channels = c;
        self
    }

    /// The most pixels (width × height) a header may declare, checked
    /// before any pixel buffer is allocated (default
    /// [`DEFAULT_MAX_PIXELS`]; 1 or more).
    pub fn max_pixels(mut self, n: u64) -> Self {
        self.max_pixels = n;
        self
    }

    /// What to do with bytes that do not decode (default [`OnError::Fail`]).
    /// A missing field is an error under either policy: it is a schema
    /// mistake, not bad data.
    pub fn on_error(mut self, p: OnError) -> Self {
        self.on_error = p;
        self
    }

    /// Whether to apply the EXIF orientation (default on).
    pub fn orientation(mut self, on: bool) -> Self {
        self.orientation = on;
        self
    }

    /// Steps run on each image right after it is decoded, in the same task
    /// (crop and resize then cost no further hand-off, and the full-size
    /// image is dropped on the worker that made it).
    pub fn then(mut self, op: impl ImageOp) -> Self {
        self.then = self.then.then(op);
        self
    }

    /// The decoded field.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// Decodes `bytes`: the entry point every sample goes through, safe on
    /// hostile input (an error, never a panic or an allocation beyond
    /// `max_pixels`).
    ///
    /// ```
    /// use zephon_media::{DecodeConfig, DecodeFailure};
    /// // A PNG header declaring 100000 x 100000 pixels, and nothing else.
    /// let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    /// png.extend(100_000u32.to_be_bytes());
    /// png.extend(100_000u32.to_be_bytes());
    /// png.extend([8, 2, 0, 0, 0]);
    /// let crc = 0u32; png.extend(crc.to_be_bytes());
    /// let e = DecodeConfig::new("png").decode(&png).unwrap_err();
    /// assert!(matches!(e, DecodeFailure::TooLarge { .. }) || matches!(e, DecodeFailure::Corrupt(_)), "{e}");
    /// ```
    pub fn decode(&self, bytes: &[u8]) -> std::result::Result<Image, DecodeFailure> {
        // A decoder's own bug on crafted bytes is this sample's error.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.decode_inner(bytes))) {
            Ok(r) => r,
            Err(p) => Err(DecodeFailure::Corrupt(format!(
                "the decoder failed on these bytes ({})",
                zephon_core::error::panic_message(&*p)
            ))),
        }
    }

    fn decode_inner(&self, bytes: &[u8]) -> std::result::Result<Image, DecodeFailure> {
        let corrupt = |e: &dyn fmt::Display| DecodeFailure::Corrupt(e.to_string());
        let mut reader = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| corrupt(&e))?;
        let format = match reader.format() {
            Some(f @ (ImageFormat::Jpeg | ImageFormat::Png | ImageFormat::WebP)) => f,
            _ => {
                let head: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
                return Err(DecodeFailure::Corrupt(format!(
                    "not a JPEG, PNG or WebP image ({} bytes starting {})",
                    bytes.len(),
                    head.join(" ")
                )));
            }
        };
        // Room for the largest allowed image at 16-bit RGBA, plus the
        // decoder's own tables.
        let mut limits = Limits::default();
        limits.max_alloc = Some(self.max_pixels.saturating_mul(8).saturating_add(64 << 20));
        reader.limits(limits);
        let mut decoder = reader.into_decoder().map_err(|e| corrupt(&e))?;
        let (width, height) = decoder.dimensions();
        if width as u64 * height as u64 > self.max_pixels {
            return Err(DecodeFailure::TooLarge {
                width,
                height,
                max_pixels: self.max_pixels,
            });
        }
        if width == 0 || height == 0 {
            return Err(DecodeFailure::Corrupt(format!(
                "{format:?} of {width}x{height} pixels"
            )));
        }
        let orientation = if self.orientation {
            decoder.orientation().ok()
        } else {
            None
        };
        let mut img = DynamicImage::from_decoder(decoder).map_err(|e| corrupt(&e))?;
        if let Some(o) = orientation {
            img.apply_orientation(o);
        }
        let (w, h) = (img.width(), img.height());
        let pixels = match self.channels {
            Channels::Rgb => match img {
                DynamicImage::ImageRgb8(b) => b.into_raw(),
                other => other.into_rgb8().into_raw(),
            },
            Channels::Gray => match img {
                DynamicImage::ImageLuma8(b) => b.into_raw(),
                other => other.into_luma8().into_raw(),
            },
        };
        Ok(Image {
            width: w,
            height: h,
            channels: self.channels.count(),
            pixels: crate::image::Pixels::U8(pixels),
        })
    }

    fn check(&self) -> Result<()> {
        crate::error::check(
            self.max_pixels >= 1,
            "decode_image.max_pixels",
            "0 is out of range 1..",
        )
    }

    /// One record to its sample: `Ok(None)` for a skipped one.
    fn decode_record(&self, mut record: Record, stats: &MediaStats) -> Result<Option<ImageSample>> {
        let op = "decode_image";
        let ptr = PtrDisplay(record.source().copied());
        let fail = |message: String, key: KeyDisplay| MediaError::Decode {
            op,
            ptr,
            key,
            message,
        };
        let decoded = match record.get(&self.field) {
            Some(Value::Bytes(b)) => self.decode(b).map_err(|e| (e, b.len())),
            Some(v) if v.as_text().is_some() => {
                let path = v.as_text().unwrap_or_default();
                match read_bounded(path, self.max_pixels) {
                    Ok(b) => self.decode(&b).map_err(|e| (e, b.len())),
                    Err(e) => Err((DecodeFailure::Corrupt(format!("reading `{path}`: {e}")), 0)),
                }
            }
            other => {
                return Err(MediaError::MissingField {
                    op,
                    field: self.field.clone(),
                    expected: "bytes or path",
                    found: other
                        .map(|v| format!(" (found {})", v.kind()))
                        .unwrap_or_default(),
                    ptr,
                    key: KeyDisplay::of(&record),
                }
                .into());
            }
        };
        let image = match decoded {
            Ok(img) => img,
            Err((e, len)) => {
                if self.on_error == OnError::Skip {
                    stats.skipped.inc();
                    return Ok(None);
                }
                let key = KeyDisplay::of(&record);
                return Err(match e {
                    DecodeFailure::TooLarge {
                        width,
                        height,
                        max_pixels,
                    } => MediaError::TooLarge {
                        op,
                        ptr,
                        key,
                        width,
                        height,
                        max_pixels,
                    },
                    DecodeFailure::Corrupt(m) => fail(format!("{m} ({len} bytes)"), key),
                }
                .into());
            }
        };
        stats.decoded.inc();
        stats.pixels.add(image.width as u64 * image.height as u64);
        record.take(&self.field);
        let sample = ImageSample { image, record };
        if self.then.is_empty() {
            Ok(Some(sample))
        } else {
            self.then.apply(sample).map(Some)
        }
    }
}

/// The bytes of a local file, refused when larger than any image within
/// `max_pixels` could reasonably be (uncompressed 16-bit RGBA plus 1 MiB).
fn read_bounded(path: &str, max_pixels: u64) -> std::io::Result<Vec<u8>> {
    let limit = max_pixels.saturating_mul(8).saturating_add(1 << 20);
    let len = std::fs::metadata(path)?.len();
    if len > limit {
        return Err(std::io::Error::other(format!(
            "{len} bytes, more than any image of max_pixels could need ({limit})"
        )));
    }
    std::fs::read(path)
}

/// Decodes an image field of every record into an [`ImageSample`], with up
/// to `parallelism` micro-batches decoding at once on worker threads (in
/// place under the inline runner); the output order equals the input order
/// for every parallelism and runner. Steps added with
/// [`DecodeConfig::then`] run in the same task. A sample that does not
/// decode is an error naming it (operator, sample, member key), or, under
/// [`OnError::Skip`], dropped and counted.
///
/// Created by [`MediaPipelineExt::decode_image`](crate::MediaPipelineExt::decode_image).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner, Value};
/// use zephon_media::{DecodeConfig, ImageSample, MediaPipelineExt, OnError};
/// # use image::ImageEncoder;
/// # let mut png = Vec::new();
/// # image::codecs::png::PngEncoder::new(&mut png).write_image(&[10u8; 4 * 3 * 3], 4, 3, image::ExtendedColorType::Rgb8).unwrap();
/// let recs = vec![
///     Record::new().with("png", Value::Bytes(png.into())).with("cls", 3i64),
///     Record::new().with("png", Value::Bytes(b"garbage".to_vec().into())),
/// ];
/// let decoded = futures::stream::iter(recs.into_iter().map(Ok))
///     .decode_image(DecodeConfig::new("png").on_error(OnError::Skip), 2);
/// let stats = decoded.stats();
/// let out: Vec<ImageSample> = decoded.into_blocking_iter(Runner::threads())?.collect::<Result<_, _>>()?;
/// assert_eq!(out.len(), 1);
/// assert_eq!((out[0].image.width, out[0].image.height, out[0].image.channels), (4, 3, 3));
/// assert_eq!(out[0].record.get("cls"), Some(&Value::Int(3)));
/// assert_eq!(stats.skipped.get(), 1);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct DecodeImage<S> {
    #[pin]
    inner: MapImages<S, Record, Option<ImageSample>>,
    stats: Arc<MediaStats>,
    field: String,
}

impl<S> DecodeImage<S> {
    /// Wraps `inner` with `config` and `parallelism` (1 to 4096; otherwise,
    /// or for an invalid option of `config`, the first item is an error
    /// naming it).
    pub fn new(inner: S, config: DecodeConfig, parallelism: usize) -> Self {
        let stats = Arc::new(MediaStats::default());
        let invalid = config.check().err();
        let field = config.field.clone();
        let detail = format!(
            "`{}` -> {:?}, max_pixels {}, on_error {:?}{}",
            config.field,
            config.channels,
            config.max_pixels,
            config.on_error,
            if config.then.is_empty() {
                String::new()
            } else {
                format!(", then {}", config.then.names().join(", "))
            }
        );
        let s = stats.clone();
        let map = MapImages::new(
            inner,
            "decode_image",
            detail,
            move |r| config.decode_record(r, &s),
            parallelism,
        )
        .invalid(invalid);
        DecodeImage {
            inner: map,
            stats,
            field,
        }
    }

    /// The statistics this operator counts into (decoded, skipped).
    pub fn stats(&self) -> Arc<MediaStats> {
        self.stats.clone()
    }

    /// The stream this adapter reads from.
    pub fn get_ref(&self) -> &S {
        self.inner.get_ref()
    }

    /// The stream this adapter reads from, mutably. Taking items from it
    /// directly bypasses this adapter.
    pub fn get_mut(&mut self) -> &mut S {
        self.inner.get_mut()
    }

    /// The stream this adapter reads from; what the adapter holds
    /// (buffered or in-flight elements) is dropped.
    pub fn into_inner(self) -> S {
        self.inner.into_inner()
    }
}

impl<S: fmt::Debug> fmt::Debug for DecodeImage<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecodeImage")
            .field("inner", self.inner.get_ref())
            .field("field", &self.field)
            .field("parallelism", &self.inner.parallelism())
            .finish_non_exhaustive()
    }
}

impl<S> Stream for DecodeImage<S>
where
    S: Stream<Item = Result<Record>>,
{
    type Item = Result<ImageSample>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            match futures::ready!(this.inner.as_mut().poll_next(cx)) {
                Some(Ok(Some(s))) => return Poll::Ready(Some(Ok(s))),
                Some(Ok(None)) => continue,
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => return Poll::Ready(None),
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // Skipped samples may make any of them vanish.
        (0, self.inner.size_hint().1)
    }
}

impl<S: Explain> Explain for DecodeImage<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
    }
}
