//! Burn's [`DataLoader`] over a Zephon pipeline, and a plain iterator of
//! tensor batches for custom training loops.

mod host;
mod items;
mod iter;
mod position;

pub use host::HostBatch;
pub use items::ItemCount;
pub use iter::TensorBatches;
pub use position::{DataPosition, PositionHandle};

use crate::error::{Error, Result};
use burn::data::dataloader::{DataLoader, DataLoaderIterator};
use burn::data::dataset::DatasetError;
use burn::tensor::Device;
use iter::{BurnIter, FailedOf, Tracking};
use position::{Resumable, Slot};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use zephon_core::{BlockingIter, WorkSource};

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
///   the loader's lanes, not by replaying and skipping: the slice holding
///   item `k * N / m` of its `N` items (of the epoch at the split, as its
///   [`ItemCount`] knows them) takes an equal share of the `m` lanes the
///   loader owns, and builds its own pipeline on them
///   ([`WorkSource::lane_part`]), as that many more ranks would: under the
///   default contiguous ownership, lane `k` itself; under interleaved
///   ownership, slice `p` of `n` takes every `n`-th lane from the `p`-th,
///   as a rank of interleaved ownership does. Each slice counts the items of
///   its own lanes. So every
///   item is produced once, batches keep their size, and all slices of one
///   epoch share it (each counts its own `iter()` calls, from the epoch of
///   the loader it was cut from). A slice whose lanes are not an equal,
///   aligned share (Burn's `n` equal ranges where `n` does not divide the
///   lanes) serves one error naming the lanes and the range.
/// - **Item count.** [`num_items`](DataLoader::num_items) is the number of
///   items ([`HostBatch::num_items`]) of the next epoch as the
///   [`ItemCount`] policy knows it (set with [`items`](Self::items)), and
///   the items served are checked against it: an epoch that serves more or
///   fewer ends with an error naming both counts, the epoch and the lanes,
///   instead of truncating or leaving progress incomplete. The default,
///   [`ItemCount::PerSample`], counts the work source's pointers, so a
///   pipeline that filters or packs needs [`ItemCount::Counted`]: one extra
///   pass over the epoch's pipeline, without the model, gives the exact
///   count (see the second example). Each slice counts its own lanes, so
///   the slices' counts add up to the whole loader's.
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
///
/// A pipeline that filters serves fewer items than the work source holds;
/// [`ItemCount::Counted`] counts them before each epoch:
///
/// ```
/// use burn::data::dataloader::DataLoader;
/// use burn::tensor::Device;
/// use zephon_burn::{ItemCount, ZephonDataLoader};
/// use zephon_core::{Dataset, PipelineExt, Record, RecordBatch, Runner, WorkSource};
///
/// let recs: Vec<Record> = (0..20).map(|i| Record::new().with("id", i)).collect();
/// let ws = WorkSource::builder().dataset(Dataset::in_memory("d", vec![recs])?, 1.0)
///     .seed(1).canonical_lanes(2).build()?;
/// let even = |r: &Record| r.get("id").and_then(|v| v.as_int()).is_some_and(|i| i % 2 == 0);
/// let loader = ZephonDataLoader::new(
///     ws,
///     Device::flex(),
///     move |ws: WorkSource| {
///         let lanes = ws.owned_lanes();
///         ws.stream().fetch(2).filter_ok(even).batch(4).lane_mux(lanes).into_blocking_iter(Runner::Inline)
///     },
///     |b: RecordBatch, _: &Device| Ok(b.items.len()),
/// )?
/// .items(ItemCount::Counted);
/// assert_eq!(loader.num_items(), 10);
/// let mut epoch = loader.iter();
/// assert_eq!(epoch.by_ref().map(|n| n.unwrap()).sum::<usize>(), 10);
/// let p = epoch.progress();
/// assert_eq!((p.items_processed, p.items_total), (10, 10));
/// # Ok::<(), zephon_burn::Error>(())
/// ```
pub struct ZephonDataLoader<H, O> {
    source: WorkSource,
    build: Build<H>,
    convert: Convert<H, O>,
    device: Device,
    next_epoch: AtomicU64,
    items: ItemCount,
    /// The last epoch [`ItemCount::Counted`] counted, and its items.
    counted: Mutex<Option<(u64, usize)>>,
    /// The whole epoch's count [`ItemCount::CountedOnce`] took, for every
    /// later epoch.
    counted_once: Mutex<Option<usize>>,
    /// Why this slice cannot be served, served by its iterator.
    broken: Option<Arc<str>>,
    /// The restore step's build, for a loader made with `resumable`.
    resumable: Option<Resumable<H>>,
    /// The position the epoch it names resumes from.
    restore: Option<Arc<DataPosition>>,
    /// The position served to, shared with the loader's clones.
    position: Slot,
}

impl<H, O> Clone for ZephonDataLoader<H, O> {
    fn clone(&self) -> Self {
        ZephonDataLoader {
            source: self.source.clone(),
            build: self.build.clone(),
            convert: self.convert.clone(),
            device: self.device.clone(),
            next_epoch: AtomicU64::new(self.next_epoch()),
            items: self.items,
            counted: Mutex::new(*self.counted.lock().unwrap_or_else(PoisonError::into_inner)),
            counted_once: Mutex::new(
                *self
                    .counted_once
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            ),
            broken: self.broken.clone(),
            resumable: self.resumable.clone(),
            restore: self.restore.clone(),
            position: self.position.clone(),
        }
    }
}

