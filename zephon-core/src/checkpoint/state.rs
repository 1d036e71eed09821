//! [`Checkpoint`]: the versioned, serializable delivery state of a run, the
//! merge of per-rank checkpoints, and the check against the run restoring it.

use super::cut::LaneCut;
use super::recipe::Recipe;
use crate::error::{Error, Result};
use crate::pointer::LaneId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the [`Checkpoint`] layout this build writes and reads.
/// Version 4 added the step and the checksum of both forms; version 5 made
/// lane cuts open to any operator (a preamble and a state each operator
/// serializes itself, see [`cut`](super::cut)) instead of a fixed set of
/// operator variants.
pub const CHECKPOINT_VERSION: u32 = 5;

/// What one lane has delivered to the consumer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneProgress {
    /// Lane-batches handed to the consumer.
    pub batches: u64,
    /// Elements in those batches. This is what a restore skips, so the
    /// micro-batch size may change as long as this count falls on a batch
    /// boundary of the new size.
    pub items: u64,
    /// The rank's pipeline ended after these batches: the lane ran dry, so
    /// it holds fewer batches than lanes with data left at the same step.
    pub ended: bool,
}

/// The state of a run between two training steps: per canonical lane, what
/// was delivered, plus what identifies the run (format version, seed, lane
/// count, work-source and recipe fingerprints).
///
/// It holds no samples, only pointers: per lane, the lane's cut (what its
/// stateful operators held, see [`cut`](super::cut)), from which a restore
/// refills shuffle buffers, mixture queues, packing bins and partial
/// batches. A lane without a cut is replayed and what was delivered dropped
/// (see [`ResumeFrom`](super::ResumeFrom)): every operator's output on a
/// lane is a pure function of that lane's input.
///
/// A rank's checkpoint holds the lanes it owns; [`Checkpoint::merge`] joins
/// the checkpoints of all ranks into one that any world size can restore from.
///
/// ```
/// use zephon_core::checkpoint::{Checkpoint, Recipe};
/// use zephon_core::{Dataset, Record, WorkSource};
/// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 10]])?;
/// let ws = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(2).build()?;
/// let mut progress = Recipe::new(&ws).start(&ws);
/// progress.record(0, 4);
/// let ckpt = progress.checkpoint();
/// assert_eq!(Checkpoint::from_json(&ckpt.to_json())?, ckpt);
/// assert_eq!(Checkpoint::from_bytes(&ckpt.to_bytes())?, ckpt);
/// assert_eq!(ckpt.lanes[&0].items, 4);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// Layout version ([`CHECKPOINT_VERSION`] when written by this build).
    pub version: u32,
    /// Steps completed: the most lane-batches any of its lanes delivered
    /// (lanes that ran dry near the end of a finite run hold fewer). The
    /// checkpoints of all ranks merge only when taken at the same step.
    pub step: u64,
    /// Pointers of the whole run over all lanes (the work source's length),
    /// `None` when it repeats forever: what tells a lane that still had
    /// data from one that ran dry.
    pub positions: Option<u64>,
    /// Fingerprint of the whole recipe (work source and settings).
    pub recipe_fingerprint: u64,
    /// Fingerprint of the work source alone.
    pub work_fingerprint: u64,
    /// The run's seed.
    pub seed: u64,
    /// The run's canonical lane count.
    pub canonical_lanes: u32,
    /// Hash of each named data-shaping setting, so a refusal can name it.
    pub settings: BTreeMap<String, u64>,
    /// Progress of the lanes this checkpoint covers (all lanes once merged).
    pub lanes: BTreeMap<LaneId, LaneProgress>,
    /// Per lane, what its stateful operators held after its last delivered
    /// batch, so a restore refills them rather than replaying the lane. A
    /// lane without a cut is replayed from its start.
    #[serde(with = "super::compact")]
    pub cuts: BTreeMap<LaneId, LaneCut>,
}

/// Lanes (sorted) written as runs, `0-3, 7, 9-11`: a message names a
/// checkpoint's lanes in a line whatever their number (up to 65,536).
///
/// ```
/// use zephon_core::checkpoint::lane_runs;
/// assert_eq!(lane_runs([0, 1, 2, 3, 7, 9, 10, 11]), "0-3, 7, 9-11");
/// assert_eq!(lane_runs([]), "none");
/// ```
pub fn lane_runs(lanes: impl IntoIterator<Item = LaneId>) -> String {
    let mut runs: Vec<(LaneId, LaneId)> = Vec::new();
    for l in lanes {
        match runs.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(l) => *last = l,
            _ => runs.push((l, l)),
        }
    }
    if runs.is_empty() {
        return "none".into();
    }
    let text: Vec<String> = runs
        .iter()
        .map(|&(a, b)| match a == b {
            true => a.to_string(),
            false => format!("{a}-{b}"),
        })
        .collect();
    text.join(", ")
}

