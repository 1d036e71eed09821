//! The data-shaping configuration of a work source, and what it makes of
//! each dataset: its exhaustion limit and its tokens per sample.

use super::policy::{ExhaustedPolicy, Limit};
use super::{BlockShuffle, LaneConfig};
use crate::error::{Error, Result};
use crate::settings;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What happens when a dataset has been read completely.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exhaustion {
    /// Stop the stream as soon as any dataset completes this many passes
    /// (so the mixture holds up to the last pointer).
    Stop {
        /// Passes over each dataset.
        passes: u64,
    },
    /// Never stop; every pass is reshuffled (the pass number keys the shuffles).
    Repeat,
    /// Every dataset repeats (reshuffled) until each has completed this many
    /// passes: the stream ends with the sample that completes the last
    /// dataset's last pass, so that one is read exactly `passes` times and
    /// the others at least as often, holding the mixture throughout.
    AllPasses {
        /// Passes over every dataset (at least 1).
        passes: u64,
    },
    /// Each dataset follows its own [`ExhaustedPolicy`]: the one
    /// [`WorkConfig::policies`] names for it, else `default`.
    PerDataset {
        /// The policy of datasets without one of their own.
        default: ExhaustedPolicy,
    },
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
    /// Per-dataset exhaustion policies by dataset name, read under
    /// [`Exhaustion::PerDataset`] (refused under any other exhaustion).
    #[serde(default)]
    pub policies: BTreeMap<String, ExhaustedPolicy>,
    /// Average tokens per sample by dataset name. Empty: the weights are
    /// sample shares. Set (for every dataset): the weights are token
    /// shares, and dataset `d` is scheduled with the sample weight
    /// `weight / tokens_per_sample`, so the schedule itself holds the token
    /// mixture. See [`WorkSourceBuilder::estimate_tokens`](super::WorkSourceBuilder::estimate_tokens).
    #[serde(default)]
    pub tokens_per_sample: BTreeMap<String, f64>,
    /// Mixture weights that change during the run (none: the datasets'
    /// own weights throughout). See [`MixtureSchedule`](super::MixtureSchedule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixture_schedule: Option<super::MixtureSchedule>,
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
            policies: BTreeMap::new(),
            tokens_per_sample: BTreeMap::new(),
            mixture_schedule: None,
        }
    }
}

/// Refuses an empty dataset name, and two datasets of one name:
/// per-dataset policies and token estimates are given by name, and
/// per-dataset figures kept under it, so a second `web` would silently
/// take the first one's.
pub(super) fn check_unique(names: &[&str]) -> Result<()> {
    for (j, name) in names.iter().enumerate() {
        if name.trim().is_empty() {
            return Err(Error::config(
                "datasets",
                format!("dataset {j} has an empty name; errors and figures name it by its name"),
            ));
        }
        if let Some(i) = names[..j].iter().position(|n| n == name) {
            return Err(Error::config(
                "datasets",
                format!(
                    "datasets {i} and {j} are both named `{name}`: per-dataset settings \
                     and figures go by name; give each dataset its own"
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses a per-dataset setting for a name no dataset has.
pub(super) fn check_named<'a>(
    names: &[&str],
    keys: impl Iterator<Item = &'a String>,
    key: &str,
) -> Result<()> {
    for k in keys {
        if !names.contains(&k.as_str()) {
            return Err(Error::config(
                key,
                format!(
                    "names dataset `{k}`, which the work source does not have (it has {names:?})"
                ),
            ));
        }
    }
    Ok(())
}

/// Tokens per sample in dataset order, `None` when mixing by samples.
pub(super) fn token_weights(c: &WorkConfig, names: &[&str]) -> Result<Option<Vec<f64>>> {
    if c.tokens_per_sample.is_empty() {
        return Ok(None);
    }
    names
        .iter()
        .map(|name| {
            let t = *c.tokens_per_sample.get(*name).ok_or_else(|| {
                Error::config(
                    "tokens_per_sample",
                    format!("dataset `{name}` has none; give it for every dataset, or for none"),
                )
            })?;
            if !(t.is_finite() && t > 0.0 && t <= settings::MAX_TOKENS_PER_SAMPLE) {
                return Err(Error::config(
                    "tokens_per_sample",
                    format!(
                        "dataset `{name}` has {t}; it must be finite, positive and at most {}",
                        settings::MAX_TOKENS_PER_SAMPLE
                    ),
                ));
            }
            Ok(t)
        })
        .collect::<Result<Vec<f64>>>()
        .map(Some)
}

/// How far dataset `name` of `total` samples may go under the configuration.
pub(super) fn limit(c: &WorkConfig, name: &str, total: u64) -> Result<Limit> {
    let times = |n: u64, key: &'static str| {
        n.checked_mul(total).ok_or_else(|| {
            Error::config(
                key,
                format!(
                    "{n} passes over dataset `{name}` ({total} samples) overflow the sample count; use `repeat` for an endless stream"
                ),
            )
        })
    };
    Ok(match c.exhaustion {
        Exhaustion::Repeat => Limit::Endless,
        Exhaustion::Stop { passes } => Limit::Stop(times(passes, "passes")?, "passes"),
        Exhaustion::AllPasses { passes } => Limit::Complete(times(passes, "passes")?),
        Exhaustion::PerDataset { default } => {
            match c.policies.get(name).copied().unwrap_or(default) {
                ExhaustedPolicy::Stop => Limit::Stop(total, "exhausted_policy"),
                ExhaustedPolicy::Redistribute => Limit::Leave(total),
                ExhaustedPolicy::Repeat { max_repeats: None } => Limit::Endless,
                ExhaustedPolicy::Repeat {
                    max_repeats: Some(m),
                } => {
                    settings::MAX_REPEATS.check("max_repeats", m)?;
                    Limit::Stop(times(m + 1, "max_repeats")?, "max_repeats")
                }
            }
        }
    })
}
