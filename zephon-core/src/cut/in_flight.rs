//! The elements an operator emitted that the next stateful operator
//! downstream has not consumed yet, per lane, for the
//! [`Preamble::in_flight`](super::Preamble::in_flight) part of a cut.

use super::{OpLaneCut, element_pointer};
use crate::pointer::SamplePtr;
use std::collections::VecDeque;

/// One lane's journal of what an operator emitted and the next stateful
/// operator downstream may not have consumed yet: the count of elements
/// emitted (a cut's [`emitted`](OpLaneCut::emitted)) and, in a
/// checkpointed pipeline, the pointers of the latest of them, so a cut can
/// list the ones still in flight between the two (in a map's
/// micro-batches) as the first
/// [`Preamble::in_flight`](super::Preamble::in_flight) of its preamble.
///
/// An operator keeps one per lane: it notes every element it emits
/// ([`note_sent`](Self::note_sent)), asks for the pointers in flight when
/// it answers a cut ([`in_flight`](Self::in_flight), which forgets those
/// the next operator consumed), and on a restore starts the count again
/// from its cut ([`restore`](Self::restore)), then notes the in-flight
/// elements as it emits them again.
///
/// ```
/// use zephon_core::SamplePtr;
/// use zephon_core::checkpoint::cut::{InFlightJournal, OpLaneCut, Preamble};
/// use zephon_core::checkpoint::PtrList;
///
/// let p = |i| SamplePtr { dataset: 0, shard: 0, sample: i, lane: 2 };
/// let mut j = InFlightJournal::new();
/// // Five elements leave; the pipeline is checkpointed, so pointers are kept.
/// for i in 0..5 {
///     j.note_sent(&p(i), true);
/// }
/// assert_eq!(j.emitted(), 5);
/// // The next stateful operator consumed three: two are in flight.
/// let flight = j.in_flight(Some(3)).unwrap();
/// assert_eq!(flight, vec![p(3), p(4)]);
/// // The most downstream operator has no next one: nothing in flight.
/// assert_eq!(j.in_flight(None), Some(vec![]));
///
/// // The operator's cut lists them first; on a restore it emits them again.
/// let cut = OpLaneCut::new("op", 5).with_emitted(j.emitted()).with_preamble(Preamble {
///     listed: PtrList::new(flight.clone()),
///     computed: 0,
///     in_flight: flight.len() as u64,
/// });
/// let mut back = InFlightJournal::new();
/// back.restore(&cut);
/// assert_eq!(back.emitted(), 3);
/// for q in &flight {
///     back.note_sent(q, true);
/// }
/// assert_eq!(back.in_flight(Some(3)), Some(flight));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InFlightJournal {
    /// Elements of the lane emitted since the run started.
    emitted: u64,
    /// Emission number and pointer of the elements the next operator may
    /// not have consumed yet, oldest first.
    sent: VecDeque<(u64, SamplePtr)>,
    /// An element without a single source pointer was emitted.
    unlisted: bool,
}

