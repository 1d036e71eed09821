//! Burn's [`DataLoader`] over a Zephon pipeline, and a plain iterator of
//! tensor batches for custom training loops.

use crate::error::Result;
use burn::data::dataloader::{DataLoader, DataLoaderIterator, Progress};
use burn::data::dataset::DatasetError;
use burn::tensor::Device;
use std::ops::Range;
use std::sync::Arc;
use zephon_core::{Batch, BlockingIter};
use zephon_ops::TrainingBatch;

/// A host-side batch whose items can be counted and cut, so a loader can
/// report exact progress and serve a slice of its items.
pub trait HostBatch: Sized {
    /// Items (samples, rows) in the batch.
    fn num_items(&self) -> usize;
    /// Keeps the items in `range` (relative to this batch).
    fn keep(self, range: Range<usize>) -> Self;
}

impl<T> HostBatch for Batch<T> {
    fn num_items(&self) -> usize {
        self.items.len()
    }
    fn keep(mut self, range: Range<usize>) -> Self {
        self.items.truncate(range.end);
        self.items.drain(..range.start);
        self
    }
}

impl HostBatch for TrainingBatch {
    fn num_items(&self) -> usize {
        self.batch_size
    }
    fn keep(self, range: Range<usize>) -> Self {
        if range == (0..self.batch_size) {
            return self;
        }
        let l = self.seq_len;
        let ids: Vec<i64> = (range.start * l..range.end * l)
            .map(|i| self.input_ids.get(i).unwrap_or(0))
            .collect();
        let (lo, hi) = ((range.start * l) as i32, (range.end * l) as i32);
        // Segment boundaries inside the kept rows, shifted to start at 0; rows
        // always start a segment, so both ends are boundaries.
        let mut cu: Vec<i32> = self
            .cu_seqlens
            .iter()
            .filter(|&&b| b >= lo && b <= hi)
            .map(|b| b - lo)
            .collect();
        if cu.first() != Some(&0) {
            cu.insert(0, 0);
        }
        if cu.last() != Some(&(hi - lo)) {
            cu.push(hi - lo);
        }
        let max_seqlen = cu
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .max()
            .unwrap_or(0);
        let cut = |from: usize, to: usize| from * l..to * l;
        let r = cut(range.start, range.end);
        TrainingBatch {
            // A slice of a lane-batch is not a lane boundary.
            cut: None,
            lane: self.lane,
            index: self.index,
            batch_size: range.len(),
            seq_len: l,
            input_ids: match self.input_ids {
                zephon_ops::TokenIds::U32(_) => {
                    zephon_ops::TokenIds::U32(ids.iter().map(|&x| x as u32).collect())
                }
                zephon_ops::TokenIds::I64(_) => zephon_ops::TokenIds::I64(ids),
            },
            labels: self.labels[r.clone()].to_vec(),
            loss_mask: self.loss_mask[r.clone()].to_vec(),
            position_ids: self.position_ids[r.clone()].to_vec(),
            segment_ids: self.segment_ids[r.clone()].to_vec(),
            attention_mask: self.attention_mask[r].to_vec(),
            cu_seqlens: cu,
            max_seqlen,
        }
    }
}

type Build<H> = Arc<dyn Fn() -> zephon_core::Result<BlockingIter<H>> + Send + Sync>;
type Convert<H, O> = Arc<dyn Fn(H, &Device) -> Result<O> + Send + Sync>;

/// Burn's [`DataLoader`] over a Zephon pipeline: each `iter()` builds the
/// pipeline afresh (same seed, same batches) and converts every host batch
/// to tensors on the loader's device.
///
/// `num_items` must be the exact number of items the pipeline yields (for a
/// [`WorkSource`](zephon_core::WorkSource) without drops: its `len()`);
/// Burn uses it for progress and to split the loader.
///
/// ```
/// use burn::data::dataloader::DataLoader;
/// use burn::tensor::{Device, FloatDType};
/// use zephon_burn::convert::{f32_bytes, float_rows};
/// use zephon_burn::ZephonDataLoader;
/// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
///
/// let recs: Vec<Record> = (0..10).map(|i| Record::new().with("x", f32_bytes(&[i as f32, 1.0]))).collect();
/// let ws = WorkSource::builder().dataset(Dataset::in_memory("d", vec![recs])?, 1.0).seed(1).build()?;
/// let loader = ZephonDataLoader::new(
///     10,
///     Device::flex(),
///     move || ws.stream().fetch(2).batch(4).into_blocking_iter(Runner::Inline),
///     |b: zephon_core::RecordBatch, device: &Device| float_rows(&b.items, "x", 2, device, FloatDType::F32),
/// );
/// let shapes: Vec<[usize; 2]> = loader.iter().map(|t| t.unwrap().dims()).collect();
/// assert_eq!(shapes, vec![[4, 2], [4, 2], [2, 2]]);
/// assert_eq!(loader.slice(3, 9).iter().map(|t| t.unwrap().dims()[0]).sum::<usize>(), 6);
/// # Ok::<(), zephon_core::Error>(())
/// ```
pub struct ZephonDataLoader<H, O> {
    build: Build<H>,
    convert: Convert<H, O>,
    range: Range<usize>,
    device: Device,
}

