//! Burn's [`DataLoader`] over a Zephon pipeline, and a plain iterator of
//! tensor batches for custom training loops.

use crate::error::{Error, Result};
use burn::data::dataloader::{DataLoader, DataLoaderIterator, Progress};
use burn::data::dataset::DatasetError;
use burn::tensor::Device;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use zephon_core::{Batch, BlockingIter, LaneId, WorkSource};
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

type Build<H> = Arc<dyn Fn(WorkSource) -> zephon_core::Result<BlockingIter<H>> + Send + Sync>;
type Convert<H, O> = Arc<dyn Fn(H, &Device) -> Result<O> + Send + Sync>;

/// Burn's [`DataLoader`] over a Zephon pipeline built on a
/// [`WorkSource`]: every `iter()` is the next epoch.
///
/// - **Epochs.** The `e`-th `iter()` (from 0) builds the pipeline on
///   [`WorkSource::epoch`]`(e)`, so each epoch is reshuffled as the work
///   source's passes are, and the same epoch is the same order on any run.
///   [`starting_at_epoch`](Self::starting_at_epoch) resumes the count.
/// - **Slices.** Burn splits a loader over the devices of a multi-device
///   strategy with [`DataLoader::slice`]. A slice is served by a share of
///   the loader's lanes, not by replaying and skipping: lane `k` of the `m`
///   lanes the loader owns belongs to the slice holding item `k * N / m` of
///   its `N` items, and the slice builds its own pipeline on those lanes
///   ([`WorkSource::lane_part`]), as that many more ranks would. So every
///   item is produced once, batches keep their size, and all slices of one
///   epoch share it (each counts its own `iter()` calls, from the epoch of
///   the loader it was cut from). A slice whose lanes are not an equal,
///   aligned share (Burn's `n` equal ranges where `n` does not divide the
///   lanes) serves one error naming the lanes and the range.
/// - **Item count.** [`num_items`](DataLoader::num_items) is the number of
///   pointers the loader's lanes hold in its next epoch, and the items
///   served ([`HostBatch::num_items`]) are checked against it: a pipeline
///   that serves more or fewer (a filter, packing) ends the epoch with an
///   error naming both counts, the epoch and the lanes, instead of
///   truncating or leaving progress incomplete.
///
/// `build` must build the whole pipeline on the work source it is given
/// (use its [`owned_lanes`](WorkSource::owned_lanes) for `lane_mux`), and
/// `convert` turns each host batch into tensors on the loader's device.
/// For Burn's `Learner`, the model lives on `device.autodiff()` while the
/// loaders may stay on the plain device.
///
/// ```
/// use burn::data::dataloader::DataLoader;
/// use burn::tensor::{Device, FloatDType};
/// use zephon_burn::convert::{f32_bytes, float_rows};
/// use zephon_burn::ZephonDataLoader;
/// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
///
/// let recs: Vec<Record> = (0..16).map(|i| Record::new().with("x", f32_bytes(&[i as f32, 1.0]))).collect();
/// let ws = WorkSource::builder().dataset(Dataset::in_memory("d", vec![recs])?, 1.0)
///     .seed(1).canonical_lanes(2).build()?;
/// let loader = ZephonDataLoader::new(
///     ws,
///     Device::flex(),
///     |ws: WorkSource| { let lanes = ws.owned_lanes(); ws.stream().fetch(2).batch(4).lane_mux(lanes).into_blocking_iter(Runner::Inline) },
///     |b: zephon_core::RecordBatch, device: &Device| float_rows(&b.items, "x", 2, device, FloatDType::F32),
/// )?;
/// assert_eq!(loader.num_items(), 16);
/// let first: Vec<f32> = loader.iter().flat_map(|t| t.unwrap().into_data().to_vec::<f32>().unwrap()).collect();
/// let second: Vec<f32> = loader.iter().flat_map(|t| t.unwrap().into_data().to_vec::<f32>().unwrap()).collect();
/// assert_ne!(first, second, "epoch 1 is reshuffled");
/// // Two devices: one lane each, batches of 4 kept.
/// let half = loader.slice(8, 16);
/// assert_eq!(half.num_items(), 8);
/// assert!(half.iter().all(|t| t.unwrap().dims() == [4, 2]));
/// # Ok::<(), zephon_burn::Error>(())
/// ```
pub struct ZephonDataLoader<H, O> {
    source: WorkSource,
    build: Build<H>,
    convert: Convert<H, O>,
    device: Device,
    next_epoch: AtomicU64,
    /// Why this slice cannot be served, served by its iterator.
    broken: Option<Arc<str>>,
}

