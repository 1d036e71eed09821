//! Shuffle's state, shared with the checkpoint board: per lane, the buffer
//! and what the lane consumed; its cut, and putting a cut back.

use super::ShuffleMode;
use crate::checkpoint::cut::{CutContext, CutSource, Listed, OpCut, OpLaneCut, element_pointer};
use crate::checkpoint::{PtrJournal, PtrList};
use crate::error::{Error, Result};
use crate::pointer::SamplePtr;
use crate::pointer::{Identity, LaneId, Laned};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::Mutex;

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
}

pub(super) struct LaneBuf<T> {
    pub(super) buf: Vec<T>,
    pub(super) consumed: u64,
    pub(super) last: Option<u64>,
    pub(super) id_sum: u64,
    /// During a restore: the cut being put back (the lane's state until it
    /// is), and how many of its elements arrived.
    pub(super) restoring: Option<(OpLaneCut, u64)>,
    /// During a restore: the buffer being put back, slot by slot.
    pub(super) staging: Vec<Option<T>>,
    pub(super) slot_order: Option<Vec<u32>>,
    /// The buffer's pointers, kept once a cut has to list them (a filter
    /// upstream).
    pub(super) ptrs: Option<PtrJournal>,
    /// An element without a single source pointer went in: the buffer
    /// cannot be listed.
    pub(super) unlistable: bool,
    /// Elements of the lane emitted, and the pointers of those the next
    /// stateful operator may not have consumed yet (emission number,
    /// pointer), for a checkpointed pipeline.
    pub(super) emitted: u64,
    pub(super) sent: VecDeque<(u64, SamplePtr)>,
    /// An element without a single source pointer was emitted: what is in
    /// flight cannot be listed.
    pub(super) sent_unlisted: bool,
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
            emitted: 0,
            sent: VecDeque::new(),
            sent_unlisted: false,
        }
    }
}

impl<T: 'static> LaneBuf<T> {
    /// Counts `x` as emitted; in a checkpointed pipeline, remembers its
    /// pointer until a cut shows the next operator consumed it.
    #[inline]
    pub(super) fn note_sent(&mut self, x: &T, cutting: bool) {
        if cutting {
            match element_pointer(x) {
                Some(p) => self.sent.push_back((self.emitted, p)),
                None => self.sent_unlisted = true,
            }
        }
        self.emitted += 1;
    }

    /// The pointers emitted but not consumed by the next operator, which
    /// consumed `down`; forgets those it consumed.
    fn in_flight(&mut self, down: Option<u64>) -> Option<Vec<SamplePtr>> {
        let Some(down) = down else {
            return Some(Vec::new());
        };
        while self.sent.front().is_some_and(|e| e.0 < down) {
            self.sent.pop_front();
        }
        let n = self.emitted.checked_sub(down)?;
        if n == 0 {
            return Some(Vec::new());
        }
        if self.sent_unlisted || self.sent.len() as u64 != n {
            return None;
        }
        Some(self.sent.iter().map(|e| e.1).collect())
    }

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

impl<T: Laned + Identity + Send + 'static> CutSource for Mutex<Core<T>> {
    fn cut(&self, lane: LaneId, ctx: CutContext) -> Option<OpLaneCut> {
        let mut guard = self.lock().unwrap_or_else(|e| e.into_inner());
        let c = &mut *guard;
        let empty = || Listed {
            pending: PtrList::new(Vec::new()),
            buffer: PtrList::new(Vec::new()),
        };
        let Some(lb) = c.lanes.get_mut(&lane) else {
            let listed = ctx.list.then(empty);
            let sent = (0, Vec::new());
            return Some(shuffle_cut(c, 0, None, 0, 0, 0, c.done, listed, sent));
        };
        if let Some((cut, _)) = &lb.restoring {
            return Some(cut.clone());
        }
        let (consumed, last) = (lb.consumed, lb.last);
        let sent = (lb.emitted, lb.in_flight(ctx.downstream_consumed)?);
        if c.done {
            // The final flush: what is left of this lane's permuted buffer.
            let left = || c.out.iter().filter(|x| x.lane() == lane);
            let listed = if ctx.list {
                Some(Listed {
                    pending: PtrList::new(pointers(left())?),
                    buffer: PtrList::new(Vec::new()),
                })
            } else {
                None
            };
            let pending = left().count() as u64;
            return Some(shuffle_cut(
                c, consumed, last, 0, pending, 0, true, listed, sent,
            ));
        }
        let (held, id_sum) = (lb.buf.len() as u64, lb.id_sum);
        let own_block = c.out_lane == Some(lane);
        let pending = if own_block { c.out.len() as u64 } else { 0 };
        let listed = if ctx.list {
            let buffer = lb.listed_buffer(c.buffer_size)?;
            let pending = if own_block {
                if c.out_ptrs.is_none() {
                    c.out_ptrs = Some(Arc::new(pointers(c.out.iter())?));
                }
                let all = c.out_ptrs.clone()?;
                let from = all.len() - c.out.len();
                PtrList::suffix(all, from)
            } else {
                PtrList::new(Vec::new())
            };
            Some(Listed { pending, buffer })
        } else {
            None
        };
        Some(shuffle_cut(
            c, consumed, last, held, pending, id_sum, false, listed, sent,
        ))
    }
}

