//! [`TrainingBatch`]: the collated, tensor-ready form of a batch of token rows.

use serde::{Deserialize, Serialize};
use zephon_core::{LaneId, Laned};

/// The label value of positions where no loss is taken (PyTorch's and Burn's
/// `ignore_index` convention).
pub const IGNORE_INDEX: i64 = -100;

/// The integer type the consumer wants token ids in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdType {
    /// 32-bit unsigned ids: half the memory, what most vocabularies need.
    #[default]
    U32,
    /// 64-bit signed ids: what embedding layers in PyTorch-style APIs index with.
    I64,
}

/// Token ids of a whole batch, row-major (`batch_size x seq_len`), in the
/// integer type the consumer asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenIds {
    /// `u32` ids.
    U32(Vec<u32>),
    /// `i64` ids.
    I64(Vec<i64>),
}

impl TokenIds {
    /// Number of ids.
    pub fn len(&self) -> usize {
        match self {
            TokenIds::U32(v) => v.len(),
            TokenIds::I64(v) => v.len(),
        }
    }

    /// Whether there are no ids.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id type.
    pub fn id_type(&self) -> IdType {
        match self {
            TokenIds::U32(_) => IdType::U32,
            TokenIds::I64(_) => IdType::I64,
        }
    }

    /// The id at flat index `i`, widened to `i64`.
    pub fn get(&self, i: usize) -> Option<i64> {
        match self {
            TokenIds::U32(v) => v.get(i).map(|&x| x as i64),
            TokenIds::I64(v) => v.get(i).copied(),
        }
    }

    /// The `u32` ids, if stored as `u32`.
    pub fn as_u32(&self) -> Option<&[u32]> {
        match self {
            TokenIds::U32(v) => Some(v),
            TokenIds::I64(_) => None,
        }
    }

    /// The `i64` ids, if stored as `i64`.
    pub fn as_i64(&self) -> Option<&[i64]> {
        match self {
            TokenIds::I64(v) => Some(v),
            TokenIds::U32(_) => None,
        }
    }

    /// All ids as `i64` (a copy when stored as `u32`).
    pub fn to_i64(&self) -> Vec<i64> {
        match self {
            TokenIds::U32(v) => v.iter().map(|&x| x as i64).collect(),
            TokenIds::I64(v) => v.clone(),
        }
    }
}

/// A batch of token rows collated for a training step.
///
/// Every per-token field is a flat, row-major vector of
/// `batch_size * seq_len` elements: element `(b, t)` sits at
/// `b * seq_len + t`. That layout maps one-to-one onto a tensor of shape
/// `[batch_size, seq_len]` without copying.
///
/// A row may hold several documents (a packed row). Their boundaries are kept
/// so that attention and loss need not cross documents:
///
/// - `position_ids` restart at 0 at the start of every document;
/// - `segment_ids` number the documents of a row from 1, with 0 for padding;
/// - `cu_seqlens` lists the cumulative segment boundaries over the flattened
///   batch, in the form variable-length attention kernels expect;
/// - `labels` are the inputs shifted left by one within a document:
///   `labels[b, t] = input_ids[b, t + 1]` when `t + 1` is in the same
///   document, [`IGNORE_INDEX`] (-100) otherwise (last token of a document,
///   last position of a row, padding).
///
/// Built by [`ToTraining`](crate::ToTraining) (`.to_training(..)`) or
/// [`TrainingBatch::from_rows`].
///
/// ```
/// use zephon_ops::{IdType, TrainingBatch, IGNORE_INDEX};
/// // One row of length 6: a document of 3 tokens, one of 2, one pad.
/// let b = TrainingBatch::from_rows(
///     &[(&[5, 6, 7, 8, 9, 0][..], &[1, 1, 1, 2, 2, 0][..])],
///     6, IdType::I64, 0, 0,
/// ).unwrap();
/// assert_eq!(b.input_ids.as_i64().unwrap(), &[5, 6, 7, 8, 9, 0]);
/// assert_eq!(b.labels, vec![6, 7, IGNORE_INDEX, 9, IGNORE_INDEX, IGNORE_INDEX]);
/// assert_eq!(b.position_ids, vec![0, 1, 2, 0, 1, 0]);
/// assert_eq!(b.cu_seqlens, vec![0, 3, 5, 6]);
/// assert_eq!(b.attention_mask, vec![true, true, true, true, true, false]);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainingBatch {
    /// In a checkpointed pipeline, what the lane's stateful operators held
    /// right after the batch this was collated from.
    #[serde(skip)]
    pub cut: Option<std::sync::Arc<zephon_core::checkpoint::LaneCut>>,
    /// The lane the batch came from.
    pub lane: LaneId,
    /// The batch's number within its lane.
    pub index: u64,
    /// Rows in the batch (`B`).
    pub batch_size: usize,
    /// Tokens per row (`L`).
    pub seq_len: usize,
    /// Token ids, `B x L`, padding filled with the pad id.
    pub input_ids: TokenIds,
    /// Next-token targets, `B x L`, [`IGNORE_INDEX`] where no loss is taken.
    pub labels: Vec<i64>,
    /// `B x L`: true where a loss is taken (exactly where `labels` is not
    /// [`IGNORE_INDEX`]).
    pub loss_mask: Vec<bool>,
    /// `B x L`: position of each token within its document (0 for padding).
    pub position_ids: Vec<i64>,
    /// `B x L`: the document number of each token within its row, from 1;
    /// 0 for padding.
    pub segment_ids: Vec<u32>,
    /// The padding mask, `B x L`: true for real tokens, false for padding.
    pub attention_mask: Vec<bool>,
    /// Cumulative segment boundaries over the flattened `B * L` tokens,
    /// starting at 0 and ending at `B * L`. Each document is one segment; the
    /// padding at the end of a row is one segment of its own, so the list
    /// covers every position (mask it out with `attention_mask`).
    pub cu_seqlens: Vec<i32>,
    /// The longest segment in `cu_seqlens` (what varlen kernels take as
    /// `max_seqlen`).
    pub max_seqlen: usize,
}

impl Laned for TrainingBatch {
    fn lane(&self) -> LaneId {
        self.lane
    }
}

impl TrainingBatch {
    /// The shape `[batch_size, seq_len]` of every per-token field.
    pub fn shape(&self) -> [usize; 2] {
        [self.batch_size, self.seq_len]
    }

    /// Number of real (non-padding) tokens.
    pub fn num_tokens(&self) -> usize {
        self.attention_mask.iter().filter(|&&m| m).count()
    }

    /// Number of labels that carry a loss (Python Zephon's
    /// `num_valid_tokens`): what a mean loss over the batch divides by.
    pub fn num_valid_tokens(&self) -> usize {
        self.loss_mask.iter().filter(|&&m| m).count()
    }
}

/// A training batch counts its rows toward a lane's progress, so
/// `.checkpointed()` works on pipelines that end in `to_training`.
impl zephon_core::checkpoint::Delivered for TrainingBatch {
    fn delivered_items(&self) -> u64 {
        self.batch_size as u64
    }

    fn lane_index(&self) -> Option<u64> {
        Some(self.index)
    }

    fn cut(&self) -> Option<&std::sync::Arc<zephon_core::checkpoint::LaneCut>> {
        self.cut.as_ref()
    }
}
