//! [`PipelineExt`]: the chain methods that compose operators.

use crate::dataset::Catalog;
use crate::error::Result;
use crate::obs::{BoxPipeline, Explain, PlanDescription};
use crate::ops::batch::{Batch, Batcher};
use crate::ops::fetch::Fetch;
use crate::ops::filter::{Filter, FilterMap};
use crate::ops::lane_mux::LaneMux;
use crate::ops::map_par::MapPar;
use crate::ops::prefetch_batches::PrefetchBatches;
use crate::ops::shuffle::{Shuffle, ShuffleMode};
use crate::pointer::{Identity, LaneId, Laned, SamplePtr};
use crate::runner::{BlockingIter, Runner};
use crate::work::Catalogued;
use futures::Stream;

/// Chain methods for pipelines: any `Stream<Item = Result<T>>`.
///
/// ```
/// use zephon_core::{Dataset, PipelineExt, Record, Runner, ShuffleMode, WorkSource};
/// let ds = Dataset::in_memory("toy", vec![(0..64).map(|i| Record::new().with("i", i as i64)).collect()]).unwrap();
/// let ws = WorkSource::builder().dataset(ds, 1.0).seed(1).build().unwrap();
/// let batches = ws.stream()
///     .fetch(4)
///     .map_par(|mut r| { r.set("seen", true as i64); Ok(r) }, 2)
///     .shuffle(16, ShuffleMode::Reservoir, 1)
///     .batch(8)
///     .prefetch_batches(2);
/// let n: usize = batches.into_blocking_iter(Runner::threads()).unwrap().map(|b| b.unwrap().len()).sum();
/// assert_eq!(n, 64);
/// ```
pub trait PipelineExt: Stream + Sized {
    /// Pointers to records, reading from the catalog this stream carries,
    /// with up to `parallelism` reads in flight (1 to 4096, see
    /// [`settings`](crate::settings); otherwise the first item is an error
    /// naming it). See [`Fetch`].
    ///
    /// ```
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![(0..6).map(|i| Record::new().with("i", i as i64)).collect()])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).build()?;
    /// let records: Vec<Record> = ws.stream().fetch(2).into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
    /// assert_eq!(records.len(), 6);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn fetch(self, parallelism: usize) -> Fetch<Self>
    where
        Self: Stream<Item = Result<SamplePtr>> + Catalogued,
    {
        let catalog = self.catalog().clone();
        Fetch::new(self, catalog, parallelism).pointer_runs(<Self as Catalogued>::next_pointers)
    }

    /// Like [`fetch`](PipelineExt::fetch), for a pointer stream that does not
    /// carry its catalog.
    ///
    /// ```
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 4]])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).build()?;
    /// // Pointers chosen by other means (here: the first two), read from the catalog.
    /// let pointers = futures::stream::iter((0..2).map(|g| Ok(ws.pointer_at(g))).collect::<Vec<_>>());
    /// let n = pointers.fetch_from(ws.catalog().clone(), 2).into_blocking_iter(Runner::Inline)?.count();
    /// assert_eq!(n, 2);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn fetch_from(self, catalog: Catalog, parallelism: usize) -> Fetch<Self>
    where
        Self: Stream<Item = Result<SamplePtr>>,
    {
        Fetch::new(self, catalog, parallelism)
    }

    /// Applies a CPU-heavy `f` with up to `k` micro-batches at work at once
    /// (1 to 4096; otherwise the first item is an error naming it) and as
    /// many queued; output order equals input order. See [`MapPar`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Runner};
    /// let squares: Vec<u64> = futures::stream::iter((0..8u64).map(Ok))
    ///     .map_par(|x| Ok(x * x), 4)
    ///     .into_blocking_iter(Runner::threads())?
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(squares, [0, 1, 4, 9, 16, 25, 36, 49]); // input order, whatever the parallelism
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn map_par<T, U, F>(self, f: F, k: usize) -> MapPar<Self, T, U>
    where
        Self: Stream<Item = Result<T>>,
        F: Fn(T) -> Result<U> + Send + Sync + 'static,
    {
        MapPar::new(self, f, k)
    }

    /// Keeps the `Ok` elements for which `pred` holds; errors pass through.
    /// Named apart from `futures::StreamExt::filter` (an async predicate
    /// over any item), so both traits can be in scope. See [`Filter`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Runner};
    /// let even: Vec<u32> = futures::stream::iter((0..6u32).map(Ok))
    ///     .filter_ok(|x| x % 2 == 0)
    ///     .into_blocking_iter(Runner::Inline)?
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(even, [0, 2, 4]);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn filter_ok<T, F>(self, pred: F) -> Filter<Self, F>
    where
        Self: Stream<Item = Result<T>>,
        F: FnMut(&T) -> bool,
    {
        Filter::new(self, pred)
    }

    /// Maps the `Ok` elements, dropping those that map to `Ok(None)`; errors
    /// pass through. Named apart from `futures::StreamExt::filter_map`. See
    /// [`FilterMap`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Runner};
    /// let halves: Vec<u32> = futures::stream::iter((0..6u32).map(Ok))
    ///     .filter_map_ok(|x| Ok((x % 2 == 0).then_some(x / 2)))
    ///     .into_blocking_iter(Runner::Inline)?
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(halves, [0, 1, 2]);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn filter_map_ok<T, U, F>(self, f: F) -> FilterMap<Self, F>
    where
        Self: Stream<Item = Result<T>>,
        F: FnMut(T) -> Result<Option<U>>,
    {
        FilterMap::new(self, f)
    }

    /// Per-lane buffer shuffle seeded by `seed` and element identities, with
    /// `buffer_size` from 1 to 16 Mi (otherwise the first item is an error
    /// naming it). See [`Shuffle`].
    ///
    /// ```
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, ShuffleMode, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![(0..32).map(|i| Record::new().with("i", i as i64)).collect()])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).shuffle_within_shard(false).build()?;
    /// let order = |seed| -> zephon_core::Result<Vec<i64>> {
    ///     ws.stream().fetch(2).shuffle(8, ShuffleMode::Reservoir, seed).into_blocking_iter(Runner::Inline)?
    ///         .map(|r| r.map(|r| r.get("i").and_then(|v| v.as_int()).unwrap())).collect()
    /// };
    /// assert_eq!(order(1)?, order(1)?); // the same seed, the same order
    /// assert_ne!(order(1)?, (0..32).collect::<Vec<_>>());
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn shuffle<T>(self, buffer_size: usize, mode: ShuffleMode, seed: u64) -> Shuffle<Self, T>
    where
        Self: Stream<Item = Result<T>>,
        T: Laned + Identity,
    {
        Shuffle::new(self, buffer_size, mode, seed)
    }

    /// Batches of `n` elements of one lane, `n` from 1 to 1,048,576
    /// (otherwise the first item is an error naming it); the last partial
    /// batch of each lane is kept. See [`Batcher`].
    ///
    /// ```
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 10]])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).build()?;
    /// let sizes: Vec<usize> = ws.stream().fetch(2).batch(4).into_blocking_iter(Runner::Inline)?
    ///     .map(|b| b.map(|b| b.len())).collect::<Result<_, _>>()?;
    /// assert_eq!(sizes, [4, 4, 2]); // the last partial batch is kept
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn batch<T>(self, n: usize) -> Batcher<Self, T>
    where
        Self: Stream<Item = Result<T>>,
        T: Laned,
    {
        Batcher::new(self, n, false)
    }

    /// Batches of `n` (1 to 1,048,576), dropping each lane's last partial
    /// batch when `drop_last`.
    ///
    /// ```
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 10]])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).build()?;
    /// let sizes: Vec<usize> = ws.stream().fetch(2).batch_with(4, true).into_blocking_iter(Runner::Inline)?
    ///     .map(|b| b.map(|b| b.len())).collect::<Result<_, _>>()?;
    /// assert_eq!(sizes, [4, 4]);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn batch_with<T>(self, n: usize, drop_last: bool) -> Batcher<Self, T>
    where
        Self: Stream<Item = Result<T>>,
        T: Laned,
    {
        Batcher::new(self, n, drop_last)
    }

    /// Keeps up to `n` finished elements ready ahead of the consumer. See
    /// [`PrefetchBatches`].
    ///
    /// ```
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 16]])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).build()?;
    /// // Up to 2 batches made while the consumer works on the current one.
    /// let n = ws.stream().fetch(2).batch(4).prefetch_batches(2).into_blocking_iter(Runner::threads())?.count();
    /// assert_eq!(n, 4);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn prefetch_batches(self, n: usize) -> PrefetchBatches<Self> {
        PrefetchBatches::new(self, n)
    }

    /// Emits the given lanes in strict round robin; an empty list is an
    /// error (as the first item). See [`LaneMux`].
    ///
    /// ```
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 16]])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(2).build()?;
    /// let lanes: Vec<u32> = ws.stream().fetch(2).batch(2).lane_mux(ws.owned_lanes())
    ///     .into_blocking_iter(Runner::Inline)?.take(4).map(|b| b.map(|b| b.lane)).collect::<Result<_, _>>()?;
    /// assert_eq!(lanes, [0, 1, 0, 1]);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn lane_mux<T>(self, lanes: Vec<LaneId>) -> LaneMux<Self, T>
    where
        Self: Stream<Item = Result<T>>,
        T: Laned,
    {
        LaneMux::new(self, lanes)
    }

    /// The compiled plan in words: stages in order with their parallelism and
    /// queue capacities, the runner, the output prefetch depth.
    ///
    /// ```
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 10]]).unwrap();
    /// let ws = WorkSource::builder().dataset(ds, 1.0).build().unwrap();
    /// let p = ws.stream().fetch(4).map_par(Ok, 8).batch(2).prefetch_batches(3);
    /// let plan = p.explain(Runner::Threads { workers: 8 });
    /// assert_eq!(plan.stages.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
    ///            ["work_source", "fetch", "map_par", "batch", "prefetch_batches"]);
    /// assert_eq!(plan.output_prefetch, 3);
    /// println!("{plan}");
    /// ```
    fn explain(&self, runner: Runner) -> PlanDescription
    where
        Self: Explain,
    {
        let mut stages = Vec::new();
        crate::runner::describing_for(runner, || self.describe(&mut stages));
        PlanDescription::new(stages, runner)
    }

    /// Boxes the pipeline, keeping its description for
    /// [`explain`](PipelineExt::explain) (a `futures` `.boxed()` stream
    /// shows as one opaque stage): for pipelines assembled at run time.
    ///
    /// ```
    /// use futures::StreamExt;
    /// use zephon_core::obs::BoxPipeline;
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 10]]).unwrap();
    /// let ws = WorkSource::builder().dataset(ds, 1.0).build().unwrap();
    /// let records: BoxPipeline<'static, _> = ws.stream().fetch(2).boxed_pipeline();
    /// let batches = records.map(|r| r).take(8).batch(4);
    /// let plan = batches.explain(Runner::Inline);
    /// assert_eq!(plan.stages.iter().map(|s| (s.name.as_str(), s.opaque)).collect::<Vec<_>>(),
    ///            [("work_source", false), ("fetch", false), ("map", true), ("take", true), ("batch", false)]);
    /// ```
    fn boxed_pipeline<'a>(self) -> BoxPipeline<'a, Self::Item>
    where
        Self: Explain + Send + 'a,
    {
        Box::pin(self)
    }

    /// Drives the pipeline from synchronous code with `runner`.
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Runner};
    /// let mut it = futures::stream::iter((0..3u8).map(Ok)).into_blocking_iter(Runner::Inline)?;
    /// assert_eq!(it.next().transpose()?, Some(0));
    /// assert_eq!(it.count(), 2);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn into_blocking_iter<T>(self, runner: Runner) -> Result<BlockingIter<T>>
    where
        Self: Stream<Item = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        BlockingIter::new(self, runner)
    }
}

impl<S: Stream> PipelineExt for S {}

/// Batches of records, the usual pipeline output.
pub type RecordBatch = Batch<crate::record::Record>;
