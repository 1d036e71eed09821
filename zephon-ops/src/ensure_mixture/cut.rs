//! `ensure_mixture`'s state, shared with the checkpoint board: per lane the
//! queues and the weight emitted per dataset; its lane cut, and putting a
//! cut back.

use super::{LaneMix, MixtureConfig, weight};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use zephon_core::checkpoint::cut::{CutContext, CutSource, OpCut, OpLaneCut, element_pointer};
use zephon_core::{Error, LaneId, Record, Result};

/// The operator's state: per lane, and the records ready to leave.
#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) lanes: BTreeMap<LaneId, LaneMix>,
    pub(super) out: VecDeque<Record>,
    pub(super) done: bool,
    /// Per lane during a restore: the cut being put back (the lane's state
    /// until it is) and how many of its records arrived.
    pub(super) restoring: BTreeMap<LaneId, (OpLaneCut, usize)>,
}

fn restore_error(lane: LaneId, message: impl Into<String>) -> Error {
    Error::Checkpoint {
        origin: "restore".into(),
        message: format!("ensure_mixture, lane {lane}: {}", message.into()),
    }
}

/// The state, shared between the operator and the checkpoint board.
#[derive(Debug, Default)]
pub(super) struct Shared(Mutex<State>);

impl Shared {
    /// The state (a poisoned lock only means a panic elsewhere; the state
    /// itself is whole).
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl CutSource for Shared {
    fn cut(&self, lane: LaneId, _: CutContext) -> Option<OpLaneCut> {
        let st = self.lock();
        if let Some((cut, _)) = st.restoring.get(&lane) {
            return Some(cut.clone());
        }
        let pending = st
            .out
            .iter()
            .filter(|r| r.lane == lane)
            .map(element_pointer)
            .collect::<Option<Vec<_>>>()?;
        let empty = LaneMix::default();
        let l = st.lanes.get(&lane).unwrap_or(&empty);
        let queues = l
            .queues
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&d, q)| {
                Some((
                    d,
                    q.iter()
                        .map(|(r, _)| element_pointer(r))
                        .collect::<Option<_>>()?,
                ))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(OpLaneCut {
            op: "ensure_mixture".into(),
            consumed: l.consumed,
            emitted: Some(l.sent),
            last_identity: l.last,
            cut: OpCut::Mixture {
                pending,
                queues,
                emitted: l.emitted.iter().map(|(&d, w)| (d, w.to_bits())).collect(),
                total: l.total.to_bits(),
            },
        })
    }
}

/// What a restoring lane does with one of its own preamble records.
pub(super) enum Restored {
    /// Taken back (into the queue of records ready to leave, or into its
    /// dataset's queue).
    Absorbed,
    /// The section was empty: process it normally.
    Normal(Record),
}

impl State {
    /// Takes back one record of `lane`'s section of the preamble; whether
    /// the section is complete.
    pub(super) fn restore_one(
        &mut self,
        c: &MixtureConfig,
        lane: LaneId,
        cut: &OpLaneCut,
        r: Record,
    ) -> Result<(Restored, bool)> {
        let OpCut::Mixture {
            pending,
            queues,
            emitted,
            total,
        } = &cut.cut
        else {
            return Err(restore_error(
                lane,
                "the checkpoint holds another operator's cut",
            ));
        };
        let section = cut.cut.preamble_len() as usize;
        if section == 0 {
            self.finish(lane, cut, emitted, *total);
            return Ok((Restored::Normal(r), true));
        }
        let seen = &mut self
            .restoring
            .entry(lane)
            .or_insert_with(|| (cut.clone(), 0))
            .1;
        let k = *seen;
        *seen += 1;
        if k == 0 {
            // The pending records are counted as they leave again.
            self.lanes.entry(lane).or_default().sent = cut.emitted.unwrap_or(0);
        }
        let expected = pending
            .iter()
            .chain(queues.iter().flat_map(|(_, q)| q))
            .nth(k)
            .copied();
        if element_pointer(&r).map(|p| (p.dataset, p.shard, p.sample))
            != expected.map(|p| (p.dataset, p.shard, p.sample))
        {
            return Err(restore_error(
                lane,
                format!("record {k} of the preamble is not the one the checkpoint held"),
            ));
        }
        if k < pending.len() {
            self.out.push_back(r);
        } else {
            let mut i = k - pending.len();
            let d = queues
                .iter()
                .find_map(|(d, q)| {
                    if i < q.len() {
                        Some(*d)
                    } else {
                        i -= q.len();
                        None
                    }
                })
                .ok_or_else(|| restore_error(lane, "a queued record past the queues"))?;
            let w = weight(c, &r)?;
            let l = self.lanes.entry(lane).or_default();
            l.queues.entry(d).or_default().push_back((r, w));
            l.buffered += 1;
        }
        let finished = k + 1 == section;
        if finished {
            self.finish(lane, cut, emitted, *total);
        }
        Ok((Restored::Absorbed, finished))
    }

    fn finish(&mut self, lane: LaneId, cut: &OpLaneCut, emitted: &[(u32, u64)], total: u64) {
        self.restoring.remove(&lane);
        let l = self.lanes.entry(lane).or_default();
        l.emitted = emitted
            .iter()
            .map(|&(d, w)| (d, f64::from_bits(w)))
            .collect();
        l.total = f64::from_bits(total);
        l.consumed = cut.consumed;
        l.last = cut.last_identity;
        if cut.cut.preamble_len() == 0 {
            l.sent = cut.emitted.unwrap_or(0);
        }
    }
}
