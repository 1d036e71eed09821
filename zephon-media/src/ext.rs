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
    fn decode_image(self, config: DecodeConfig, parallelism: usize) -> DecodeImage<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        DecodeImage::new(self, config, parallelism)
    }

    /// Applies any [`ImageOp`] (or a [`Compose`](crate::Compose) of them)
    /// with up to `parallelism` micro-batches at once, output in input
    /// order. See [`MapImages`].
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
    fn resize(self, op: Resize, parallelism: usize) -> MapImages<Self, ImageSample, ImageSample>
    where
        Self: Stream<Item = Result<ImageSample>>,
    {
        let invalid = op.check().err();
        self.map_images(op, parallelism).invalid(invalid)
    }

    /// Crops the centre of every image. See [`CenterCrop`].
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
    fn flip(self, op: Flip, parallelism: usize) -> MapImages<Self, ImageSample, ImageSample>
    where
        Self: Stream<Item = Result<ImageSample>>,
    {
        let invalid = op.check().err();
        self.map_images(op, parallelism).invalid(invalid)
    }

    /// 8-bit pixels to normalized `f32`. See [`Normalize`].
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
    fn collate_images(self, config: CollateConfig) -> CollateImages<Self>
    where
        Self: Stream<Item = Result<Batch<ImageSample>>>,
    {
        CollateImages::new(self, config)
    }
}

impl<S: Stream> MediaPipelineExt for S {}
