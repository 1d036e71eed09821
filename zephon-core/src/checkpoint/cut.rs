//! Lane cuts: what a lane's stateful operators hold right after one of its
//! batches left, in pointer form, so a restore refills them instead of
//! replaying the lane from its start.
//!
//! Every stateful operator of a checkpointed pipeline (shuffle, mixture,
//! packing, batch, and filters) attaches to the
//! [pipeline context](crate::context) with a [`CutSource`] when it is first
//! polled, which puts it on the pipeline's [`Board`]. When `batch` finishes a lane-batch it asks the board for the
//! lane's [`LaneCut`] and the batch carries it to the consumer, where
//! [`Progress`](super::Progress) keeps the latest one per lane. A restore puts
//! the cuts back on the board: the work source emits, per lane, a short
//! preamble of the pointers the operators held (pack's documents, the
//! mixture's queues, shuffle's buffer, recomputed from the work source) and
//! continues where the lane's
//! input stopped; each operator takes its part of the preamble back.
//!
//! A cut needs the stretch from the work source to the most upstream stateful
//! operator to be one-to-one (fetch, map, tokenize), or made of filters that
//! say how many elements they read to pass what went downstream: the cut
//! records the identity of the last element the most upstream operator
//! consumed, and the restore checks it against the work source's pointer at
//! that position. Below a filter, positions are no longer the work
//! source's, so a shuffle lists the pointers it holds (kept as a journal,
//! see [`PtrJournal`](super::PtrJournal)) instead of leaving them to be
//! recomputed. Each operator also says how many elements it emitted: more
//! than the next stateful operator consumed were in flight between them
//! (in a map's micro-batches); a shuffle lists them and a restore emits
//! them again first, any other operator's lane is replayed. Where the check
//! fails (a map that changes lineage), or where
//! an operator that cannot be cut sits in the pipeline (a filter between two
//! stateful operators, or an operator of another crate attached as
//! [`CutRole::Uncuttable`](crate::context::CutRole::Uncuttable)), the
//! restore replays the lane instead: slower, equally exact.

use crate::error::{Error, Result};
use crate::ops::shuffle::ShuffleMode;
use crate::pointer::{LaneId, SamplePtr};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Tokens `start..end` of document `doc` (an index into the cut's `docs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Piece {
    /// Index of the document in [`OpCut::Pieces::docs`].
    pub doc: u32,
    /// First token.
    pub start: u32,
    /// One past the last token.
    pub end: u32,
}

/// What one stateful operator holds for one lane.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum OpCut {
    /// A shuffle buffer. Its contents are not stored: they are a function of
    /// the work source's pointers and the slot hashes, recomputed on restore.
    Shuffle {
        /// Reservoir or block.
        mode: ShuffleMode,
        /// Buffer size.
        buffer_size: u64,
        /// Shuffle seed.
        seed: u64,
        /// Elements held in the buffer.
        held: u64,
        /// Elements of the last permuted block (block mode), or of the final
        /// flush, not yet emitted.
        pending: u64,
        /// The data ended and the buffer was flushed, permuted: `pending`
        /// are the last of that permutation.
        flushing: bool,
        /// Wrapping sum of the held elements' identities, to check the
        /// recomputed buffer.
        id_sum: u64,
        /// The pending elements and the buffer as pointers, where they
        /// cannot be recomputed from positions (a filter upstream).
        listed: Option<Box<Listed>>,
        /// Elements it emitted that the next stateful operator had not
        /// consumed yet (in flight in a map between them), oldest first:
        /// a restore emits them again, before the pending ones.
        in_flight: Vec<SamplePtr>,
    },
    /// Documents held as pieces (packing): rows ready to leave, then the
    /// open bins or pool, in the operator's own layout.
    Pieces {
        /// The documents, each by its pointer.
        docs: Vec<SamplePtr>,
        /// Finished rows not yet handed downstream, oldest first.
        ready: Vec<Vec<Piece>>,
        /// The open state.
        open: Vec<Piece>,
    },
    /// Batch: nothing held at a batch boundary.
    Batch,
    /// A mixture (`ensure_mixture`): records ready to leave, the queues per
    /// dataset, and how much of each dataset it emitted (f64 bits, so the
    /// restored deficits are exactly the same).
    Mixture {
        /// Records ready to leave, next first.
        pending: Vec<SamplePtr>,
        /// Per dataset (ascending), its queue, oldest first.
        queues: Vec<(u32, Vec<SamplePtr>)>,
        /// Per dataset, the weight emitted so far (`f64::to_bits`).
        emitted: Vec<(u32, u64)>,
        /// The total weight emitted (`f64::to_bits`).
        total: u64,
    },
    /// A filter (or filter_map): nothing held. Its `consumed` is how many
    /// elements it read to pass the `passed` the next operator took.
    Filter {
        /// Elements passed downstream up to the cut.
        passed: u64,
    },
}

