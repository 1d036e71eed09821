//! Shuffle's part in a checkpoint, through the same protocol as any
//! operator's (see [`checkpoint::cut`](crate::checkpoint::cut)): per lane,
//! the buffer and what the lane consumed; its cut, its preamble on a
//! restore (the buffer recomputed from the work source's pointers, or
//! listed where a filter sits upstream), and putting a cut back.

use super::{ShuffleMode, permute_by_identity, reservoir_slot};
use crate::checkpoint::cut::{
    CutContext, CutSource, FILTER_OPS, InFlightJournal, LaneInput, OpLaneCut, OpState, Preamble,
    element_pointer,
};
use crate::checkpoint::{PtrJournal, PtrList};
use crate::error::{Error, Result};
use crate::pointer::SamplePtr;
use crate::pointer::{Identity, LaneId, Laned};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::Mutex;

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
/// [`StateCheck`](crate::checkpoint::cut::StateCheck)), and on restore.
pub(crate) fn check_state(lane: LaneId, cut: &OpLaneCut) -> std::result::Result<(), String> {
    let s: ShuffleState = cut
        .decode_state(lane, NAME, STATE_VERSION)
        .map_err(|e| match e {
            Error::Checkpoint { message, .. } => message,
            e => e.to_string(),
        })?;
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

/// The parts of a shuffle's cut, before they become one.
struct Parts {
    consumed: u64,
    last: Option<u64>,
    held: u64,
    pending: u64,
    id_sum: u64,
    flushing: bool,
    /// The pending elements and the buffer, where they are listed.
    listed: Option<(PtrList, PtrList)>,
    emitted: u64,
    in_flight: Vec<SamplePtr>,
}

impl<T: Laned + Identity + Send + 'static> CutSource for Mutex<Core<T>> {
    fn cut(&self, lane: LaneId, ctx: CutContext) -> Option<OpLaneCut> {
        let mut guard = self.lock().unwrap_or_else(|e| e.into_inner());
        let c = &mut *guard;
        let empty = || (PtrList::default(), PtrList::default());
        let Some(lb) = c.lanes.get_mut(&lane) else {
            return shuffle_cut(
                c,
                Parts {
                    consumed: 0,
                    last: None,
                    held: 0,
                    pending: 0,
                    id_sum: 0,
                    flushing: c.done,
                    listed: ctx.list.then(empty),
                    emitted: 0,
                    in_flight: Vec::new(),
                },
            );
        };
        if let Some(r) = &lb.restoring {
            return Some(r.cut.clone());
        }
        let (consumed, last) = (lb.consumed, lb.last);
        let (emitted, in_flight) = (
            lb.sent.emitted(),
            lb.sent.in_flight(ctx.downstream_consumed)?,
        );
        if c.done {
            // The final flush: what is left of this lane's permuted buffer.
            let left = || c.out.iter().filter(|x| x.lane() == lane);
            let listed = if ctx.list {
                Some((PtrList::new(pointers(left())?), PtrList::default()))
            } else {
                None
            };
            let pending = left().count() as u64;
            return shuffle_cut(
                c,
                Parts {
                    consumed,
                    last,
                    held: 0,
                    pending,
                    id_sum: 0,
                    flushing: true,
                    listed,
                    emitted,
                    in_flight,
                },
            );
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
                PtrList::default()
            };
            Some((pending, buffer))
        } else {
            None
        };
        shuffle_cut(
            c,
            Parts {
                consumed,
                last,
                held,
                pending,
                id_sum,
                flushing: false,
                listed,
                emitted,
                in_flight,
            },
        )
    }

    fn restore_preamble(
        &self,
        cut: &OpLaneCut,
        input: &mut LaneInput<'_>,
    ) -> std::result::Result<Vec<SamplePtr>, String> {
        let lane = input.lane();
        check_state(lane, cut)?;
        let s: ShuffleState = cut
            .decode_state(lane, NAME, STATE_VERSION)
            .map_err(|e| e.to_string())?;
        {
            // Checked before computing anything from the cut's buffer size.
            let mut core = self.lock().unwrap_or_else(|e| e.into_inner());
            let (mode, n, seed) = (core.mode, core.buffer_size, core.seed);
            if let Err(e) = same_settings(lane, &s, mode, n, seed) {
                let why = e.to_string();
                core.refused.get_or_insert(e);
                return Err(why);
            }
        }
        if !input
            .upstream()
            .iter()
            .all(|o| FILTER_OPS.contains(&o.op.as_str()))
        {
            return Err("a shuffle downstream of another stateful operator".into());
        }
        let relane = |p: SamplePtr| SamplePtr { lane, ..p };
        let listed: Vec<SamplePtr> = cut
            .preamble
            .listed
            .to_vec()
            .into_iter()
            .map(relane)
            .collect();
        let (in_flight, rest) = listed.split_at(cut.preamble.in_flight as usize);
        let (pend, buf) = if s.listed {
            // Below a filter the buffer is listed: positions in the
            // shuffle's input are not the work source's.
            let (pend, buf) = rest.split_at(s.pending as usize);
            (pend.to_vec(), buf.to_vec())
        } else if !input.upstream().is_empty() {
            return Err("a shuffle below a filter without its buffer listed".into());
        } else {
            let consumed = input.consumed();
            contents(input, consumed, &s)?
        };
        // What was in flight to the next operator leaves first, as it did;
        // then what was pending; then the buffer in shard and sample order,
        // so fetch reads runs: the shuffle puts each element back into its
        // slot.
        let mut order: Vec<u32> = (0..buf.len() as u32).collect();
        order.sort_by_key(|&i| {
            let p = &buf[i as usize];
            (p.dataset, p.shard, p.sample)
        });
        let mut out = Vec::with_capacity(in_flight.len() + pend.len() + buf.len());
        out.extend_from_slice(in_flight);
        out.extend(pend);
        out.extend(order.iter().map(|&i| buf[i as usize]));
        let mut core = self.lock().unwrap_or_else(|e| e.into_inner());
        core.lanes.entry(lane).or_default().slot_order = Some(order);
        Ok(out)
    }
}

