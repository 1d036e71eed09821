//! `collate_images`: batches of image samples to one contiguous array
//! ([`ImageBatch`]), plus labels and the records' other fields.

use crate::error::{MediaError, PtrDisplay, Result};
use crate::image::{ImageSample, Layout, Pixels};
use futures::Stream;
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use zephon_core::checkpoint::Delivered;
use zephon_core::checkpoint::cut::LaneCut;
use zephon_core::context::Probe;
use zephon_core::obs::{Explain, StageDescription};
use zephon_core::{Batch, LaneId, Laned, Record, Value};

/// One batch of images as one array: `batch_size` images of `height ×
/// width × channels`, laid out N×H×W×C or N×C×H×W ([`Layout`]), 8-bit or
/// `f32` as the images were; the labels, when a label field was named; the
/// records with their other fields (captions, keys, lineage).
#[derive(Clone, Debug, PartialEq)]
pub struct ImageBatch {
    /// The lane of the batch.
    pub lane: LaneId,
    /// The batch's number within its lane.
    pub index: u64,
    /// Images in the batch.
    pub batch_size: usize,
    /// Height of every image.
    pub height: u32,
    /// Width of every image.
    pub width: u32,
    /// Channels of every image.
    pub channels: u8,
    /// How `pixels` is laid out.
    pub layout: Layout,
    /// `batch_size * height * width * channels` values.
    pub pixels: Pixels,
    /// One label per image, when [`CollateConfig::label`] named a field;
    /// empty otherwise.
    pub labels: Vec<i64>,
    /// The source records (without the image bytes and the label field).
    pub records: Vec<Record>,
    /// In a checkpointed pipeline, the lane's cut right after this batch.
    pub cut: Option<Arc<LaneCut>>,
}

impl ImageBatch {
    /// The array's shape, in its layout's order: `[N, H, W, C]` or
    /// `[N, C, H, W]`.
    pub fn shape(&self) -> [usize; 4] {
        let (n, h, w, c) = (
            self.batch_size,
            self.height as usize,
            self.width as usize,
            self.channels as usize,
        );
        match self.layout {
            Layout::Hwc => [n, h, w, c],
            Layout::Chw => [n, c, h, w],
        }
    }

    /// A stable digest of the whole batch (pixels, labels, records), for
    /// checksums of runs.
    pub fn digest(&self) -> u64 {
        use zephon_core::hash::{combine, key};
        let mut h = key(&[
            self.lane as u64,
            self.index,
            self.batch_size as u64,
            self.height as u64,
            self.width as u64,
            self.channels as u64,
            self.layout as u64,
            self.pixels.digest(),
        ]);
        for l in &self.labels {
            h = combine(h, *l as u64);
        }
        for r in &self.records {
            h = combine(h, r.digest());
        }
        h
    }
}

/// How [`CollateImages`] builds batches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollateConfig {
    layout: Layout,
    label: Option<String>,
}

impl CollateConfig {
    /// Batches in `layout`, without labels.
    pub fn new(layout: Layout) -> Self {
        CollateConfig {
            layout,
            label: None,
        }
    }

    /// Reads each record's label from `field`: an integer, or text or
    /// bytes holding one (WebDataset's `.cls` members). The field is taken
    /// out of the records.
    pub fn label(mut self, field: impl Into<String>) -> Self {
        self.label = Some(field.into());
        self
    }

    /// Collates one batch; an error names the sample that does not fit
    /// (another size or channel count, a missing or unreadable label).
    ///
    /// ```
    /// use zephon_core::{Batch, Record};
    /// use zephon_media::{CollateConfig, Image, ImageSample, Layout};
    /// let s = |v: u8| ImageSample { image: Image::new_u8(2, 1, 2, vec![v, v + 1, v + 2, v + 3]).unwrap(),
    ///     record: Record::new().with("cls", v as i64) };
    /// let batch = Batch { lane: 0, index: 0, items: vec![s(0), s(10)], cut: None };
    /// let b = CollateConfig::new(Layout::Chw).label("cls").collate(batch)?;
    /// assert_eq!(b.shape(), [2, 2, 1, 2]);
    /// assert_eq!(b.pixels.as_u8().unwrap(), &[0, 2, 1, 3, 10, 12, 11, 13]);
    /// assert_eq!(b.labels, [0, 10]);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn collate(&self, batch: Batch<ImageSample>) -> Result<ImageBatch> {
        let op = "collate_images";
        let Batch {
            lane,
            index,
            items,
            cut,
        } = batch;
        let (width, height, channels, is_f32) = match items.first() {
            Some(s) => (
                s.image.width,
                s.image.height,
                s.image.channels,
                matches!(s.image.pixels, Pixels::F32(_)),
            ),
            None => (0, 0, 0, false),
        };
        let per = width as usize * height as usize * channels as usize;
        let n = items.len();
        let mut u8s = Vec::new();
        let mut f32s = Vec::new();
        if is_f32 {
            f32s.reserve_exact(per * n);
        } else {
            u8s.reserve_exact(per * n);
        }
        let mut labels = Vec::with_capacity(if self.label.is_some() { n } else { 0 });
        let mut records = Vec::with_capacity(n);
        for (row, s) in items.into_iter().enumerate() {
            let ptr = s.ptr();
            let img = &s.image;
            if (img.width, img.height, img.channels) != (width, height, channels)
                || matches!(img.pixels, Pixels::F32(_)) != is_f32
            {
                return Err(MediaError::Unsupported {
                    op,
                    ptr,
                    message: format!(
                        "row {row} of batch (lane {lane}, index {index}) is {}x{}x{} {}, the batch {width}x{height}x{channels} {}: resize or crop before batching",
                        img.width,
                        img.height,
                        img.channels,
                        kind(&img.pixels),
                        if is_f32 { "f32" } else { "u8" }
                    ),
                }
                .into());
            }
            match (&img.pixels, self.layout) {
                (Pixels::U8(p), Layout::Hwc) => u8s.extend_from_slice(p),
                (Pixels::F32(p), Layout::Hwc) => f32s.extend_from_slice(p),
                (Pixels::U8(p), Layout::Chw) => planes(p, channels as usize, &mut u8s),
                (Pixels::F32(p), Layout::Chw) => planes(p, channels as usize, &mut f32s),
            }
            let mut record = s.record;
            if let Some(field) = &self.label {
                labels.push(read_label(op, &mut record, field, ptr)?);
            }
            records.push(record);
        }
        Ok(ImageBatch {
            lane,
            index,
            batch_size: n,
            height,
            width,
            channels,
            layout: self.layout,
            pixels: if is_f32 {
                Pixels::F32(f32s)
            } else {
                Pixels::U8(u8s)
            },
            labels,
            records,
            cut,
        })
    }
}

