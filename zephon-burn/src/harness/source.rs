//! Where the harness gets its batches: a Zephon pipeline or a Burn `DataLoader`.

use crate::error::{Error, Result};
use burn::data::dataloader::DataLoader;
use std::sync::Arc;
use zephon_core::{BlockingIter, Observer, Tracking};

/// A source of batches, one pass per epoch.
pub trait BatchSource<B> {
    /// The batches of epoch `epoch` (from 0).
    fn epoch(&mut self, epoch: usize) -> Result<Box<dyn Iterator<Item = Result<B>> + '_>>;

    /// Batches per epoch, when known (for the progress bar).
    fn batches_per_epoch(&self) -> Option<usize> {
        None
    }

    /// Turns the pipeline's own observability on at `tracking` for the
    /// epochs that follow, forgetting the observers of earlier runs.
    /// Sources without a Zephon pipeline ignore it.
    fn set_tracking(&mut self, _tracking: Tracking) {}

    /// One observer per epoch run with tracking on, oldest first.
    fn observers(&self) -> &[Observer] {
        &[]
    }
}

/// A Zephon pipeline, rebuilt for every epoch by a closure that gets the
/// epoch number (to seed a shuffle, or to pick a pass).
///
/// ```
/// use zephon_burn::harness::{BatchSource, PipelineSource};
/// use zephon_core::{PipelineExt, Runner};
/// let mut src = PipelineSource::new(|_epoch| {
///     futures::stream::iter((0..3).map(Ok::<u32, zephon_core::Error>)).into_blocking_iter(Runner::Inline)
/// });
/// let items: Vec<u32> = src.epoch(0).unwrap().map(Result::unwrap).collect();
/// assert_eq!(items, vec![0, 1, 2]);
/// ```
pub struct PipelineSource<F> {
    build: F,
    batches: Option<usize>,
    tracking: Tracking,
    observers: Vec<Observer>,
}

impl<F> std::fmt::Debug for PipelineSource<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineSource")
            .field("batches", &self.batches)
            .field("tracking", &self.tracking)
            .finish_non_exhaustive()
    }
}

impl<F> PipelineSource<F> {
    /// A source that calls `build(epoch)` at the start of every epoch.
    pub fn new(build: F) -> Self {
        PipelineSource {
            build,
            batches: None,
            tracking: Tracking::Off,
            observers: Vec::new(),
        }
    }

    /// Declares the number of batches per epoch (shown by the progress bar).
    pub fn with_batches_per_epoch(mut self, n: usize) -> Self {
        self.batches = Some(n);
        self
    }
}

impl<B: 'static, F> BatchSource<B> for PipelineSource<F>
where
    F: FnMut(usize) -> zephon_core::Result<BlockingIter<B>>,
{
    fn epoch(&mut self, epoch: usize) -> Result<Box<dyn Iterator<Item = Result<B>> + '_>> {
        let mut it = (self.build)(epoch)?;
        // Before the first `next()`, or the pipeline starts unobserved.
        if self.tracking != Tracking::Off {
            self.observers.push(it.enable_observability(self.tracking));
        }
        Ok(Box::new(it.map(|r| r.map_err(Error::from))))
    }

    fn batches_per_epoch(&self) -> Option<usize> {
        self.batches
    }

    fn set_tracking(&mut self, tracking: Tracking) {
        self.tracking = tracking;
        self.observers.clear();
    }

    fn observers(&self) -> &[Observer] {
        &self.observers
    }
}

/// A Burn [`DataLoader`] as a batch source; every epoch is one `iter()`.
pub struct LoaderSource<O> {
    loader: Arc<dyn DataLoader<O>>,
    batches: Option<usize>,
}

impl<O> std::fmt::Debug for LoaderSource<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoaderSource")
            .field("num_items", &self.loader.num_items())
            .finish_non_exhaustive()
    }
}

impl<O> LoaderSource<O> {
    /// Wraps `loader`. `batch_size` turns its item count into a batch count
    /// for the progress bar; pass `None` when batches vary in size.
    pub fn new(loader: Arc<dyn DataLoader<O>>, batch_size: Option<usize>) -> Self {
        let batches = batch_size.map(|b| loader.num_items().div_ceil(b.max(1)));
        LoaderSource { loader, batches }
    }
}

impl<O> BatchSource<O> for LoaderSource<O> {
    fn epoch(&mut self, _epoch: usize) -> Result<Box<dyn Iterator<Item = Result<O>> + '_>> {
        Ok(Box::new(
            self.loader
                .iter()
                .map(|r| r.map_err(|e| Error::DataLoader(e.to_string()))),
        ))
    }

    fn batches_per_epoch(&self) -> Option<usize> {
        self.batches
    }
}
