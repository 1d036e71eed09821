//! Putting a shuffle's cut back, element by element of its preamble.

use super::{Core, NAME, STATE_VERSION, ShuffleState, check};
use crate::error::{Error, Result};
use crate::ops::shuffle::ShuffleMode;
use crate::pointer::{Identity, LaneId};

fn restore_error(lane: LaneId, message: String) -> Error {
    Error::Checkpoint {
        origin: "restore".into(),
        message: format!("shuffle, lane {lane}: {message}"),
    }
}

/// What a restoring lane does with one of its own preamble elements.
pub(in crate::ops::shuffle) enum Restored<T> {
    /// Emit it (a pending element of a permuted block).
    Emit(T),
    /// Taken into the buffer.
    Absorbed,
    /// The section was empty: process it normally.
    Normal(T),
}

/// Refuses a cut of other shuffle settings than `mode`, `n` and `seed`.
pub(super) fn same_settings(
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
    pub(in crate::ops::shuffle) fn restore_one(
        &mut self,
        lane: LaneId,
        x: T,
    ) -> Result<(Restored<T>, bool)> {
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
