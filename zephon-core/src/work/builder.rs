//! The work source's builder and options.

use super::shuffle::DatasetOrder;
use super::{BlockShuffle, LaneConfig, Launcher, Mixture, Ownership, Plan, WorkSource};
use crate::dataset::{Catalog, Dataset};
use crate::error::{Error, Result};
use crate::hash;
use crate::settings;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// What happens when a dataset has been read completely.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exhaustion {
    /// Stop the stream as soon as any dataset completes this many passes
    /// (so the mixture holds up to the last pointer).
    Stop {
        /// Passes over each dataset.
        passes: u64,
    },
    /// Never stop; every pass is reshuffled (the pass number keys the shuffles).
    Repeat,
}

/// The data-shaping settings of a work source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkConfig {
    /// Seed of every shuffle.
    pub seed: u64,
    /// Mixture chunk size: each chunk holds exact largest-remainder quotas.
    pub chunk_size: u64,
    /// Shuffle the order of shards in each pass (default on).
    pub shuffle_shards: bool,
    /// Shuffle samples within each shard (default on).
    pub shuffle_within_shard: bool,
    /// Block shuffle over the pass (default off).
    pub shuffle_block_size: BlockShuffle,
    /// Passes and exhaustion policy (default: stop after one pass).
    pub exhaustion: Exhaustion,
    /// Lane layout and this rank's place in it.
    pub lanes: LaneConfig,
}

impl Default for WorkConfig {
    fn default() -> Self {
        WorkConfig {
            seed: 0,
            chunk_size: 1024,
            shuffle_shards: true,
            shuffle_within_shard: true,
            shuffle_block_size: BlockShuffle::Off,
            exhaustion: Exhaustion::Stop { passes: 1 },
            lanes: LaneConfig::default(),
        }
    }
}

/// Builds a [`WorkSource`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct WorkSourceBuilder {
    datasets: Vec<(Dataset, f64)>,
    config: WorkConfig,
    /// Rank and world size as a launcher exported them.
    launcher: Option<Launcher>,
    /// Whether `rank` / `world_size` were set explicitly, so a launcher that
    /// disagrees is refused rather than silently overriding them.
    explicit_rank: bool,
    explicit_world_size: bool,
}