pub(super) fn err(origin: &str, message: impl Into<String>) -> Error {
    Error::Checkpoint {
        origin: origin.to_owned(),
        message: message.into(),
    }
}

impl Checkpoint {
    /// Whether every canonical lane is covered (a merged, global checkpoint).
    pub fn is_complete(&self) -> bool {
        (0..self.canonical_lanes).all(|l| self.lanes.contains_key(&l))
    }

    /// The canonical lanes this checkpoint does not cover (see
    /// [`lane_runs`] to name them in a message).
    pub fn missing_lanes(&self) -> Vec<LaneId> {
        (0..self.canonical_lanes)
            .filter(|l| !self.lanes.contains_key(l))
            .collect()
    }

    /// Joins the checkpoints of several ranks (each covering its own lanes)
    /// into one. They must come from the same run and step: same version,
    /// seed, lane count, fingerprints and step, and no lane may be in two
    /// parts.
    ///
    /// ```
    /// use zephon_core::checkpoint::{Checkpoint, Recipe};
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 10]])?;
    /// let rank = |r| WorkSource::builder().dataset(ds.clone(), 1.0)
    ///     .canonical_lanes(4).rank(r).world_size(2).build();
    /// let (ws0, ws1) = (rank(0)?, rank(1)?);
    /// let a = Recipe::new(&ws0).start(&ws0).checkpoint();
    /// let b = Recipe::new(&ws1).start(&ws1).checkpoint();
    /// assert!(!a.is_complete());
    /// assert!(Checkpoint::merge([a, b])?.is_complete());
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn merge(parts: impl IntoIterator<Item = Checkpoint>) -> Result<Self> {
        Self::merge_named(
            parts
                .into_iter()
                .enumerate()
                .map(|(i, c)| (c, format!("part {i}"))),
        )
    }

    pub(super) fn merge_named(
        parts: impl IntoIterator<Item = (Checkpoint, String)>,
    ) -> Result<Self> {
        let parts: Vec<(Checkpoint, String)> = parts.into_iter().collect();
        check_same_step(&parts)?;
        let mut it = parts.into_iter();
        let (mut acc, first) = it
            .next()
            .ok_or_else(|| err("merge", "no checkpoints to merge"))?;
        // Which part each lane came from, to name both when one repeats.
        let mut owner: BTreeMap<LaneId, String> =
            acc.lanes.keys().map(|&l| (l, first.clone())).collect();
        for (part, name) in it {
            let origin = format!("{name} (merged with {first})");
            let same = |what: &str, a: u64, b: u64| {
                if a == b {
                    Ok(())
                } else {
                    Err(err(
                        &origin,
                        format!("{what} {b} differs from {a} in {first}: not the same run"),
                    ))
                }
            };
            same("version", acc.version as u64, part.version as u64)?;
            same("seed", acc.seed, part.seed)?;
            if acc.positions != part.positions {
                return Err(err(
                    &origin,
                    format!(
                        "run length {:?} differs from {:?} in {first}: not the same run",
                        part.positions, acc.positions
                    ),
                ));
            }
            same(
                "canonical_lanes",
                acc.canonical_lanes as u64,
                part.canonical_lanes as u64,
            )?;
            same(
                "work fingerprint",
                acc.work_fingerprint,
                part.work_fingerprint,
            )?;
            same(
                "recipe fingerprint",
                acc.recipe_fingerprint,
                part.recipe_fingerprint,
            )?;
            for (&lane, p) in &part.lanes {
                if let Some(other) = owner.get(&lane) {
                    return Err(err(
                        &origin,
                        format!(
                            "lane {lane} is also in {other}: each lane must come from exactly one rank's checkpoint"
                        ),
                    ));
                }
                owner.insert(lane, name.clone());
                acc.lanes.insert(lane, *p);
            }
            acc.cuts.extend(part.cuts);
        }
        // Ranks whose lanes ran dry may be behind: the merged step is the
        // furthest lane's.
        acc.step = acc.lanes.values().map(|p| p.batches).max().unwrap_or(0);
        Ok(acc)
    }

    /// Checks that this checkpoint belongs to the run `recipe` describes:
    /// seed, lane count, work source and every setting. The error says which
    /// one differs.
    pub fn check_recipe(&self, recipe: &Recipe) -> Result<()> {
        let origin = "restore";
        // The operator chain is checked where the pipeline is known
        // (`ResumeExt::resume`); a recipe kept by hand does not hold it.
        let recipe = &recipe.with_chain_of(&self.settings);
        super::form::check_version(self.version as u64, origin)?;
        // A checkpoint built or changed in memory has not been through a
        // file's checks.
        self.check_consistent(origin)?;
        if self.seed != recipe.seed() {
            return Err(err(
                origin,
                format!(
                    "seed differs: the checkpoint has seed {}, this run {}",
                    self.seed,
                    recipe.seed()
                ),
            ));
        }
        if self.canonical_lanes != recipe.canonical_lanes() {
            return Err(err(
                origin,
                format!(
                    "canonical_lanes differs: the checkpoint has {} lanes, this run {}; the lane count is fixed for a run",
                    self.canonical_lanes,
                    recipe.canonical_lanes()
                ),
            ));
        }
        if self.work_fingerprint != recipe.work_fingerprint() {
            return Err(err(
                origin,
                "work source fingerprint differs: the datasets, weights, shuffles, passes, exhaustion policies or tokens per sample are not those of the checkpointed run",
            ));
        }
        if self.positions != recipe.positions() {
            return Err(err(
                origin,
                format!(
                    "run length differs: the checkpoint's run has {:?} positions, this run {:?}",
                    self.positions,
                    recipe.positions()
                ),
            ));
        }
        // A checkpoint written before shards were recorded holds none: it is
        // checked against the other settings.
        let recorded = self
            .settings
            .keys()
            .any(|k| k.starts_with(super::recipe::SHARD_PREFIX));
        let expected = match recorded {
            true => recipe.fingerprint(),
            false => recipe.fingerprint_without_shards(),
        };
        if self.recipe_fingerprint != expected {
            let mut diff = recipe.differences(&self.settings);
            if !recorded {
                let ours = recipe.differences(&BTreeMap::new());
                diff.retain(|d| !ours.contains(d) || !d.starts_with("dataset `"));
            }
            return Err(err(
                origin,
                format!(
                    "recipe fingerprint differs in the settings: {}",
                    diff.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// Batches delivered per lane, over all lanes: the steps of a training loop
/// that takes one batch per owned lane per step, whichever lane has one
/// (rounded up, as a checkpoint may fall inside a step).
fn rounds(c: &Checkpoint) -> u64 {
    // Summed wide: a file's counts are anyone's numbers, and their mean
    // fits where their sum may not.
    let total: u128 = c.lanes.values().map(|&p| u128::from(p.batches)).sum();
    u64::try_from(total.div_ceil(c.lanes.len().max(1) as u128)).unwrap_or(u64::MAX)
}

/// Refuses parts taken at different steps: a set of rank files agrees on
/// the step, always. A training loop counts a step either as the next
/// batch of every owned lane (the step is the most batches a lane
/// delivered: lanes with data left all hold that many at a step boundary)
/// or as one batch per owned lane in round robin, whichever lane has one
/// (the rounds). The parts whose pipeline had not ended must all agree by
/// one of the two counts. A part whose pipeline ended (every lane ran dry,
/// see [`Progress::mark_ended`](super::Progress::mark_ended)) holds the
/// same state at every later step, so it joins parts of its own step or of
/// a later one, never of an earlier one: its last batch came after theirs.
fn check_same_step(parts: &[(Checkpoint, String)]) -> Result<()> {
    let ended = |c: &Checkpoint| !c.lanes.is_empty() && c.lanes.values().all(|p| p.ended);
    let live: Vec<&(Checkpoint, String)> = parts.iter().filter(|(c, _)| !ended(c)).collect();
    let Some((first, first_name)) = live.first().map(|p| (&p.0, &p.1)) else {
        return Ok(());
    };
    let (step, per_lane) = (first.step, rounds(first));
    let same_step = live.iter().all(|(c, _)| c.step == step);
    let same_rounds = live.iter().all(|(c, _)| rounds(c) == per_lane);
    if !same_step && !same_rounds {
        let (part, name) = live
            .iter()
            .map(|p| (&p.0, &p.1))
            .find(|(c, _)| c.step != step)
            .unwrap_or((first, first_name));
        return Err(err(
            &format!("{name} (merged with {first_name})"),
            format!(
                "taken at step {}, {first_name} at step {step}: checkpoints of different steps \
                 (a rank whose pipeline ran to its end records it with Progress::mark_ended, \
                 as Checkpointed does)",
                part.step
            ),
        ));
    }
    for (part, name) in parts.iter().filter(|(c, _)| ended(c)) {
        // Later by every count the live parts agree on.
        let later = (!same_step || part.step > step) && (!same_rounds || rounds(part) > per_lane);
        if later {
            return Err(err(
                &format!("{name} (merged with {first_name})"),
                format!(
                    "its pipeline ended at step {}, after {first_name}'s step {step}: checkpoints of different steps",
                    part.step
                ),
            ));
        }
    }
    Ok(())
}
