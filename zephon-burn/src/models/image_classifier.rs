//! A small image classifier (two convolutions, pooling, a linear head) and
//! the Zephon image pipeline that feeds it from WebDataset shards of JPEGs
//! and labels: fetch -> `decode_image` -> `random_resized_crop` -> `flip`
//! -> batch -> `collate_images` (N×C×H×W) -> prefetch.
//!
//! This crate opens no storage itself: the shards are read (and, for the
//! synthetic data, written) through a [`ShardStore`], which `zephon timing`
//! backs with `zephon-storage`; [`InMemoryShards`] keeps them in memory.

use crate::error::{Error, Result};
use crate::harness::{BatchSource, PipelineSource, TimedModel};
use crate::media::{ImageTensors, PixelScale};
use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::{Device, FloatDType, Int, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use zephon_core::WorkSource;
use zephon_core::{BlockingIter, Dataset, Observer, PipelineExt, Record, Runner, Tracking, Value};
use zephon_media::{
    CollateConfig, DecodeConfig, Flip, ImageBatch, Layout, MediaPipelineExt, RandomResizedCrop,
};

/// Sizes of the [`ImageClassifier`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageClassifierConfig {
    /// Channels of the input images (3 for the RGB the pipeline decodes).
    #[serde(default = "default_in_channels")]
    pub in_channels: usize,
    /// Output channels of the two 3×3 convolutions.
    #[serde(default = "default_conv_channels")]
    pub conv_channels: [usize; 2],
    /// Classes of the linear head; every label must lie below it.
    pub num_classes: usize,
}

fn default_in_channels() -> usize {
    3
}

fn default_conv_channels() -> [usize; 2] {
    [16, 32]
}

/// conv 3×3 -> ReLU -> max pool 2×2 -> conv 3×3 -> ReLU -> global average
/// pool -> linear, trained with cross-entropy. The global pool makes it
/// take any image size.
#[derive(Module, Debug)]
pub struct ImageClassifier {
    conv1: Conv2d,
    pool: MaxPool2d,
    conv2: Conv2d,
    global: AdaptiveAvgPool2d,
    head: Linear,
}

impl ImageClassifier {
    /// A freshly initialised classifier on `device`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use zephon_burn::models::image_classifier::{ImageClassifier, ImageClassifierConfig};
    /// let device = Device::flex();
    /// let cfg = ImageClassifierConfig { in_channels: 3, conv_channels: [4, 8], num_classes: 5 };
    /// let model = ImageClassifier::new(&cfg, &device);
    /// let logits = model.forward(Tensor::zeros([2, 3, 12, 10], &device));
    /// assert_eq!(logits.dims(), [2, 5]);
    /// ```
    pub fn new(config: &ImageClassifierConfig, device: &Device) -> Self {
        let [c1, c2] = config.conv_channels;
        let conv = |from: usize, to: usize| {
            Conv2dConfig::new([from, to], [3, 3])
                .with_padding(PaddingConfig2d::Same)
                .init(device)
        };
        ImageClassifier {
            conv1: conv(config.in_channels, c1),
            pool: MaxPool2dConfig::new([2, 2]).init(),
            conv2: conv(c1, c2),
            global: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            head: LinearConfig::new(c2, config.num_classes).init(device),
        }
    }

    /// Class logits `[N, num_classes]` of images `[N, C, H, W]`.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        let x = self.pool.forward(relu(self.conv1.forward(images)));
        let x = self.global.forward(relu(self.conv2.forward(x)));
        let [n, c, _, _] = x.dims();
        self.head.forward(x.reshape([n, c]))
    }
}

/// A labelled image batch on the device.
#[derive(Clone, Debug)]
pub struct ImageInput {
    /// The images, `[N, C, H, W]`.
    pub images: Tensor<4>,
    /// Their classes, `[N]`.
    pub labels: Tensor<1, Int>,
}

impl TimedModel for ImageClassifier {
    type Batch = ImageBatch;
    type Input = ImageInput;

    fn to_input(batch: ImageBatch, device: &Device, dtype: FloatDType) -> Result<ImageInput> {
        let t = ImageTensors::from_batch_with(&batch, device, dtype, PixelScale::Unit)?;
        match t.labels {
            Some(labels) => Ok(ImageInput {
                images: t.images,
                labels,
            }),
            None => Err(Error::Shape(format!(
                "image batch (lane {}, index {}) has no labels: collate it with a label field",
                batch.lane, batch.index
            ))),
        }
    }

    fn batch_len(batch: &ImageBatch) -> usize {
        batch.batch_size
    }

