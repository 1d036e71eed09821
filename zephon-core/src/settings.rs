//! The documented ranges of every size, count and parallelism setting, and
//! the one check that enforces them (builders, operators, the CLI's recipes).
//!
//! The upper bounds are far above any useful value but low enough that a
//! typo (an extra digit, `u32::MAX`) is an error naming the setting instead
//! of an allocation of tens of gigabytes, an aborted process or an
//! overflowing capacity.
//!
//! ```
//! use zephon_core::settings::BATCH_SIZE;
//! assert_eq!(BATCH_SIZE.check("batch.size", 32u32).unwrap(), 32);
//! let e = BATCH_SIZE.check_usize("batch.size", 0).unwrap_err().to_string();
//! assert!(e.contains("batch.size") && e.contains("1..=1048576"), "{e}");
//! ```

use crate::error::{Error, Result};

/// An inclusive range of allowed values, with why its upper bound is what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// Smallest allowed value.
    pub min: u64,
    /// Largest allowed value.
    pub max: u64,
    /// Why the bound is there, for the error message.
    pub why: &'static str,
}

impl Range {
    /// The range `min..=max`.
    pub const fn new(min: u64, max: u64, why: &'static str) -> Self {
        Range { min, max, why }
    }

    /// `value` if it lies in the range, else a [`Error::Config`] naming `key`.
    pub fn check<T: Copy + Into<u128> + std::fmt::Display>(
        &self,
        key: &str,
        value: T,
    ) -> Result<T> {
        let v: u128 = value.into();
        if v < self.min as u128 || v > self.max as u128 {
            return Err(self.error(key, value));
        }
        Ok(value)
    }

    /// Like [`check`](Range::check), for a `usize`.
    pub fn check_usize(&self, key: &str, value: usize) -> Result<usize> {
        self.check(key, value as u64).map(|v| v as usize)
    }

    /// Whether `value` lies in the range.
    pub fn contains(&self, value: u64) -> bool {
        (self.min..=self.max).contains(&value)
    }

    /// What is wrong with `value`, for an error message.
    pub fn message(&self, value: impl std::fmt::Display) -> String {
        format!(
            "{value} is out of range {}..={} ({})",
            self.min, self.max, self.why
        )
    }

    /// The error for `value` out of this range.
    pub fn error(&self, key: &str, value: impl std::fmt::Display) -> Error {
        Error::config(key, self.message(value))
    }
}

/// The detail an operator shows in `explain()`: what it is set to, or, when
/// a setting is out of range, the error its first poll will return.
///
/// ```
/// use zephon_core::settings::{explain_detail, BATCH_SIZE};
/// let e = BATCH_SIZE.error("batch.size", 0);
/// assert!(explain_detail(Some(&e), "0 per lane".into()).starts_with("invalid: "));
/// assert_eq!(explain_detail(None::<&String>, "8 per lane".into()), "8 per lane");
/// ```
pub fn explain_detail(invalid: Option<&impl std::fmt::Display>, detail: String) -> String {
    match invalid {
        Some(e) => format!("invalid: {e}"),
        None => detail,
    }
}

/// `canonical_lanes`: every stateful operator keeps state per lane and the
/// tail multiplexer a queue per lane, so the count is bounded to keep those
/// tables small; 65,536 lanes is far more ranks than any run has.
pub const CANONICAL_LANES: Range = Range::new(1, 65_536, "state is kept per lane");

/// `world_size`: each rank owns at least one lane.
pub const WORLD_SIZE: Range = Range::new(1, 65_536, "each rank owns at least one lane");

/// Parallelism of `fetch`, `map_par`, `tokenize` and shard prefetch: tasks or
/// micro-batches in flight, each holding its buffers; beyond a few thousand
/// they add memory and no speed.
pub const PARALLELISM: Range = Range::new(1, 4096, "work in flight at once");

/// Worker threads of the threads runner (0: one per core); every thread
/// reserves a stack, and far more threads than cores only adds switching.
pub const WORKERS: Range = Range::new(0, 4096, "threads spawned at start-up; 0 is one per core");

/// Elements handed to a worker at once by `map_par` and `tokenize`.
pub const MICRO_BATCH: Range = Range::new(1, 65_536, "elements held per micro-batch");

/// Elements per batch: a batch is allocated whole.
pub const BATCH_SIZE: Range = Range::new(1, 1 << 20, "a batch is allocated whole");

/// Elements a buffering operator holds per lane (shuffle, `ensure_mixture`)
/// or pointers looked ahead (shard prefetch): 16 Mi elements per lane.
pub const BUFFER_SIZE: Range = Range::new(1, 1 << 24, "elements held in memory per lane");

/// Finished elements kept ahead of the consumer (`prefetch_batches`).
pub const PREFETCH_DEPTH: Range = Range::new(0, 65_536, "finished elements held in memory");

