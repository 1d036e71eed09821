//! Taking a shuffle's cut of a lane, and its preamble on a restore.

use super::recompute::contents;
use super::restore::same_settings;
use super::{Core, NAME, STATE_VERSION, ShuffleState, check_state, pointers};
use crate::cut::PtrList;
use crate::cut::{CutContext, CutSource, FILTER_OPS, LaneInput, OpLaneCut, OpState, Preamble};
use crate::pointer::SamplePtr;
use crate::pointer::{Identity, LaneId, Laned};
use std::sync::Arc;
use std::sync::Mutex;

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