fn kind(p: &Pixels) -> &'static str {
    match p {
        Pixels::U8(_) => "u8",
        Pixels::F32(_) => "f32",
    }
}

/// HWC values appended as `c` planes (CHW).
fn planes<T: Copy>(hwc: &[T], c: usize, out: &mut Vec<T>) {
    if c == 1 {
        out.extend_from_slice(hwc);
        return;
    }
    for k in 0..c {
        out.extend(hwc.iter().skip(k).step_by(c).copied());
    }
}

/// The integer label in `field`, taken out of `record`; an error naming
/// `op` and the sample when it is missing or not an integer.
pub(crate) fn read_label(
    op: &'static str,
    record: &mut Record,
    field: &str,
    ptr: PtrDisplay,
) -> Result<i64> {
    let v = record.take(field);
    let parsed = match &v {
        Some(Value::Int(i)) => Some(*i),
        Some(Value::Bytes(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|t| t.trim().parse().ok()),
        Some(other) => other.as_text().and_then(|t| t.trim().parse().ok()),
        None => None,
    };
    parsed.ok_or_else(|| {
        MediaError::MissingField {
            op,
            field: field.to_owned(),
            expected: "integer label",
            found: v
                .map(|v| format!(" (found {})", v.kind()))
                .unwrap_or_default(),
            ptr,
            key: crate::error::KeyDisplay::of(record),
        }
        .into()
    })
}

/// Collates each [`Batch`] of [`ImageSample`]s into an [`ImageBatch`]:
/// one contiguous array, labels, records; lane, index and checkpoint cut
/// carried over. Runs in the pipeline's task (a copy per value).
///
/// Created by [`MediaPipelineExt::collate_images`](crate::MediaPipelineExt::collate_images).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner};
/// use zephon_media::{CollateConfig, Image, ImageSample, Layout, MediaPipelineExt};
/// let samples = (0..5u8).map(|i| Ok(ImageSample {
///     image: Image::new_u8(2, 2, 3, vec![i; 12]).unwrap(), record: Record::new().with("label", i as i64) }));
/// let batches: Vec<_> = futures::stream::iter(samples).batch(2)
///     .collate_images(CollateConfig::new(Layout::Hwc).label("label"))
///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
/// assert_eq!(batches.iter().map(|b| b.shape()).collect::<Vec<_>>(), [[2, 2, 2, 3], [2, 2, 2, 3], [1, 2, 2, 3]]);
/// assert_eq!(batches[2].labels, [4]);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct CollateImages<S> {
    #[pin]
    inner: S,
    config: CollateConfig,
    probe: Probe,
}

impl<S> CollateImages<S> {
    /// Wraps `inner` with `config`.
    pub fn new(inner: S, config: CollateConfig) -> Self {
        CollateImages {
            inner,
            config,
            probe: Probe::default(),
        }
    }

    /// The stream this adapter reads from.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The stream this adapter reads from, mutably. Taking items from it
    /// directly bypasses this adapter.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The stream this adapter reads from.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for CollateImages<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollateImages")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S> Stream for CollateImages<S>
where
    S: Stream<Item = Result<Batch<ImageSample>>>,
{
    type Item = Result<ImageBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        this.probe.attach("collate_images", 1, None);
        match this.inner.poll_next(cx) {
            Poll::Ready(Some(r)) => {
                this.probe.input();
                let start = this.probe.sample();
                let out = r.and_then(|b| this.config.collate(b));
                this.probe.sampled(start);
                this.probe.output();
                Poll::Ready(Some(out))
            }
            Poll::Ready(None) => {
                this.probe.finish();
                Poll::Ready(None)
            }
            Poll::Pending => {
                this.probe.input_pending();
                Poll::Pending
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<S: Explain> Explain for CollateImages<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(
            StageDescription::new(
                "collate_images",
                1,
                None,
                format!(
                    "{:?}{}",
                    self.config.layout,
                    match &self.config.label {
                        Some(l) => format!(", labels from `{l}`"),
                        None => String::new(),
                    }
                ),
            )
            .with_data(&self.config),
        );
    }
}

/// A batch knows its lane, so batches of several lanes can be split and
/// merged as text batches are (a multi-lane pipeline collates after
/// `lane_mux`).
impl Laned for ImageBatch {
    fn lane(&self) -> LaneId {
        self.lane
    }
}

/// What a checkpointed loop counts of a batch: its images, its place in its
/// lane and the lane's cut after it, so an image pipeline resumes exactly.
impl Delivered for ImageBatch {
    fn delivered_items(&self) -> u64 {
        self.batch_size as u64
    }

    fn cut(&self) -> Option<&Arc<LaneCut>> {
        self.cut.as_ref()
    }

    fn lane_index(&self) -> Option<u64> {
        Some(self.index)
    }
}