impl<H, O> Clone for ZephonDataLoader<H, O> {
    fn clone(&self) -> Self {
        ZephonDataLoader {
            build: self.build.clone(),
            convert: self.convert.clone(),
            range: self.range.clone(),
            device: self.device.clone(),
        }
    }
}

impl<H, O> std::fmt::Debug for ZephonDataLoader<H, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZephonDataLoader")
            .field("range", &self.range)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl<H: HostBatch + 'static, O: 'static> ZephonDataLoader<H, O> {
    /// A loader of `num_items` items: `build` makes the pipeline, `convert`
    /// turns each of its batches into tensors on the device.
    pub fn new(
        num_items: usize,
        device: Device,
        build: impl Fn() -> zephon_core::Result<BlockingIter<H>> + Send + Sync + 'static,
        convert: impl Fn(H, &Device) -> Result<O> + Send + Sync + 'static,
    ) -> Self {
        ZephonDataLoader {
            build: Arc::new(build),
            convert: Arc::new(convert),
            range: 0..num_items,
            device,
        }
    }

    /// The device batches are put on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A plain iterator over the tensor batches, for custom loops. The
    /// pipeline is built here; an error building it is returned at once.
    pub fn batches(&self) -> Result<TensorBatches<H, O>> {
        Ok(TensorBatches {
            inner: (self.build)()?,
            convert: self.convert.clone(),
            device: self.device.clone(),
            range: self.range.clone(),
            seen: 0,
            processed: 0,
            done: false,
        })
    }
}

/// The iterator of a [`ZephonDataLoader`]: host batches from the pipeline,
/// cut to the loader's item range, converted on the device.
pub struct TensorBatches<H, O> {
    inner: BlockingIter<H>,
    convert: Convert<H, O>,
    device: Device,
    range: Range<usize>,
    seen: usize,
    processed: usize,
    done: bool,
}

impl<H, O> std::fmt::Debug for TensorBatches<H, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorBatches")
            .field("range", &self.range)
            .field("processed", &self.processed)
            .finish_non_exhaustive()
    }
}

impl<H: HostBatch, O> Iterator for TensorBatches<H, O> {
    type Item = Result<O>;

    fn next(&mut self) -> Option<Result<O>> {
        while !self.done {
            let batch = match self.inner.next() {
                None => break,
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e.into()));
                }
                Some(Ok(b)) => b,
            };
            let (start, n) = (self.seen, batch.num_items());
            self.seen += n;
            if self.seen <= self.range.start {
                continue;
            }
            if start >= self.range.end {
                break;
            }
            let lo = self.range.start.saturating_sub(start);
            let hi = (self.range.end - start).min(n);
            let batch = if lo == 0 && hi == n {
                batch
            } else {
                batch.keep(lo..hi)
            };
            self.processed += hi - lo;
            return Some((self.convert)(batch, &self.device));
        }
        self.done = true;
        None
    }
}

impl<H: HostBatch, O> DataLoaderIterator<O> for BurnIter<H, O> {
    fn progress(&self) -> Progress {
        Progress::new(self.0.processed, self.0.range.len(), Some("items".into()))
    }
}

/// [`TensorBatches`] with Burn's error type, as [`DataLoader::iter`] yields.
struct BurnIter<H, O>(TensorBatches<H, O>);

impl<H: HostBatch, O> Iterator for BurnIter<H, O> {
    type Item = std::result::Result<O, DatasetError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|r| r.map_err(DatasetError::new))
    }
}

impl<H, O> DataLoader<O> for ZephonDataLoader<H, O>
where
    H: HostBatch + 'static,
    O: 'static,
{
    fn iter<'a>(&'a self) -> Box<dyn DataLoaderIterator<O> + 'a> {
        match self.batches() {
            Ok(it) => Box::new(BurnIter(it)),
            Err(e) => Box::new(FailedOf::<O>(
                Some(DatasetError::new(e)),
                self.range.len(),
                std::marker::PhantomData,
            )),
        }
    }

    fn num_items(&self) -> usize {
        self.range.len()
    }

    fn to_device(&self, device: &Device) -> Arc<dyn DataLoader<O>> {
        let mut l = self.clone();
        l.device = device.clone();
        Arc::new(l)
    }

    fn slice(&self, start: usize, end: usize) -> Arc<dyn DataLoader<O>> {
        let mut l = self.clone();
        let s = (self.range.start + start).min(self.range.end);
        let e = (self.range.start + end).clamp(s, self.range.end);
        l.range = s..e;
        Arc::new(l)
    }
}

/// Yields one error, for a pipeline that could not be built.
struct FailedOf<O>(
    Option<DatasetError>,
    usize,
    std::marker::PhantomData<fn() -> O>,
);

impl<O> Iterator for FailedOf<O> {
    type Item = std::result::Result<O, DatasetError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.0.take().map(Err)
    }
}

impl<O> DataLoaderIterator<O> for FailedOf<O> {
    fn progress(&self) -> Progress {
        Progress::new(0, self.1, Some("items".into()))
    }
}
