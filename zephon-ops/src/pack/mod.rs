//! `pack_sequences`: token sequences packed into rows of at most
//! `max_length`, per lane, keeping document boundaries.
//!
//! - [`bins`]: `first_fit` and `best_fit` (a sequence is never split);
//! - [`wrap`]: `wrap` (a continuous stream cut into rows) and `best_fit_wrap`;
//! - [`stream`]: the stream adapter; [`flat`]: padding rows to `max_length`;
//! - `row`: a row being filled (ids, segments, loss mask); `cut` and
//!   `masks`: a lane's part in a checkpoint.

pub mod bins;
pub(crate) mod cut;
pub mod flat;
mod masks;
mod row;
pub mod stream;
pub mod wrap;

pub(crate) use row::{Row, RowPiece};

use crate::error::{Error, PtrDisplay};
use crate::fields;
use crate::stats::TextStats;
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::sync::Arc;
use zephon_core::settings::{Range, SEQ_LEN};
use zephon_core::{LaneId, Lineage, Record, Value};

/// How sequences are placed into rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PackAlgorithm {
    /// Each sequence goes to the first row with room, in arrival order.
    FirstFit,
    /// Best fit, largest first, per window; never more rows than
    /// [`FirstFit`](PackAlgorithm::FirstFit) on the same window.
    BestFit,
    /// A continuous stream of tokens cut into rows of exactly `max_length`;
    /// no padding, sequences cut at row ends.
    #[default]
    Wrap,
    /// Best fit from a pool of candidates; when nothing fits, the oldest
    /// candidate is split to fill the row (at most one split per row).
    BestFitWrap,
}

/// What `first_fit` and `best_fit` do with a sequence longer than `max_length`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OversizedPolicy {
    /// Drop it, counted in [`TextStats::dropped_oversized`].
    #[default]
    Drop,
    /// An error naming its source pointer and length.
    Error,
}

/// The options of `pack_sequences`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackConfig {
    /// Tokens per row, at most.
    pub max_length: usize,
    /// The placement algorithm.
    pub algorithm: PackAlgorithm,
    /// Bins per window (`first_fit`, `best_fit`: a window closes once it holds
    /// `num_bins * max_length` tokens) or candidates in the pool
    /// (`best_fit_wrap`). More bins pack tighter and hold more in memory.
    pub num_bins: usize,
    /// At most this many segments per row (not for `wrap`).
    pub max_sequences_per_bin: Option<usize>,
    /// Sequences shorter than this are dropped (empty ones always are).
    pub min_sequence_length: usize,
    /// Oversized sequences under `first_fit` and `best_fit`.
    pub oversized: OversizedPolicy,
    /// At the end of the stream, drops each lane's last row if it is not full
    /// (`wrap`, `best_fit_wrap`); counted in [`TextStats::dropped_tokens`].
    pub drop_remainder: bool,
    /// `best_fit_wrap` only: a candidate that has waited more than this many
    /// incoming documents of its lane is placed first in the next row, built
    /// at once (see [`wrap::BestFitWrapPacker`]); in [`MAX_CANDIDATE_AGE`].
    /// `None` (the default): candidates wait until the pool overflows.
    pub max_candidate_age: Option<u64>,
    /// Homogeneity groups: the record field whose value (text, integer or
    /// boolean) keys separate bins, so a row never mixes documents of two
    /// values; `None` (the default): one group per lane. Each group keeps
    /// its own bins or pool, so a lane holds up to `num_bins` per group.
    pub group_field: Option<Arc<str>>,
}

/// Bins per window or candidates per pool: each holds up to a row of tokens.
pub const NUM_BINS: Range = Range::new(1, 65_536, "each bin holds up to a row per lane");

/// Documents a `best_fit_wrap` candidate may wait before it is placed.
pub const MAX_CANDIDATE_AGE: Range = Range::new(
    1,
    1 << 40,
    "0 would close a row per document; a candidate's age is counted in 64 bits",
);

impl PackConfig {
    /// `algorithm` into rows of `max_length`, 64 bins, no other limits.
    /// `max_length` must lie in [`SEQ_LEN`] (1 to 16 Mi tokens); the
    /// operators refuse it otherwise (see [`validate`](Self::validate)).
    pub fn new(max_length: usize, algorithm: PackAlgorithm) -> Self {
        PackConfig {
            max_length,
            algorithm,
            num_bins: 64,
            max_sequences_per_bin: None,
            min_sequence_length: 1,
            oversized: OversizedPolicy::Drop,
            drop_remainder: false,
            max_candidate_age: None,
            group_field: None,
        }
    }