impl InFlightJournal {
    /// An empty journal: nothing emitted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Elements emitted on the lane since the run started (or since the
    /// cut it was restored from): the cut's `emitted`.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    /// Counts `x` as emitted; when `cutting` (the operator registered on a
    /// checkpoint [`Board`](super::Board)), keeps its pointer
    /// ([`element_pointer`]) until a cut shows the next operator consumed
    /// it, or [marks it unlisted](Self::mark_unlisted) when it has none.
    #[inline]
    pub fn note_sent<T: 'static>(&mut self, x: &T, cutting: bool) {
        let ptr = if cutting { element_pointer(x) } else { None };
        self.note_pointer(ptr, cutting);
    }

    /// [`note_sent`](Self::note_sent) for an element whose pointer the
    /// operator already looked up (`None`: it has no single source pointer).
    #[inline]
    pub fn note_pointer(&mut self, ptr: Option<SamplePtr>, cutting: bool) {
        if cutting {
            match ptr {
                Some(p) => self.sent.push_back((self.emitted, p)),
                None => self.unlisted = true,
            }
        }
        self.emitted += 1;
    }

    /// Records that an element without a single source pointer was emitted
    /// (as [`note_pointer`](Self::note_pointer) with `None` does): from now
    /// on, no cut can list what is in flight, only say nothing is.
    pub fn mark_unlisted(&mut self) {
        self.unlisted = true;
    }

    /// Whether an element without a single source pointer was emitted.
    pub fn is_unlisted(&self) -> bool {
        self.unlisted
    }

    /// Forgets the pointers of the elements the next operator consumed,
    /// which consumed `downstream_consumed` elements of the lane: the
    /// emission numbers below it.
    pub fn trim(&mut self, downstream_consumed: u64) {
        while self
            .sent
            .front()
            .is_some_and(|&(n, _)| n < downstream_consumed)
        {
            self.sent.pop_front();
        }
    }

    /// The pointers of the elements in flight to the next operator, which
    /// consumed `downstream_consumed` (a [`CutContext`](super::CutContext)'s
    /// `downstream_consumed`; `None` for the most downstream operator, which
    /// has nothing in flight), oldest first; forgets those it consumed.
    /// `None` when they cannot be listed: the next operator consumed more
    /// than was emitted, or some in flight were not kept (emitted without
    /// a pointer, or outside a checkpointed pipeline); then the lane cannot
    /// be cut.
    pub fn in_flight(&mut self, downstream_consumed: Option<u64>) -> Option<Vec<SamplePtr>> {
        let Some(down) = downstream_consumed else {
            return Some(Vec::new());
        };
        self.trim(down);
        let n = self.emitted.checked_sub(down)?;
        if n == 0 {
            return Some(Vec::new());
        }
        if self.unlisted || self.sent.len() as u64 != n {
            return None;
        }
        Some(self.sent.iter().map(|&(_, p)| p).collect())
    }

    /// Starts again from `cut`, this operator's cut being restored: the
    /// count is what it had emitted less the elements in flight at the cut,
    /// which the operator emits again first (noting them as it does), and
    /// nothing is kept.
    pub fn restore(&mut self, cut: &OpLaneCut) {
        *self = InFlightJournal {
            emitted: cut
                .emitted
                .unwrap_or(0)
                .saturating_sub(cut.preamble.in_flight),
            ..Self::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cut::Preamble;

    fn p(i: u64) -> SamplePtr {
        SamplePtr {
            dataset: 0,
            shard: 1,
            sample: i,
            lane: 0,
        }
    }

    #[test]
    fn in_flight_is_exactly_what_the_next_operator_did_not_consume() {
        let mut j = InFlightJournal::new();
        for i in 0..6 {
            j.note_sent(&p(i), true);
        }
        // Asked at every count the next operator may have reached, in order:
        // the element numbered `down` is the first still in flight.
        for down in 0..=6 {
            let want: Vec<SamplePtr> = (down..6).map(p).collect();
            assert_eq!(j.in_flight(Some(down)), Some(want), "down = {down}");
        }
        // Trimmed: what was consumed is gone, the count stays.
        assert_eq!(j.emitted(), 6);
        j.note_sent(&p(6), true);
        assert_eq!(j.in_flight(Some(6)), Some(vec![p(6)]));
        // More consumed than emitted: no cut.
        assert_eq!(j.in_flight(Some(8)), None);
    }

    #[test]
    fn trim_keeps_the_first_unconsumed_element() {
        let mut j = InFlightJournal::new();
        for i in 0..4 {
            j.note_sent(&p(i), true);
        }
        j.trim(2);
        assert_eq!(j.in_flight(Some(2)), Some(vec![p(2), p(3)]));
        j.trim(4);
        assert_eq!(j.in_flight(Some(4)), Some(vec![]));
    }

    #[test]
    fn unkept_elements_make_the_flight_unlistable_while_in_flight() {
        let mut j = InFlightJournal::new();
        j.note_sent(&p(0), true);
        // Outside a checkpointed pipeline: counted, not kept.
        j.note_sent(&p(1), false);
        assert_eq!(j.emitted(), 2);
        assert_eq!(j.in_flight(Some(1)), None);
        assert_eq!(j.in_flight(Some(2)), Some(vec![]));
        // No single pointer: counted, and nothing in flight can be listed.
        j.note_sent(&7u32, true);
        assert!(j.is_unlisted());
        j.note_sent(&p(3), true);
        assert_eq!(j.in_flight(Some(3)), None);
        assert_eq!(j.in_flight(Some(4)), Some(vec![]));
        let mut k = InFlightJournal::new();
        k.note_sent(&p(0), true);
        k.mark_unlisted();
        assert_eq!(k.in_flight(Some(0)), None);
    }

    #[test]
    fn restore_counts_from_the_cut_less_what_was_in_flight() {
        let mut j = InFlightJournal::new();
        j.note_sent(&p(9), true);
        j.mark_unlisted();
        let cut = OpLaneCut::new("op", 10)
            .with_emitted(7)
            .with_preamble(Preamble {
                listed: crate::cut::PtrList::new(vec![p(5), p(6)]),
                computed: 0,
                in_flight: 2,
            });
        j.restore(&cut);
        assert_eq!(
            j,
            InFlightJournal {
                emitted: 5,
                ..InFlightJournal::new()
            }
        );
        j.note_sent(&p(5), true);
        j.note_sent(&p(6), true);
        assert_eq!(j.in_flight(Some(5)), Some(vec![p(5), p(6)]));
        // A cut that counted nothing emitted restores to zero.
        j.restore(&OpLaneCut::new("op", 3));
        assert_eq!(j.emitted(), 0);
    }
}
