//! Sample pointers and the traits that let operators see lanes and identities.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A lane: one of the fixed logical sub-streams that ranks own.
pub type LaneId = u32;

/// Where a sample lives and which lane it travels in: a few integers, no I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SamplePtr {
    /// Index of the dataset in the work source's catalog.
    pub dataset: u32,
    /// Index of the shard within the dataset.
    pub shard: u32,
    /// Index of the sample within the shard.
    pub sample: u64,
    /// The lane this sample is assigned to.
    pub lane: LaneId,
}

impl SamplePtr {
    /// A stable 64-bit identity of the sample (lane excluded: the same sample
    /// has the same identity whichever lane carries it).
    pub fn identity(&self) -> u64 {
        crate::hash::key(&[self.dataset as u64, self.shard as u64, self.sample])
    }
}

impl fmt::Display for SamplePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(dataset {}, shard {}, sample {}, lane {})",
            self.dataset, self.shard, self.sample, self.lane
        )
    }
}

/// Elements that belong to a lane. Stateful operators keep per-lane state.
pub trait Laned {
    /// The element's lane.
    fn lane(&self) -> LaneId;
}

/// Elements with a stable identity, used to seed randomness (shuffles) so that
/// the outcome depends on *what* flows, not on *when* it arrives.
pub trait Identity {
    /// A stable 64-bit identity.
    fn identity(&self) -> u64;
}

impl Laned for SamplePtr {
    fn lane(&self) -> LaneId {
        self.lane
    }
}

impl Identity for SamplePtr {
    fn identity(&self) -> u64 {
        SamplePtr::identity(self)
    }
}

impl<T: Laned> Laned for std::sync::Arc<T> {
    fn lane(&self) -> LaneId {
        (**self).lane()
    }
}

impl<T: Identity> Identity for std::sync::Arc<T> {
    fn identity(&self) -> u64 {
        (**self).identity()
    }
}