    fn loss(&self, input: ImageInput) -> Tensor<1> {
        let logits = self.forward(input.images);
        let [n, _] = logits.dims();
        let picked = log_softmax(logits, 1).gather(1, input.labels.reshape([n, 1]));
        picked.reshape([n]).mean().neg()
    }
}

/// The member of a WebDataset sample holding its JPEG.
pub const IMAGE_FIELD: &str = "jpg";
/// The member of a WebDataset sample holding its class.
pub const LABEL_FIELD: &str = "cls";

/// Where [`ImageData`] reads its WebDataset shards, and writes the
/// synthetic ones into a folder that holds none.
pub trait ShardStore {
    /// The dataset in `dir`, or `None` when it holds no shards (or is not
    /// there).
    fn open(&self, name: &str, dir: &Path) -> zephon_core::Result<Option<Dataset>>;

    /// Writes `records` into `dir` as WebDataset tars of `shard_samples`
    /// samples each: a record's fields become members `KEY.FIELD`, the key
    /// its `__key__`.
    fn write_webdataset(
        &self,
        dir: &Path,
        shard_samples: usize,
        records: &mut dyn Iterator<Item = Record>,
    ) -> zephon_core::Result<()>;
}

/// A [`ShardStore`] that keeps what is written in memory, for tests and
/// for runs that need no files. The records it serves are the records
/// written, in shards of the asked size; reading WebDataset tars turns
/// numbers into text members, which the label reader takes too.
///
/// ```
/// use std::path::Path;
/// use zephon_burn::models::image_classifier::{InMemoryShards, ShardStore};
/// use zephon_core::Record;
/// let store = InMemoryShards::default();
/// assert!(store.open("d", Path::new("x")).unwrap().is_none());
/// store.write_webdataset(Path::new("x"), 2, &mut (0..5i64).map(|i| Record::new().with("cls", i))).unwrap();
/// let ds = store.open("d", Path::new("x")).unwrap().unwrap();
/// assert_eq!((ds.shards().len(), ds.num_samples()), (3, 5));
/// ```
#[derive(Debug, Default)]
pub struct InMemoryShards {
    folders: Mutex<HashMap<PathBuf, Vec<Vec<Record>>>>,
}

impl ShardStore for InMemoryShards {
    fn open(&self, name: &str, dir: &Path) -> zephon_core::Result<Option<Dataset>> {
        let folders = self
            .folders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match folders.get(dir) {
            Some(shards) => Ok(Some(Dataset::in_memory(name, shards.clone())?)),
            None => Ok(None),
        }
    }

    fn write_webdataset(
        &self,
        dir: &Path,
        shard_samples: usize,
        records: &mut dyn Iterator<Item = Record>,
    ) -> zephon_core::Result<()> {
        let mut shards: Vec<Vec<Record>> = Vec::new();
        for r in records {
            match shards.last_mut() {
                Some(s) if s.len() < shard_samples.max(1) => s.push(r),
                _ => shards.push(vec![r]),
            }
        }
        self.folders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(dir.to_path_buf(), shards);
        Ok(())
    }
}

/// Synthetic JPEGs written into [`ImageData::dir`] when it holds no shards.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateImages {
    /// Images written.
    pub num_samples: usize,
    /// Width of every image.
    pub width: u32,
    /// Height of every image.
    pub height: u32,
    /// Images per shard.
    #[serde(default = "default_shard_samples")]
    pub shard_samples: usize,
    /// JPEG quality, 1 to 100.
    #[serde(default = "default_quality")]
    pub quality: u8,
}

fn default_shard_samples() -> usize {
    256
}

fn default_quality() -> u8 {
    90
}

/// Images of WebDataset shards (`KEY.jpg`, `KEY.cls`) in a folder, decoded,
/// randomly cropped to `image_size` squares, mirrored with probability 1/2,
/// in labelled batches, shuffled per epoch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageData {
    /// The folder of shards. A relative path is taken from the working
    /// directory.
    pub dir: PathBuf,
    /// Side of the square crops the model sees.
    pub image_size: u32,
    /// Images per batch.
    pub batch_size: usize,
    /// Classes: every label lies in `0..num_classes` (a batch holding
    /// another is an error), and the synthetic images are dealt among them.
    pub num_classes: usize,
    /// Seed of the order, the crops and the flips.
    #[serde(default)]
    pub seed: u64,
    /// Images decoded at once (the `decode_image` parallelism).
    #[serde(default = "default_workers")]
    pub decode_workers: usize,
    /// Images cropped and flipped at once (the parallelism of
    /// `random_resized_crop` and `flip`).
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Write synthetic images into `dir` when it holds no shards; without
    /// it such a folder is an error.
    #[serde(default)]
    pub generate: Option<GenerateImages>,
}

