//! [`WorkCost`] and [`offload_measured`]: CPU work handed to the pool only
//! when it costs more than the hand-off.
//!
//! Under the threads runner a micro-batch [`offload`](super::offload)ed to
//! the CPU pool pays for a queue, a pool thread's wake-up and the result's
//! way back, and the items a pool thread makes are then read and freed on
//! another core, a few cache misses each. For cheap reads (MDS or Parquet
//! samples, a read of a few hundred of them) that costs more than the work
//! itself, so handing every read over made `fetch` slower on two threads
//! than on one; JSON lines, dearer per item, gain from a second core. The
//! thresholds below sit between the two, as `zephon-bench formats` (the
//! one-thread and two-thread columns per format) measures them; the
//! figures are on the guide's benchmarks page. Work measured to cost less
//! than [`IN_PLACE_BELOW`] in all, or less than [`IN_PLACE_PER_ITEM`] an
//! item (up to [`IN_PLACE_MOST`] in all), runs where it is polled instead;
//! work that costs more (JSON lines by the hundred, tar members) still goes
//! to the pool. Where a micro-batch runs never changes what it returns or
//! the order the operator hands it out in: a performance knob like the
//! others.

use super::{offload, run_here};
use crate::error::Result;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Work measured to take less than this a micro-batch runs in place, not
/// on the CPU pool: a few times what a hand-off to the pool and back
/// costs, and short enough for an async worker to run between two waits.
pub const IN_PLACE_BELOW: Duration = Duration::from_micros(50);

/// Work measured to take less than this an item runs in place too, up to
/// [`IN_PLACE_MOST`] a micro-batch: the items a pool thread makes are
/// then read and freed on another core, a few cache misses each, which
/// costs about as much again as such an item's work (an MDS or Parquet
/// sample's, as `zephon-bench formats` measures it), while a JSON line's
/// dearer work gains from a second core.
pub const IN_PLACE_PER_ITEM: Duration = Duration::from_nanos(150);

/// The most a micro-batch of cheap items ([`IN_PLACE_PER_ITEM`]) runs in
/// place for: longer would hold up the other tasks of an async worker.
pub const IN_PLACE_MOST: Duration = Duration::from_micros(500);

/// What one kind of work (a shard's reads, say) costs an item, a running
/// average of what it was measured to cost so far. Shared by the
/// micro-batches of that work, from any thread.
///
/// ```
/// use std::time::Duration;
/// use zephon_core::runner::WorkCost;
/// let cost = WorkCost::default();
/// assert!(!cost.cheap(256)); // nothing measured yet: hand it off
/// cost.record(Duration::from_micros(25), 256); // about 100 ns an item
/// assert!(cost.cheap(256));
/// assert!(!cost.cheap(256 * 32)); // 800 us in all: too long in place
/// let dear = WorkCost::default();
/// dear.record(Duration::from_micros(256), 256); // 1 us an item
/// assert!(dear.cheap(16) && !dear.cheap(256)); // only under 50 us in all
/// ```
#[derive(Debug, Default)]
pub struct WorkCost {
    /// Nanoseconds an item, times 16 for precision; 0 until measured.
    per_item_x16: AtomicU64,
}

impl WorkCost {
    /// Whether `items` items are expected to take less than
    /// [`IN_PLACE_BELOW`], or less than [`IN_PLACE_PER_ITEM`] each and
    /// [`IN_PLACE_MOST`] in all: `false` until something was measured.
    pub fn cheap(&self, items: usize) -> bool {
        match self.per_item_x16.load(Ordering::Relaxed) {
            0 => false,
            x16 => {
                let total = x16.saturating_mul(items as u64);
                total < IN_PLACE_BELOW.as_nanos() as u64 * 16
                    || (x16 < IN_PLACE_PER_ITEM.as_nanos() as u64 * 16
                        && total < IN_PLACE_MOST.as_nanos() as u64 * 16)
            }
        }
    }

