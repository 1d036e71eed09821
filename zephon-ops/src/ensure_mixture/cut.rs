//! `ensure_mixture`'s state, shared with the checkpoint board: per lane the
//! queues and the weight emitted per dataset; its lane cut, through
//! zephon-core's open lane-cut protocol (see
//! [`zephon_core::checkpoint::cut`]) as any crate's operator takes part, and
//! putting a cut back.

use super::{LaneMix, MixtureConfig, weight};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use zephon_core::checkpoint::PtrList;
use zephon_core::checkpoint::cut::{
    CutContext, CutSource, OpLaneCut, OpState, Preamble, element_pointer,
};
use zephon_core::{Error, LaneId, Record, Result, SamplePtr};

/// The name the operator registers under.
pub(crate) const NAME: &str = "ensure_mixture";

/// Layout version of [`MixState`].
const STATE_VERSION: u32 = 1;

/// What a mixture cut holds besides its preamble, which lists the records
/// ready to leave (next first), then each queue (oldest first) in the order
/// of `queues`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MixState {
    /// Records ready to leave: the first this many of the preamble.
    pending: u64,
    /// Per dataset (ascending) with a queue, its length.
    queues: Vec<(u32, u64)>,
    /// Per dataset, the weight emitted so far (`f64::to_bits`, so the
    /// restored deficits are exactly the same).
    emitted: Vec<(u32, u64)>,
    /// The total weight emitted (`f64::to_bits`).
    total: u64,
}

/// A mixture cut's counts add up to its preamble.
pub(crate) fn check_state(lane: LaneId, cut: &OpLaneCut) -> std::result::Result<(), String> {
    let s: MixState = cut.check_decode(lane, NAME, STATE_VERSION)?;
    check(&s, &cut.preamble)
}

fn check(s: &MixState, p: &Preamble) -> std::result::Result<(), String> {
    let counted = s
        .queues
        .iter()
        .try_fold(s.pending, |n, (_, q)| n.checked_add(*q));
    if p.computed != 0 || p.in_flight != 0 || counted != Some(p.listed.len() as u64) {
        return Err(format!(
            "{} pending and queues of {:?} records, but a preamble of {} listed, {} computed, {} in flight",
            s.pending,
            s.queues.iter().map(|q| q.1).collect::<Vec<_>>(),
            p.listed.len(),
            p.computed,
            p.in_flight
        ));
    }
    Ok(())
}

/// The operator's state: per lane, and the records ready to leave.
#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) lanes: BTreeMap<LaneId, LaneMix>,
    pub(super) out: VecDeque<Record>,
    pub(super) done: bool,
    /// Per lane during a restore: the cut being put back (the lane's state
    /// until it is), its state once decoded, and how many of its records
    /// arrived.
    pub(super) restoring: BTreeMap<LaneId, (OpLaneCut, Option<MixState>, usize)>,
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
        if let Some((cut, _, _)) = st.restoring.get(&lane) {
            return Some(cut.clone());
        }
        let pending = st
            .out
            .iter()
            .filter(|r| r.lane == lane)
            .map(element_pointer)
            .collect::<Option<Vec<SamplePtr>>>()?;
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
                        .collect::<Option<Vec<SamplePtr>>>()?,
                ))
            })
            .collect::<Option<Vec<_>>>()?;
        let mut listed: Vec<SamplePtr> = pending;
        let mut lens = Vec::with_capacity(queues.len());
        for (d, q) in queues {
            lens.push((d, q.len() as u64));
            listed.extend(q);
        }
        let state = MixState {
            pending: listed.len() as u64 - lens.iter().map(|q| q.1).sum::<u64>(),
            queues: lens,
            emitted: l.emitted.iter().map(|(&d, w)| (d, w.to_bits())).collect(),
            total: l.total.to_bits(),
        };
        Some(
            OpLaneCut::new(NAME, l.consumed)
                .with_emitted(l.sent)
                .with_last_identity(l.last)
                .with_preamble(Preamble {
                    listed: PtrList::new(listed),
                    ..Preamble::default()
                })
                .with_state(OpState::new(STATE_VERSION, &state).ok()?),
        )
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
        // Out of the map while this record is put back, so the lane's
        // state can change; back in unless the section is complete.
        let (held, decoded, k) = self
            .restoring
            .remove(&lane)
            .unwrap_or_else(|| (cut.clone(), None, 0));
        let state = match decoded {
            Some(s) => s,
            None => {
                let s: MixState = cut.decode_state(lane, NAME, STATE_VERSION)?;
                check(&s, &cut.preamble).map_err(|m| restore_error(lane, m))?;
                s
            }
        };
        let section = cut.preamble_len() as usize;
        if section == 0 {
            self.finish(lane, cut, &state);
            return Ok((Restored::Normal(r), true));
        }
        if k == 0 {
            // The pending records are counted as they leave again.
            self.lanes.entry(lane).or_default().sent = cut.emitted.unwrap_or(0);
        }
        let expected = cut.preamble.listed.get(k);
        if element_pointer(&r).map(|p| (p.dataset, p.shard, p.sample))
            != expected.map(|p| (p.dataset, p.shard, p.sample))
        {
            return Err(restore_error(
                lane,
                format!("record {k} of the preamble is not the one the checkpoint held"),
            ));
        }
        let pending = state.pending as usize;
        if k < pending {
            self.out.push_back(r);
        } else {
            let mut i = (k - pending) as u64;
            let d = state
                .queues
                .iter()
                .find_map(|&(d, q)| {
                    if i < q {
                        Some(d)
                    } else {
                        i -= q;
                        None
                    }
                })
                .ok_or_else(|| restore_error(lane, "a queued record past the queues"))?;
            // Only the queue a record would have joined: one of another
            // dataset, or of one without a weight, is never drained.
            let own = r.source().map(|p| p.dataset);
            if own != Some(d) || !c.weights.contains_key(&d) {
                return Err(restore_error(
                    lane,
                    format!(
                        "record {k} of the preamble is queued under dataset {d}, but it is of \
                         dataset {} and the weighted datasets are {:?}",
                        own.map_or("none".into(), |o| o.to_string()),
                        c.weights.keys().collect::<Vec<_>>()
                    ),
                ));
            }
            let w = weight(c, &r)?;
            let l = self.lanes.entry(lane).or_default();
            l.queues.entry(d).or_default().push_back((r, w));
            l.buffered += 1;
        }
        let finished = k + 1 == section;
        if finished {
            self.finish(lane, cut, &state);
        } else {
            self.restoring.insert(lane, (held, Some(state), k + 1));
        }
        Ok((Restored::Absorbed, finished))
    }

    fn finish(&mut self, lane: LaneId, cut: &OpLaneCut, state: &MixState) {
        self.restoring.remove(&lane);
        let l = self.lanes.entry(lane).or_default();
        l.emitted = state
            .emitted
            .iter()
            .map(|&(d, w)| (d, f64::from_bits(w)))
            .collect();
        l.total = f64::from_bits(state.total);
        l.consumed = cut.consumed;
        l.last = cut.last_identity;
        if cut.preamble_len() == 0 {
            l.sent = cut.emitted.unwrap_or(0);
        }
    }
}
