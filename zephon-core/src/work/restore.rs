//! The work source's side of a restore from lane cuts: per lane, the
//! identity check of where the lane stopped, the preamble of pointers the
//! stateful operators take back (each operator says what its own is, see
//! [`CutSource::restore_preamble`](crate::cut::CutSource::restore_preamble)),
//! and the lane position where the lane continues.

use super::Plan;
use super::shuffle::PassLayout;
use crate::cut::{Board, CutSource, LaneCut, LaneInput};
use crate::pointer::{LaneId, SamplePtr};
use crate::record::lineage_identity;
use std::collections::VecDeque;
use std::sync::Arc;

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

/// The registered operators' cut sources, in registration order.
type Sources = [(&'static str, Option<Arc<dyn CutSource>>)];

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
    let sources = board.sources();
    let sources: &Sources = &sources;
    // Computing preambles (a shuffle buffer takes up to n ln n pointer
    // lookups) is per lane: lanes share out over the cores.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(cuts.len())
        .max(1);
    let per_thread = cuts.len().div_ceil(threads).max(1);
    let results: Result<Vec<LaneResult>, String> = std::thread::scope(|scope| {
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
                            let preamble = lane_preamble(&mut look, sources, lane, cut);
                            (lane, cut.consumed(), preamble)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        // A worker that panicked would leave its lanes out: they would
        // start again from 0 beside operators restored to the cut, so the
        // whole restore falls back to replaying instead. Every handle is
        // joined first: one left to the scope would panic it.
        let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        joined
            .into_iter()
            .map(|j| j.map_err(|p| crate::error::panic_message(&*p)))
            .collect::<Result<Vec<Vec<LaneResult>>, String>>()
            .map(|chunks| chunks.into_iter().flatten().collect())
    });
    let results = match results {
        Ok(r) => r,
        Err(why) => {
            board.replay_all(&format!("computing a lane's restore panicked: {why}"));
            return None;
        }
    };
    for (lane, consumed, result) in results {
        match result {
            Ok(preamble) => {
                out.preamble.extend(preamble);
                out.starts[lane as usize] = consumed;
            }
            Err(why) => {
                board.replay_all(&format!("lane {lane}: {why}"));
                return None;
            }
        }
    }
    Some(out)
}

/// A lane's restore: its preamble.
type LaneResult = (LaneId, u64, Result<Vec<SamplePtr>, String>);

fn lane_preamble(
    look: &mut Lookup<'_>,
    sources: &Sources,
    lane: LaneId,
    cut: &LaneCut,
) -> Result<Vec<SamplePtr>, String> {
    let consumed = cut.consumed();
    let last = cut
        .last_identity()
        .ok_or("the most upstream operator did not record what it consumed")?;
    let at_last = look
        .at(lane, consumed.checked_sub(1).ok_or("nothing consumed")?)
        .ok_or("the lane is shorter than the checkpoint says")?;
    // The most upstream operator sees records (with the pointer as
    // lineage) or bare pointers (a pipeline of pointers before fetch).
    let record_ids = if lineage_identity(std::slice::from_ref(&at_last)) == last {
        true
    } else if at_last.identity() == last {
        false
    } else {
        return Err(
            "the last element consumed is not the work source's pointer at that position \
             (an operator between the work source and the first stateful one is not one-to-one)"
                .into(),
        );
    };
    if sources.len() != cut.ops.len() {
        return Err(format!(
            "the cut holds {} stateful operators, this pipeline registered {}",
            cut.ops.len(),
            sources.len()
        ));
    }
    let mut preamble = Vec::new();
    for (i, (op, (name, source))) in cut.ops.iter().zip(sources).enumerate() {
        let source = source
            .as_ref()
            .ok_or_else(|| format!("operator {i} (`{name}`) cannot be cut"))?;
        let mut at = |pos: u64| look.at(lane, pos);
        let mut input = LaneInput::new(lane, consumed, record_ids, &cut.ops[i + 1..], &mut at);
        let own = source
            .restore_preamble(op, &mut input)
            .map_err(|e| format!("operator {i} (`{name}`): {e}"))?;
        if own.len() as u64 != op.preamble_len() {
            return Err(format!(
                "operator {i} (`{name}`) gave {} preamble pointers for a cut of {}",
                own.len(),
                op.preamble_len()
            ));
        }
        preamble.extend(own.into_iter().map(|p| SamplePtr { lane, ..p }));
    }
    Ok(preamble)
}
