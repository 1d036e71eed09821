//! The work source's side of a restore from lane cuts: per lane, the
//! preamble of pointers the stateful operators take back, and the lane
//! position where the lane continues.

use super::Plan;
use super::shuffle::PassLayout;
use crate::checkpoint::cut::{Board, LaneCut, OpCut};
use crate::ops::shuffle::{ShuffleMode, permute_by_identity, reservoir_slot};
use crate::pointer::{Identity, LaneId, SamplePtr};
use crate::record::lineage_identity;
use std::collections::VecDeque;

/// How the most upstream stateful operator identifies its elements: records
/// (lineage) or bare pointers (a shuffle of pointers before fetch).
#[derive(Clone, Copy, Debug)]
enum IdKind {
    Record,
    Pointer,
}

impl IdKind {
    fn of(self, p: &SamplePtr) -> u64 {
        match self {
            IdKind::Record => lineage_identity(std::slice::from_ref(p)),
            IdKind::Pointer => p.identity(),
        }
    }
}

/// A pointer standing for the element it becomes, for the block permutation.
struct Ided(u64, SamplePtr);

impl Identity for Ided {
    fn identity(&self) -> u64 {
        self.0
    }
}

/// Where each canonical lane continues, and the preamble to emit first.
#[derive(Debug, Default)]
pub(super) struct Resume {
    pub preamble: VecDeque<SamplePtr>,
    /// Per canonical lane: the first lane position still to emit.
    pub starts: Vec<u64>,
}

struct Lookup<'a> {
    plan: &'a Plan,
    cache: &'a mut [Option<PassLayout>],
    lanes: u64,
}

impl Lookup<'_> {
    /// The pointer at position `pos` of `lane`, `None` past a finite end.
    fn at(&mut self, lane: LaneId, pos: u64) -> Option<SamplePtr> {
        let g = pos.checked_mul(self.lanes)?.checked_add(lane as u64)?;
        if self.plan.end.is_some_and(|e| g >= e) {
            return None;
        }
        Some(self.plan.pointer_at(g, self.cache))
    }
}