#[allow(clippy::too_many_arguments)]
fn shuffle_cut<T>(
    c: &Core<T>,
    consumed: u64,
    last: Option<u64>,
    held: u64,
    pending: u64,
    id_sum: u64,
    flushing: bool,
    listed: Option<Listed>,
    (emitted, in_flight): (u64, Vec<SamplePtr>),
) -> OpLaneCut {
    OpLaneCut {
        op: "shuffle".into(),
        consumed,
        emitted: Some(emitted),
        last_identity: last,
        cut: OpCut::Shuffle {
            mode: c.mode,
            buffer_size: c.buffer_size as u64,
            seed: c.seed,
            held,
            pending,
            id_sum,
            flushing,
            listed: listed.map(Box::new),
            in_flight,
        },
    }
}

fn restore_error(lane: LaneId, message: String) -> Error {
    Error::Checkpoint {
        origin: "restore".into(),
        message: format!("shuffle, lane {lane}: {message}"),
    }
}

/// What a restoring lane does with one of its own preamble elements.
pub(super) enum Restored<T> {
    /// Emit it (a pending element of a permuted block).
    Emit(T),
    /// Taken into the buffer.
    Absorbed,
    /// The section was empty: process it normally.
    Normal(T),
}

impl<T: Identity> Core<T> {
    pub(super) fn restore_one(
        &mut self,
        lane: LaneId,
        cut: &OpLaneCut,
        x: T,
        board: Option<&crate::checkpoint::cut::Board>,
    ) -> Result<(Restored<T>, bool)> {
        let OpCut::Shuffle {
            mode,
            buffer_size,
            seed,
            held,
            pending,
            id_sum,
            ref in_flight,
            ..
        } = cut.cut
        else {
            return Err(restore_error(
                lane,
                "the checkpoint holds another operator's cut".into(),
            ));
        };
        if (mode, buffer_size, seed) != (self.mode, self.buffer_size as u64, self.seed) {
            return Err(restore_error(
                lane,
                format!(
                    "the checkpoint shuffled {mode:?} with {buffer_size} slots and seed {seed}, this pipeline {:?} with {} and seed {}",
                    self.mode, self.buffer_size, self.seed
                ),
            ));
        }
        let lb = self.lanes.entry(lane).or_default();
        // Emitted again (in flight at the cut, then pending): counted as
        // they leave.
        let emit = pending + in_flight.len() as u64;
        if lb.restoring.as_ref().is_none_or(|r| r.1 == 0) {
            lb.emitted = cut
                .emitted
                .unwrap_or(0)
                .saturating_sub(in_flight.len() as u64);
        }
        let seen = lb.restoring.get_or_insert_with(|| (cut.clone(), 0));
        let section = held + emit;
        let out = if section == 0 {
            Restored::Normal(x)
        } else if seen.1 < emit {
            seen.1 += 1;
            Restored::Emit(x)
        } else {
            // The work source sends the buffer in shard order (for reading
            // runs) and says which slot each element goes back to.
            let k = (seen.1 - emit) as usize;
            seen.1 += 1;
            if k == 0 {
                lb.staging = (0..held).map(|_| None).collect();
                lb.slot_order = board.and_then(|b| b.take_slot_order(lane));
            }
            let slot = lb.slot_order.as_ref().map_or(k, |o| o[k] as usize);
            lb.id_sum = lb.id_sum.wrapping_add(x.identity());
            if let Some(s) = lb.staging.get_mut(slot) {
                *s = Some(x);
            }
            Restored::Absorbed
        };
        let finished = section == 0 || seen.1 == section;
        if finished {
            lb.restoring = None;
            lb.slot_order = None;
            // Rebuilt from the restored buffer when a cut next lists it.
            lb.ptrs = None;
            if !lb.staging.is_empty() {
                match std::mem::take(&mut lb.staging)
                    .into_iter()
                    .collect::<Option<Vec<T>>>()
                {
                    Some(buf) => lb.buf = buf,
                    None => {
                        return Err(restore_error(lane, "a buffer slot was not put back".into()));
                    }
                }
            }
            if lb.id_sum != id_sum {
                return Err(restore_error(
                    lane,
                    "the elements put back into the buffer are not those the checkpoint held: the stretch \
                     between the work source and shuffle is not one-to-one"
                        .into(),
                ));
            }
            lb.consumed = cut.consumed;
            lb.last = cut.last_identity;
        }
        Ok((out, finished))
    }
}
