//! The work source's builder and options.

use super::config::{check_named, check_unique, limit, token_weights};
use super::policy::{ExhaustedPolicy, Schedule};
use super::shuffle::DatasetOrder;
use super::{BlockShuffle, Exhaustion, Launcher, Ownership, Plan, WorkConfig, WorkSource};
use crate::dataset::{Catalog, Dataset};
use crate::error::{Error, Result};
use crate::hash;
use crate::settings;
use std::sync::Arc;

/// Builds a [`WorkSource`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct WorkSourceBuilder {
    pub(super) datasets: Vec<(Dataset, f64)>,
    pub(super) config: WorkConfig,
    /// Rank and world size as a launcher exported them.
    launcher: Option<Launcher>,
    /// Whether `rank` / `world_size` were set explicitly, so a launcher that
    /// disagrees is refused rather than silently overriding them.
    explicit_rank: bool,
    explicit_world_size: bool,
}

impl WorkSourceBuilder {
    /// Adds a dataset with its mixture weight (weights need not sum to 1).
    /// Each dataset needs a name of its own ([`build`](Self::build) refuses
    /// a second one of a name): per-dataset policies and token estimates
    /// are given by name, and per-dataset figures are kept under it. The
    /// same data under two names is allowed: two entries of the mixture.
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
    ///
    /// Over remote data larger than the shard cache, the order decides the
    /// cost. A global shuffle ([`BlockShuffle::Global`]) touches the data
    /// in random order: read it by byte range (the storage crate's
    /// `byte_range`), which fetches just each sample's bytes, many requests
    /// in flight, neighbours within a small gap merged into one request
    /// (`fetch(..).max_group(n)`, with `.across_shards(true)` when there are
    /// several shards, sets how many upcoming samples a read sees). Through
    /// the block cache instead, it downloads blocks that are evicted before
    /// their other samples are read. A block shuffle
    /// ([`BlockShuffle::Size`], with `shuffle_within_shard(false)`) is the
    /// locality-friendly alternative: each block of neighbouring samples
    /// lies in a few cache blocks, downloaded once and used while cached,
    /// at the price of a weaker shuffle (samples mix only within a block).
    pub fn shuffle_block_size(mut self, b: BlockShuffle) -> Self {
        self.config.shuffle_block_size = b;
        self
    }
    /// Stop after `n` passes, in [`settings::PASSES`] (1 to 2^40; checked by
    /// [`build`](Self::build)).
    pub fn passes(mut self, n: u64) -> Self {
        self.config.exhaustion = Exhaustion::Stop { passes: n };
        self
    }
    /// Repeat forever, reshuffling every pass.
    pub fn repeat(mut self) -> Self {
        self.config.exhaustion = Exhaustion::Repeat;
        self
    }
    /// Repeat every dataset until each has completed `n` passes
    /// ([`Exhaustion::AllPasses`]; at least 1, checked by [`build`](Self::build)).
    ///
    /// ```
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let a = Dataset::in_memory("a", vec![vec![Record::new(); 4]])?;
    /// let b = Dataset::in_memory("b", vec![vec![Record::new(); 12]])?;
    /// let ws = WorkSource::builder().dataset(a, 1.0).dataset(b, 1.0).chunk_size(2)
    ///     .stop_after_passes(1).build()?;
    /// // `b` is read once; `a`, as fast, three times meanwhile.
    /// assert_eq!(ws.global_len(), Some(24));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn stop_after_passes(mut self, n: u64) -> Self {
        self.config.exhaustion = Exhaustion::AllPasses { passes: n };
        self
    }
    /// Every dataset without a policy of its own follows `policy`
    /// ([`Exhaustion::PerDataset`]); policies already given per dataset stay.
    pub fn exhausted_policy(mut self, policy: ExhaustedPolicy) -> Self {
        self.config.exhaustion = Exhaustion::PerDataset { default: policy };
        self
    }
    /// The policy of the dataset named `name` (switching to
    /// [`Exhaustion::PerDataset`], default [`ExhaustedPolicy::Stop`], unless
    /// already there). A name no dataset has is refused by
    /// [`build`](Self::build).
    ///
    /// ```
    /// use zephon_core::work::ExhaustedPolicy;
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let a = Dataset::in_memory("a", vec![vec![Record::new(); 4]])?;
    /// let b = Dataset::in_memory("b", vec![vec![Record::new(); 12]])?;
    /// let ws = WorkSource::builder().dataset(a, 1.0).dataset(b, 1.0).chunk_size(2)
    ///     .dataset_policy("a", ExhaustedPolicy::Redistribute)
    ///     .dataset_policy("b", ExhaustedPolicy::Redistribute).build()?;
    /// // Once `a` is done, `b` has the stream to itself: each sample once.
    /// assert_eq!(ws.global_len(), Some(16));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn dataset_policy(mut self, name: &str, policy: ExhaustedPolicy) -> Self {
        if !matches!(self.config.exhaustion, Exhaustion::PerDataset { .. }) {
            self.config.exhaustion = Exhaustion::PerDataset {
                default: ExhaustedPolicy::Stop,
            };
        }
        self.config.policies.insert(name.to_owned(), policy);
        self
    }
    /// Average tokens per sample of the dataset named `name` (finite and
    /// positive, checked by [`build`](Self::build)): once given for every
    /// dataset, the weights are token shares. See
    /// [`estimate_tokens`](Self::estimate_tokens) to measure it instead.
    pub fn tokens_per_sample(mut self, name: &str, tokens: f64) -> Self {
        self.config
            .tokens_per_sample
            .insert(name.to_owned(), tokens);
        self
    }
    /// Mixture weights that change during the run: phases, linear
    /// interpolation or an anneal, by global position (see
    /// [`MixtureSchedule`](super::MixtureSchedule); checked by
    /// [`build`](Self::build)). Part of the work source's fingerprint: a
    /// checkpoint resumes only under the same schedule.
    pub fn mixture_schedule(mut self, schedule: super::MixtureSchedule) -> Self {
        self.config.mixture_schedule = Some(schedule);
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
        if let Exhaustion::Stop { passes } | Exhaustion::AllPasses { passes } = c.exhaustion {
            settings::PASSES.check("passes", passes)?;
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
        check_unique(&names)?;
        check_named(&names, c.policies.keys(), "exhausted_policy")?;
        check_named(&names, c.tokens_per_sample.keys(), "tokens_per_sample")?;
        if !c.policies.is_empty() && !matches!(c.exhaustion, Exhaustion::PerDataset { .. }) {
            return Err(Error::config(
                "exhausted_policy",
                format!(
                    "per-dataset policies need the per-dataset exhaustion, not {:?}",
                    c.exhaustion
                ),
            ));
        }
        let tokens = token_weights(c, &names)?;
        let weights: Vec<f64> = self
            .datasets
            .iter()
            .enumerate()
            .map(|(d, (_, w))| tokens.as_ref().map_or(*w, |t| w / t[d]))
            .collect();
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
        let limits = orders
            .iter()
            .enumerate()
            .map(|(d, o)| limit(c, names[d], o.total))
            .collect::<Result<Vec<_>>>()?;
        let mut tally = None;
        let schedule = match &c.mixture_schedule {
            None => Schedule::new(&weights, &names, c.chunk_size, &limits)?,
            Some(ms) => {
                let per_sample = |d: usize, w: f64| tokens.as_ref().map_or(w, |t| w / t[d]);
                // The datasets' own weights hold before the first point;
                // a weight of 0 there keeps a dataset out until it enters.
                for ((_, w), name) in self.datasets.iter().zip(&names) {
                    if !(w.is_finite() && *w >= 0.0) {
                        return Err(Error::config(
                            "weight",
                            format!(
                                "dataset `{name}` has weight {w}; with a mixture schedule, weights must be finite and not negative (0: out until a phase names it)"
                            ),
                        ));
                    }
                }
                let phases = ms.resolve(&names, &weights, per_sample)?;
                let by_tokens = match ms.unit() {
                    super::ScheduleUnit::Tokens => Some(tokens.as_deref().ok_or_else(|| {
                        Error::config(
                            super::phases::KEY,
                            "a schedule by tokens needs tokens per sample for every dataset (tokens_per_sample or estimate_tokens)",
                        )
                    })?),
                    _ => None,
                };
                tally = Some(super::tally::Tally::new(
                    ms.unit(),
                    names.iter().map(|n| n.to_string()).collect(),
                    phases
                        .iter()
                        .map(|p| (p.start, p.weights.clone()))
                        .collect(),
                ));
                Schedule::phased(&phases, by_tokens, &names, c.chunk_size, &limits)?
            }
        };
        let end = schedule.end;
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
        for (d, ((ds, w), o)) in self.datasets.iter().zip(&orders).enumerate() {
            fp = hash::combine(fp, hash::bytes(ds.name().as_bytes()));
            fp = hash::combine(fp, w.to_bits());
            for l in &o.shard_lens {
                fp = hash::combine(fp, *l);
            }
            // Only settings that change the schedule enter the fingerprint,
            // so runs from before these settings existed keep theirs.
            if let Some(p) = c.policies.get(ds.name()) {
                fp = hash::combine(fp, hash::bytes(format!("{p:?}").as_bytes()));
            }
            if let Some(t) = &tokens {
                fp = hash::combine(fp, t[d].to_bits());
            }
        }
        if let Some(ms) = &c.mixture_schedule {
            fp = hash::combine(fp, hash::bytes(format!("{ms:?}").as_bytes()));
        }
        let given: Vec<f64> = self.datasets.iter().map(|(_, w)| *w).collect();
        let catalog: Catalog = self.datasets.into_iter().map(|(d, _)| d).collect();
        Ok(WorkSource {
            plan: Arc::new(Plan {
                catalog,
                config: self.config,
                schedule,
                orders,
                end,
                weights: given,
                tokens_per_sample: tokens,
                epoch_len: end,
                fingerprint: fp,
                tally,
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
        refused(builder().stop_after_passes(0), "passes");
        refused(builder().stop_after_passes(u64::MAX), "passes");
        // Below the product's overflow, past any run: an endless run.
        refused(builder().passes((1 << 40) + 1), "passes");
        refused(builder().stop_after_passes(1 << 50), "passes");
        let e = refused(
            builder().dataset_policy("nope", ExhaustedPolicy::Redistribute),
            "exhausted_policy",
        );
        assert!(e.contains("`nope`"), "{e}");
        let mut policy_then_passes = builder()
            .dataset_policy("toy", ExhaustedPolicy::Stop)
            .passes(2);
        refused(policy_then_passes.clone(), "exhausted_policy");
        policy_then_passes.config.policies.clear();
        assert!(policy_then_passes.build().is_ok());
        let capped = |m| ExhaustedPolicy::Repeat {
            max_repeats: Some(m),
        };
        refused(
            builder().dataset_policy("toy", capped(1 << 41)),
            "max_repeats",
        );
        assert!(
            builder()
                .dataset_policy("toy", capped(1 << 40))
                .build()
                .is_ok()
        );
        for bad in [f64::NAN, 0.0, -1.0, f64::INFINITY, 1e10] {
            let e = refused(builder().tokens_per_sample("toy", bad), "tokens_per_sample");
            assert!(e.contains("`toy`"), "{e}");
        }
        let two = builder()
            .dataset(
                Dataset::in_memory("code", vec![vec![Record::new(); 3]]).unwrap(),
                1.0,
            )
            .tokens_per_sample("toy", 12.0);
        let e = refused(two, "tokens_per_sample");
        assert!(e.contains("`code` has none"), "{e}");
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