impl<H, O> Clone for ZephonDataLoader<H, O> {
    fn clone(&self) -> Self {
        ZephonDataLoader {
            source: self.source.clone(),
            build: self.build.clone(),
            convert: self.convert.clone(),
            device: self.device.clone(),
            next_epoch: AtomicU64::new(self.next_epoch()),
            broken: self.broken.clone(),
        }
    }
}

impl<H, O> std::fmt::Debug for ZephonDataLoader<H, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZephonDataLoader")
            .field("lanes", &self.source.owned_lanes())
            .field("next_epoch", &self.next_epoch())
            .field("device", &self.device)
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

impl<H, O> ZephonDataLoader<H, O> {
    /// The epoch the next `iter()` (or [`batches`](Self::batches)) serves.
    pub fn next_epoch(&self) -> u64 {
        self.next_epoch.load(Ordering::Relaxed)
    }

    /// The device batches are put on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The work source as given (or this slice's share of its lanes).
    pub fn work_source(&self) -> &WorkSource {
        &self.source
    }
}

impl<H: HostBatch + 'static, O: 'static> ZephonDataLoader<H, O> {
    /// A loader over the epochs of `source`: `build` makes the pipeline on
    /// the work source of an epoch (and of a slice's lanes), `convert` turns
    /// each of its batches into tensors on `device`.
    ///
    /// An endless source ([`repeat`](zephon_core::WorkSourceBuilder::repeat))
    /// has no epochs and is refused with an [`Error::Config`].
    pub fn new(
        source: WorkSource,
        device: Device,
        build: impl Fn(WorkSource) -> zephon_core::Result<BlockingIter<H>> + Send + Sync + 'static,
        convert: impl Fn(H, &Device) -> Result<O> + Send + Sync + 'static,
    ) -> Result<Self> {
        source.epoch(0)?;
        Ok(ZephonDataLoader {
            source,
            build: Arc::new(build),
            convert: Arc::new(convert),
            device,
            next_epoch: AtomicU64::new(0),
            broken: None,
        })
    }

    /// Starts the epoch count at `epoch`, to resume a run after that many
    /// epochs (Burn's `SupervisedTraining::checkpoint(epoch)`).
    #[must_use]
    pub fn starting_at_epoch(self, epoch: u64) -> Self {
        self.next_epoch.store(epoch, Ordering::Relaxed);
        self
    }

    /// Items (pointers of the loader's lanes) of epoch `epoch`.
    pub fn items_in_epoch(&self, epoch: u64) -> Result<usize> {
        let n = self.source.epoch(epoch)?.len().unwrap_or(0);
        usize::try_from(n).map_err(|_| {
            Error::DataLoader(format!("{n} items do not fit in this platform's usize"))
        })
    }

    /// A plain iterator over the tensor batches of the next epoch, for
    /// custom loops. The pipeline is built here; an error building it is
    /// returned at once.
    pub fn batches(&self) -> Result<TensorBatches<H, O>> {
        let epoch = self.next_epoch.fetch_add(1, Ordering::Relaxed);
        if let Some(why) = &self.broken {
            return Err(Error::DataLoader(why.to_string()));
        }
        let ws = self.source.epoch(epoch)?;
        let expected = self.items_in_epoch(epoch)?;
        Ok(TensorBatches {
            lanes: ws.owned_lanes(),
            inner: (self.build)(ws)?,
            convert: self.convert.clone(),
            device: self.device.clone(),
            epoch,
            expected,
            served: 0,
            done: false,
        })
    }

