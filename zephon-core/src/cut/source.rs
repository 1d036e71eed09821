//! The operator's side of a cut: the [`CutSource`] trait, the
//! [`CutContext`] it is asked with, and the [`LaneInput`] it computes a
//! preamble from.

use super::OpLaneCut;
use crate::pointer::{LaneId, SamplePtr};
use crate::record::lineage_identity;

/// What the board tells an operator when it asks for the operator's cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutContext {
    /// Elements of the lane the next stateful operator downstream consumed
    /// (`None` for the most downstream one).
    pub downstream_consumed: Option<u64>,
    /// A filter sits upstream: positions in this operator's input are not
    /// the work source's, so a preamble must be listed, not computed.
    pub list: bool,
}

/// How a restore sees one lane's input, for an operator computing its
/// preamble ([`CutSource::restore_preamble`]): the lane's pointers by
/// position, and the operators between this one and the work source.
pub struct LaneInput<'a> {
    lane: LaneId,
    consumed: u64,
    record_ids: bool,
    upstream: &'a [OpLaneCut],
    at: &'a mut dyn FnMut(u64) -> Option<SamplePtr>,
}

impl std::fmt::Debug for LaneInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneInput")
            .field("lane", &self.lane)
            .field("consumed", &self.consumed)
            .field("upstream", &self.upstream.len())
            .finish_non_exhaustive()
    }
}

impl<'a> LaneInput<'a> {
    pub(crate) fn new(
        lane: LaneId,
        consumed: u64,
        record_ids: bool,
        upstream: &'a [OpLaneCut],
        at: &'a mut dyn FnMut(u64) -> Option<SamplePtr>,
    ) -> Self {
        LaneInput {
            lane,
            consumed,
            record_ids,
            upstream,
            at,
        }
    }

    /// The lane.
    pub fn lane(&self) -> LaneId {
        self.lane
    }

    /// Positions of the lane the pipeline consumed (the most upstream
    /// operator's `consumed`): the work source continues the lane there.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The cuts of the stateful operators between this one and the work
    /// source, nearest first; empty for the most upstream one, whose input
    /// position `p` is the lane's position `p`.
    pub fn upstream(&self) -> &[OpLaneCut] {
        self.upstream
    }

    /// The work source's pointer at position `pos` of the lane, `None`
    /// past a finite end.
    pub fn pointer_at(&mut self, pos: u64) -> Option<SamplePtr> {
        (self.at)(pos)
    }

    /// The identity (see [`Identity`](crate::Identity)) of the element `p` becomes where the
    /// most upstream operator sees it: a record with lineage `[p]`, or the
    /// bare pointer, as the restore found by checking `last_identity`.
    pub fn identity_of(&self, p: &SamplePtr) -> u64 {
        if self.record_ids {
            lineage_identity(std::slice::from_ref(p))
        } else {
            p.identity()
        }
    }

    /// The cut's listed preamble, each pointer on this lane: what
    /// [`CutSource::restore_preamble`] returns by default. An error when
    /// the cut says some are computed.
    pub fn listed(&self, cut: &OpLaneCut) -> std::result::Result<Vec<SamplePtr>, String> {
        if cut.preamble.computed > 0 {
            return Err(format!(
                "`{}` computes {} preamble pointers but does not say how",
                cut.op, cut.preamble.computed
            ));
        }
        let lane = self.lane;
        Ok(cut
            .preamble
            .listed
            .to_vec()
            .into_iter()
            .map(|p| SamplePtr { lane, ..p })
            .collect())
    }
}

/// An operator's view of its own lane state, read when a batch leaves and
/// asked for its preamble on a restore. See the [module documentation](super).
pub trait CutSource: Send + Sync {
    /// The cut of `lane` now; `None` where it cannot be cut (then the
    /// checkpoint replays the lane).
    fn cut(&self, lane: LaneId, ctx: CutContext) -> Option<OpLaneCut>;

    /// On a restore, before the work source emits anything: the pointers of
    /// this operator's preamble for `cut`'s lane, exactly
    /// [`OpLaneCut::preamble_len`] of them, in the order the operator takes
    /// them back. Called once per restored lane, possibly from several
    /// threads at once (one lane each), after the operator registered.
    ///
    /// The default returns the listed ones ([`LaneInput::listed`]). An
    /// operator that computes its preamble computes it here, from `input`;
    /// it may also reorder it (for reading locality) and remember the order
    /// in its own state. An error (or a panic) makes the restore replay
    /// every lane instead, with a warning giving the reason; an operator that must
    /// refuse the restore instead (shuffle, given a cut of other settings)
    /// keeps the error and returns it from its stream.
    fn restore_preamble(
        &self,
        cut: &OpLaneCut,
        input: &mut LaneInput<'_>,
    ) -> std::result::Result<Vec<SamplePtr>, String> {
        input.listed(cut)
    }
}
