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
    /// Per shard setting (see [`SHARD_PREFIX`]), the shard's name in words.
    shard_names: BTreeMap<String, String>,
}

/// Names of the settings that record the identity of a shard: `shard
/// DATASET/INDEX name` (its path below the dataset's common folder) and
/// `shard DATASET/INDEX content` (its sample count and
/// [`Shard::fingerprint`](crate::Shard::fingerprint)), for every shard that
/// has a fingerprint.
pub const SHARD_PREFIX: &str = "shard ";

/// The shard names of `names` below their longest common folder, so a
/// dataset moved or copied whole keeps them, while a shard renamed or moved
/// into a subfolder does not.
fn relative_names(names: &[&str]) -> Vec<String> {
    let folder = |n: &str| n.rfind('/').map_or(0, |i| i + 1);
    let mut common = names.first().map_or(0, |n| folder(n));
    for n in names {
        let a = &names[0].as_bytes()[..common];
        let same = a
            .iter()
            .zip(n.as_bytes())
            .take_while(|(x, y)| x == y)
            .count();
        common = folder(&names[0][..same.min(common)]);
    }
    names.iter().map(|n| n[common..].to_owned()).collect()
}

impl Recipe {
    /// The recipe of `work`, with no operator settings yet.
    ///
    /// The shards of its datasets that know a
    /// [`fingerprint`](crate::Shard::fingerprint) enter it as settings
    /// (see [`SHARD_PREFIX`]): a restore over data that changed is refused,
    /// naming the shard.
    pub fn new(work: &WorkSource) -> Self {
        let state = work.state();
        let mut settings = BTreeMap::new();
        let mut shard_names = BTreeMap::new();
        for ds in work.catalog().iter() {
            let names: Vec<&str> = ds.shards().iter().map(|s| s.name()).collect();
            let relative = relative_names(&names);
            for (i, (shard, rel)) in ds.shards().iter().zip(relative).enumerate() {
                let Some(fp) = shard.fingerprint() else {
                    continue;
                };
                let key = format!("{SHARD_PREFIX}{}/{i}", ds.name());
                let words = format!("dataset `{}` shard {i} (`{}`)", ds.name(), shard.name());
                settings.insert(format!("{key} name"), hash::bytes(rel.as_bytes()));
                settings.insert(format!("{key} content"), hash::key(&[shard.len(), fp]));
                shard_names.insert(format!("{key} name"), words.clone());
                shard_names.insert(format!("{key} content"), words);
            }
        }
        Recipe {
            work_fingerprint: state.fingerprint,
            seed: state.seed,
            canonical_lanes: state.canonical_lanes,
            positions: work.global_len(),
            settings,
            shard_names,
        }
    }

    /// The fingerprint a checkpoint written before shards were recorded
    /// holds: that of the settings other than the shards'.
    pub(crate) fn fingerprint_without_shards(&self) -> u64 {
        let settings: BTreeMap<String, u64> = self
            .settings
            .iter()
            .filter(|(k, _)| !k.starts_with(SHARD_PREFIX))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        fingerprint_of(self.work_fingerprint, &settings)
    }

    /// Records a checksum of every shard's whole content
    /// ([`Shard::content_checksum`](crate::Shard::content_checksum)) as a
    /// setting `shard DATASET/INDEX bytes`, so a resume over a shard edited
    /// anywhere is refused, naming it: the fingerprint [`Recipe::new`]
    /// records reads sampled bytes only, and misses an edit elsewhere in a
    /// large shard that keeps its size. It costs a full read of every local
    /// shard; a remote shard gives its manifest's SHA-256 (where the
    /// manifest has one, as `build-index` writes it) without a read. Both
    /// the checkpointed run and the resumed one must use it: a checkpoint
    /// without the checksums is refused by a recipe that has them. An error
    /// reading a shard names it.
    ///
    /// ```
    /// use zephon_core::checkpoint::Recipe;
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 4]])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).build()?;
    /// // In-memory shards have no checksum: nothing is added.
    /// let r = Recipe::new(&ws).verify_content(&ws)?;
    /// assert_eq!(r.fingerprint(), Recipe::new(&ws).fingerprint());
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn verify_content(mut self, work: &WorkSource) -> crate::error::Result<Self> {
        for ds in work.catalog().iter() {
            for (i, shard) in ds.shards().iter().enumerate() {
                let Some(sum) = shard.content_checksum()? else {
                    continue;
                };
                let key = format!("{SHARD_PREFIX}{}/{i} bytes", ds.name());
                let words = format!("dataset `{}` shard {i} (`{}`)", ds.name(), shard.name());
                self.settings
                    .insert(key.clone(), hash::key(&[shard.len(), sum]));
                self.shard_names.insert(key, words);
            }
        }
        Ok(self)
    }

    /// Adds (or replaces) a data-shaping setting, identified by `name` and
    /// hashed from `value`'s `Debug` form.
    #[must_use]
    pub fn setting(mut self, name: &str, value: impl fmt::Debug) -> Self {
        let h = hash::bytes(format!("{value:?}").as_bytes());
        self.settings.insert(name.to_owned(), h);
        self
    }

    /// Sets a setting by its hash (a chain stage's, see
    /// [`CHAIN_PREFIX`](super::CHAIN_PREFIX)).
    pub(crate) fn insert_hashed(&mut self, name: &str, hash: u64) {
        self.settings.insert(name.to_owned(), hash);
    }

    /// This recipe with the operator chain recorded in `settings` (a
    /// checkpoint's), when it records none itself (the chain is checked
    /// where the pipeline is known, by
    /// [`resume`](super::ResumeExt::resume)), and with the skipped steps
    /// recorded there.
    pub(crate) fn with_chain_of(&self, settings: &BTreeMap<String, u64>) -> Recipe {
        let mut out = self.clone();
        if super::chain::recorded(&self.settings).is_empty() {
            for (k, v) in super::chain::recorded(settings) {
                out.settings.insert(k.to_owned(), v);
            }
        }
        // Skipped steps are the run's history: a resumed run keeps them.
        for (k, v) in settings
            .iter()
            .filter(|(k, _)| k.starts_with(super::SKIP_PREFIX))
        {
            out.settings.insert(k.clone(), *v);
        }
        out
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
    /// A shard's settings are said in words: `dataset `web` shard 2
    /// (`/data/b.jsonl`): content differs from the checkpointed run's`.
    pub fn differences(&self, other: &BTreeMap<String, u64>) -> Vec<String> {
        let mut out = Vec::new();
        let shard = |name: &str, what: &str| {
            let words = self.shard_names.get(name)?;
            let part = name.rsplit(' ').next().unwrap_or("identity");
            Some(format!("{words}: its {part} {what}"))
        };
        for (name, h) in &self.settings {
            match other.get(name) {
                Some(o) if o == h => {}
                Some(_) => out.push(
                    shard(
                        name,
                        "differs from the checkpointed run's (size, sample count or bytes changed)",
                    )
                    .unwrap_or_else(|| format!("{name} (differs)")),
                ),
                None => out.push(
                    shard(name, "is not in the checkpointed run")
                        .unwrap_or_else(|| format!("{name} (only in this run)")),
                ),
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
            .field(
                "settings",
                &self
                    .settings
                    .keys()
                    .filter(|k| !k.starts_with(SHARD_PREFIX))
                    .collect::<Vec<_>>(),
            )
            .field("shards", &(self.shard_names.len() / 2))
            .finish()
    }
}
