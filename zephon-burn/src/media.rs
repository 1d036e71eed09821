//! Image and audio batches ([`zephon_media`]) to Burn tensors.
//!
//! As for text ([`TrainingTensors`](crate::TrainingTensors)), each tensor is
//! built from one host buffer already in the element type the device wants,
//! so a batch is copied once. Images always arrive as N×C×H×W, the layout
//! Burn's convolutions take, whatever layout the batch was collated in: an
//! N×H×W×C batch is transposed while it is copied, not in a second pass.
//!
//! These are plain functions of a batch and a device, so they serve as the
//! `convert` of a [`ZephonDataLoader`](crate::ZephonDataLoader) as they
//! are; the loader can count and cut [`ImageBatch`], [`AudioBatch`] and
//! [`MelBatch`] (they implement [`HostBatch`](crate::HostBatch)).
//!
//! ```
//! use burn::data::dataloader::DataLoader;
//! use burn::tensor::Device;
//! use zephon_burn::ZephonDataLoader;
//! use zephon_burn::media::ImageTensors;
//! use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
//! use zephon_media::{CollateConfig, Image, ImageBatch, ImageSample, Layout, MediaPipelineExt};
//!
//! // Ten 4x2 RGB images with labels; a real pipeline decodes them with `decode_image`.
//! let recs: Vec<Record> = (0..10).map(|i| Record::new().with("cls", i % 3)).collect();
//! let ws = WorkSource::builder().dataset(Dataset::in_memory("d", vec![recs])?, 1.0).seed(1).build()?;
//! // The record goes along: its lineage names the sample and its lane.
//! let to_image = |r: Record| Ok(ImageSample { image: Image::new_u8(4, 2, 3, vec![255; 24])?, record: r });
//! let loader = ZephonDataLoader::new(
//!     ws,
//!     Device::flex(),
//!     move |ws: WorkSource| ws.stream().fetch(1).map_par(to_image, 1).batch(4)
//!         .collate_images(CollateConfig::new(Layout::Hwc).label("cls"))
//!         .into_blocking_iter(Runner::Inline),
//!     |b: ImageBatch, device: &Device| ImageTensors::from_batch(&b, device),
//! )?;
//! assert_eq!(loader.num_items(), 10);
//! let shapes: Vec<[usize; 4]> = loader.iter().map(|t| t.unwrap().images.dims()).collect();
//! assert_eq!(shapes, [[4, 3, 2, 4], [4, 3, 2, 4], [2, 3, 2, 4]]);
//! let first = loader.iter().next().unwrap().unwrap();
//! // 8-bit pixels scaled to [0, 1]; labels as the device's ints.
//! assert_eq!(first.images.into_data().try_into_vec_as::<f32>().unwrap()[0], 1.0);
//! assert_eq!(first.labels.unwrap().dims(), [4]);
//! # Ok::<(), zephon_burn::Error>(())
//! ```

use crate::convert::{float_tensor, int_tensor};
use crate::error::{Error, Result};
use burn::tensor::{Device, FloatDType, Int, Tensor};
use zephon_media::{AudioBatch, ImageBatch, Layout, MelBatch, Pixels};

/// What becomes of 8-bit pixels on their way to a float tensor. `f32`
/// pixels (after [`normalize`](zephon_media::MediaPipelineExt::normalize))
/// are taken as they are under either choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PixelScale {
    /// Divided by 255, to [0, 1] (torchvision's `ToTensor`).
    #[default]
    Unit,
    /// As they are, 0 to 255 (for a model that normalizes on the device).
    Raw,
}

/// An [`ImageBatch`] on a device.
#[derive(Clone, Debug)]
pub struct ImageTensors {
    /// The images, `[N, C, H, W]`.
    pub images: Tensor<4>,
    /// One label per image, `[N]`, when the batch was collated with labels.
    pub labels: Option<Tensor<1, Int>>,
}

impl ImageTensors {
    /// Moves `batch` to `device` as `f32`, 8-bit pixels scaled to [0, 1]
    /// ([`PixelScale::Unit`]).
    pub fn from_batch(batch: &ImageBatch, device: &Device) -> Result<Self> {
        Self::from_batch_with(batch, device, FloatDType::F32, PixelScale::Unit)
    }

