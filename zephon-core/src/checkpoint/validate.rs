//! The checks every [`Checkpoint`] passes when it is read and again when a
//! run restores from it: its fields must agree with each other, whatever a
//! hand-made or damaged file says.

use super::recipe::fingerprint_of;
use super::state::{Checkpoint, err};
use crate::cut::{LaneCut, StateCheck, registered_state_check};
use crate::error::Result;
use crate::pointer::LaneId;

impl Checkpoint {
    /// Refuses internal contradictions: a lane count outside
    /// [`CANONICAL_LANES`](crate::settings::CANONICAL_LANES), lanes outside
    /// it, counts that cannot be (elements without batches, fewer elements
    /// than batches), a step that is not the most batches of a lane, cuts
    /// of lanes the checkpoint does not cover or that contradict themselves,
    /// and a recipe fingerprint that is not its settings'.
    pub(super) fn check_consistent(&self, origin: &str) -> Result<()> {
        let fail = |message: String| Err(err(origin, message));
        // Bounded before anything walks the lanes: a file saying 4 billion
        // would have every lane id listed to name the ones it lacks.
        if !crate::settings::CANONICAL_LANES.contains(self.canonical_lanes as u64) {
            return fail(format!(
                "canonical_lanes {}",
                crate::settings::CANONICAL_LANES.message(self.canonical_lanes)
            ));
        }
        if self.lanes.is_empty() {
            return fail("it covers no lane".into());
        }
        if let Some(l) = self.lanes.keys().find(|&&l| l >= self.canonical_lanes) {
            return fail(format!(
                "lane {l} is outside the {} canonical lanes",
                self.canonical_lanes
            ));
        }
        for (lane, p) in &self.lanes {
            // A delivered batch holds at least one element.
            if p.items < p.batches {
                return fail(format!(
                    "lane {lane}: {} elements in {} batches",
                    p.items, p.batches
                ));
            }
        }
        let most = self.lanes.values().map(|p| p.batches).max().unwrap_or(0);
        if self.step != most {
            return fail(format!(
                "step {} but its lanes delivered at most {most} batches",
                self.step
            ));
        }
        for (&lane, cut) in &self.cuts {
            let Some(p) = self.lanes.get(&lane) else {
                return fail(format!(
                    "a cut of lane {lane}, which the checkpoint does not cover"
                ));
            };
            if p.batches == 0 {
                return fail(format!(
                    "a cut of lane {lane}, which delivered no batch yet"
                ));
            }
            check_cut(lane, cut).map_err(|m| err(origin, format!("lane {lane}'s cut: {m}")))?;
            if let Some(total) = self.positions {
                let len = total
                    .saturating_sub(lane as u64)
                    .div_ceil(self.canonical_lanes as u64);
                if cut.consumed() > len {
                    return fail(format!(
                        "lane {lane}'s cut consumed {} positions of a lane of {len}",
                        cut.consumed()
                    ));
                }
            }
        }
        if fingerprint_of(self.work_fingerprint, &self.settings) != self.recipe_fingerprint {
            return fail(
                "recipe fingerprint does not match its settings: the file is corrupt".into(),
            );
        }
        Ok(())
    }
}

/// A lane cut's operators and pointers agree with each other and the lane:
/// the layout every operator's cut shares, then what a check registered for
/// the operator says (see [`StateCheck`](super::cut::StateCheck)).
fn check_cut(lane: LaneId, cut: &LaneCut) -> std::result::Result<(), String> {
    if cut.ops.is_empty() {
        return Err("no operator".into());
    }
    for (i, op) in cut.ops.iter().enumerate() {
        let at = |m: String| format!("operator {i} (`{}`): {m}", op.op);
        if op.op.is_empty() {
            return Err(at("an operator without a name".into()));
        }
        let p = &op.preamble;
        let listed = p.listed.len() as u64;
        // One pass over the list: it may hold many pointers.
        if let Some(other) = p.listed.to_vec().iter().find(|q| q.lane != lane) {
            return Err(at(format!("its preamble holds {other}, of another lane")));
        }
        if listed.checked_add(p.computed).is_none() {
            return Err(at(format!(
                "a preamble of {listed} listed and {} computed pointers",
                p.computed
            )));
        }
        if p.in_flight > listed {
            return Err(at(format!(
                "{} elements in flight but {listed} listed",
                p.in_flight
            )));
        }
        if let Some(emitted) = op.emitted
            && emitted < p.in_flight
        {
            return Err(at(format!(
                "{} elements in flight but {emitted} emitted",
                p.in_flight
            )));
        }
        if let Some(check) = state_check(&op.op) {
            check(lane, op).map_err(at)?;
        }
    }
    Ok(())
}

/// The check registered for `op`: one of zephon-core's own operators', or
/// one registered with [`register_state_check`](crate::cut::register_state_check).
fn state_check(op: &str) -> Option<StateCheck> {
    crate::ops::STATE_CHECKS
        .iter()
        .find(|(name, _)| *name == op)
        .map(|(_, c)| *c)
        .or_else(|| registered_state_check(op))
}
