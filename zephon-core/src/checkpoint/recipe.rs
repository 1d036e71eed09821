//! [`Recipe`]: what identifies a run's data, so a checkpoint is only ever
//! restored into the run it came from.

use crate::hash;
use crate::work::WorkSource;
use std::collections::BTreeMap;
use std::fmt;

/// The identity of a run's data: the work source (datasets, weights, seed,
/// shuffles, passes, canonical lanes) plus the named data-shaping settings of
/// the operator chain (shuffle buffer and seed, packing algorithm and length,
/// mixture weights, ...).
///
/// Only settings that change *which* samples arrive in *which* order belong
/// here. Execution settings (parallelism, runner, prefetch depths, world
/// size, rank, lane ownership) and the per-rank micro-batch size are left out
/// on purpose: they may change between checkpoint and restore.
///
/// Each setting is stored as a hash of its `Debug` form, so a checkpoint stays
/// small and a refused restore can say *which* setting differs.
///
/// ```
/// use zephon_core::checkpoint::Recipe;
/// use zephon_core::{Dataset, Record, ShuffleMode, WorkSource};
/// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 10]])?;
/// let ws = WorkSource::builder().dataset(ds, 1.0).seed(3).build()?;
/// let a = Recipe::new(&ws).setting("shuffle", (64, ShuffleMode::Reservoir, 3));
/// let b = Recipe::new(&ws).setting("shuffle", (128, ShuffleMode::Reservoir, 3));
/// assert_ne!(a.fingerprint(), b.fingerprint());
/// assert_eq!(a.differences(b.settings()), vec!["shuffle (differs)".to_string()]);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Recipe {
    work_fingerprint: u64,
    seed: u64,
    canonical_lanes: u32,
    positions: Option<u64>,
    settings: BTreeMap<String, u64>,
}

impl Recipe {
    /// The recipe of `work`, with no operator settings yet.
    pub fn new(work: &WorkSource) -> Self {
        let state = work.state();
        Recipe {
            work_fingerprint: state.fingerprint,
            seed: state.seed,
            canonical_lanes: state.canonical_lanes,
            positions: work.global_len(),
            settings: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) a data-shaping setting, identified by `name` and
    /// hashed from `value`'s `Debug` form.
    #[must_use]
    pub fn setting(mut self, name: &str, value: impl fmt::Debug) -> Self {
        let h = hash::bytes(format!("{value:?}").as_bytes());
        self.settings.insert(name.to_owned(), h);
        self
    }

    /// Fingerprint of the work source alone.
    pub fn work_fingerprint(&self) -> u64 {
        self.work_fingerprint
    }

    /// The seed of the work source.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The canonical lane count of the run.
    pub fn canonical_lanes(&self) -> u32 {
        self.canonical_lanes
    }

    /// Pointers of the whole run over all lanes, `None` when the work
    /// source repeats forever.
    pub fn positions(&self) -> Option<u64> {
        self.positions
    }

    /// The settings, by name, as hashes.
    pub fn settings(&self) -> &BTreeMap<String, u64> {
        &self.settings
    }

    /// One number for the whole recipe: the work source and every setting.
    pub fn fingerprint(&self) -> u64 {
        fingerprint_of(self.work_fingerprint, &self.settings)
    }

    /// The settings that differ between this recipe and `other`, in words
    /// (`"pack (differs)"`, `"mixture (only in the checkpoint)"`, ...).
    pub fn differences(&self, other: &BTreeMap<String, u64>) -> Vec<String> {
        let mut out = Vec::new();
        for (name, h) in &self.settings {
            match other.get(name) {
                Some(o) if o == h => {}
                Some(_) => out.push(format!("{name} (differs)")),
                None => out.push(format!("{name} (only in this run)")),
            }
        }
        for name in other.keys() {
            if !self.settings.contains_key(name) {
                out.push(format!("{name} (only in the checkpoint)"));
            }
        }
        out
    }
}

pub(crate) fn fingerprint_of(work: u64, settings: &BTreeMap<String, u64>) -> u64 {
    settings.iter().fold(hash::key(&[work]), |h, (name, v)| {
        hash::combine(hash::combine(h, hash::bytes(name.as_bytes())), *v)
    })
}

impl fmt::Debug for Recipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recipe")
            .field(
                "work_fingerprint",
                &format_args!("{:016x}", self.work_fingerprint),
            )
            .field("seed", &self.seed)
            .field("canonical_lanes", &self.canonical_lanes)
            .field("settings", &self.settings.keys().collect::<Vec<_>>())
            .finish()
    }
}