/// What a shuffle holds, as pointers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listed {
    /// Elements still to leave, next first.
    pub pending: super::PtrList,
    /// The buffer, in slot order.
    pub buffer: super::PtrList,
}

impl OpCut {
    /// Elements of the restore preamble this operator takes (or emits).
    pub fn preamble_len(&self) -> u64 {
        match self {
            OpCut::Shuffle {
                held,
                pending,
                in_flight,
                ..
            } => held + pending + in_flight.len() as u64,
            OpCut::Pieces { docs, .. } => docs.len() as u64,
            OpCut::Batch | OpCut::Filter { .. } => 0,
            OpCut::Mixture {
                pending, queues, ..
            } => (pending.len() + queues.iter().map(|(_, q)| q.len()).sum::<usize>()) as u64,
        }
    }
}

/// One operator's cut of one lane.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpLaneCut {
    /// The operator's name (`shuffle`, `pack_sequences`, `batch`).
    pub op: String,
    /// Elements of this lane the operator consumed since the run started.
    pub consumed: u64,
    /// Elements of this lane it emitted since the run started, where it
    /// counts them: more than the next stateful operator consumed means
    /// elements were in flight between the two (in a map's micro-batches),
    /// which the cut must list or the lane cannot be cut.
    pub emitted: Option<u64>,
    /// Identity of the last of them (`None` where the operator cannot tell).
    pub last_identity: Option<u64>,
    /// What it holds.
    pub cut: OpCut,
}

/// Every stateful operator's cut of one lane, downstream first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneCut {
    /// Per operator, in pipeline order from the consumer's end.
    pub ops: Vec<OpLaneCut>,
}

impl LaneCut {
    /// Lane positions consumed at the source's end of the pipeline: where a
    /// restored work source continues this lane.
    pub fn consumed(&self) -> u64 {
        self.ops.last().map_or(0, |o| o.consumed)
    }

    /// Identity of the last element the most upstream operator consumed.
    pub fn last_identity(&self) -> Option<u64> {
        self.ops.last().and_then(|o| o.last_identity)
    }
}

/// What the board tells an operator when it asks for the operator's cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutContext {
    /// Elements of the lane the next stateful operator downstream consumed
    /// (`None` for the most downstream one).
    pub downstream_consumed: Option<u64>,
    /// A filter sits upstream: positions in this operator's input are not
    /// the work source's, so what it holds must be listed as pointers (a
    /// shuffle lists its buffer; packing holds pointers anyway).
    pub list: bool,
}

/// An operator's view of its own lane state, read when a batch leaves.
pub trait CutSource: Send + Sync {
    /// The cut of `lane` now; `None` where it cannot be cut (then the
    /// checkpoint replays the lane).
    fn cut(&self, lane: LaneId, ctx: CutContext) -> Option<OpLaneCut>;
}

/// Names under which filters register: a cut may have them upstream of
/// every other stateful operator, nowhere else.
pub const FILTER_OPS: [&str; 2] = ["filter", "filter_map"];

fn is_filter(name: &str) -> bool {
    FILTER_OPS.contains(&name)
}

/// The lane, identity and pointer of a pipeline element, for the element
/// types a cut can describe: records whose lineage is one sample, and bare
/// pointers. `None` for any other type or lineage.
///
/// ```
/// use zephon_core::checkpoint::cut::element_key;
/// use zephon_core::{Record, SamplePtr};
/// let p = SamplePtr { dataset: 0, shard: 1, sample: 2, lane: 3 };
/// let mut r = Record::new();
/// r.lane = 3;
/// r.lineage.push(p);
/// assert_eq!(element_key(&r).map(|k| (k.0, k.2)), Some((3, p)));
/// assert_eq!(element_key(&7u32), None);
/// ```
pub fn element_key<T: 'static>(x: &T) -> Option<(LaneId, u64, SamplePtr)> {
    let any = x as &dyn std::any::Any;
    if let Some(r) = any.downcast_ref::<crate::Record>() {
        match r.lineage.as_slice() {
            [p] => Some((r.lane, crate::pointer::Identity::identity(r), *p)),
            _ => None,
        }
    } else {
        any.downcast_ref::<SamplePtr>()
            .map(|p| (p.lane, p.identity(), *p))
    }
}