impl<H, O> std::fmt::Debug for ZephonDataLoader<H, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZephonDataLoader")
            .field("lanes", &self.source.owned_lanes())
            .field("next_epoch", &self.next_epoch())
            .field("items", &self.items)
            .field("device", &self.device)
            .field("broken", &self.broken)
            .field("resumable", &self.resumable.is_some())
            .field(
                "restore",
                &self.restore.as_ref().map(|r| (r.epoch, r.step())),
            )
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

    /// How the loader knows the items of an epoch.
    pub fn item_count(&self) -> ItemCount {
        self.items
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
            items: ItemCount::PerSample,
            counted: Mutex::new(None),
            counted_once: Mutex::new(None),
            broken: None,
            resumable: None,
            restore: None,
            position: Slot::default(),
        })
    }

    /// Starts the epoch count at `epoch`, to resume a run after that many
    /// epochs (Burn's `SupervisedTraining::checkpoint(epoch)`).
    #[must_use]
    pub fn starting_at_epoch(self, epoch: u64) -> Self {
        self.next_epoch.store(epoch, Ordering::Relaxed);
        self
    }

    /// How the loader knows the items of an epoch ([`ItemCount::PerSample`]
    /// unless set): the total it reports for each epoch, and checks the
    /// served items against.
    #[must_use]
    pub fn items(mut self, items: ItemCount) -> Self {
        self.items = items;
        *self
            .counted
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = None;
        *self
            .counted_once
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = None;
        self
    }

    /// Items of epoch `epoch` as the [`ItemCount`] policy knows them: the
    /// pointers of the loader's lanes, a count of what the epoch's pipeline
    /// yields (run here, unless that epoch was the last counted), or the
    /// declared number.
    pub fn items_in_epoch(&self, epoch: u64) -> Result<usize> {
        let fit = |n: u64| {
            usize::try_from(n).map_err(|_| {
                Error::DataLoader(format!("{n} items do not fit in this platform's usize"))
            })
        };
        // The items the restored position served in its epoch are not
        // served again; a count of the resumed pipeline already leaves them out.
        let served = match self.restore.as_deref() {
            Some(r) if r.epoch == epoch => r.served_items(Some(&self.source)),
            _ => 0,
        };
        let left = |n: u64| {
            n.checked_sub(served).ok_or_else(|| {
                Error::DataLoader(format!(
                    "epoch {epoch} over lanes {:?} holds {n} items, but the position it resumes from served {served} of them",
                    self.source.owned_lanes()
                ))
            })
        };
        match self.items {
            ItemCount::PerSample => fit(left(self.source.epoch(epoch)?.len().unwrap_or(0))?),
            ItemCount::Counted => self.count(epoch),
            // A resumed epoch counts what it has left; a whole epoch's
            // count is taken once and kept for every later whole epoch.
            ItemCount::CountedOnce if served > 0 => self.count(epoch),
            ItemCount::CountedOnce => {
                let mut once = self
                    .counted_once
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                match *once {
                    Some(n) => Ok(n),
                    None => {
                        let n = self.count(epoch)?;
                        *once = Some(n);
                        Ok(n)
                    }
                }
            }
            ItemCount::Declared(n) => fit(left(n as u64)?),
        }
    }

    /// Runs epoch `epoch`'s pipeline without converting its batches and
    /// counts their items, once per epoch: the lock is held while counting
    /// so callers on other threads wait for the count instead of repeating it.
    fn count(&self, epoch: u64) -> Result<usize> {
        let mut last = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((e, n)) = *last
            && e == epoch
        {
            return Ok(n);
        }
        let ws = self.source.epoch(epoch)?;
        let lanes = ws.owned_lanes();
        let fail = |why: &dyn std::fmt::Display| {
            Error::DataLoader(format!(
                "counting the items of epoch {epoch} over lanes {lanes:?}: {why}"
            ))
        };
        let mut n = 0usize;
        let pipeline = match &self.resumable {
            Some(r) => {
                let mut p = r
                    .progress(&ws, epoch, self.restore.as_deref())
                    .map_err(|e| fail(&e))?;
                (r.build)(ws, &mut p)
            }
            None => (self.build)(ws),
        };
        for batch in pipeline.map_err(|e| fail(&e))? {
            let items = batch.map_err(|e| fail(&e))?.num_items();
            n = n
                .checked_add(items)
                .ok_or_else(|| fail(&"more items than this platform's usize holds"))?;
        }
        *last = Some((epoch, n));
        Ok(n)
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
        let lanes = ws.owned_lanes();
        let (inner, tracking) = match &self.resumable {
            Some(r) => {
                let mut progress = r.progress(&ws, epoch, self.restore.as_deref())?;
                let inner = (r.build)(ws, &mut progress)?;
                *self.position.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some((epoch, progress));
                let tracking = Tracking {
                    slot: self.position.clone(),
                    track: r.track,
                };
                (inner, Some(tracking))
            }
            None => ((self.build)(ws)?, None),
        };
        Ok(TensorBatches {
            lanes,
            inner,
            tracking,
            convert: self.convert.clone(),
            device: self.device.clone(),
            epoch,
            policy: self.items,
            expected,
            served: 0,
            done: false,
        })
    }

    /// The share of this loader's lanes that serves items `start..end`, or
    /// why there is none.
    fn lanes_for(&self, start: usize, end: usize) -> std::result::Result<WorkSource, String> {
        if let ItemCount::Declared(n) = self.items {
            return Err(format!(
                "slice {start}..{end} of {n} declared items over lanes {:?}: a declared count cannot be shared out over the lanes of a device split; count the items with `ItemCount::Counted`",
                self.source.owned_lanes()
            ));
        }
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
                Ok(ws) => {
                    l.source = ws;
                    // The slice counts its own lanes, and keeps its own
                    // position: the loader's would mix the slices'.
                    l.counted = Mutex::new(None);
                    l.counted_once = Mutex::new(None);
                    l.position = Slot::default();
                }
                Err(why) => l.broken = Some(why.into()),
            }
        }
        Arc::new(l)
    }
}