    /// The share of this loader's lanes that serves items `start..end`, or
    /// why there is none.
    fn lanes_for(&self, start: usize, end: usize) -> std::result::Result<WorkSource, String> {
        let n = self
            .items_in_epoch(self.next_epoch())
            .map_err(|e| e.to_string())? as u128;
        let lanes = self.source.owned_lanes();
        let m = lanes.len() as u128;
        let mine: Vec<u128> = (0..m)
            .filter(|&k| (start as u128..end as u128).contains(&(k * n / m)))
            .collect();
        let b = mine.len() as u128;
        let refuse = |why: &str| {
            format!(
                "slice {start}..{end} of {n} items over lanes {lanes:?}: {why}; split over a number of devices that divides the {m} lanes"
            )
        };
        if b == 0 || !m.is_multiple_of(b) || !mine[0].is_multiple_of(b) {
            return Err(refuse("its lanes are not an equal, aligned share"));
        }
        self.source
            .lane_part((mine[0] / b) as u32, (m / b) as u32)
            .map_err(|e| refuse(&e.to_string()))
    }
}

/// The iterator of a [`ZephonDataLoader`]: one epoch's host batches from
/// the pipeline, converted on the device, counted against the epoch's items.
pub struct TensorBatches<H, O> {
    inner: BlockingIter<H>,
    convert: Convert<H, O>,
    device: Device,
    lanes: Vec<LaneId>,
    epoch: u64,
    expected: usize,
    served: usize,
    done: bool,
}

impl<H, O> std::fmt::Debug for TensorBatches<H, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorBatches")
            .field("epoch", &self.epoch)
            .field("lanes", &self.lanes)
            .field("served", &self.served)
            .field("expected", &self.expected)
            .finish_non_exhaustive()
    }
}

impl<H, O> TensorBatches<H, O> {
    /// The epoch this iterator serves.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    fn mismatch(&mut self, what: &str) -> Option<Result<O>> {
        self.done = true;
        Some(Err(Error::DataLoader(format!(
            "epoch {} over lanes {:?}: the pipeline served {} items {what}, but the work source holds {}; a pipeline that drops, adds or packs samples does not fit a per-sample loader",
            self.epoch, self.lanes, self.served, self.expected
        ))))
    }
}

impl<H: HostBatch, O> Iterator for TensorBatches<H, O> {
    type Item = Result<O>;

    fn next(&mut self) -> Option<Result<O>> {
        if self.done {
            return None;
        }
        match self.inner.next() {
            None if self.served != self.expected => self.mismatch("by its end"),
            None => {
                self.done = true;
                None
            }
            Some(Err(e)) => {
                self.done = true;
                Some(Err(e.into()))
            }
            Some(Ok(batch)) => {
                self.served += batch.num_items();
                if self.served > self.expected {
                    return self.mismatch("so far");
                }
                Some((self.convert)(batch, &self.device))
            }
        }
    }
}

impl<H: HostBatch, O> DataLoaderIterator<O> for BurnIter<H, O> {
    fn progress(&self) -> Progress {
        Progress::new(self.0.served, self.0.expected, Some("items".into()))
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
        let total = self.num_items();
        match self.batches() {
            Ok(it) => Box::new(BurnIter(it)),
            Err(e) => Box::new(FailedOf::<O>(
                Some(DatasetError::new(e)),
                total,
                std::marker::PhantomData,
            )),
        }
    }

    fn num_items(&self) -> usize {
        if self.broken.is_some() {
            return 0;
        }
        self.items_in_epoch(self.next_epoch()).unwrap_or(0)
    }

    fn to_device(&self, device: &Device) -> Arc<dyn DataLoader<O>> {
        let mut l = self.clone();
        l.device = device.clone();
        Arc::new(l)
    }

    fn slice(&self, start: usize, end: usize) -> Arc<dyn DataLoader<O>> {
        let mut l = self.clone();
        if l.broken.is_none() {
            match self.lanes_for(start, end) {
                Ok(ws) => l.source = ws,
                Err(why) => l.broken = Some(why.into()),
            }
        }
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
