//! Loss masks of what a lane held at a checkpoint, put back on restore.
//!
//! The cut names pieces of documents by token range; restoring re-reads the
//! documents and rebuilds ids from those ranges. Masks are cut from the same
//! ranges of the re-read documents' [`fields::LOSS_MASK`], so a resumed run
//! takes the loss on the same tokens as an uninterrupted one.

use super::cut::{Piece, cut_pieces};
use super::{LaneState, Packer};
use crate::fields;
use zephon_core::checkpoint::cut::OpLaneCut;
use zephon_core::{LaneId, Record, Value};

/// The masks of documents re-read for a cut, in the cut's order.
pub(crate) fn doc_masks(docs: &[Record]) -> Vec<Option<Vec<u32>>> {
    docs.iter()
        .map(|r| r.token_ids(fields::LOSS_MASK).map(|m| m.to_vec()))
        .collect()
}

/// The pieces' masks joined, or `None` if no piece has one (a piece without
/// one beside masked pieces is all supervised, as in `Row::push_masked`).
fn joined(pieces: &[Piece], slice: &impl Fn(&Piece) -> Option<Vec<u32>>) -> Option<Vec<u32>> {
    let parts: Vec<Option<Vec<u32>>> = pieces.iter().map(slice).collect();
    parts.iter().any(Option::is_some).then(|| {
        pieces
            .iter()
            .zip(parts)
            .flat_map(|(p, m)| m.unwrap_or_else(|| vec![1; (p.end() - p.start()) as usize]))
            .collect()
    })
}

impl Packer {
    /// Right after [`restore_lane`](Packer::restore_lane) with the same
    /// `cut`: gives the restored rows and held sequences of `lane` their
    /// masks, cut from `masks` (the re-read documents', in the cut's order).
    pub(crate) fn restore_masks(
        &mut self,
        lane: LaneId,
        cut: &OpLaneCut,
        masks: &[Option<Vec<u32>>],
    ) {
        let Some((ready, open)) = cut_pieces(lane, cut) else {
            return;
        };
        if masks.iter().all(Option::is_none) {
            return;
        }
        let slice = |p: &Piece| -> Option<Vec<u32>> {
            let m = masks.get(p.doc() as usize)?.as_ref()?;
            m.get(p.start() as usize..p.end() as usize)
                .map(<[u32]>::to_vec)
        };
        // `restore_lane` has just appended the lane's ready rows, in order.
        let first = self.out.len().saturating_sub(ready.len());
        for (pieces, (row, _)) in ready.iter().zip(self.out.range_mut(first..)) {
            if let Some(m) = joined(pieces, &slice) {
                row.set(fields::LOSS_MASK, Value::Tokens(m));
            }
        }
        for (group, open) in open {
            let key = (lane, group);
            match self.lanes.get_mut(&key) {
                Some(LaneState::Wrap(w)) => w.row.loss_mask = joined(&open, &slice),
                Some(LaneState::Bins(_) | LaneState::BestFitWrap(_)) => {
                    self.masks.insert(key, open.iter().map(slice).collect());
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{PackAlgorithm, PackConfig, Packer};
    use zephon_core::{Lineage, Record, SamplePtr, Value};

    /// Document `i`: ids `100 * i + j`, the first half unsupervised.
    fn doc(i: u64, len: u32) -> Record {
        let mut r = Record::new()
            .with(
                "input_ids",
                Value::Tokens((0..len).map(|j| 100 * i as u32 + j).collect()),
            )
            .with(
                "loss_mask",
                Value::Tokens((0..len).map(|j| u32::from(j >= len / 2)).collect()),
            );
        r.lineage = Lineage::from_elem(
            SamplePtr {
                dataset: 0,
                shard: 0,
                sample: i,
                lane: 0,
            },
            1,
        );
        r
    }

    fn rows(p: &mut Packer) -> Vec<(Vec<u32>, Option<Vec<u32>>)> {
        std::iter::from_fn(|| p.pop())
            .map(|r| {
                let t = |k| r.tokens(k).map(<[u32]>::to_vec);
                (t("input_ids").unwrap(), t("loss_mask"))
            })
            .collect()
    }

    #[test]
    fn a_restored_lane_packs_the_same_masks() {
        let lens = [5, 9, 3, 7, 2, 6, 8, 4, 5, 3];
        let docs: Vec<Record> = (0..lens.len()).map(|i| doc(i as u64, lens[i])).collect();
        for algorithm in [
            PackAlgorithm::FirstFit,
            PackAlgorithm::BestFit,
            PackAlgorithm::Wrap,
            PackAlgorithm::BestFitWrap,
        ] {
            let config = PackConfig::new(8, algorithm).num_bins(2);
            let mut whole = Packer::new(config.clone());
            whole.track_cuts();
            for r in &docs[..6] {
                whole.push(r.clone()).unwrap();
            }
            let cut = whole.lane_cut(0).unwrap();
            let (ready, open) = super::cut_pieces(0, &cut).expect("a packing cut");
            let open: Vec<_> = open.into_iter().flat_map(|g| g.1).collect();
            let ptrs = cut.preamble.listed.to_vec();
            assert!(!ready.is_empty() || !open.is_empty(), "{algorithm:?}");
            for r in &docs[6..] {
                whole.push(r.clone()).unwrap();
            }
            whole.finish();
            let want = rows(&mut whole);
            assert!(want.iter().all(|(_, m)| m.is_some()), "{algorithm:?}");

            let reread: Vec<Record> = ptrs
                .iter()
                .map(|p| docs[p.sample as usize].clone())
                .collect();
            let mut resumed = Packer::new(config);
            resumed.track_cuts();
            let masks = super::doc_masks(&reread);
            resumed.restore_lane(0, &cut, reread).unwrap();
            resumed.restore_masks(0, &cut, &masks);
            for r in &docs[6..] {
                resumed.push(r.clone()).unwrap();
            }
            resumed.finish();
            assert_eq!(rows(&mut resumed), want, "{algorithm:?}");
        }
    }
}
