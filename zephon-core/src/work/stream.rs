//! The stream of pointers a work source emits for the lanes a rank owns.

use super::shuffle::PassLayout;
use super::{Plan, count_lane, restore};
use crate::dataset::Catalog;
use crate::error::Result;
use crate::pointer::{LaneId, SamplePtr};
use futures::Stream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The pointers of the lanes this rank owns, in global order. Never pending.
#[must_use = "streams do nothing unless polled"]
#[derive(Debug)]
pub struct PointerStream {
    pub(super) plan: Arc<Plan>,
    pub(super) next: u64,
    pub(super) cache: Vec<Option<PassLayout>>,
    /// Whether this rank owns each lane, looked up per index rather than
    /// computed (two divisions each).
    pub(super) owned: Vec<bool>,
    pub(super) board_looked: bool,
    /// Restoring from lane cuts: the preamble, and where each lane resumes.
    pub(super) resume: Option<restore::Resume>,
}

impl PointerStream {
    /// The next global index this stream will consider.
    pub fn position(&self) -> u64 {
        self.next
    }
}

/// Streams that know the catalog their pointers refer to, so `fetch()` needs
/// no argument.
pub trait Catalogued {
    /// The datasets the pointers index into.
    fn catalog(&self) -> &Catalog;
}

impl Catalogued for PointerStream {
    fn catalog(&self) -> &Catalog {
        &self.plan.catalog
    }
}

impl PointerStream {
    /// The pointers as a plain iterator (the stream never waits).
    pub fn pointers(self) -> impl Iterator<Item = SamplePtr> {
        let mut s = self;
        std::iter::from_fn(move || s.next_pointer())
    }

    /// The next pointer of an owned lane, `None` at the end.
    pub fn next_pointer(&mut self) -> Option<SamplePtr> {
        let lanes = self.plan.config.lanes;
        let l = lanes.canonical_lanes as u64;
        if let Some(r) = &mut self.resume
            && let Some(p) = r.preamble.pop_front()
        {
            return Some(p);
        }
        loop {
            let g = self.next;
            if self.plan.end.is_some_and(|e| g >= e) {
                return None;
            }
            self.next += 1;
            let lane = (g % l) as LaneId;
            if self.owned[lane as usize]
                && self
                    .resume
                    .as_ref()
                    .is_none_or(|r| g / l >= r.starts[lane as usize])
            {
                return Some(self.plan.pointer_in_lane(g, lane, &mut self.cache));
            }
        }
    }

    /// First poll of a checkpointed pipeline being restored: take the lane
    /// cuts off the board.
    fn look_for_restore(&mut self) {
        self.board_looked = true;
        let Some(board) = crate::checkpoint::cut::Board::current() else {
            return;
        };
        if board.restoring().is_empty() || board.replaying_all() {
            return;
        }
        if let Some(r) = restore::plan(&self.plan, &board) {
            let lanes = self.plan.config.lanes;
            let l = lanes.canonical_lanes as u64;
            let first = lanes
                .owned_lanes()
                .iter()
                .map(|&lane| r.starts[lane as usize] * l + lane as u64)
                .min()
                .unwrap_or(0);
            self.next = self.next.max(first);
            self.resume = Some(r);
        }
    }

    fn remaining(&self) -> (usize, Option<usize>) {
        match self.plan.end {
            None => (usize::MAX, None),
            Some(end) => {
                let lanes = self.plan.config.lanes;
                let l = lanes.canonical_lanes as u64;
                let n: u64 = lanes
                    .owned_lanes()
                    .iter()
                    .map(|&lane| {
                        let start = self
                            .resume
                            .as_ref()
                            .map_or(0, |r| r.starts[lane as usize] * l + lane as u64);
                        count_lane(self.next.max(start), end, lane as u64, l)
                    })
                    .sum::<u64>()
                    + self.resume.as_ref().map_or(0, |r| r.preamble.len() as u64);
                (n as usize, Some(n as usize))
            }
        }
    }
}

impl Stream for PointerStream {
    type Item = Result<SamplePtr>;
    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if !this.board_looked {
            this.look_for_restore();
        }
        Poll::Ready(this.next_pointer().map(Ok))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.remaining()
    }
}

impl crate::obs::Explain for PointerStream {
    fn describe(&self, out: &mut Vec<crate::obs::StageDescription>) {
        let c = &self.plan.config;
        let datasets: Vec<String> = self
            .plan
            .catalog
            .iter()
            .enumerate()
            .zip(&self.plan.schedule.segments[0].mixture.quotas)
            .map(|((i, d), q)| {
                let mut s = format!("{} ({q}/{}", d.name(), c.chunk_size);
                if let Some(t) = &self.plan.tokens_per_sample {
                    s += &format!(", {:.1} tokens/sample", t[i]);
                }
                if let Some(p) = c.policies.get(d.name()) {
                    s += &format!(", {p:?}");
                }
                s + ")"
            })
            .collect();
        out.push(crate::obs::StageDescription::new(
            "work_source",
            1,
            None,
            format!(
                "{}; seed {}; {:?} ({} segment(s)); lanes {:?} of {}",
                datasets.join(", "),
                c.seed,
                c.exhaustion,
                self.plan.schedule.segments.len(),
                c.lanes.owned_lanes(),
                c.lanes.canonical_lanes
            ),
        ));
    }
}
