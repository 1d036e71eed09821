//! The iterators a [`ZephonDataLoader`](super::ZephonDataLoader) hands out:
//! one epoch's batches, counted against the epoch's items.

use super::items::ItemCount;
use super::{Convert, HostBatch};
use crate::error::{Error, Result};
use burn::data::dataloader::{DataLoaderIterator, Progress};
use burn::data::dataset::DatasetError;
use burn::tensor::Device;
use zephon_core::checkpoint::Progress as DataProgress;
use zephon_core::{BlockingIter, LaneId};

/// How a resumable loader's iterator keeps its position: the slot it
/// records each served batch in.
pub(super) struct Tracking<H> {
    pub(super) slot: super::Slot,
    pub(super) track: fn(&mut DataProgress, &H) -> zephon_core::Result<()>,
}

/// The iterator of a [`ZephonDataLoader`](super::ZephonDataLoader): one epoch's host batches from
/// the pipeline, converted on the device, counted against the epoch's items.
pub struct TensorBatches<H, O> {
    pub(super) inner: BlockingIter<H>,
    pub(super) tracking: Option<Tracking<H>>,
    pub(super) convert: Convert<H, O>,
    pub(super) device: Device,
    pub(super) lanes: Vec<LaneId>,
    pub(super) epoch: u64,
    pub(super) policy: ItemCount,
    pub(super) expected: usize,
    pub(super) served: usize,
    pub(super) done: bool,
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
            "epoch {} over lanes {:?}: the pipeline served {} items {what}, but {}",
            self.epoch,
            self.lanes,
            self.served,
            self.policy.expected(self.expected)
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
                // Saturating: a batch claiming more items than fit is a mismatch too.
                self.served = self.served.saturating_add(batch.num_items());
                if self.served > self.expected {
                    return self.mismatch("so far");
                }
                if let Some(t) = &self.tracking {
                    let mut slot = t
                        .slot
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Some((_, progress)) = slot.as_mut()
                        && let Err(e) = (t.track)(progress, &batch)
                    {
                        self.done = true;
                        return Some(Err(e.into()));
                    }
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

/// [`TensorBatches`] with Burn's error type, as
/// [`DataLoader::iter`](burn::data::dataloader::DataLoader::iter) yields.
pub(super) struct BurnIter<H, O>(pub(super) TensorBatches<H, O>);

impl<H: HostBatch, O> Iterator for BurnIter<H, O> {
    type Item = std::result::Result<O, DatasetError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|r| r.map_err(DatasetError::new))
    }
}

/// Yields one error, for a pipeline that could not be built.
pub(super) struct FailedOf<O>(
    pub(super) Option<DatasetError>,
    pub(super) usize,
    pub(super) std::marker::PhantomData<fn() -> O>,
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
