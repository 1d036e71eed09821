//! The pipeline's [`Board`] of stateful operators, and the per-operator
//! restore bookkeeping ([`Restoring`]).

use super::check::is_filter;
use super::{CutContext, CutSource, LaneCut, OpLaneCut};
use crate::error::{Error, Result};
use crate::pointer::LaneId;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// What a registered operator restores, per lane: how many preamble elements
/// to pass through untouched (they belong to operators downstream), and its
/// own cut.
pub type RestorePlan = BTreeMap<LaneId, (u64, OpLaneCut)>;

struct Registered {
    name: &'static str,
    source: Option<Weak<dyn CutSource>>,
}

/// The stateful operators of one pipeline and, on a restore, the cuts to put
/// back. Installed by [`ResumeFrom`](crate::checkpoint::ResumeFrom) around every poll of
/// the pipeline.
pub struct Board {
    ops: Mutex<Vec<Registered>>,
    restore: BTreeMap<LaneId, Arc<LaneCut>>,
    /// Set by the work source when it could not verify the cuts: every lane
    /// is replayed instead.
    replay_all: AtomicBool,
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
        })
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
            let pass = cut.ops[..index]
                .iter()
                .fold(0u64, |n, o| n.saturating_add(o.preamble_len()));
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

    /// The registered operators, in registration order (from the consumer's
    /// end), each with its cut source while the operator lives (`None` for
    /// one registered as uncuttable): what the work source asks for
    /// preambles on a restore.
    pub fn sources(&self) -> Vec<(&'static str, Option<Arc<dyn CutSource>>)> {
        let ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        ops.iter()
            .map(|r| (r.name, r.source.as_ref().and_then(Weak::upgrade)))
            .collect()
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
            if let Some(emitted) = up.emitted
                && emitted != down.consumed + up.preamble.in_flight
            {
                return None;
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
