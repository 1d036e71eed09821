//! [`Checkpoint`]: the versioned, serializable delivery state of a run, its
//! JSON and binary forms, files, and the merge of per-rank checkpoints.

use super::cut::LaneCut;
use super::recipe::{Recipe, fingerprint_of};
use crate::error::{Error, Result};
use crate::pointer::LaneId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Version of the [`Checkpoint`] layout this build writes and reads.
pub const CHECKPOINT_VERSION: u32 = 3;

/// First bytes of the binary form, so a file is recognised (and a file of
/// something else refused) before decoding.
const MAGIC: &[u8; 4] = b"ZPCK";

/// What one lane has delivered to the consumer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneProgress {
    /// Lane-batches handed to the consumer.
    pub batches: u64,
    /// Elements in those batches. This is what a restore skips, so the
    /// micro-batch size may change as long as this count falls on a batch
    /// boundary of the new size.
    pub items: u64,
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
pub struct Checkpoint {
    /// Layout version ([`CHECKPOINT_VERSION`] when written by this build).
    pub version: u32,
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
    pub cuts: BTreeMap<LaneId, LaneCut>,
}

fn err(origin: &str, message: impl Into<String>) -> Error {
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

    /// The canonical lanes this checkpoint does not cover.
    pub fn missing_lanes(&self) -> Vec<LaneId> {
        (0..self.canonical_lanes)
            .filter(|l| !self.lanes.contains_key(l))
            .collect()
    }

    /// Pretty JSON, for people and tools.
    pub fn to_json(&self) -> String {
        // Plain data with string keys: serialization cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads the JSON form. A different layout version is refused with an
    /// error saying both versions.
    pub fn from_json(text: &str) -> Result<Self> {
        Self::from_json_at(text, "in-memory JSON")
    }

    fn from_json_at(text: &str, origin: &str) -> Result<Self> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| err(origin, format!("not valid JSON: {e}")))?;
        let version = value
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| err(origin, "no `version` field: not a Zephon checkpoint"))?;
        check_version(version, origin)?;
        let ckpt: Checkpoint = serde_json::from_value(value)
            .map_err(|e| err(origin, format!("malformed checkpoint: {e}")))?;
        ckpt.check_consistent(origin)?;
        Ok(ckpt)
    }

    /// The compact binary form: a 4-byte magic, then postcard.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        // Writing plain data into a growable Vec cannot fail.
        out.extend(postcard::to_stdvec(self).unwrap_or_default());
        out
    }

    /// Reads the binary form. A different layout version is refused with an
    /// error saying both versions.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::from_bytes_at(bytes, "in-memory bytes")
    }

    fn from_bytes_at(bytes: &[u8], origin: &str) -> Result<Self> {
        let body = bytes
            .strip_prefix(MAGIC)
            .ok_or_else(|| err(origin, "does not start with the checkpoint magic `ZPCK`"))?;
        // The version leads the layout, so it can be read whatever follows.
        let (version, _) = postcard::take_from_bytes::<u32>(body)
            .map_err(|e| err(origin, format!("truncated before the version: {e}")))?;
        check_version(version as u64, origin)?;
        let ckpt: Checkpoint = postcard::from_bytes(body)
            .map_err(|e| err(origin, format!("corrupt or truncated: {e}")))?;
        ckpt.check_consistent(origin)?;
        Ok(ckpt)
    }

    /// Writes the checkpoint to `path`: JSON when the name ends in `.json`,
    /// the binary form otherwise. The file is replaced atomically (written
    /// beside it, then renamed), so a crash never leaves half a checkpoint.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let data = if path.extension().is_some_and(|e| e == "json") {
            self.to_json().into_bytes()
        } else {
            self.to_bytes()
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let io = |source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        std::fs::write(&tmp, data).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Reads a checkpoint file in either form (recognised by its first
    /// bytes). Errors name the file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: origin.clone(),
            source,
        })?;
        if bytes.starts_with(MAGIC) {
            Self::from_bytes_at(&bytes, &origin)
        } else {
            let text = std::str::from_utf8(&bytes)
                .map_err(|_| err(&origin, "neither the binary form nor UTF-8 JSON"))?;
            Self::from_json_at(text, &origin)
        }
    }

    /// Reads the checkpoint files of several ranks and merges them.
    pub fn load_all<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Result<Self> {
        let mut parts = Vec::new();
        let mut names = Vec::new();
        for p in paths {
            names.push(p.as_ref().display().to_string());
            parts.push(Self::load(p)?);
        }
        Self::merge_named(parts.into_iter().zip(names))
    }

    /// Joins the checkpoints of several ranks (each covering its own lanes)
    /// into one. They must come from the same run and step: same version,
    /// seed, lane count and fingerprints, and a lane present in two parts
    /// must have the same progress in both.
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

    fn merge_named(parts: impl IntoIterator<Item = (Checkpoint, String)>) -> Result<Self> {
        let mut it = parts.into_iter();
        let (mut acc, first) = it
            .next()
            .ok_or_else(|| err("merge", "no checkpoints to merge"))?;
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
            for (lane, cut) in part.cuts {
                acc.cuts.entry(lane).or_insert(cut);
            }
            for (lane, p) in part.lanes {
                match acc.lanes.get(&lane) {
                    Some(q) if *q != p => {
                        return Err(err(
                            &origin,
                            format!(
                                "lane {lane} has {} items delivered here and {} in {first}: checkpoints of different steps",
                                p.items, q.items
                            ),
                        ));
                    }
                    _ => {
                        acc.lanes.insert(lane, p);
                    }
                }
            }
        }
        Ok(acc)
    }

    /// Refuses internal contradictions a corrupt or hand-edited file may have.
    fn check_consistent(&self, origin: &str) -> Result<()> {
        if self.canonical_lanes == 0 {
            return Err(err(origin, "canonical_lanes is 0"));
        }
        if let Some(l) = self.lanes.keys().find(|&&l| l >= self.canonical_lanes) {
            return Err(err(
                origin,
                format!(
                    "lane {l} is outside the {} canonical lanes",
                    self.canonical_lanes
                ),
            ));
        }
        if fingerprint_of(self.work_fingerprint, &self.settings) != self.recipe_fingerprint {
            return Err(err(
                origin,
                "recipe fingerprint does not match its settings: the file is corrupt",
            ));
        }
        Ok(())
    }

    /// Checks that this checkpoint belongs to the run `recipe` describes:
    /// seed, lane count, work source and every setting. The error says which
    /// one differs.
    pub fn check_recipe(&self, recipe: &Recipe) -> Result<()> {
        let origin = "restore";
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
                "work source fingerprint differs: the datasets, weights, shuffles or passes are not those of the checkpointed run",
            ));
        }
        if self.recipe_fingerprint != recipe.fingerprint() {
            let diff = recipe.differences(&self.settings);
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

fn check_version(version: u64, origin: &str) -> Result<()> {
    if version != CHECKPOINT_VERSION as u64 {
        return Err(err(
            origin,
            format!(
                "format version {version} is not supported (this build reads version {CHECKPOINT_VERSION})"
            ),
        ));
    }
    Ok(())
}