    /// Moves `batch` to `device`, the images in `dtype`, N×C×H×W whatever
    /// the batch's layout, 8-bit pixels treated as `scale` says. A batch
    /// whose array or labels do not match its declared shape is an error.
    ///
    /// ```
    /// use burn::tensor::{Device, FloatDType};
    /// use zephon_burn::media::{ImageTensors, PixelScale};
    /// use zephon_core::{Batch, Record};
    /// use zephon_media::{CollateConfig, Image, ImageSample, Layout};
    /// // One 2x1 image of two channels, HWC: pixel (0,0) = [1, 2], pixel (1,0) = [3, 4].
    /// let s = ImageSample { image: Image::new_u8(2, 1, 2, vec![1, 2, 3, 4]).unwrap(), record: Record::new() };
    /// let hwc = CollateConfig::new(Layout::Hwc).collate(Batch { lane: 0, index: 0, items: vec![s], cut: None })?;
    /// let t = ImageTensors::from_batch_with(&hwc, &Device::flex(), FloatDType::F32, PixelScale::Raw)?;
    /// assert_eq!(t.images.dims(), [1, 2, 1, 2]);
    /// // Channel planes: the first channel of both pixels, then the second.
    /// assert_eq!(t.images.into_data().try_into_vec_as::<f32>().unwrap(), [1.0, 3.0, 2.0, 4.0]);
    /// assert!(t.labels.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_batch_with(
        batch: &ImageBatch,
        device: &Device,
        dtype: FloatDType,
        scale: PixelScale,
    ) -> Result<Self> {
        let (n, h, w, c) = (
            batch.batch_size,
            batch.height as usize,
            batch.width as usize,
            batch.channels as usize,
        );
        let want = n * h * w * c;
        if batch.pixels.len() != want {
            return Err(Error::Shape(format!(
                "image batch (lane {}, index {}) holds {} pixel values, its shape {:?} needs {want}",
                batch.lane,
                batch.index,
                batch.pixels.len(),
                batch.shape()
            )));
        }
        let labels = labels(&batch.labels, n, "image", batch.lane, batch.index, device)?;
        let shape = [n, c, h, w];
        let factor = match scale {
            PixelScale::Unit => 1.0 / 255.0,
            PixelScale::Raw => 1.0,
        };
        let images = match (&batch.pixels, batch.layout) {
            (Pixels::U8(p), Layout::Chw) => {
                float_tensor(p.iter().map(|&v| v as f32 * factor), shape, device, dtype)
            }
            (Pixels::F32(p), Layout::Chw) => float_tensor(p.iter().copied(), shape, device, dtype),
            (Pixels::U8(p), Layout::Hwc) => float_tensor(
                chw_order(n, h, w, c).map(|i| p[i] as f32 * factor),
                shape,
                device,
                dtype,
            ),
            (Pixels::F32(p), Layout::Hwc) => {
                float_tensor(chw_order(n, h, w, c).map(|i| p[i]), shape, device, dtype)
            }
        };
        Ok(ImageTensors { images, labels })
    }
}

/// The indices of an N×H×W×C array in N×C×H×W order.
fn chw_order(n: usize, h: usize, w: usize, c: usize) -> impl Iterator<Item = usize> {
    let plane = h * w;
    (0..n).flat_map(move |img| {
        (0..c).flat_map(move |ch| (0..plane).map(move |px| (img * plane + px) * c + ch))
    })
}

/// An [`AudioBatch`] on a device.
#[derive(Clone, Debug)]
pub struct AudioTensors {
    /// The sounds, `[N, C, T]`, zero beyond each sound's length.
    pub samples: Tensor<3>,
    /// Each sound's frames of signal, `[N]` (what a model masks beyond).
    pub lengths: Tensor<1, Int>,
    /// One label per sound, `[N]`, when the batch was collated with labels.
    pub labels: Option<Tensor<1, Int>>,
}

