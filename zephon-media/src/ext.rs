//! [`MediaPipelineExt`]: the chain methods of the image operators.

use crate::center_crop::CenterCrop;
use crate::collate::{CollateConfig, CollateImages};
use crate::decode::{DecodeConfig, DecodeImage};
use crate::error::Result;
use crate::flip::Flip;
use crate::image::ImageSample;
use crate::map_images::{ImageOp, MapImages};
use crate::normalize::Normalize;
use crate::random_resized_crop::RandomResizedCrop;
use crate::resize::Resize;
use futures::Stream;
use zephon_core::{Batch, Record};

/// Chain methods for image pipelines, on any `Stream<Item = Result<..>>`:
/// records to [`ImageSample`]s with [`decode_image`](Self::decode_image),
/// image steps on worker threads, batches to [`ImageBatch`](crate::ImageBatch)es
/// with [`collate_images`](Self::collate_images). Every step's output order
/// equals its input order, and every random choice is seeded by the
/// sample's identity, so parallelism never changes the batches.
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner, Value};
/// use zephon_media::{CollateConfig, DecodeConfig, Flip, Layout, MediaPipelineExt, Normalize, RandomResizedCrop};
/// # use image::ImageEncoder;
/// # let mut png = Vec::new();
/// # image::codecs::png::PngEncoder::new(&mut png).write_image(&[90u8; 40 * 30 * 3], 40, 30, image::ExtendedColorType::Rgb8).unwrap();
/// let recs = (0..6i64).map(move |i| Ok(Record::new().with("png", Value::Bytes(png.clone().into())).with("cls", i)));
/// let batches: Vec<_> = futures::stream::iter(recs)
///     .decode_image(DecodeConfig::new("png"), 2)
///     .random_resized_crop(RandomResizedCrop::new(16, 16).seed(1), 2)
///     .flip(Flip::new(0.5, 1), 1)
///     .normalize(Normalize::imagenet(), 1)
///     .batch(4)
///     .collate_images(CollateConfig::new(Layout::Chw).label("cls"))
///     .into_blocking_iter(Runner::threads())?
///     .collect::<Result<_, _>>()?;
/// assert_eq!(batches[0].shape(), [4, 3, 16, 16]);
/// assert_eq!(batches[1].labels, [4, 5]);
/// # Ok::<(), zephon_core::Error>(())
/// ```
pub trait MediaPipelineExt: Stream + Sized {
    /// Decodes an image field of each record, up to `parallelism`
    /// micro-batches at once (1 to 4096; otherwise the first item is an
    /// error naming it). See [`DecodeImage`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner, Value};
    /// use zephon_media::{DecodeConfig, ImageSample, MediaPipelineExt};
    /// # use image::ImageEncoder;
    /// # let mut png = Vec::new();
    /// # image::codecs::png::PngEncoder::new(&mut png).write_image(&[90u8; 40 * 30 * 3], 40, 30, image::ExtendedColorType::Rgb8).unwrap();
    /// let rec = Record::new().with("png", Value::Bytes(png.into())).with("cls", 3i64);
    /// let out: Vec<ImageSample> = futures::stream::iter([Ok(rec)])
    ///     .decode_image(DecodeConfig::new("png"), 1)
    ///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
    /// let img = &out[0].image;
    /// assert_eq!((img.width, img.height, img.channels), (40, 30, 3));
    /// assert_eq!(img.pixels.as_u8(), Some(&[90; 40 * 30 * 3][..]));
    /// // The bytes are taken out of the record; the label stays.
    /// assert!(out[0].record.get("png").is_none());
    /// assert_eq!(out[0].record.get("cls").and_then(Value::as_int), Some(3));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn decode_image(self, config: DecodeConfig, parallelism: usize) -> DecodeImage<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        DecodeImage::new(self, config, parallelism)
    }

    /// Applies any [`ImageOp`] (or a [`Compose`](crate::Compose) of them)
    /// with up to `parallelism` micro-batches at once, output in input
    /// order. See [`MapImages`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_media::{CenterCrop, Compose, Flip, Image, ImageSample, MediaPipelineExt};
    /// let samples = (0..3u8).map(|i| Ok(ImageSample {
    ///     image: Image::new_u8(4, 4, 1, (0..16).map(|v| v + 16 * i).collect())?, record: Record::new() }));
    /// let out: Vec<ImageSample> = futures::stream::iter(samples)
    ///     .map_images(Compose::new().then(CenterCrop::new(2, 2)).then(Flip::new(1.0, 0)), 2)
    ///     .into_blocking_iter(Runner::threads())?.collect::<Result<_, _>>()?;
    /// let px: Vec<&[u8]> = out.iter().map(|s| s.image.pixels.as_u8().unwrap()).collect();
    /// assert_eq!(px, [&[6, 5, 10, 9][..], &[22, 21, 26, 25], &[38, 37, 42, 41]]);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn map_images<O: ImageOp>(
        self,
        op: O,
        parallelism: usize,
    ) -> MapImages<Self, ImageSample, ImageSample>
    where
        Self: Stream<Item = Result<ImageSample>>,
    {
        let name = op.name();
        let detail = format!("{op:?}");
        MapImages::new(self, name, detail, move |s| op.apply(s), parallelism)
    }

    /// A random crop resized to a fixed size (torchvision's
    /// `RandomResizedCrop`), seeded by the sample's identity. See
    /// [`RandomResizedCrop`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_media::{Image, ImageSample, MediaPipelineExt, RandomResizedCrop};
    /// let run = |runner: Runner, parallelism: usize| -> Result<Vec<ImageSample>, zephon_core::Error> {
    ///     let samples = (0..8i64).map(|i| Ok(ImageSample {
    ///         image: Image::new_u8(64, 48, 3, (0..64 * 48 * 3).map(|v| v as u8).collect())?,
    ///         record: Record::new().with("cls", i) }));
    ///     futures::stream::iter(samples)
    ///         .random_resized_crop(RandomResizedCrop::new(16, 16).seed(3), parallelism)
    ///         .into_blocking_iter(runner)?.collect()
    /// };
    /// let a = run(Runner::threads(), 4)?;
    /// assert!(a.iter().all(|s| (s.image.width, s.image.height) == (16, 16)));
    /// // The crops depend on the seed and each sample, not on the threads.
    /// assert_eq!(a, run(Runner::Inline, 1)?);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn random_resized_crop(
        self,
        op: RandomResizedCrop,
        parallelism: usize,
    ) -> MapImages<Self, ImageSample, ImageSample>
    where
        Self: Stream<Item = Result<ImageSample>>,
    {
        let invalid = op.check().err();
        self.map_images(op, parallelism).invalid(invalid)
    }

    /// Resizes every image. See [`Resize`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_media::{Image, ImageSample, MediaPipelineExt, Resize};
    /// let s = ImageSample { image: Image::new_u8(64, 48, 3, vec![7; 64 * 48 * 3])?, record: Record::new() };
    /// let out: Vec<ImageSample> = futures::stream::iter([Ok(s)])
    ///     .resize(Resize::shorter_side(16), 1)
    ///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
    /// // 64 × 48 keeps its aspect ratio, the longer side rounded down.
    /// assert_eq!((out[0].image.width, out[0].image.height), (21, 16));
    /// assert_eq!(out[0].image.pixels.as_u8(), Some(&[7; 21 * 16 * 3][..]));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn resize(self, op: Resize, parallelism: usize) -> MapImages<Self, ImageSample, ImageSample>
    where
        Self: Stream<Item = Result<ImageSample>>,
    {
        let invalid = op.check().err();
        self.map_images(op, parallelism).invalid(invalid)
    }

    /// Crops the centre of every image. See [`CenterCrop`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_media::{CenterCrop, Image, ImageSample, MediaPipelineExt};
    /// let s = ImageSample { image: Image::new_u8(5, 5, 1, (0..25).collect())?, record: Record::new() };
    /// let out: Vec<ImageSample> = futures::stream::iter([Ok(s)])
    ///     .center_crop(CenterCrop::square(3), 1)
    ///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
    /// assert_eq!(out[0].image.pixels.as_u8(), Some(&[6, 7, 8, 11, 12, 13, 16, 17, 18][..]));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn center_crop(
        self,
        op: CenterCrop,
        parallelism: usize,
    ) -> MapImages<Self, ImageSample, ImageSample>
    where
        Self: Stream<Item = Result<ImageSample>>,
    {
        let invalid = op.check().err();
        self.map_images(op, parallelism).invalid(invalid)
    }

    /// Mirrors images left to right with a probability, seeded by the
    /// sample's identity. See [`Flip`].
    ///
    /// ```
    /// use zephon_core::{Identity, PipelineExt, Record, Runner};
    /// use zephon_media::{Flip, Image, ImageSample, MediaPipelineExt};
    /// let samples = (0..8i64).map(|i| Ok(ImageSample {
    ///     image: Image::new_u8(3, 1, 1, vec![1, 2, 3])?, record: Record::new().with("cls", i) }));
    /// let op = Flip::new(0.5, 9);
    /// let out: Vec<ImageSample> = futures::stream::iter(samples)
    ///     .flip(op, 2)
    ///     .into_blocking_iter(Runner::threads())?.collect::<Result<_, _>>()?;
    /// let flipped: Vec<bool> = out.iter().map(|s| s.image.pixels.as_u8() == Some(&[3, 2, 1][..])).collect();
    /// // Exactly the samples whose identity draws a flip are mirrored.
    /// assert_eq!(flipped, out.iter().map(|s| op.flips(s.record.identity())).collect::<Vec<_>>());
    /// assert!(flipped.contains(&true) && flipped.contains(&false));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn flip(self, op: Flip, parallelism: usize) -> MapImages<Self, ImageSample, ImageSample>
    where
        Self: Stream<Item = Result<ImageSample>>,
    {
        let invalid = op.check().err();
        self.map_images(op, parallelism).invalid(invalid)
    }

    /// 8-bit pixels to normalized `f32`. See [`Normalize`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_media::{Image, ImageSample, MediaPipelineExt, Normalize};
    /// let s = ImageSample { image: Image::new_u8(2, 1, 3, vec![0, 0, 0, 255, 255, 255])?, record: Record::new() };
    /// let out: Vec<ImageSample> = futures::stream::iter([Ok(s)])
    ///     // One mean and one std serve every channel.
    ///     .normalize(Normalize::new(vec![0.5], vec![0.5]), 1)
    ///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
    /// assert_eq!(out[0].image.pixels.as_f32(), Some(&[-1.0, -1.0, -1.0, 1.0, 1.0, 1.0][..]));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn normalize(
        self,
        op: Normalize,
        parallelism: usize,
    ) -> MapImages<Self, ImageSample, ImageSample>
    where
        Self: Stream<Item = Result<ImageSample>>,
    {
        let invalid = op.check().err();
        self.map_images(op, parallelism).invalid(invalid)
    }

    /// Batches of image samples to [`ImageBatch`](crate::ImageBatch)es.
    /// See [`CollateImages`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_media::{CollateConfig, Image, ImageBatch, ImageSample, Layout, MediaPipelineExt};
    /// let samples = (0..5u8).map(|i| Ok(ImageSample {
    ///     image: Image::new_u8(4, 2, 3, vec![i; 24])?, record: Record::new().with("cls", i as i64) }));
    /// let batches: Vec<ImageBatch> = futures::stream::iter(samples)
    ///     .batch(2)
    ///     .collate_images(CollateConfig::new(Layout::Hwc).label("cls"))
    ///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
    /// assert_eq!(batches.iter().map(|b| b.shape()).collect::<Vec<_>>(), [[2, 2, 4, 3], [2, 2, 4, 3], [1, 2, 4, 3]]);
    /// assert_eq!((batches[2].labels.as_slice(), batches[2].pixels.as_u8()), (&[4][..], Some(&[4; 24][..])));
    /// // The label field is taken out of the records.
    /// assert!(batches[0].records[0].get("cls").is_none());
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn collate_images(self, config: CollateConfig) -> CollateImages<Self>
    where
        Self: Stream<Item = Result<Batch<ImageSample>>>,
    {
        CollateImages::new(self, config)
    }
}

impl<S: Stream> MediaPipelineExt for S {}
