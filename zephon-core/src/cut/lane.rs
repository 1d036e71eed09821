//! The lane-cut types: one operator's cut of a lane ([`OpLaneCut`]), its
//! [`Preamble`], and every operator's cut of a lane ([`LaneCut`]).

use super::OpState;
use crate::cut::PtrList;
use serde::{Deserialize, Serialize};

/// The pointers an operator needs back first on a restore (its preamble),
/// in the order it takes them back: the listed ones, then `computed` more.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preamble {
    /// Pointers stored in the cut.
    pub listed: PtrList,
    /// Pointers after the listed ones that the operator computes on
    /// restore from the work source's (its [`CutSource::restore_preamble`](super::CutSource::restore_preamble))
    /// instead of storing them.
    pub computed: u64,
    /// The first `in_flight` listed pointers are elements the operator
    /// emitted that the next stateful operator had not consumed yet (in
    /// flight in a map between the two): a restore emits them again first.
    pub in_flight: u64,
}

impl Preamble {
    /// Elements of the preamble.
    pub fn len(&self) -> u64 {
        // A file may say anything: its checks refuse a sum past u64.
        (self.listed.len() as u64).saturating_add(self.computed)
    }

    /// Whether the operator needs nothing back.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One operator's cut of one lane: what it consumed and emitted, the
/// identity of the last element it consumed, its preamble and its state.
/// See the [module documentation](super).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpLaneCut {
    /// The operator's name, as it registered ([`Board::register`](super::Board::register)).
    pub op: String,
    /// Elements of this lane the operator consumed since the run started.
    pub consumed: u64,
    /// Elements of this lane it emitted since the run started, where it
    /// counts them: more than the next stateful operator consumed means
    /// elements were in flight between the two (in a map's micro-batches),
    /// which the cut must list ([`Preamble::in_flight`]) or the lane cannot
    /// be cut.
    pub emitted: Option<u64>,
    /// Identity of the last of them (`None` where the operator cannot tell).
    pub last_identity: Option<u64>,
    /// The pointers it needs back first on a restore.
    pub preamble: Preamble,
    /// Everything else it holds, serialized by itself.
    pub state: OpState,
}

impl OpLaneCut {
    /// The cut of operator `op` after consuming `consumed` elements: nothing
    /// emitted counted, no identity, no preamble, no state; the `with_`
    /// methods fill those in.
    pub fn new(op: impl Into<String>, consumed: u64) -> Self {
        OpLaneCut {
            op: op.into(),
            consumed,
            emitted: None,
            last_identity: None,
            preamble: Preamble::default(),
            state: OpState::none(),
        }
    }

    /// With `emitted` elements emitted.
    pub fn with_emitted(mut self, emitted: u64) -> Self {
        self.emitted = Some(emitted);
        self
    }

    /// With the identity of the last element consumed.
    pub fn with_last_identity(mut self, last: Option<u64>) -> Self {
        self.last_identity = last;
        self
    }

    /// With this preamble.
    pub fn with_preamble(mut self, preamble: Preamble) -> Self {
        self.preamble = preamble;
        self
    }

    /// With this state.
    pub fn with_state(mut self, state: OpState) -> Self {
        self.state = state;
        self
    }

    /// Elements of the restore preamble this operator takes (or emits).
    pub fn preamble_len(&self) -> u64 {
        self.preamble.len()
    }
}

/// Every stateful operator's cut of one lane, downstream first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneCut {
    /// Per operator, in pipeline order from the consumer's end.
    pub ops: Vec<OpLaneCut>,
}

impl LaneCut {
    /// Lane positions consumed at the source's end of the pipeline: where a
    /// restored work source continues this lane.
    pub fn consumed(&self) -> u64 {
        self.ops.last().map_or(0, |o| o.consumed)
    }

    /// Identity of the last element the most upstream operator consumed.
    pub fn last_identity(&self) -> Option<u64> {
        self.ops.last().and_then(|o| o.last_identity)
    }
}
