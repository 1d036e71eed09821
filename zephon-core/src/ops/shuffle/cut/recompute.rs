//! Recomputing a shuffle's pending elements and buffer from the work
//! source's pointers, on a restore.

use super::ShuffleState;
use crate::cut::LaneInput;
use crate::ops::shuffle::{ShuffleMode, block_bounds, permute_by_identity, reservoir_slot};
use crate::pointer::Identity;
use crate::pointer::SamplePtr;

/// A pointer standing for the element it becomes, for the block permutation.
struct Ided(u64, SamplePtr);

impl Identity for Ided {
    fn identity(&self) -> u64 {
        self.0
    }
}

/// The pending outputs and the buffer (in slot order) of a shuffle that
/// consumed the first `consumed` positions of the lane.
pub(super) fn contents(
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
        let (start, _, last) = block_bounds(s.mode, n, consumed);
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
            let (start, _, _) = block_bounds(s.mode, n, consumed);
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
