//! Lanes: the fixed logical sub-streams, and which of them a rank owns.

use crate::error::{Error, Result};
use crate::pointer::LaneId;
use serde::{Deserialize, Serialize};

/// How lanes are dealt to ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ownership {
    /// Rank `r` of `W` owns lanes `r*L/W .. (r+1)*L/W`.
    #[default]
    Contiguous,
    /// Rank `r` of `W` owns lanes `r, r+W, r+2W, ...`.
    Interleaved,
}

/// The lane layout of a run and this process's place in it.
///
/// `canonical_lanes` is fixed for a run (it is part of what the model sees);
/// `rank`, `world_size` and `ownership` are execution settings that may change
/// between checkpoint and restore.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneConfig {
    /// Number of lanes the global sample sequence is dealt into.
    pub canonical_lanes: u32,
    /// This process's rank, `0..world_size`.
    pub rank: u32,
    /// Number of data-parallel ranks.
    pub world_size: u32,
    /// How lanes are dealt to ranks.
    pub ownership: Ownership,
}

impl Default for LaneConfig {
    fn default() -> Self {
        LaneConfig {
            canonical_lanes: 1,
            rank: 0,
            world_size: 1,
            ownership: Ownership::Contiguous,
        }
    }
}

impl LaneConfig {
    /// Checks the layout: every rank must own the same, non-zero number of lanes.
    pub fn validate(&self) -> Result<()> {
        if self.canonical_lanes == 0 {
            return Err(Error::config("canonical_lanes", "must be at least 1"));
        }
        if self.world_size == 0 {
            return Err(Error::config("world_size", "must be at least 1"));
        }
        if self.rank >= self.world_size {
            return Err(Error::config(
                "rank",
                format!(
                    "rank {} is not below world_size {}",
                    self.rank, self.world_size
                ),
            ));
        }
        if self.canonical_lanes < self.world_size {
            return Err(Error::config(
                "canonical_lanes",
                format!(
                    "{} lanes is smaller than world_size {}: every rank needs at least one lane",
                    self.canonical_lanes, self.world_size
                ),
            ));
        }
        if !self.canonical_lanes.is_multiple_of(self.world_size) {
            return Err(Error::config(
                "canonical_lanes",
                format!(
                    "{} lanes cannot be dealt evenly to {} ranks; use a world_size that divides canonical_lanes",
                    self.canonical_lanes, self.world_size
                ),
            ));
        }
        Ok(())
    }

    /// The lanes this rank owns, in increasing order.
    pub fn owned_lanes(&self) -> Vec<LaneId> {
        let (l, w, r) = (self.canonical_lanes, self.world_size, self.rank);
        match self.ownership {
            Ownership::Contiguous => {
                let per = l / w;
                (r * per..(r + 1) * per).collect()
            }
            Ownership::Interleaved => (r..l).step_by(w as usize).collect(),
        }
    }

    /// Whether this rank owns `lane`.
    pub fn owns(&self, lane: LaneId) -> bool {
        let (l, w, r) = (self.canonical_lanes, self.world_size, self.rank);
        match self.ownership {
            Ownership::Contiguous => lane / (l / w) == r,
            Ownership::Interleaved => lane % w == r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_partitions_lanes() {
        for ownership in [Ownership::Contiguous, Ownership::Interleaved] {
            for w in [1, 2, 4, 8] {
                let mut all: Vec<LaneId> = (0..w)
                    .flat_map(|rank| {
                        let c = LaneConfig {
                            canonical_lanes: 8,
                            rank,
                            world_size: w,
                            ownership,
                        };
                        c.validate().unwrap();
                        let owned = c.owned_lanes();
                        assert!(owned.iter().all(|&l| c.owns(l)));
                        owned
                    })
                    .collect();
                all.sort();
                assert_eq!(all, (0..8).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn too_few_lanes_is_an_error() {
        let c = LaneConfig {
            canonical_lanes: 2,
            rank: 0,
            world_size: 4,
            ..Default::default()
        };
        let msg = c.validate().unwrap_err().to_string();
        assert!(
            msg.contains("canonical_lanes") && msg.contains("world_size 4"),
            "{msg}"
        );
    }
}