fn shuffle_cut<T>(c: &Core<T>, p: Parts) -> Option<OpLaneCut> {
    let state = ShuffleState {
        mode: c.mode,
        buffer_size: c.buffer_size as u64,
        seed: c.seed,
        held: p.held,
        pending: p.pending,
        flushing: p.flushing,
        id_sum: p.id_sum,
        listed: p.listed.is_some(),
    };
    let in_flight = p.in_flight.len() as u64;
    let flight = PtrList::new(p.in_flight);
    let preamble = match p.listed {
        Some((pending, buffer)) => Preamble {
            listed: PtrList::concat(vec![flight, pending, buffer]),
            computed: 0,
            in_flight,
        },
        None => Preamble {
            listed: flight,
            computed: p.pending + p.held,
            in_flight,
        },
    };
    Some(
        OpLaneCut::new(NAME, p.consumed)
            .with_emitted(p.emitted)
            .with_last_identity(p.last)
            .with_preamble(preamble)
            .with_state(OpState::new(STATE_VERSION, &state).ok()?),
    )
}

/// A pointer standing for the element it becomes, for the block permutation.
struct Ided(u64, SamplePtr);

impl Identity for Ided {
    fn identity(&self) -> u64 {
        self.0
    }
}

/// The pending outputs and the buffer (in slot order) of a shuffle that
/// consumed the first `consumed` positions of the lane.
fn contents(
    input: &mut LaneInput<'_>,
    consumed: u64,
    s: &ShuffleState,
) -> std::result::Result<(Vec<SamplePtr>, Vec<SamplePtr>), String> {
    let n = s.buffer_size;
    // The last `pending` of `ptrs` permuted as the shuffle permutes.
    let tail_of_permutation = |input: &LaneInput<'_>, ptrs: Vec<SamplePtr>, pending: u64| {
        let mut items: Vec<Ided> = ptrs
            .into_iter()
            .map(|p| Ided(input.identity_of(&p), p))
            .collect();
        permute_by_identity(s.seed, &mut items);
        let from = items.len().saturating_sub(pending as usize);
        items[from..].iter().map(|b| b.1).collect::<Vec<_>>()
    };
    let buffer = buffer_at(input, consumed, s)?;
    if s.flushing {
        if s.held != 0 || s.pending > buffer.len() as u64 {
            return Err(format!(
                "a flushed shuffle with {} pending of {} buffered",
                s.pending,
                buffer.len()
            ));
        }
        return Ok((tail_of_permutation(input, buffer, s.pending), Vec::new()));
    }
    if buffer.len() as u64 != s.held {
        return Err(format!(
            "{:?} shuffle of {n} holding {} after {consumed} elements, not {}",
            s.mode,
            s.held,
            buffer.len()
        ));
    }
    let mut pend = Vec::new();
    if s.pending > 0 {
        let (start, _, last) = super::block_bounds(s.mode, n, consumed);
        let last = match last {
            Some((from, to))
                if s.mode != ShuffleMode::Reservoir
                    && start == consumed
                    && s.pending <= to - from =>
            {
                from..to
            }
            _ => {
                return Err(format!(
                    "{:?} shuffle with {} pending after {consumed} elements",
                    s.mode, s.pending
                ));
            }
        };
        let block = last
            .map(|pos| input.pointer_at(pos).ok_or_else(|| past(pos)))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        pend = tail_of_permutation(input, block, s.pending);
    }
    Ok((pend, buffer))
}

fn past(pos: u64) -> String {
    format!("position {pos} is past the end of the lane")
}