fn default_workers() -> usize {
    2
}

/// The dataset name the shards are opened under (errors name it).
const DATASET: &str = "images";

impl ImageData {
    /// Checks the sizes against their documented ranges: `batch_size` in
    /// [`BATCH_SIZE`](zephon_core::settings::BATCH_SIZE), both worker
    /// counts in [`PARALLELISM`](zephon_core::settings::PARALLELISM),
    /// `image_size` and the generated sides from 1 to 8192,
    /// `num_classes` in [`MODEL_DIM`](crate::config::MODEL_DIM), the
    /// generated count in [`SAMPLES`](crate::config::SAMPLES).
    pub fn validate(&self) -> Result<()> {
        use crate::limits::{MODEL_DIM, SAMPLES, in_range};
        use zephon_core::settings::{BATCH_SIZE, PARALLELISM, Range};
        const SIDE: Range = Range::new(1, 8192, "an image is allocated whole");
        in_range("data.image_size", self.image_size as usize, SIDE)?;
        in_range("data.batch_size", self.batch_size, BATCH_SIZE)?;
        in_range("data.num_classes", self.num_classes, MODEL_DIM)?;
        in_range("data.decode_workers", self.decode_workers, PARALLELISM)?;
        in_range("data.workers", self.workers, PARALLELISM)?;
        if let Some(g) = &self.generate {
            in_range("data.generate.num_samples", g.num_samples, SAMPLES)?;
            in_range("data.generate.width", g.width as usize, SIDE)?;
            in_range("data.generate.height", g.height as usize, SIDE)?;
            in_range("data.generate.shard_samples", g.shard_samples, SAMPLES)?;
            if !(1..=100).contains(&g.quality) {
                return Err(Error::config(
                    "data.generate.quality",
                    format!("{} is outside 1 to 100", g.quality),
                ));
            }
        }
        Ok(())
    }

    /// The shards of [`dir`](Self::dir), written first from
    /// [`generate`](Self::generate) when the folder holds none.
    pub fn dataset(&self, store: &dyn ShardStore) -> Result<Dataset> {
        if let Some(ds) = store.open(DATASET, &self.dir)? {
            return Ok(ds);
        }
        let Some(g) = &self.generate else {
            return Err(Error::config(
                "data.dir",
                format!(
                    "{} holds no WebDataset shards; make some, or add `generate` to write synthetic ones there",
                    self.dir.display()
                ),
            ));
        };
        let (g, seed, classes) = (g.clone(), self.seed, self.num_classes as u64);
        let mut failed = None;
        let mut records = (0..g.num_samples as u64).map_while(|i| {
            let class = zephon_core::hash::key(&[seed, i, 1]) % classes;
            match synthetic_jpeg(&g, seed, i, class) {
                Ok(jpg) => Some(
                    Record::new()
                        .with("__key__", format!("{i:08}"))
                        .with(IMAGE_FIELD, Value::Bytes(jpg.into()))
                        .with(LABEL_FIELD, class as i64),
                ),
                Err(e) => {
                    failed = Some(e);
                    None
                }
            }
        });
        store.write_webdataset(&self.dir, g.shard_samples, &mut records)?;
        if let Some(e) = failed {
            return Err(e);
        }
        store.open(DATASET, &self.dir)?.ok_or_else(|| {
            Error::config(
                "data.dir",
                format!(
                    "{}: the shards written there cannot be read back",
                    self.dir.display()
                ),
            )
        })
    }

    /// The work source over `dataset`: shards and samples shuffled by
    /// `seed + epoch`.
    pub fn work_source(&self, dataset: Dataset, epoch: usize) -> zephon_core::Result<WorkSource> {
        WorkSource::builder()
            .dataset(dataset, 1.0)
            .seed(self.seed.wrapping_add(epoch as u64))
            .shuffle_shards(true)
            .shuffle_within_shard(true)
            .build()
    }

    /// The pipeline of epoch `epoch` on `ws`: fetch -> `decode_image`
    /// (RGB) -> `random_resized_crop` (area 8-100%, aspect 3/4 to 4/3) ->
    /// `flip` (probability 1/2) -> batch -> `collate_images` (N×C×H×W,
    /// labels from `cls`) -> prefetch. Crops and flips are seeded by
    /// `seed + epoch`: the augmentations' seeds do not hold the pass, so
    /// without it every epoch would see the same crops.
    pub fn pipeline_on(
        &self,
        ws: WorkSource,
        epoch: usize,
    ) -> zephon_core::Result<BlockingIter<ImageBatch>> {
        let s = self.image_size;
        let seed = self.seed.wrapping_add(epoch as u64);
        ws.stream()
            .fetch(self.decode_workers)
            .decode_image(DecodeConfig::new(IMAGE_FIELD), self.decode_workers)
            .random_resized_crop(RandomResizedCrop::new(s, s).seed(seed), self.workers)
            .flip(Flip::new(0.5, seed), self.workers)
            .batch(self.batch_size)
            .collate_images(CollateConfig::new(Layout::Chw).label(LABEL_FIELD))
            .prefetch_batches(4)
            .into_blocking_iter(Runner::threads())
    }

