//! A filter's part in a checkpointed pipeline: per lane, how many elements
//! it read to pass how many, so a cut can say where the work source resumes
//! a lane whose elements were filtered.

use crate::context::Probe;
use crate::context::{CutRole, Joined};
use crate::cut::{
    Arrival, CutContext, CutSource, OpLaneCut, OpState, Restoring, element_key, keyed_type,
};
use crate::error::Result;
use crate::pointer::LaneId;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Layout version of a filter's cut state (the elements it passed).
const STATE_VERSION: u32 = 1;

/// One passed element: its number among the passed (1-based), its position
/// in the filter's input and its identity.
type Passed = (u64, u64, u64);

#[derive(Debug, Default)]
struct Lane {
    consumed: u64,
    passed: u64,
    /// Passed elements the next operator may not have taken yet; the cut
    /// drops what is older than what it was asked about.
    log: VecDeque<Passed>,
}

/// Per-lane counts of one filter, shared with the checkpoint board.
#[derive(Debug)]
pub(super) struct Lanes {
    name: &'static str,
    lanes: Mutex<BTreeMap<LaneId, Lane>>,
    /// An element the cut cannot describe went through: counts no longer
    /// map to the work source, so lanes are replayed.
    lost: AtomicBool,
}

impl Lanes {
    fn record(&self, lane: LaneId, identity: u64, kept: bool) {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let l = lanes.entry(lane).or_default();
        l.consumed += 1;
        if kept {
            l.passed += 1;
            let entry = (l.passed, l.consumed - 1, identity);
            l.log.push_back(entry);
        }
    }

    fn restore(&self, lane: LaneId, passed: u64, consumed: u64, last: Option<u64>) {
        let log = match (last, consumed.checked_sub(1)) {
            (Some(id), Some(pos)) if passed > 0 => VecDeque::from([(passed, pos, id)]),
            _ => VecDeque::new(),
        };
        self.lanes.lock().unwrap_or_else(|e| e.into_inner()).insert(
            lane,
            Lane {
                consumed,
                passed,
                log,
            },
        );
    }
}

impl CutSource for Lanes {
    fn cut(&self, lane: LaneId, ctx: CutContext) -> Option<OpLaneCut> {
        if self.lost.load(Ordering::Relaxed) {
            return None;
        }
        // A filter maps what the next operator consumed to what it read
        // itself: without a next operator there is nothing to map.
        let taken = ctx.downstream_consumed?;
        // The log maps what the next operator took; nothing is lost, so
        // `emitted` is not counted. The state: elements passed up to the cut.
        let state = OpState::from_value(STATE_VERSION, taken.into()).ok()?;
        let cut = |consumed, last_identity| {
            OpLaneCut::new(self.name, consumed)
                .with_last_identity(last_identity)
                .with_state(state.clone())
        };
        if taken == 0 {
            return Some(cut(0, None));
        }
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let l = lanes.get_mut(&lane)?;
        let k = l.log.partition_point(|e| e.0 < taken);
        let &(_, pos, identity) = l.log.get(k).filter(|e| e.0 == taken)?;
        // What the next operator took is never asked about again.
        l.log.drain(..k);
        Some(cut(pos + 1, Some(identity)))
    }
}

/// How the filter treats an element during a restore.
pub(super) enum Gate {
    /// A preamble element of an operator downstream: it passed before, so
    /// it goes through untouched and uncounted.
    Pass,
    /// Judge it; afterwards report the verdict with [`FilterCut::judged`].
    Judge(Option<(LaneId, u64)>),
}

struct Checkpointing {
    lanes: Arc<Lanes>,
    restoring: Restoring,
}

/// The filter's checkpoint state: nothing outside a checkpointed pipeline.
#[derive(Default)]
pub(super) struct FilterCut {
    state: Option<Checkpointing>,
}

impl std::fmt::Debug for FilterCut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterCut")
            .field("checkpointed", &self.state.is_some())
            .finish()
    }
}

impl FilterCut {
    /// On the first call, attaches the filter to the pipeline context
    /// through `probe`: on the board, if any, as a cuttable filter when its
    /// elements (of type `T`) can be described by a cut, as an uncuttable
    /// operator otherwise.
    #[inline]
    pub(super) fn attach<T: 'static>(
        &mut self,
        probe: &mut Probe,
        name: &'static str,
    ) -> Result<()> {
        if probe.attached() {
            return Ok(());
        }
        let mut made = None;
        let joined = probe.join(name, 1, None, || {
            if !keyed_type::<T>() {
                return CutRole::Uncuttable;
            }
            let lanes = Arc::new(Lanes {
                name,
                lanes: Mutex::new(BTreeMap::new()),
                lost: AtomicBool::new(false),
            });
            let weak: Weak<dyn CutSource> = Arc::downgrade(&lanes) as _;
            made = Some(lanes);
            CutRole::Source(weak)
        })?;
        if let (Some(Joined { board, plan }), Some(lanes)) = (joined, made) {
            self.state = Some(Checkpointing {
                restoring: Restoring::new(plan, board),
                lanes,
            });
        }
        Ok(())
    }

    /// Classifies `x` before it is judged.
    #[inline]
    pub(super) fn gate<T: 'static>(&mut self, x: &T) -> Result<Gate> {
        let Some(st) = &mut self.state else {
            return Ok(Gate::Judge(None));
        };
        let Some((lane, identity, _)) = element_key(x) else {
            st.lanes.lost.store(true, Ordering::Relaxed);
            return Ok(Gate::Judge(None));
        };
        match st.restoring.arrive(lane) {
            Arrival::Pass => return Ok(Gate::Pass),
            Arrival::Own(cut) => {
                let passed: u64 = cut.decode_state(lane, st.lanes.name, STATE_VERSION)?;
                let (consumed, last) = (cut.consumed, cut.last_identity);
                st.restoring.done(lane);
                st.lanes.restore(lane, passed, consumed, last);
            }
            Arrival::Normal => {}
        }
        Ok(Gate::Judge(Some((lane, identity))))
    }

    /// Reports the verdict on an element [`gate`](FilterCut::gate) let through.
    #[inline]
    pub(super) fn judged(&self, key: Option<(LaneId, u64)>, kept: bool) {
        if let (Some(st), Some((lane, identity))) = (&self.state, key) {
            st.lanes.record(lane, identity, kept);
        }
    }
}
