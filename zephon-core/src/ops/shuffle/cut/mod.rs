//! Shuffle's part in a checkpoint, through the same protocol as any
//! operator's (see [`checkpoint::cut`](crate::checkpoint::cut)): per lane,
//! the buffer and what the lane consumed; its cut, its preamble on a
//! restore (the buffer recomputed from the work source's pointers, or
//! listed where a filter sits upstream), and putting a cut back.

mod recompute;
mod restore;
mod take;

pub(super) use restore::Restored;

use super::ShuffleMode;
use crate::cut::{InFlightJournal, OpLaneCut, Preamble, element_pointer};
use crate::cut::{PtrJournal, PtrList};
use crate::error::Error;
use crate::pointer::LaneId;
use crate::pointer::SamplePtr;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// The name shuffle registers under.
pub(crate) const NAME: &str = "shuffle";

/// Layout version of [`ShuffleState`].
const STATE_VERSION: u32 = 1;

/// What a shuffle's cut holds besides its preamble. The preamble is, in
/// order: the elements in flight to the next operator (listed), the
/// pending ones, then the buffer; the last two listed where `listed`,
/// computed from the work source's pointers otherwise (their contents are
/// a function of the positions consumed and the slot hashes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ShuffleState {
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
    /// The data ended and the buffer was flushed, permuted: `pending` are
    /// the last of that permutation.
    flushing: bool,
    /// Wrapping sum of the held elements' identities, to check the
    /// recomputed buffer.
    id_sum: u64,
    /// The pending elements and the buffer are listed in the preamble (a
    /// filter upstream: positions are not the work source's).
    listed: bool,
}

/// A shuffle's cut state that contradicts itself or its preamble: what is
/// wrong. Run on every checkpoint loaded (see
/// [`StateCheck`](crate::cut::StateCheck)), and on restore.
pub(crate) fn check_state(lane: LaneId, cut: &OpLaneCut) -> std::result::Result<(), String> {
    let s: ShuffleState = cut.check_decode(lane, NAME, STATE_VERSION)?;
    check(&s, &cut.preamble)
}

fn check(s: &ShuffleState, p: &Preamble) -> std::result::Result<(), String> {
    if s.held > s.buffer_size {
        return Err(format!(
            "holds {} elements in a buffer of {}",
            s.held, s.buffer_size
        ));
    }
    if s.pending > s.buffer_size {
        return Err(format!(
            "{} elements pending from a buffer of {}",
            s.pending, s.buffer_size
        ));
    }
    let listed = p.listed.len() as u64;
    if p.in_flight > listed {
        return Err(format!(
            "{} elements in flight but {listed} listed",
            p.in_flight
        ));
    }
    // Both at most the buffer size (at most 2^24 in a pipeline): a file's
    // larger counts saturate, and are refused below or on restore.
    let own = s.pending.saturating_add(s.held);
    let (lists, computes) = if s.listed { (own, 0) } else { (0, own) };
    if listed - p.in_flight != lists || p.computed != computes {
        return Err(format!(
            "a preamble of {} listed ({} in flight) and {} computed for {} pending and {} held elements{}",
            listed,
            p.in_flight,
            p.computed,
            s.pending,
            s.held,
            if s.listed { ", listed" } else { "" }
        ));
    }
    Ok(())
}

pub(super) struct Core<T> {
    pub(super) mode: ShuffleMode,
    pub(super) buffer_size: usize,
    pub(super) seed: u64,
    pub(super) lanes: BTreeMap<LaneId, LaneBuf<T>>,
    pub(super) out: VecDeque<T>,
    /// The lane whose permuted block `out` holds (block mode).
    pub(super) out_lane: Option<LaneId>,
    /// That block's pointers, while a cut lists them; `out` holds its last
    /// `out.len()`.
    pub(super) out_ptrs: Option<Arc<Vec<SamplePtr>>>,
    pub(super) done: bool,
    /// A restored cut of other shuffle settings, found by the preamble hook
    /// (which makes the restore fall back to a replay): the error the
    /// stream returns instead, as a restore refuses such a cut.
    pub(super) refused: Option<Error>,
}

pub(super) struct LaneBuf<T> {
    pub(super) buf: Vec<T>,
    pub(super) consumed: u64,
    pub(super) last: Option<u64>,
    pub(super) id_sum: u64,
    /// During a restore: the cut being put back (the lane's state until it
    /// is), its state once decoded, and how many of its elements arrived.
    pub(super) restoring: Option<LaneRestore>,
    /// During a restore: the buffer being put back, slot by slot.
    pub(super) staging: Vec<Option<T>>,
    /// During a restore: the order in which the work source emits the
    /// buffer (the slot of the k-th), sorted by shard and sample so fetch
    /// reads runs rather than single samples; set by the preamble hook.
    pub(super) slot_order: Option<Vec<u32>>,
    /// The buffer's pointers, kept once a cut has to list them (a filter
    /// upstream).
    pub(super) ptrs: Option<PtrJournal>,
    /// An element without a single source pointer went in: the buffer
    /// cannot be listed.
    pub(super) unlistable: bool,
    /// Elements of the lane emitted, and the pointers of those the next
    /// stateful operator may not have consumed yet.
    pub(super) sent: InFlightJournal,
}

/// A lane being restored.
pub(super) struct LaneRestore {
    /// The cut being put back.
    pub(super) cut: OpLaneCut,
    /// Its state, decoded at the first element of its preamble.
    state: Option<ShuffleState>,
    /// Elements of its preamble that arrived.
    seen: u64,
}

impl LaneRestore {
    pub(super) fn new(cut: OpLaneCut) -> Self {
        LaneRestore {
            cut,
            state: None,
            seen: 0,
        }
    }
}

impl<T> Default for LaneBuf<T> {
    fn default() -> Self {
        LaneBuf {
            buf: Vec::new(),
            consumed: 0,
            last: None,
            id_sum: 0,
            restoring: None,
            staging: Vec::new(),
            slot_order: None,
            ptrs: None,
            unlistable: false,
            sent: InFlightJournal::new(),
        }
    }
}

impl<T: 'static> LaneBuf<T> {
    /// Records that `x` went into `slot`, if the buffer is being listed.
    #[inline]
    pub(super) fn listed_set(&mut self, slot: usize, x: &T) {
        if let Some(j) = &mut self.ptrs {
            match element_pointer(x) {
                Some(p) => j.set(slot, p),
                None => {
                    self.ptrs = None;
                    self.unlistable = true;
                }
            }
        }
    }

    /// The buffer as listed pointers, starting the journal if need be.
    fn listed_buffer(&mut self, n: usize) -> Option<PtrList> {
        if self.unlistable {
            return None;
        }
        if self.ptrs.is_none() {
            let ptrs = pointers(self.buf.iter());
            let Some(ptrs) = ptrs else {
                self.unlistable = true;
                return None;
            };
            self.ptrs = Some(PtrJournal::new(ptrs, n));
        }
        self.ptrs.as_ref().map(PtrJournal::snapshot)
    }
}

/// The pointers of `items`, or `None` when one is not a single sample.
pub(super) fn pointers<'a, T: 'static>(
    items: impl Iterator<Item = &'a T>,
) -> Option<Vec<SamplePtr>> {
    items.map(element_pointer).collect()
}