/// The pointer of a pipeline element, as [`element_key`] finds it, without
/// computing its identity: for listing a shuffle buffer.
#[inline]
pub fn element_pointer<T: 'static>(x: &T) -> Option<SamplePtr> {
    let any = x as &dyn std::any::Any;
    if let Some(r) = any.downcast_ref::<crate::Record>() {
        match r.lineage.as_slice() {
            [p] => Some(*p),
            _ => None,
        }
    } else {
        any.downcast_ref::<SamplePtr>().copied()
    }
}

/// Whether [`element_key`] can describe elements of type `T` at all.
pub fn keyed_type<T: 'static>() -> bool {
    let t = std::any::TypeId::of::<T>();
    t == std::any::TypeId::of::<crate::Record>() || t == std::any::TypeId::of::<SamplePtr>()
}

/// What a registered operator restores, per lane: how many preamble elements
/// to pass through untouched (they belong to operators downstream), and its
/// own cut.
pub type RestorePlan = BTreeMap<LaneId, (u64, OpLaneCut)>;

struct Registered {
    name: &'static str,
    source: Option<Weak<dyn CutSource>>,
}

/// The stateful operators of one pipeline and, on a restore, the cuts to put
/// back. Installed by [`ResumeFrom`](super::ResumeFrom) around every poll of
/// the pipeline.
pub struct Board {
    ops: Mutex<Vec<Registered>>,
    restore: BTreeMap<LaneId, Arc<LaneCut>>,
    /// Set by the work source when it could not verify the cuts: every lane
    /// is replayed instead.
    replay_all: AtomicBool,
    /// Per lane, the order in which the work source emits a shuffle buffer's
    /// pointers: slot of the k-th. Sorted by shard and sample, so fetch reads
    /// them in runs rather than one by one.
    slot_orders: Mutex<BTreeMap<LaneId, Vec<u32>>>,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Board")
            .field("ops", &ops.iter().map(|r| r.name).collect::<Vec<_>>())
            .field("restore_lanes", &self.restore.len())
            .field("replay_all", &self.replay_all.load(Ordering::Relaxed))
            .finish()
    }
}

impl Board {
    /// A board restoring `restore` (empty for a fresh start).
    pub fn new(restore: BTreeMap<LaneId, Arc<LaneCut>>) -> Arc<Self> {
        Arc::new(Board {
            ops: Mutex::new(Vec::new()),
            restore,
            replay_all: AtomicBool::new(false),
            slot_orders: Mutex::new(BTreeMap::new()),
        })
    }

    /// The board of the pipeline being polled, if it is checkpointed (it
    /// travels in the [`PipelineContext`](crate::context::PipelineContext)).
    pub fn current() -> Option<Arc<Board>> {
        crate::context::PipelineContext::current().and_then(|c| c.board().cloned())
    }

    /// Registers a stateful operator (in first-poll order, which is pipeline
    /// order from the consumer's end) and returns what it restores. An
    /// operator registered with `None` cannot be cut: lanes are replayed.
    pub fn register(
        &self,
        name: &'static str,
        source: Option<Weak<dyn CutSource>>,
    ) -> Result<RestorePlan> {
        let mut ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        let index = ops.len();
        ops.push(Registered { name, source });
        let mut plan = RestorePlan::new();
        for (&lane, cut) in &self.restore {
            let Some(own) = cut.ops.get(index) else {
                return Err(mismatch(lane, index, name, "nothing"));
            };
            if own.op != name {
                return Err(mismatch(lane, index, name, &own.op));
            }
            let pass: u64 = cut.ops[..index].iter().map(|o| o.cut.preamble_len()).sum();
            plan.insert(lane, (pass, own.clone()));
        }
        Ok(plan)
    }

    /// Whether the restore was abandoned for a replay of every lane.
    pub fn replaying_all(&self) -> bool {
        self.replay_all.load(Ordering::Acquire)
    }