    /// Counts a micro-batch of `items` items that took `took`: the average
    /// moves a quarter of the way to it, so a change in the work (longer
    /// texts further on) shows within a few micro-batches.
    /// A micro-batch of no items says nothing of an item's cost.
    pub fn record(&self, took: Duration, items: usize) {
        if items == 0 {
            return;
        }
        let now = (u64::try_from(took.as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_mul(16)
            / items as u64)
            .max(1);
        // Updates from two threads at once may lose one of them: a
        // running estimate, not a count.
        let before = self.per_item_x16.load(Ordering::Relaxed);
        let next = if before == 0 {
            now
        } else {
            // One slow micro-batch (a thread preempted on a busy machine,
            // first faults on a shard's pages) counts as at most twice the
            // average: work that became dearer still shows within a few.
            before - before / 4 + now.min(before.saturating_mul(2)) / 4
        };
        self.per_item_x16.store(next.max(1), Ordering::Relaxed);
    }
}

/// [`offload`] for work of `items` items whose cost `cost` tracks: run in
/// place when it is [`cheap`](WorkCost::cheap) (under [`IN_PLACE_BELOW`]
/// in all, or under [`IN_PLACE_PER_ITEM`] an item and [`IN_PLACE_MOST`]
/// in all), on the CPU pool otherwise,
/// and timed either way. A panic in `f` comes back as
/// [`Error::Panic`](crate::Error::Panic) naming `op` in both places, as
/// [`offload`] does.
///
/// ```
/// use std::sync::Arc;
/// use zephon_core::runner::{WorkCost, offload_measured};
/// let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
/// let cost = Arc::new(WorkCost::default());
/// let sums: Vec<u64> = (0..4u64)
///     .map(|i| rt.block_on(offload_measured("doc", &cost, 100, move || (0..100).map(|x| x * i).sum())).unwrap())
///     .collect();
/// assert_eq!(sums, [0, 4950, 9900, 14850]);
/// assert!(cost.cheap(100)); // measured: summing 100 numbers is cheap
/// let r = rt.block_on(offload_measured("doc", &cost, 1, || -> u32 { panic!("boom") }));
/// assert_eq!(r.unwrap_err().to_string(), "operator `doc`: panic in pipeline: boom");
/// ```
pub fn offload_measured<F, R>(
    op: &'static str,
    cost: &std::sync::Arc<WorkCost>,
    items: usize,
    f: F,
) -> BoxFuture<'static, Result<R>>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let cost = cost.clone();
    // Decided when first polled, as `offload` decides where to run.
    async move {
        if cost.cheap(items) {
            let t = Instant::now();
            let r = run_here(op, f);
            cost.record(t.elapsed(), items);
            return r;
        }
        offload(op, move || {
            let t = Instant::now();
            let r = f();
            cost.record(t.elapsed(), items);
            r
        })
        .await
    }
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_follows_the_work() {
        let below = IN_PLACE_BELOW.as_nanos() as usize;
        let most = IN_PLACE_MOST.as_nanos() as usize;
        let cost = WorkCost::default();
        // 100 ns an item: cheap items, in place up to IN_PLACE_MOST.
        cost.record(Duration::from_nanos(100_000), 1000);
        let n = most / 100;
        assert!(cost.cheap(n - 1) && !cost.cheap(n));
        // Work ten times dearer, past IN_PLACE_PER_ITEM: in place only up
        // to IN_PLACE_BELOW. One micro-batch moves the estimate by a
        // quarter of at most twice itself; it gets there in a few dozen.
        cost.record(Duration::from_micros(1000), 1000);
        assert!(!cost.cheap(n - 1) && cost.cheap(n / 2));
        for _ in 0..40 {
            cost.record(Duration::from_micros(1000), 1000);
        }
        let m = below / 1000;
        assert!(cost.cheap(m - 1) && !cost.cheap(m + 1));
        // One slow micro-batch (a preempted thread) counts twice at most.
        cost.record(Duration::from_millis(1000), 1000);
        assert!(cost.cheap(m * 4 / 5 - 1));
        // No items: nothing learnt.
        let before = cost.per_item_x16.load(Ordering::Relaxed);
        cost.record(Duration::ZERO, 0);
        assert_eq!(cost.per_item_x16.load(Ordering::Relaxed), before);
        // Work that took no measurable time is cheap, not unmeasured.
        let free = WorkCost::default();
        free.record(Duration::ZERO, 10);
        assert!(free.cheap(100_000));
    }
}