/// Tokens per row (pack `max_length`, `to_training` `seq_len`, tokenize
/// `max_length`): rows are allocated whole, and 16 Mi tokens is longer than
/// any model's context.
pub const SEQ_LEN: Range = Range::new(1, 1 << 24, "a row of tokens is allocated whole");

/// The mixture's chunk size: one chunk's schedule is materialised.
pub const CHUNK_SIZE: Range = Range::new(1, 1 << 24, "one chunk's schedule is held in memory");

/// A work source's `passes` (and `stop_after_passes`): at least one, and no
/// more than a dataset may repeat ([`MAX_REPEATS`]): past it a typo is an
/// endless run by another name.
pub const PASSES: Range = Range::new(1, 1 << 40, "passes over the datasets");

/// A dataset's `max_repeats` (passes after its first): far beyond any
/// training run, low enough that a typo is an error, not an endless run by
/// another name.
pub const MAX_REPEATS: Range = Range::new(0, 1 << 40, "passes after the first over one dataset");

/// Records read per dataset to estimate its tokens per sample: each is read
/// and handed to the estimator at build time.
pub const TOKEN_SAMPLES: Range = Range::new(1, 1 << 20, "records read per dataset at build time");

/// The largest average tokens per sample a dataset may be given (a float
/// setting; finite and positive too): a sample of over 2^32 tokens is a
/// mistake in units.
pub const MAX_TOKENS_PER_SAMPLE: f64 = 4_294_967_296.0;

/// Number of cores available to this process: what a `0` for
/// [`WORKERS`] (and the other "one per core" settings) stands for.
pub fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_and_errors_name_the_key() {
        assert_eq!(
            CANONICAL_LANES.check("canonical_lanes", 65_536u32).unwrap(),
            65_536
        );
        assert_eq!(WORKERS.check_usize("workers", 0).unwrap(), 0);
        let e = CANONICAL_LANES
            .check("canonical_lanes", u32::MAX)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`canonical_lanes`") && e.contains("4294967295"),
            "{e}"
        );
        assert!(PARALLELISM.check_usize("p", usize::MAX).is_err());
        assert!(SEQ_LEN.check("seq_len", 0u64).is_err());
    }

    /// The first item is the error naming `key`, and the stream ends there.
    fn refused<T: Send + 'static>(
        s: impl futures::Stream<Item = Result<T>> + Send + 'static,
        key: &str,
    ) {
        use crate::{PipelineExt, Runner};
        let mut it = s.into_blocking_iter(Runner::Inline).unwrap();
        match it.next() {
            Some(Err(e)) => assert!(e.to_string().contains(&format!("`{key}`")), "{key}: {e}"),
            Some(Ok(_)) => panic!("{key}: an element instead of an error"),
            None => panic!("{key}: an empty stream instead of an error"),
        }
        assert!(it.next().is_none(), "{key}: the stream goes on");
    }

    #[test]
    fn operators_refuse_out_of_range_settings_at_first_poll() {
        use crate::{Dataset, PipelineExt, Record, ShuffleMode, WorkSource};
        let recs = || futures::stream::iter((0..8).map(|_| Ok(Record::new())));
        refused(recs().batch(0), "batch.size");
        refused(recs().batch(usize::MAX), "batch.size");
        refused(recs().map_par(Ok, 0), "map_par.parallelism");
        refused(recs().map_par(Ok, 100_000), "map_par.parallelism");
        refused(recs().map_par(Ok, 2).micro_batch(0), "map_par.micro_batch");
        refused(
            recs().shuffle(0, ShuffleMode::Reservoir, 1),
            "shuffle.buffer_size",
        );
        refused(
            recs().shuffle(usize::MAX, ShuffleMode::Block, 1),
            "shuffle.buffer_size",
        );
        refused(
            recs().batch(2).prefetch_batches(10_000_000),
            "prefetch_batches.depth",
        );
        refused(recs().lane_mux(vec![]), "lane_mux.lanes");
        refused(recs().lane_mux(vec![0, u32::MAX]), "lane_mux.lanes");
        let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 8]]).unwrap();
        let ws = WorkSource::builder().dataset(ds, 1.0).build().unwrap();
        refused(ws.stream().fetch(0), "fetch.parallelism");
        refused(ws.stream().fetch(2).max_group(0), "fetch.max_group");
    }

    #[test]
    fn explain_shows_an_out_of_range_setting() {
        use crate::{Dataset, PipelineExt, Record, Runner, WorkSource};
        let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 8]]).unwrap();
        let ws = WorkSource::builder().dataset(ds, 1.0).build().unwrap();
        let plan = ws.stream().fetch(2).batch(0).explain(Runner::Inline);
        let batch = plan.stages.iter().find(|s| s.name == "batch").unwrap();
        assert!(
            batch.detail.contains("invalid") && batch.detail.contains("`batch.size`"),
            "{plan}"
        );
    }
}
