//! `pack_sequences`: token sequences packed into rows of at most
//! `max_length`, per lane, keeping document boundaries.
//!
//! - [`bins`]: `first_fit` and `best_fit` (a sequence is never split);
//! - [`wrap`]: `wrap` (a continuous stream cut into rows) and `best_fit_wrap`;
//! - [`stream`]: the stream adapter; [`flat`]: padding rows to `max_length`;
//! - `row`: a row being filled (ids, segments, loss mask); `cut` and
//!   `masks`: a lane's part in a checkpoint.

pub mod bins;
mod config;
pub(crate) mod cut;
pub mod flat;
mod masks;
mod row;
pub mod stream;
pub mod wrap;

pub use config::{
    MAX_CANDIDATE_AGE, MAX_GROUPS, NUM_BINS, OversizedPolicy, PackAlgorithm, PackConfig,
};
pub(crate) use row::{Row, RowPiece};

use crate::error::{Error, PtrDisplay};
use crate::fields;
use crate::stats::TextStats;
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::sync::Arc;
use zephon_core::{LaneId, Lineage, Record, Value};

/// A sequence to pack: its ids and where it came from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Seq {
    /// Token ids.
    pub ids: Vec<u32>,
    /// Source pointers.
    pub lineage: Lineage,
    /// Tokens of the source document before `ids` (already packed into an
    /// earlier row), so a checkpoint can name the piece still held.
    pub offset: u32,
}

/// Loss masks of the sequences a lane holds (a bin window or a candidate
/// pool), in the same order; `None` for a sequence without one.
pub(crate) type Masks = VecDeque<Option<Vec<u32>>>;

/// Lines `masks` up with the `n` sequences held: sequences put back from a
/// checkpoint come without masks and sit at the front.
pub(crate) fn align(masks: &mut Masks, n: usize) {
    if masks.len() > n {
        masks.clear();
    }
    while masks.len() < n {
        masks.push_front(None);
    }
}

/// A lane and a homogeneity group's key (empty without `group_field`).
pub(crate) type GroupKey = (LaneId, String);

/// The value of `field` of `r` as a group key.
fn group_of(field: &str, r: &Record) -> crate::Result<String> {
    let v = r.get(field);
    if let Some(t) = v.and_then(Value::as_text) {
        return Ok(t.to_owned());
    }
    match v {
        Some(Value::Int(i)) => Ok(i.to_string()),
        Some(Value::Bool(b)) => Ok(b.to_string()),
        _ => Err(Error::missing(
            "pack_sequences",
            field,
            "text, integer or boolean (pack's group_field)",
            r,
        )),
    }
}

/// The per-lane state of one algorithm.
#[derive(Debug)]
enum LaneState {
    Bins(bins::BinPacker),
    Wrap(wrap::WrapPacker),
    BestFitWrap(wrap::BestFitWrapPacker),
}

/// The packing state machine behind the stream adapter, usable on its own:
/// push records, take rows. Lanes are packed independently; the output for
/// a lane depends only on that lane's input, so it is deterministic.
///
/// ```
/// use zephon_core::{Record, Value};
/// use zephon_ops::{PackAlgorithm, PackConfig, Packer};
/// let mut p = Packer::new(PackConfig::new(4, PackAlgorithm::Wrap));
/// for doc in [vec![1, 2, 3], vec![4, 5, 6]] {
///     p.push(Record::new().with("input_ids", Value::Tokens(doc)))?;
/// }
/// p.finish();
/// let rows: Vec<Record> = std::iter::from_fn(|| p.pop()).collect();
/// assert_eq!(rows[0].tokens("input_ids").unwrap(), &[1, 2, 3, 4]);
/// assert_eq!(rows[0].tokens("segment_ids").unwrap(), &[1, 1, 1, 2]);
/// assert_eq!(rows[1].tokens("position_ids").unwrap(), &[0, 1]);
/// # Ok::<(), zephon_ops::Error>(())
/// ```
#[derive(Debug)]
pub struct Packer {
    config: PackConfig,
    lanes: BTreeMap<GroupKey, LaneState>,
    /// Per lane and group: the loss masks of the sequences its bins or pool hold.
    masks: BTreeMap<GroupKey, Masks>,
    /// Finished rows, with where their segments came from (for checkpoints).
    out: VecDeque<(Record, Vec<RowPiece>)>,
    /// Per lane: documents pushed, and the identity of the last; kept only
    /// in a checkpointed pipeline (`cutting`).
    consumed: BTreeMap<LaneId, (u64, u64)>,
    /// Per lane: rows taken (only in a checkpointed pipeline).
    emitted: BTreeMap<LaneId, u64>,
    cutting: bool,
    stats: Arc<TextStats>,
}