/// The restore plan for the lanes this rank owns, or `None` (after telling
/// the board to replay every lane) when a cut does not fit this work source.
pub(super) fn plan(plan: &Plan, board: &Board) -> Option<Resume> {
    let lanes = plan.config.lanes;
    let l = lanes.canonical_lanes as u64;
    let mut out = Resume {
        preamble: VecDeque::new(),
        starts: vec![0; l as usize],
    };
    let cuts: Vec<(LaneId, &LaneCut)> = board
        .restoring()
        .iter()
        .filter(|(lane, _)| lanes.owns(**lane))
        .map(|(&lane, cut)| (lane, &**cut))
        .collect();
    // Recomputing shuffle buffers takes up to n ln n pointer lookups per
    // lane: lanes are independent, so they share out over the cores.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(cuts.len())
        .max(1);
    let per_thread = cuts.len().div_ceil(threads).max(1);
    let results: Vec<LaneResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = cuts
            .chunks(per_thread)
            .map(|chunk| {
                scope.spawn(move || {
                    let mut cache = vec![None; plan.orders.len()];
                    let mut look = Lookup {
                        plan,
                        cache: &mut cache,
                        lanes: l,
                    };
                    chunk
                        .iter()
                        .map(|&(lane, cut)| {
                            (lane, cut.consumed(), lane_preamble(&mut look, lane, cut))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    for (lane, consumed, result) in results {
        match result {
            Ok((preamble, order)) => {
                out.preamble.extend(preamble);
                out.starts[lane as usize] = consumed;
                if let Some(order) = order {
                    board.set_slot_order(lane, order);
                }
            }
            Err(why) => {
                board.replay_all(&format!("lane {lane}: {why}"));
                return None;
            }
        }
    }
    Some(out)
}

/// A lane's restore: its preamble and the slot order of its shuffle buffer.
type LaneResult = (
    LaneId,
    u64,
    Result<(Vec<SamplePtr>, Option<Vec<u32>>), String>,
);

fn lane_preamble(
    look: &mut Lookup<'_>,
    lane: LaneId,
    cut: &LaneCut,
) -> Result<(Vec<SamplePtr>, Option<Vec<u32>>), String> {
    let consumed = cut.consumed();
    let last = cut
        .last_identity()
        .ok_or("the most upstream operator did not record what it consumed")?;
    let at_last = look
        .at(lane, consumed.checked_sub(1).ok_or("nothing consumed")?)
        .ok_or("the lane is shorter than the checkpoint says")?;
    let kind = [IdKind::Record, IdKind::Pointer]
        .into_iter()
        .find(|k| k.of(&at_last) == last)
        .ok_or(
            "the last element consumed is not the work source's pointer at that position \
             (an operator between the work source and the first stateful one is not one-to-one)",
        )?;
    let mut preamble = Vec::new();
    let mut slot_order = None;
    let n_ops = cut.ops.len();
    for (i, op) in cut.ops.iter().enumerate() {
        match &op.cut {
            OpCut::Batch | OpCut::Filter { .. } => {}
            OpCut::Pieces { docs, .. } => {
                preamble.extend(docs.iter().map(|d| SamplePtr { lane, ..*d }));
            }
            OpCut::Mixture {
                pending, queues, ..
            } => {
                let queued = queues.iter().flat_map(|(_, q)| q);
                preamble.extend(
                    pending
                        .iter()
                        .chain(queued)
                        .map(|d| SamplePtr { lane, ..*d }),
                );
            }
            OpCut::Shuffle {
                mode,
                buffer_size,
                seed,
                held,
                pending,
                flushing,
                listed,
                in_flight,
                ..
            } => {
                let only_filters_upstream = cut.ops[i + 1..]
                    .iter()
                    .all(|o| matches!(o.cut, OpCut::Filter { .. }));
                if !only_filters_upstream {
                    return Err("a shuffle downstream of another stateful operator".into());
                }
                let (pend, buf) = match listed {
                    // Below a filter the buffer is listed: positions in the
                    // shuffle's input are not the work source's.
                    Some(l) => {
                        let (pend, buf) = (l.pending.to_vec(), l.buffer.to_vec());
                        let held_now = if *flushing { 0 } else { *held };
                        if pend.len() as u64 != *pending || buf.len() as u64 != held_now {
                            return Err(format!(
                                "a listed shuffle of {} pending and {} held, counted {pending} and {held_now}",
                                pend.len(),
                                buf.len()
                            ));
                        }
                        let relane = |v: Vec<SamplePtr>| {
                            v.into_iter()
                                .map(|p| SamplePtr { lane, ..p })
                                .collect::<Vec<_>>()
                        };
                        (relane(pend), relane(buf))
                    }
                    None if i + 1 != n_ops => {
                        return Err("a shuffle below a filter without its buffer listed".into());
                    }
                    None => {
                        let s = ShuffleCut {
                            mode: *mode,
                            n: *buffer_size,
                            seed: *seed,
                            held: *held,
                            pending: *pending,
                            flushing: *flushing,
                        };
                        shuffle_contents(look, lane, kind, consumed, &s)?
                    }
                };
                // What was in flight to the next operator leaves first, as
                // it did; then what was pending.
                preamble.extend(in_flight.iter().map(|p| SamplePtr { lane, ..*p }));
                preamble.extend(pend);
                // The buffer in shard and sample order, so fetch reads runs;
                // the shuffle puts each element back into its slot.
                let mut order: Vec<u32> = (0..buf.len() as u32).collect();
                order.sort_by_key(|&i| {
                    let p = &buf[i as usize];
                    (p.dataset, p.shard, p.sample)
                });
                preamble.extend(order.iter().map(|&i| buf[i as usize]));
                slot_order = Some(order);
            }
        }
    }
    Ok((preamble, slot_order))
}

struct ShuffleCut {
    mode: ShuffleMode,
    n: u64,
    seed: u64,
    held: u64,
    pending: u64,
    flushing: bool,
}

/// The pending outputs and the buffer (in slot order) of a shuffle that
/// consumed the first `consumed` positions of `lane`.
fn shuffle_contents(
    look: &mut Lookup<'_>,
    lane: LaneId,
    kind: IdKind,
    consumed: u64,
    s: &ShuffleCut,
) -> Result<(Vec<SamplePtr>, Vec<SamplePtr>), String> {
    let n = s.n;
    // The last `pending` of `ptrs` permuted as the shuffle permutes.
    let tail_of_permutation = |ptrs: Vec<SamplePtr>, pending: u64| {
        let mut items: Vec<Ided> = ptrs.into_iter().map(|p| Ided(kind.of(&p), p)).collect();
        permute_by_identity(s.seed, &mut items);
        let from = items.len().saturating_sub(pending as usize);
        items[from..].iter().map(|b| b.1).collect::<Vec<_>>()
    };
    let buffer = buffer_at(look, lane, consumed, s)?;
    if s.flushing {
        if s.held != 0 || s.pending > buffer.len() as u64 {
            return Err(format!(
                "a flushed shuffle with {} pending of {} buffered",
                s.pending,
                buffer.len()
            ));
        }
        return Ok((tail_of_permutation(buffer, s.pending), Vec::new()));
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
        if s.mode != ShuffleMode::Block
            || !consumed.is_multiple_of(n)
            || consumed < n
            || s.pending > n
        {
            return Err(format!(
                "{:?} shuffle with {} pending after {consumed} elements",
                s.mode, s.pending
            ));
        }
        let block = (consumed - n..consumed)
            .map(|pos| look.at(lane, pos).ok_or_else(|| past(pos)))
            .collect::<Result<Vec<_>, _>>()?;
        pend = tail_of_permutation(block, s.pending);
    }
    Ok((pend, buffer))
}

fn past(pos: u64) -> String {
    format!("position {pos} is past the end of the lane")
}

/// What the buffer of a shuffle holds after `consumed` positions of `lane`
/// (in slot order for a reservoir, arrival order for a block).
fn buffer_at(
    look: &mut Lookup<'_>,
    lane: LaneId,
    consumed: u64,
    s: &ShuffleCut,
) -> Result<Vec<SamplePtr>, String> {
    let n = s.n;
    let ptr = |look: &mut Lookup<'_>, pos: u64| look.at(lane, pos).ok_or_else(|| past(pos));
    match s.mode {
        ShuffleMode::Block => (consumed - consumed % n..consumed)
            .map(|pos| ptr(look, pos))
            .collect(),
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
            let slots: Vec<Option<SamplePtr>> = slots
                .into_iter()
                .map(|pos| pos.map(|pos| ptr(look, pos)).transpose())
                .collect::<Result<_, _>>()?;
            slots
                .into_iter()
                .map(|s| s.ok_or_else(|| "a reservoir slot was never filled".to_string()))
                .collect()
        }
    }
}