    /// Sets `group_field`: rows never mix documents whose `field` differs.
    /// The name is owned (a `&str`, a `String` or an `Arc<str>`), so one
    /// read from a recipe at run time needs no `'static` copy.
    ///
    /// ```
    /// use zephon_core::{Record, Value};
    /// use zephon_ops::{PackAlgorithm, PackConfig, Packer};
    /// let mut p = Packer::new(PackConfig::new(4, PackAlgorithm::Wrap).group_field("lang"));
    /// for (doc, lang) in [(vec![1, 2], "en"), (vec![3, 4], "fr"), (vec![5, 6], "en")] {
    ///     p.push(
    ///         Record::new()
    ///             .with("input_ids", Value::Tokens(doc))
    ///             .with("lang", Value::Text(lang.into())),
    ///     )?;
    /// }
    /// p.finish();
    /// let rows: Vec<Record> = std::iter::from_fn(|| p.pop()).collect();
    /// assert_eq!(rows[0].tokens("input_ids").unwrap(), &[1, 2, 5, 6]);
    /// assert_eq!(rows[1].tokens("input_ids").unwrap(), &[3, 4]);
    /// # Ok::<(), zephon_ops::Error>(())
    /// ```
    pub fn group_field(mut self, field: impl Into<Arc<str>>) -> Self {
        self.group_field = Some(field.into());
        self
    }

    /// Sets `max_candidate_age`, in [`MAX_CANDIDATE_AGE`] (1 to 2^40
    /// documents); `best_fit_wrap` only.
    ///
    /// ```
    /// use zephon_core::{Record, Value};
    /// use zephon_ops::{PackAlgorithm, PackConfig, Packer};
    /// let c = PackConfig::new(8, PackAlgorithm::BestFitWrap)
    ///     .num_bins(64)
    ///     .max_candidate_age(1);
    /// let mut p = Packer::new(c);
    /// for doc in [vec![1, 2], vec![3], vec![4]] {
    ///     p.push(Record::new().with("input_ids", Value::Tokens(doc)))?;
    /// }
    /// // The first document waited two documents: its row closes unfilled.
    /// assert_eq!(p.pop().unwrap().tokens("input_ids").unwrap(), &[1, 2, 3, 4]);
    /// # Ok::<(), zephon_ops::Error>(())
    /// ```
    pub fn max_candidate_age(mut self, n: u64) -> Self {
        self.max_candidate_age = Some(n);
        self
    }

    /// Sets `num_bins`, in [`NUM_BINS`] (1 to 65,536).
    pub fn num_bins(mut self, n: usize) -> Self {
        self.num_bins = n;
        self
    }

    /// Sets `max_sequences_per_bin` (at least 1).
    pub fn max_sequences_per_bin(mut self, n: usize) -> Self {
        self.max_sequences_per_bin = Some(n);
        self
    }

    /// Checks every option against its documented range; the pack
    /// operators report the error at their first poll.
    ///
    /// ```
    /// use zephon_ops::{PackAlgorithm, PackConfig};
    /// assert!(PackConfig::new(128, PackAlgorithm::Wrap).validate().is_ok());
    /// let e = PackConfig::new(0, PackAlgorithm::Wrap).validate().unwrap_err();
    /// assert!(e.to_string().contains("pack.max_length"), "{e}");
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        Error::in_range(SEQ_LEN, "pack.max_length", self.max_length)?;
        Error::in_range(NUM_BINS, "pack.num_bins", self.num_bins)?;
        if self.max_sequences_per_bin == Some(0) {
            return Err(Error::Config {
                key: "pack.max_sequences_per_bin",
                message: "0 sequences per row leaves every row empty; use at least 1".into(),
            });
        }
        if self
            .group_field
            .as_deref()
            .is_some_and(|f| f.is_empty() || f == fields::INPUT_IDS)
        {
            return Err(Error::Config {
                key: "pack.group_field",
                message: "must be a non-empty field name other than `input_ids`".into(),
            });
        }
        if let Some(age) = self.max_candidate_age {
            if self.algorithm != PackAlgorithm::BestFitWrap {
                return Err(Error::Config {
                    key: "pack.max_candidate_age",
                    message:
                        "applies to best_fit_wrap only (other algorithms hold no candidate pool)"
                            .into(),
                });
            }
            if !MAX_CANDIDATE_AGE.contains(age) {
                return Err(Error::Config {
                    key: "pack.max_candidate_age",
                    message: MAX_CANDIDATE_AGE.message(age),
                });
            }
        }
        Ok(())
    }

    /// Sets `min_sequence_length`.
    pub fn min_sequence_length(mut self, n: usize) -> Self {
        self.min_sequence_length = n;
        self
    }

    /// Sets the oversized policy.
    pub fn oversized(mut self, p: OversizedPolicy) -> Self {
        self.oversized = p;
        self
    }

    /// Sets `drop_remainder`.
    pub fn drop_remainder(mut self, on: bool) -> Self {
        self.drop_remainder = on;
        self
    }

    pub(crate) fn seq_limit(&self) -> usize {
        self.max_sequences_per_bin.unwrap_or(usize::MAX)
    }
}

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
    match r.get(field) {
        Some(Value::Text(t)) => Ok(t.clone()),
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