impl Packer {
    /// A packer with its own statistics.
    pub fn new(config: PackConfig) -> Self {
        Packer {
            config,
            lanes: BTreeMap::new(),
            masks: BTreeMap::new(),
            out: VecDeque::new(),
            consumed: BTreeMap::new(),
            emitted: BTreeMap::new(),
            cutting: false,
            stats: Arc::new(TextStats::default()),
        }
    }

    /// Counts into `stats` instead.
    pub fn with_stats(mut self, stats: Arc<TextStats>) -> Self {
        self.stats = stats;
        self
    }

    /// The statistics this packer counts into.
    pub fn stats(&self) -> &Arc<TextStats> {
        &self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &PackConfig {
        &self.config
    }

    /// Rows ready to be taken.
    pub fn ready(&self) -> usize {
        self.out.len()
    }

    /// Takes the next finished row.
    pub fn pop(&mut self) -> Option<Record> {
        let (r, _) = self.out.pop_front()?;
        if self.cutting {
            *self.emitted.entry(r.lane).or_default() += 1;
        }
        Some(r)
    }

    /// Adds a record carrying [`fields::INPUT_IDS`] and, optionally, a
    /// [`fields::LOSS_MASK`] (one value per id, as `tokenize_chat` writes
    /// it), which is cut and joined with the ids so each row keeps its
    /// pieces' masks; other fields are dropped. A configuration
    /// [`PackConfig::validate`] refuses, or a mask of another length than
    /// the ids, is an error.
    pub fn push(&mut self, mut r: Record) -> crate::Result<()> {
        // A few comparisons: an out-of-range row length would otherwise
        // make empty rows forever or allocate without bound.
        self.config.validate()?;
        let group = match self.config.group_field.as_deref() {
            Some(f) => group_of(f, &r)?,
            None => String::new(),
        };
        if self.cutting {
            let id = zephon_core::Identity::identity(&r);
            let n = self.consumed.entry(r.lane).or_default();
            *n = (n.0 + 1, id);
        }
        // A view of a shard's ids is copied here, once: the row owns them.
        let ids = match r.take(fields::INPUT_IDS).map(Value::into_token_vec) {
            Some(Ok(t)) => t,
            other => {
                if let Some(Err(v)) = other {
                    r.set(fields::INPUT_IDS, v);
                }
                return Err(Error::missing(
                    "pack_sequences",
                    fields::INPUT_IDS,
                    "tokens",
                    &r,
                ));
            }
        };
        let mask = match r.take(fields::LOSS_MASK).map(Value::into_token_vec) {
            None => None,
            Some(Ok(m)) if m.len() == ids.len() => Some(m),
            Some(Ok(m)) => {
                return Err(Error::Misaligned {
                    op: "pack_sequences",
                    field: fields::LOSS_MASK.into(),
                    ptr: PtrDisplay(r.source().copied()),
                    len: m.len(),
                    ids: ids.len(),
                });
            }
            Some(Err(v)) => {
                r.set(fields::LOSS_MASK, v);
                return Err(Error::missing(
                    "pack_sequences",
                    fields::LOSS_MASK,
                    "tokens",
                    &r,
                ));
            }
        };
        let c = &self.config;
        let st = &self.stats;
        st.sequences_in.inc();
        if ids.is_empty() || ids.len() < c.min_sequence_length {
            st.dropped_short.inc();
            st.dropped_tokens.add(ids.len() as u64);
            return Ok(());
        }
        let is_bins = matches!(
            c.algorithm,
            PackAlgorithm::FirstFit | PackAlgorithm::BestFit
        );
        if is_bins && ids.len() > c.max_length {
            return match c.oversized {
                OversizedPolicy::Drop => {
                    st.dropped_oversized.inc();
                    st.dropped_tokens.add(ids.len() as u64);
                    Ok(())
                }
                OversizedPolicy::Error => Err(Error::Oversized {
                    ptr: PtrDisplay(r.source().copied()),
                    len: ids.len(),
                    max_length: c.max_length,
                }),
            };
        }
        let lane = r.lane;
        let seq = Seq {
            ids,
            lineage: std::mem::take(&mut r.lineage),
            offset: 0,
        };
        let key = (lane, group);
        if c.group_field.is_some() && !self.lanes.contains_key(&key) {
            let open = self
                .lanes
                .range((lane, String::new())..)
                .take_while(|((l, _), _)| *l == lane)
                .count();
            if open >= MAX_GROUPS {
                return Err(Error::Config {
                    key: "pack.group_field",
                    message: format!(
                        "lane {lane} already holds {open} groups open (at most {MAX_GROUPS}), and \
                         sample {} starts another, `{}`: the field's values are not a few \
                         groups, and every group holds its own rows until the end",
                        PtrDisplay(seq.lineage.first().copied()),
                        key.1
                    ),
                });
            }
        }
        let state = self
            .lanes
            .entry(key.clone())
            .or_insert_with(|| match c.algorithm {
                PackAlgorithm::FirstFit | PackAlgorithm::BestFit => {
                    LaneState::Bins(bins::BinPacker::default())
                }
                PackAlgorithm::Wrap => LaneState::Wrap(wrap::WrapPacker::default()),
                PackAlgorithm::BestFitWrap => {
                    LaneState::BestFitWrap(wrap::BestFitWrapPacker::default())
                }
            });
        let masks = self.masks.entry(key).or_default();
        let mut rows = Vec::new();
        match state {
            LaneState::Bins(p) => p.push(seq, mask, masks, c, &mut rows),
            LaneState::Wrap(p) => p.push(seq, mask.as_deref(), c, st, &mut rows),
            LaneState::BestFitWrap(p) => p.push(seq, mask, masks, c, st, &mut rows),
        }
        self.emit(lane, rows);
        Ok(())
    }

    /// Flushes every lane, in lane order: the end of the input.
    pub fn finish(&mut self) {
        let c = self.config.clone();
        let lanes = std::mem::take(&mut self.lanes);
        let mut all_masks = std::mem::take(&mut self.masks);
        for (key, state) in lanes {
            let mut masks = all_masks.remove(&key).unwrap_or_default();
            let lane = key.0;
            let mut rows = Vec::new();
            match state {
                LaneState::Bins(mut p) => p.flush(&mut masks, &c, &mut rows),
                LaneState::Wrap(p) => p.finish(&c, &self.stats, &mut rows),
                LaneState::BestFitWrap(p) => p.finish(&mut masks, &c, &self.stats, &mut rows),
            }
            self.emit(lane, rows);
        }
    }

    fn emit(&mut self, lane: LaneId, rows: Vec<Row>) {
        for mut row in rows {
            self.stats
                .record_row(row.ids.len(), row.seg_lens.len(), self.config.max_length);
            let pieces = std::mem::take(&mut row.pieces);
            self.out.push_back((row.into_record(lane), pieces));
        }
    }
}