    /// Abandons the restore from cuts: every lane is replayed.
    pub fn replay_all(&self, why: &str) {
        if !self.replay_all.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                reason = why,
                "checkpoint restore: the lane cuts do not fit this pipeline; replaying every lane instead"
            );
        }
    }

    /// Records that the work source emits `lane`'s shuffle buffer with the
    /// k-th pointer belonging in slot `order[k]`.
    pub fn set_slot_order(&self, lane: LaneId, order: Vec<u32>) {
        self.slot_orders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(lane, order);
    }

    /// The slot order of `lane`'s shuffle buffer (see
    /// [`set_slot_order`](Board::set_slot_order)); `None`: in slot order.
    pub fn take_slot_order(&self, lane: LaneId) -> Option<Vec<u32>> {
        self.slot_orders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&lane)
    }

    /// The cuts being restored (empty for a fresh start, or when replaying).
    pub fn restoring(&self) -> &BTreeMap<LaneId, Arc<LaneCut>> {
        &self.restore
    }

    /// The cut of `lane` now: every registered operator's, or `None` when one
    /// of them cannot be cut, or the most upstream one cannot say what it
    /// consumed last.
    pub fn cut(&self, lane: LaneId) -> Option<LaneCut> {
        let ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<OpLaneCut> = Vec::with_capacity(ops.len());
        for (i, r) in ops.iter().enumerate() {
            let upstream_filters = ops[i + 1..].iter().filter(|o| is_filter(o.name)).count();
            // A filter's count maps the next operator's input to its own;
            // with a stateful operator upstream of it, that operator's
            // state would be ahead of the mapping.
            if is_filter(r.name) && upstream_filters != ops.len() - i - 1 {
                return None;
            }
            let source = r.source.as_ref()?.upgrade()?;
            let ctx = CutContext {
                downstream_consumed: out.last().map(|o| o.consumed),
                list: upstream_filters > 0,
            };
            out.push(source.cut(lane, ctx)?);
        }
        // What an operator emitted beyond what the next one consumed was in
        // flight between them; unless its cut lists it, a restore would
        // lose it.
        for pair in out.windows(2) {
            let (down, up) = (&pair[0], &pair[1]);
            if let Some(emitted) = up.emitted {
                let listed = match &up.cut {
                    OpCut::Shuffle { in_flight, .. } => in_flight.len() as u64,
                    _ => 0,
                };
                if emitted != down.consumed + listed {
                    return None;
                }
            }
        }
        let cut = LaneCut { ops: out };
        cut.last_identity()?;
        Some(cut)
    }
}

fn mismatch(lane: LaneId, index: usize, name: &str, found: &str) -> Error {
    Error::Checkpoint {
        origin: "restore".into(),
        message: format!(
            "lane {lane}: stateful operator {index} (from the consumer's end) is `{name}` in this pipeline \
             but `{found}` in the checkpoint; restore with the pipeline that wrote it"
        ),
    }
}

/// The restore state of one lane inside an operator: how many preamble
/// elements pass through, then how many it takes back.
#[derive(Clone, Debug)]
pub struct LaneRestore {
    /// Preamble elements still to pass through untouched.
    pub pass: u64,
    /// The operator's own cut, until it is taken back.
    pub cut: Option<OpLaneCut>,
}

/// Per-lane restore bookkeeping for an operator: built from its
/// [`RestorePlan`], asked for each arriving element what to do with it.
#[derive(Debug, Default)]
pub struct Restoring {
    lanes: BTreeMap<LaneId, LaneRestore>,
    board: Option<Arc<Board>>,
}

/// What an operator does with an arriving element during a restore.
#[derive(Debug)]
pub enum Arrival<'a> {
    /// Normal operation (no restore, or this lane's preamble is over).
    Normal,
    /// Pass it downstream untouched (it belongs to a later operator).
    Pass,
    /// It is part of this operator's own preamble section.
    Own(&'a mut OpLaneCut),
}

impl Restoring {
    /// Bookkeeping for `plan`, on `board`.
    pub fn new(plan: RestorePlan, board: Arc<Board>) -> Self {
        Restoring {
            lanes: plan
                .into_iter()
                .map(|(l, (pass, cut))| {
                    (
                        l,
                        LaneRestore {
                            pass,
                            cut: Some(cut),
                        },
                    )
                })
                .collect(),
            board: Some(board),
        }
    }

    /// Classifies an element arriving on `lane`. Call [`Restoring::done`]
    /// once the operator has taken its whole section back.
    pub fn arrive(&mut self, lane: LaneId) -> Arrival<'_> {
        if self.lanes.is_empty() {
            return Arrival::Normal;
        }
        if self.board.as_ref().is_some_and(|b| b.replaying_all()) {
            self.lanes.clear();
            return Arrival::Normal;
        }
        match self.lanes.get_mut(&lane) {
            None => Arrival::Normal,
            Some(r) if r.pass > 0 => {
                r.pass -= 1;
                Arrival::Pass
            }
            Some(r) => match r.cut.as_mut() {
                Some(c) => Arrival::Own(c),
                None => Arrival::Normal,
            },
        }
    }

    /// The board this restore comes from.
    pub fn board(&self) -> Option<&Arc<Board>> {
        self.board.as_ref()
    }

    /// `lane`'s restore is over.
    pub fn done(&mut self, lane: LaneId) {
        self.lanes.remove(&lane);
    }
}
