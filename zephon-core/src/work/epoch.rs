//! Epochs of a work source and finer lane splits of a rank, for loaders
//! that iterate a work source again and again (Burn's `DataLoader`).

use super::{LaneConfig, Ownership, WorkSource};
use crate::error::{Error, Result};
use std::sync::Arc;

impl WorkSource {
    /// The work source of epoch `epoch` (counted from 0): the global indices
    /// `epoch * N .. (epoch + 1) * N`, where `N` is [`global_len`](Self::global_len),
    /// from the start of the epoch whatever this source's position.
    ///
    /// Every pointer is a function of its global index, so epoch 1 continues
    /// where epoch 0 stopped: a dataset's pass `k` is reshuffled as pass `k`
    /// is (the pass number keys the shard, within-shard and block
    /// shuffles). With one dataset and `passes(P)`, epoch `e` holds passes
    /// `e * P .. (e + 1) * P`; in a mixture, a dataset that had not finished
    /// its pass when the epoch ended finishes it in the next epoch.
    ///
    /// An endless source ([`repeat`](super::WorkSourceBuilder::repeat)) has
    /// no epochs, and an epoch whose end overflows 64 bits is refused:
    /// both are an [`Error::Config`].
    ///
    /// ```
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let ds = Dataset::in_memory("d", vec![vec![Record::new(); 6]; 2])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).seed(3).build()?;
    /// let order = |e| ws.epoch(e).unwrap().stream().pointers().map(|p| (p.shard, p.sample)).collect::<Vec<_>>();
    /// let (first, second) = (order(0), order(1));
    /// assert_eq!(first.len(), 12);
    /// assert_ne!(first, second, "each epoch is reshuffled");
    /// let (mut a, mut b) = (first.clone(), second.clone());
    /// a.sort();
    /// b.sort();
    /// assert_eq!(a, b, "and holds every sample once");
    /// assert_eq!(first, order(0), "the same epoch is the same order");
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn epoch(&self, epoch: u64) -> Result<WorkSource> {
        let Some(n) = self.plan.epoch_len else {
            return Err(Error::config(
                "passes",
                "an endless (repeat) work source has no epochs; set a number of passes",
            ));
        };
        let too_far = || {
            Error::config(
                "epoch",
                format!("epoch {epoch} of {n} pointers overflows the global index"),
            )
        };
        let start = epoch.checked_mul(n).ok_or_else(too_far)?;
        let end = start.checked_add(n).ok_or_else(too_far)?;
        let mut plan = (*self.plan).clone();
        plan.end = Some(end);
        Ok(WorkSource {
            plan: Arc::new(plan),
            next_global: start,
        })
    }

    /// This rank's lanes dealt again to `parts` parts (the devices of one
    /// rank process): part `part` of rank `r` of `W` is rank `r * parts +
    /// part` of `W * parts` for contiguous ownership, rank `r + part * W`
    /// for interleaved, so it owns a subset of this rank's lanes and the
    /// parts together own them all, each once. The position is kept.
    ///
    /// `parts` must be at least 1 and `W * parts` must divide the canonical
    /// lanes; `part` must be below `parts`. Otherwise an [`Error::Config`]
    /// names the setting.
    ///
    /// ```
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let ds = Dataset::in_memory("d", vec![vec![Record::new(); 16]])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(8).world_size(2).rank(1).build()?;
    /// assert_eq!(ws.owned_lanes(), vec![4, 5, 6, 7]);
    /// assert_eq!(ws.lane_part(0, 2)?.owned_lanes(), vec![4, 5]);
    /// assert_eq!(ws.lane_part(1, 2)?.owned_lanes(), vec![6, 7]);
    /// assert!(ws.lane_part(0, 3).is_err());
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn lane_part(&self, part: u32, parts: u32) -> Result<WorkSource> {
        let c = self.plan.config.lanes;
        if parts == 0 {
            return Err(Error::config("parts", "must be at least 1"));
        }
        if part >= parts {
            return Err(Error::config(
                "part",
                format!("part {part} is not below {parts} parts"),
            ));
        }
        let world_size = c.world_size.checked_mul(parts).ok_or_else(|| {
            Error::config(
                "parts",
                format!("{parts} parts of {} ranks overflow", c.world_size),
            )
        })?;
        let rank = match c.ownership {
            Ownership::Contiguous => c.rank * parts + part,
            Ownership::Interleaved => c.rank + part * c.world_size,
        };
        let lanes = LaneConfig {
            rank,
            world_size,
            ..c
        };
        lanes.validate().map_err(|e| {
            Error::config(
                "parts",
                format!(
                    "{} lanes on {} ranks cannot be split into {parts} parts per rank: {e}",
                    c.canonical_lanes, c.world_size
                ),
            )
        })?;
        let mut plan = (*self.plan).clone();
        plan.config.lanes = lanes;
        Ok(WorkSource {
            plan: Arc::new(plan),
            next_global: self.next_global,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{Dataset, Record, WorkSource};
    use std::collections::BTreeSet;

    fn source(lanes: u32, ownership: super::Ownership) -> WorkSource {
        let ds = Dataset::in_memory("d", vec![vec![Record::new(); 25]; 3]).unwrap();
        WorkSource::builder()
            .dataset(ds, 1.0)
            .seed(11)
            .canonical_lanes(lanes)
            .ownership(ownership)
            .build()
            .unwrap()
    }

    #[test]
    fn lane_parts_partition_an_epoch() {
        for ownership in [super::Ownership::Contiguous, super::Ownership::Interleaved] {
            let ws = source(8, ownership).epoch(2).unwrap();
            let whole: BTreeSet<_> = ws.stream().pointers().collect();
            assert_eq!(whole.len(), 75);
            let mut parts = BTreeSet::new();
            let mut count = 0;
            for p in 0..4 {
                let part = ws.lane_part(p, 4).unwrap();
                assert_eq!(part.owned_lanes().len(), 2);
                count += part.len().unwrap();
                parts.extend(part.stream().pointers());
            }
            assert_eq!(count, 75);
            assert_eq!(parts, whole);
        }
    }

    #[test]
    fn epochs_need_an_end_and_parts_need_lanes() {
        let ds = Dataset::in_memory("d", vec![vec![Record::new(); 4]]).unwrap();
        let endless = WorkSource::builder()
            .dataset(ds, 1.0)
            .repeat()
            .build()
            .unwrap();
        assert!(endless.epoch(0).unwrap_err().to_string().contains("passes"));
        let ws = source(4, super::Ownership::Contiguous);
        assert!(
            ws.epoch(u64::MAX)
                .unwrap_err()
                .to_string()
                .contains("epoch")
        );
        let e = ws.lane_part(0, 3).unwrap_err().to_string();
        assert!(
            e.contains("4 lanes on 1 ranks cannot be split into 3"),
            "{e}"
        );
        assert!(ws.lane_part(3, 3).is_err());
        assert!(ws.lane_part(0, 0).is_err());
    }
}
