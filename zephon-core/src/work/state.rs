//! Serializable work-source state for checkpoints.

use serde::{Deserialize, Serialize};

/// Version of the [`WorkState`] layout.
pub const WORK_STATE_VERSION: u32 = 1;

/// Where a work source stands. Because every pointer is a pure function of its
/// global index, the state is the next global index plus what identifies the
/// run (seed, lanes, a fingerprint of the datasets and the data-shaping
/// settings), so a restore into a different run is refused, not silently
/// accepted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkState {
    /// Layout version.
    pub version: u32,
    /// Fingerprint of datasets, weights and the data-shaping settings.
    pub fingerprint: u64,
    /// The seed.
    pub seed: u64,
    /// Canonical lane count.
    pub canonical_lanes: u32,
    /// The next global index to emit (over all lanes).
    pub next_global: u64,
    /// Average tokens per sample of each dataset (catalog order) the
    /// schedule was built with, empty when the weights are sample shares:
    /// an estimate measured at build time is kept here, so a resumed run
    /// can be given the same one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens_per_sample: Vec<f64>,
}