impl AudioTensors {
    /// Moves `batch` to `device`, the samples in `dtype`. A batch whose
    /// array, lengths or labels do not match its declared shape is an error.
    ///
    /// ```
    /// use burn::tensor::{Device, FloatDType};
    /// use zephon_burn::media::AudioTensors;
    /// use zephon_media::AudioBatch;
    /// let b = AudioBatch { lane: 0, index: 0, batch_size: 2, sample_rate: 16_000, channels: 1, frames: 3,
    ///     samples: vec![0.1, 0.2, 0.3, 0.4, 0.0, 0.0], lengths: vec![3, 1], labels: vec![7, 8],
    ///     records: Vec::new(), cut: None };
    /// let t = AudioTensors::from_batch(&b, &Device::flex(), FloatDType::F32)?;
    /// assert_eq!(t.samples.dims(), [2, 1, 3]);
    /// assert_eq!(t.lengths.into_data().try_into_vec_as::<i64>().unwrap(), [3, 1]);
    /// assert_eq!(t.labels.unwrap().into_data().try_into_vec_as::<i64>().unwrap(), [7, 8]);
    /// # Ok::<(), zephon_burn::Error>(())
    /// ```
    pub fn from_batch(batch: &AudioBatch, device: &Device, dtype: FloatDType) -> Result<Self> {
        let shape = batch.shape();
        let (lane, index) = (batch.lane, batch.index);
        check_len(
            "audio",
            "samples",
            batch.samples.len(),
            shape.iter().product(),
            lane,
            index,
        )?;
        let n = batch.batch_size;
        Ok(AudioTensors {
            samples: float_tensor(batch.samples.iter().copied(), shape, device, dtype),
            lengths: lengths(&batch.lengths, n, "audio", lane, index, device)?,
            labels: labels(&batch.labels, n, "audio", lane, index, device)?,
        })
    }
}

/// A [`MelBatch`] on a device.
#[derive(Clone, Debug)]
pub struct MelTensors {
    /// The log-mel spectrograms, `[N, C, M, F]` (mel bands, then frames).
    pub values: Tensor<4>,
    /// Each sound's frames computed from signal, `[N]`.
    pub lengths: Tensor<1, Int>,
    /// One label per sound, `[N]`, when the batch has labels.
    pub labels: Option<Tensor<1, Int>>,
}

impl MelTensors {
    /// Moves `batch` to `device`, the values in `dtype`. A batch whose
    /// array, lengths or labels do not match its declared shape is an error.
    ///
    /// ```
    /// use burn::tensor::{Device, FloatDType};
    /// use zephon_burn::media::MelTensors;
    /// use zephon_media::MelBatch;
    /// let b = MelBatch { lane: 0, index: 0, batch_size: 1, channels: 1, n_mels: 2, frames: 2,
    ///     values: vec![0.0; 4], lengths: vec![2], labels: Vec::new(), records: Vec::new(), cut: None };
    /// let t = MelTensors::from_batch(&b, &Device::flex(), FloatDType::F32)?;
    /// assert_eq!(t.values.dims(), [1, 1, 2, 2]);
    /// assert!(t.labels.is_none());
    /// // A batch that lies about its shape is refused.
    /// let bad = MelBatch { values: vec![0.0; 3], ..b };
    /// assert!(MelTensors::from_batch(&bad, &Device::flex(), FloatDType::F32).is_err());
    /// # Ok::<(), zephon_burn::Error>(())
    /// ```
    pub fn from_batch(batch: &MelBatch, device: &Device, dtype: FloatDType) -> Result<Self> {
        let shape = batch.shape();
        let (lane, index) = (batch.lane, batch.index);
        check_len(
            "mel",
            "values",
            batch.values.len(),
            shape.iter().product(),
            lane,
            index,
        )?;
        let n = batch.batch_size;
        Ok(MelTensors {
            values: float_tensor(batch.values.iter().copied(), shape, device, dtype),
            lengths: lengths(&batch.lengths, n, "mel", lane, index, device)?,
            labels: labels(&batch.labels, n, "mel", lane, index, device)?,
        })
    }
}

fn check_len(
    kind: &str,
    field: &str,
    len: usize,
    want: usize,
    lane: u32,
    index: u64,
) -> Result<()> {
    if len == want {
        Ok(())
    } else {
        Err(Error::Shape(format!(
            "{kind} batch (lane {lane}, index {index}): `{field}` has {len} values, its shape needs {want}"
        )))
    }
}

/// The labels as an int tensor; none for a batch collated without labels.
fn labels(
    values: &[i64],
    n: usize,
    kind: &str,
    lane: u32,
    index: u64,
    device: &Device,
) -> Result<Option<Tensor<1, Int>>> {
    if values.is_empty() && n > 0 {
        return Ok(None);
    }
    check_len(kind, "labels", values.len(), n, lane, index)?;
    Ok(Some(int_tensor(values.iter().copied(), [n], device)))
}

fn lengths(
    values: &[usize],
    n: usize,
    kind: &str,
    lane: u32,
    index: u64,
    device: &Device,
) -> Result<Tensor<1, Int>> {
    check_len(kind, "lengths", values.len(), n, lane, index)?;
    Ok(int_tensor(values.iter().map(|&v| v as i64), [n], device))
}