    /// A harness batch source over the shards in `dir` (written first
    /// when [`generate`](Self::generate) asks), one pass per epoch, every
    /// batch's labels checked against `num_classes`.
    pub fn source(&self, store: &dyn ShardStore) -> Result<ImageSource> {
        self.validate()?;
        let dataset = self.dataset(store)?;
        let batches = dataset.num_samples().div_ceil(self.batch_size as u64) as usize;
        let data = self.clone();
        let build: BuildImages = Box::new(move |epoch| {
            data.pipeline_on(data.work_source(dataset.clone(), epoch)?, epoch)
        });
        Ok(ImageSource {
            inner: PipelineSource::new(build).with_batches_per_epoch(batches),
            num_classes: self.num_classes,
        })
    }
}

type BuildImages = Box<dyn FnMut(usize) -> zephon_core::Result<BlockingIter<ImageBatch>>>;

/// The batch source of [`ImageData::source`]: its pipeline, every batch's
/// labels checked against the classes before the model sees them (a label
/// past the head would index outside the logits).
pub struct ImageSource {
    inner: PipelineSource<BuildImages>,
    num_classes: usize,
}

impl std::fmt::Debug for ImageSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageSource")
            .field("inner", &self.inner)
            .field("num_classes", &self.num_classes)
            .finish()
    }
}

impl BatchSource<ImageBatch> for ImageSource {
    fn epoch(&mut self, epoch: usize) -> Result<Box<dyn Iterator<Item = Result<ImageBatch>> + '_>> {
        let classes = self.num_classes;
        let it = self.inner.epoch(epoch)?;
        Ok(Box::new(
            it.map(move |b| b.and_then(|b| check_labels(b, classes))),
        ))
    }

    fn batches_per_epoch(&self) -> Option<usize> {
        self.inner.batches_per_epoch()
    }

    fn set_tracking(&mut self, tracking: Tracking) {
        BatchSource::<ImageBatch>::set_tracking(&mut self.inner, tracking);
    }

    fn observers(&self) -> &[Observer] {
        BatchSource::<ImageBatch>::observers(&self.inner)
    }
}

fn check_labels(batch: ImageBatch, classes: usize) -> Result<ImageBatch> {
    let bad = batch
        .labels
        .iter()
        .position(|&l| l < 0 || l as u64 >= classes as u64);
    match bad {
        None => Ok(batch),
        Some(row) => {
            let key = batch
                .records
                .get(row)
                .and_then(|r| r.get("__key__"))
                .and_then(|v| v.as_text())
                .map(|k| format!(" (key `{k}`)"))
                .unwrap_or_default();
            Err(Error::config(
                "data.num_classes",
                format!(
                    "row {row}{key} of batch (lane {}, index {}) is labelled {}, outside 0..{classes}",
                    batch.lane, batch.index, batch.labels[row]
                ),
            ))
        }
    }
}

/// A JPEG of `g`'s size for sample `i` of class `class`: a colour of the
/// class over a gradient, with block noise so that it compresses as a
/// photograph does rather than to nothing.
fn synthetic_jpeg(g: &GenerateImages, seed: u64, i: u64, class: u64) -> Result<Vec<u8>> {
    use image::ImageEncoder;
    let (w, h) = (g.width as usize, g.height as usize);
    let base = zephon_core::hash::key(&[seed, class, 2]);
    let tint = [
        (base & 0xff) as u32,
        ((base >> 8) & 0xff) as u32,
        ((base >> 16) & 0xff) as u32,
    ];
    let mut pixels = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let block = zephon_core::hash::key(&[seed, i, (y / 8 * w + x / 8) as u64]);
            let ramp = ((x * 96) / w.max(1) + (y * 64) / h.max(1)) as u32;
            for (k, t) in tint.iter().enumerate() {
                let noise = ((block >> (8 * k)) & 0x3f) as u32;
                pixels.push(((t / 2 + ramp + noise).min(255)) as u8);
            }
        }
    }
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, g.quality)
        .write_image(&pixels, g.width, g.height, image::ExtendedColorType::Rgb8)
        .map_err(|e| Error::Shape(format!("encoding synthetic image {i}: {e}")))?;
    Ok(out)
}
