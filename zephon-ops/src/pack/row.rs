//! A packed row being filled, and where each of its segments came from.

use crate::fields;
use zephon_core::{LaneId, Lineage, Record, Value};

/// Where a row's segment came from: the document (when its lineage is one
/// pointer) and the token range within it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RowPiece {
    pub ptr: Option<zephon_core::SamplePtr>,
    pub start: u32,
    pub end: u32,
}

impl RowPiece {
    pub(crate) fn of(lineage: &Lineage, start: u32, len: usize) -> Self {
        RowPiece {
            ptr: match lineage.as_slice() {
                [p] => Some(*p),
                _ => None,
            },
            start,
            end: start + len as u32,
        }
    }
}

/// A row being filled: ids, the length of each segment, and the lineage of
/// every segment's source.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Row {
    pub ids: Vec<u32>,
    pub seg_lens: Vec<u32>,
    pub lineage: Lineage,
    pub pieces: Vec<RowPiece>,
    /// One 0 or 1 per id, once a segment with a [`fields::LOSS_MASK`] is in.
    pub loss_mask: Option<Vec<u32>>,
}

impl Row {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Row {
            ids: Vec::with_capacity(n),
            seg_lens: Vec::new(),
            lineage: Lineage::new(),
            pieces: Vec::new(),
            loss_mask: None,
        }
    }

    /// Appends `ids`, tokens `start..` of the document with `lineage`.
    pub(crate) fn push(&mut self, ids: &[u32], lineage: &Lineage, start: u32) {
        self.push_masked(ids, None, lineage, start);
    }

    /// [`push`](Self::push) with the piece's loss mask, if it has one. A
    /// piece without a mask beside masked ones is all supervised, as
    /// `to_training` reads an unmasked record.
    pub(crate) fn push_masked(
        &mut self,
        ids: &[u32],
        mask: Option<&[u32]>,
        lineage: &Lineage,
        start: u32,
    ) {
        match (&mut self.loss_mask, mask) {
            (Some(m), Some(add)) => m.extend_from_slice(add),
            (Some(m), None) => m.extend(std::iter::repeat_n(1, ids.len())),
            (None, Some(add)) => {
                let mut m = vec![1; self.ids.len()];
                m.extend_from_slice(add);
                self.loss_mask = Some(m);
            }
            (None, None) => {}
        }
        self.ids.extend_from_slice(ids);
        self.seg_lens.push(ids.len() as u32);
        self.lineage.extend(lineage.iter().copied());
        self.pieces.push(RowPiece::of(lineage, start, ids.len()));
    }

    /// The packed record: ids, segment ids from 1, positions restarting at
    /// every segment.
    pub(crate) fn into_record(self, lane: LaneId) -> Record {
        let n = self.ids.len();
        let mut segs = Vec::with_capacity(n);
        let mut pos = Vec::with_capacity(n);
        for (i, &len) in self.seg_lens.iter().enumerate() {
            segs.extend(std::iter::repeat_n(i as u32 + 1, len as usize));
            pos.extend(0..len);
        }
        let mut r = Record {
            lane,
            lineage: self.lineage,
            ..Record::new()
        };
        r.set(fields::INPUT_IDS, Value::Tokens(self.ids));
        r.set(fields::SEGMENT_IDS, Value::Tokens(segs));
        r.set(fields::POSITION_IDS, Value::Tokens(pos));
        if let Some(m) = self.loss_mask {
            r.set(fields::LOSS_MASK, Value::Tokens(m));
        }
        r
    }
}