impl WorkSourceBuilder {
    /// Adds a dataset with its mixture weight (weights need not sum to 1).
    pub fn dataset(mut self, dataset: Dataset, weight: f64) -> Self {
        self.datasets.push((dataset, weight));
        self
    }
    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self
    }
    /// Sets the mixture chunk size, in
    /// [`settings::CHUNK_SIZE`] (1 to 16 Mi; checked by [`build`](Self::build)).
    pub fn chunk_size(mut self, n: u64) -> Self {
        self.config.chunk_size = n;
        self
    }
    /// Shard shuffle on or off.
    pub fn shuffle_shards(mut self, on: bool) -> Self {
        self.config.shuffle_shards = on;
        self
    }
    /// Within-shard shuffle on or off.
    pub fn shuffle_within_shard(mut self, on: bool) -> Self {
        self.config.shuffle_within_shard = on;
        self
    }
    /// Block shuffle size; a [`BlockShuffle::Size`] of 0 is refused by
    /// [`build`](Self::build).
    pub fn shuffle_block_size(mut self, b: BlockShuffle) -> Self {
        self.config.shuffle_block_size = b;
        self
    }
    /// Stop after `n` passes (at least 1, checked by [`build`](Self::build)).
    pub fn passes(mut self, n: u64) -> Self {
        self.config.exhaustion = Exhaustion::Stop { passes: n };
        self
    }
    /// Repeat forever, reshuffling every pass.
    pub fn repeat(mut self) -> Self {
        self.config.exhaustion = Exhaustion::Repeat;
        self
    }
    /// Number of canonical lanes (fixed for a run), in
    /// [`settings::CANONICAL_LANES`] (1 to 65,536; checked by [`build`](Self::build)).
    pub fn canonical_lanes(mut self, n: u32) -> Self {
        self.config.lanes.canonical_lanes = n;
        self
    }
    /// This process's rank, below `world_size` (checked by [`build`](Self::build)).
    pub fn rank(mut self, r: u32) -> Self {
        self.config.lanes.rank = r;
        self.explicit_rank = true;
        self
    }
    /// Number of data-parallel ranks, in [`settings::WORLD_SIZE`] (1 to
    /// 65,536) and dividing `canonical_lanes` (checked by [`build`](Self::build)).
    pub fn world_size(mut self, w: u32) -> Self {
        self.config.lanes.world_size = w;
        self.explicit_world_size = true;
        self
    }
    /// Takes rank and world size from `launcher` (see [`Launcher`]). An
    /// explicit [`rank`](Self::rank) or [`world_size`](Self::world_size)
    /// that differs from it is refused by [`build`](Self::build), whatever
    /// the order of the calls.
    ///
    /// ```
    /// use zephon_core::work::{Launcher, LauncherKind};
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 8]])?;
    /// let l = Launcher { rank: 1, world_size: 2, local_rank: None, kind: LauncherKind::Torchrun };
    /// let ws = WorkSource::builder().dataset(ds.clone(), 1.0).canonical_lanes(4).launcher(l).build()?;
    /// assert_eq!(ws.owned_lanes(), vec![2, 3]);
    /// let e = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(4)
    ///     .rank(0).launcher(l).build().unwrap_err();
    /// assert!(e.to_string().contains("RANK"), "{e}");
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn launcher(mut self, launcher: Launcher) -> Self {
        self.launcher = Some(launcher);
        self
    }
    /// Takes rank and world size from the process environment as torchrun
    /// (`RANK`, `WORLD_SIZE`) or Slurm (`SLURM_PROCID`, `SLURM_NTASKS`)
    /// export them ([`Launcher::from_env`]); without those variables the
    /// builder is unchanged (a single process, unless set otherwise).
    /// Values that are not numbers, or a rank not below the world size, are
    /// an [`Error::Config`] naming the variable.
    ///
    /// ```no_run
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 8]])?;
    /// // Started by `torchrun --nproc-per-node 4` or `srun --ntasks 4`.
    /// let ws = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(8)
    ///     .ranks_from_env()?.build()?;
    /// println!("this rank owns lanes {:?}", ws.owned_lanes());
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn ranks_from_env(self) -> Result<Self> {
        Ok(match Launcher::from_env()? {
            Some(l) => self.launcher(l),
            None => self,
        })
    }

    /// Applies the launcher's rank and world size, refusing explicit
    /// settings that differ.
    fn apply_launcher(&mut self) -> Result<()> {
        let Some(l) = self.launcher else {
            return Ok(());
        };
        let [rank_var, world_var, _] = l.kind.variables();
        let lanes = &mut self.config.lanes;
        for (key, explicit, set, launched, var) in [
            (
                "rank",
                self.explicit_rank,
                &mut lanes.rank,
                l.rank,
                rank_var,
            ),
            (
                "world_size",
                self.explicit_world_size,
                &mut lanes.world_size,
                l.world_size,
                world_var,
            ),
        ] {
            if explicit && *set != launched {
                return Err(Error::config(
                    key,
                    format!(
                        "set to {set}, but the launcher's {var} is {launched}; set one or the other, or the same"
                    ),
                ));
            }
            *set = launched;
        }
        Ok(())
    }
    /// How lanes are dealt to ranks.
    pub fn ownership(mut self, o: Ownership) -> Self {
        self.config.lanes.ownership = o;
        self
    }
    /// Replaces the whole configuration.
    pub fn config(mut self, config: WorkConfig) -> Self {
        self.config = config;
        self
    }

    /// Validates everything and builds the work source: an out-of-range
    /// setting is an [`Error::Config`] naming it.
    ///
    /// ```
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 4]]).unwrap();
    /// let e = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(u32::MAX).build().unwrap_err();
    /// assert!(e.to_string().contains("canonical_lanes"), "{e}");
    /// ```
    pub fn build(mut self) -> Result<WorkSource> {
        self.apply_launcher()?;
        let c = &self.config;
        if self.datasets.is_empty() {
            return Err(Error::config(
                "datasets",
                "a work source needs at least one dataset",
            ));
        }
        settings::CANONICAL_LANES.check("canonical_lanes", c.lanes.canonical_lanes)?;
        settings::WORLD_SIZE.check("world_size", c.lanes.world_size)?;
        c.lanes.validate()?;
        settings::CHUNK_SIZE.check("chunk_size", c.chunk_size)?;
        if let Exhaustion::Stop { passes: 0 } = c.exhaustion {
            return Err(Error::config("passes", "must be at least 1"));
        }
        if c.shuffle_block_size == BlockShuffle::Size(0) {
            return Err(Error::config(
                "shuffle_block_size",
                "a block of 0 samples; use at least 1, or off",
            ));
        }
        for (ds, _) in &self.datasets {
            if ds.num_samples() == 0 {
                return Err(Error::Dataset {
                    dataset: ds.name().into(),
                    location: ds.location().into(),
                    message: "has no samples".into(),
                });
            }
        }
        let names: Vec<&str> = self.datasets.iter().map(|(d, _)| d.name()).collect();
        let weights: Vec<f64> = self.datasets.iter().map(|(_, w)| *w).collect();
        let mixture = Mixture::new(&weights, &names, c.chunk_size)?;
        let orders: Vec<DatasetOrder> = self
            .datasets
            .iter()
            .enumerate()
            .map(|(i, (ds, _))| {
                DatasetOrder::new(
                    c.seed,
                    i as u32,
                    ds.shards().iter().map(|s| s.len()).collect(),
                    c.shuffle_shards,
                    c.shuffle_within_shard,
                    c.shuffle_block_size,
                )
            })
            .collect();
        let end = match c.exhaustion {
            Exhaustion::Repeat => None,
            Exhaustion::Stop { passes } => {
                let mut end = u64::MAX;
                for (d, o) in orders.iter().enumerate() {
                    // The stream's length must be countable: a pass count
                    // whose samples overflow 64 bits is a typo, not a plan.
                    let too_many = || {
                        Error::config(
                            "passes",
                            format!(
                                "{passes} passes over dataset `{}` ({} samples) overflow the sample count; use `repeat` for an endless stream",
                                names[d], o.total
                            ),
                        )
                    };
                    let samples = passes.checked_mul(o.total).ok_or_else(too_many)?;
                    end = end.min(
                        mixture
                            .checked_global_index(d, samples)
                            .ok_or_else(too_many)?,
                    );
                }
                Some(end)
            }
        };
        let mut fp = hash::key(&[
            c.seed,
            c.chunk_size,
            c.shuffle_shards as u64,
            c.shuffle_within_shard as u64,
            c.lanes.canonical_lanes as u64,
        ]);
        fp = hash::combine(
            fp,
            hash::bytes(format!("{:?}{:?}", c.shuffle_block_size, c.exhaustion).as_bytes()),
        );
        for ((ds, w), o) in self.datasets.iter().zip(&orders) {
            fp = hash::combine(fp, hash::bytes(ds.name().as_bytes()));
            fp = hash::combine(fp, w.to_bits());
            for l in &o.shard_lens {
                fp = hash::combine(fp, *l);
            }
        }
        let catalog: Catalog = self.datasets.into_iter().map(|(d, _)| d).collect();
        Ok(WorkSource {
            plan: Arc::new(Plan {
                catalog,
                config: self.config,
                mixture,
                orders,
                end,
                epoch_len: end,
                fingerprint: fp,
            }),
            next_global: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    fn builder() -> WorkSourceBuilder {
        let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 8]; 2]).unwrap();
        WorkSource::builder().dataset(ds, 1.0)
    }

    fn refused(b: WorkSourceBuilder, key: &str) -> String {
        let e = b.build().unwrap_err().to_string();
        assert!(e.contains(&format!("`{key}`")), "{key}: {e}");
        e
    }

    #[test]
    fn out_of_range_settings_are_errors_naming_them() {
        let e = refused(builder().canonical_lanes(u32::MAX), "canonical_lanes");
        assert!(e.contains("1..=65536"), "{e}");
        refused(builder().canonical_lanes(0), "canonical_lanes");
        refused(builder().chunk_size(u64::MAX), "chunk_size");
        refused(builder().passes(u64::MAX), "passes");
        refused(builder().passes(0), "passes");
        refused(
            builder().shuffle_block_size(BlockShuffle::Size(0)),
            "shuffle_block_size",
        );
        refused(builder().canonical_lanes(4).world_size(0), "world_size");
        refused(builder().canonical_lanes(4).world_size(4).rank(4), "rank");
    }

    fn launched(env: &[(&str, &str)]) -> Launcher {
        Launcher::from_lookup(|k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap()
        .unwrap()
    }

    #[test]
    fn ranks_come_from_the_launcher() {
        let l = launched(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")]);
        let ws = builder().canonical_lanes(4).launcher(l).build().unwrap();
        assert_eq!(ws.owned_lanes(), vec![2, 3]);
        // Explicit settings that agree are fine, in either order.
        let ws = builder()
            .canonical_lanes(4)
            .world_size(2)
            .launcher(l)
            .rank(1)
            .build()
            .unwrap();
        assert_eq!(ws.owned_lanes(), vec![2, 3]);
    }

    #[test]
    fn explicit_ranks_that_disagree_with_the_launcher_are_refused() {
        let l = launched(&[("RANK", "1"), ("WORLD_SIZE", "2")]);
        let e = refused(builder().canonical_lanes(4).rank(0).launcher(l), "rank");
        assert!(e.contains("set to 0, but the launcher's RANK is 1"), "{e}");
        let e = refused(
            builder().canonical_lanes(4).launcher(l).world_size(4),
            "world_size",
        );
        assert!(e.contains("WORLD_SIZE is 2"), "{e}");
        // The launcher's world size must still divide the lanes.
        let l = launched(&[("RANK", "0"), ("WORLD_SIZE", "3")]);
        assert!(builder().canonical_lanes(4).launcher(l).build().is_err());
    }

    #[test]
    fn the_bounds_themselves_are_accepted() {
        let ws = builder()
            .canonical_lanes(65_536)
            .world_size(65_536)
            .rank(65_535)
            .chunk_size(1 << 24)
            .build()
            .unwrap();
        assert_eq!(ws.owned_lanes(), vec![65_535]);
        assert!(builder().passes(1 << 40).build().is_ok());
    }
}
