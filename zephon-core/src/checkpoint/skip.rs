//! Skipped steps: global batches a run leaves out from a given step on
//! (after a loss spike, say), recorded in its checkpoints.

use super::progress::{Delivered, Progress};
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::ops::Range;

/// Names of the recipe settings that record a skip: `skip steps A..B`.
pub const SKIP_PREFIX: &str = "skip steps ";

/// The skipped step ranges recorded in `settings`.
pub(crate) fn recorded(settings: &BTreeMap<String, u64>) -> Vec<Range<u64>> {
    settings
        .keys()
        .filter_map(|k| {
            let (a, b) = k.strip_prefix(SKIP_PREFIX)?.split_once("..")?;
            Some(a.parse().ok()?..b.parse().ok()?)
        })
        .collect()
}

impl Progress {
    /// Leaves out the global batches of steps `from..from + count`: each
    /// lane's batches of those numbers are made and counted as delivered,
    /// but not handed out ([`Checkpointed`](super::Checkpointed) and
    /// [`CheckpointedStream`](super::CheckpointedStream) drop them). A lane's
    /// batch `t` belongs to step `t` on every rank count, so the skip is the
    /// same whatever the world size; it is recorded in every later
    /// checkpoint (a setting `skip steps A..B`), and a run resumed from one
    /// keeps it.
    ///
    /// Only steps to come can be skipped: `from` before the steps already
    /// delivered, an empty range, or one overlapping a recorded skip is an
    /// error naming `skip`.
    ///
    /// ```
    /// use zephon_core::checkpoint::{CheckpointedExt, Recipe, ResumeExt};
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 40]])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(2).build()?;
    /// let mut p = Recipe::new(&ws).start(&ws);
    /// p.skip_steps(1, 2)?; // steps 1 and 2 are left out
    /// let chain = ws.stream().fetch(2).batch(4).resume(&mut p);
    /// assert!(chain.explain(Runner::Inline).to_string().contains("steps 1..3 skipped"));
    /// let steps: Vec<u64> = chain.into_blocking_iter(Runner::Inline)?.checkpointed(p)
    ///     .map(|b| b.map(|b| b.index)).collect::<Result<_, _>>()?;
    /// assert_eq!(steps, [0, 0, 3, 3, 4, 4]);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn skip_steps(&mut self, from: u64, count: u64) -> Result<()> {
        let end = from
            .checked_add(count)
            .filter(|_| count > 0)
            .ok_or_else(|| {
                Error::config(
                    "skip",
                    format!("steps {from}..+{count}: skip at least one step, within 64 bits"),
                )
            })?;
        let done = self.steps();
        if from < done {
            return Err(Error::config(
                "skip",
                format!(
                    "steps {from}..{end} start before step {done}, which this run has delivered already; \
                     only steps to come can be skipped"
                ),
            ));
        }
        if let Some(r) = self.skips().iter().find(|r| r.start < end && from < r.end) {
            return Err(Error::config(
                "skip",
                format!(
                    "steps {from}..{end} overlap the recorded skip of steps {}..{}",
                    r.start, r.end
                ),
            ));
        }
        self.recipe_mut()
            .insert_hashed(&format!("{SKIP_PREFIX}{from}..{end}"), 1);
        self.set_skips(recorded(self.recipe().settings()));
        Ok(())
    }

    /// Whether `unit` belongs to a skipped step (a loop that counts its
    /// batches itself, without [`Checkpointed`](super::Checkpointed),
    /// records it and leaves it out).
    pub fn is_skipped<T: Delivered>(&self, unit: &T) -> bool {
        match unit.lane_index() {
            Some(t) => self.skips().iter().any(|r| r.contains(&t)),
            None => false,
        }
    }
}