/// What the buffer of a shuffle holds after `consumed` positions of the
/// lane (in slot order for a reservoir, arrival order for a block).
fn buffer_at(
    input: &mut LaneInput<'_>,
    consumed: u64,
    s: &ShuffleState,
) -> std::result::Result<Vec<SamplePtr>, String> {
    let n = s.buffer_size;
    let lane = input.lane();
    let mut ptr = |pos: u64| input.pointer_at(pos).ok_or_else(|| past(pos));
    match s.mode {
        ShuffleMode::Block | ShuffleMode::BlockWarmup => {
            let (start, _, _) = super::block_bounds(s.mode, n, consumed);
            (start..consumed).map(ptr).collect()
        }
        ShuffleMode::Reservoir => {
            let held = consumed.min(n);
            let slot_of = |pos: u64| {
                if pos < n {
                    pos
                } else {
                    reservoir_slot(s.seed, lane, pos, n)
                }
            };
            // Slots are a function of positions: find, by hashing alone, the
            // last position that went into each slot (backward from the end,
            // about n ln n hashes, or forward from the start where that is
            // shorter), then look up only those pointers.
            let mut slots: Vec<Option<u64>> = vec![None; held as usize];
            let backward_cost = (n as f64 * ((n as f64).ln() + 1.0)) as u64;
            if consumed <= backward_cost {
                for pos in 0..consumed {
                    slots[slot_of(pos) as usize] = Some(pos);
                }
            } else {
                let mut missing = held;
                let mut pos = consumed;
                while missing > 0 && pos > 0 {
                    pos -= 1;
                    let s = &mut slots[slot_of(pos) as usize];
                    if s.is_none() {
                        *s = Some(pos);
                        missing -= 1;
                    }
                }
            }
            slots
                .into_iter()
                .map(|pos| {
                    pos.ok_or_else(|| "a reservoir slot was never filled".to_string())
                        .and_then(&mut ptr)
                })
                .collect()
        }
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

/// Refuses a cut of other shuffle settings than `mode`, `n` and `seed`.
fn same_settings(
    lane: LaneId,
    s: &ShuffleState,
    mode: ShuffleMode,
    n: usize,
    seed: u64,
) -> Result<()> {
    if (s.mode, s.buffer_size, s.seed) != (mode, n as u64, seed) {
        return Err(restore_error(
            lane,
            format!(
                "the checkpoint shuffled {:?} with {} slots and seed {}, this pipeline {mode:?} with {n} and seed {seed}",
                s.mode, s.buffer_size, s.seed
            ),
        ));
    }
    Ok(())
}

impl<T: Identity> Core<T> {
    pub(super) fn restore_one(&mut self, lane: LaneId, x: T) -> Result<(Restored<T>, bool)> {
        let lb = self.lanes.entry(lane).or_default();
        let Some(r) = lb.restoring.as_mut() else {
            return Ok((Restored::Normal(x), true));
        };
        let s = match r.state {
            Some(s) => s,
            None => {
                let s: ShuffleState = r.cut.decode_state(lane, NAME, STATE_VERSION)?;
                check(&s, &r.cut.preamble).map_err(|m| restore_error(lane, m))?;
                same_settings(lane, &s, self.mode, self.buffer_size, self.seed)?;
                // Emitted again (in flight at the cut, then pending):
                // counted as they leave.
                lb.sent.restore(&r.cut);
                r.state = Some(s);
                s
            }
        };
        let in_flight = r.cut.preamble.in_flight;
        let emit = s.pending + in_flight;
        let section = s.held + emit;
        let out = if section == 0 {
            Restored::Normal(x)
        } else if r.seen < emit {
            r.seen += 1;
            Restored::Emit(x)
        } else {
            // The work source sends the buffer in shard order (for reading
            // runs), and the preamble hook noted which slot each element
            // goes back to.
            let k = (r.seen - emit) as usize;
            r.seen += 1;
            if k == 0 {
                lb.staging = (0..s.held).map(|_| None).collect();
            }
            let slot = lb.slot_order.as_ref().map_or(k, |o| o[k] as usize);
            lb.id_sum = lb.id_sum.wrapping_add(x.identity());
            if let Some(st) = lb.staging.get_mut(slot) {
                *st = Some(x);
            }
            Restored::Absorbed
        };
        let finished = section == 0 || r.seen == section;
        if finished {
            let (consumed, last) = (r.cut.consumed, r.cut.last_identity);
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
            if lb.id_sum != s.id_sum {
                return Err(restore_error(
                    lane,
                    "the elements put back into the buffer are not those the checkpoint held: the stretch \
                     between the work source and shuffle is not one-to-one"
                        .into(),
                ));
            }
            lb.consumed = consumed;
            lb.last = last;
        }
        Ok((out, finished))
    }
}
