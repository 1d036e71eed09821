//! The stream of pointers a work source emits for the lanes a rank owns.

use super::shuffle::PassLayout;
use super::{Cursor, Plan, count_lane, restore};
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
    /// Where `next` falls in the schedule, when it was last computed there.
    pub(super) cursor: Option<Cursor>,
    /// Under a mixture schedule, the pointers handed out per phase.
    pub(super) tally: Option<super::tally::LocalTally>,
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

    /// Appends up to `max` of the next pointers to `out` at once and says how
    /// many (0: the stream has ended), for a stream that never waits and
    /// never fails; `None` (the default) for any other, which is polled one
    /// pointer at a time. [`fetch`](crate::PipelineExt::fetch) takes its
    /// pointers this way where it can: a poll per pointer cost more than
    /// computing the pointer. Either way gives the same pointers in the same
    /// order.
    ///
    /// ```
    /// use std::pin::Pin;
    /// use zephon_core::{Catalogued, Dataset, Record, WorkSource};
    /// let ds = Dataset::in_memory("d", vec![vec![Record::new(); 10]])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).seed(5).build()?;
    /// let mut s = ws.stream();
    /// let mut out = Vec::new();
    /// assert_eq!(Pin::new(&mut s).next_pointers(&mut out, 4), Some(4));
    /// assert_eq!(Pin::new(&mut s).next_pointers(&mut out, 100), Some(6));
    /// assert_eq!(Pin::new(&mut s).next_pointers(&mut out, 100), Some(0));
    /// assert_eq!(out, ws.stream().pointers().collect::<Vec<_>>());
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn next_pointers(self: Pin<&mut Self>, out: &mut Vec<SamplePtr>, max: usize) -> Option<usize> {
        let _ = (out, max);
        None
    }
}

impl Catalogued for PointerStream {
    fn catalog(&self) -> &Catalog {
        &self.plan.catalog
    }

    fn next_pointers(self: Pin<&mut Self>, out: &mut Vec<SamplePtr>, max: usize) -> Option<usize> {
        let this = self.get_mut();
        if !this.board_looked {
            this.look_for_restore();
        }
        out.reserve(max);
        let mut n = 0;
        while n < max {
            let Some(p) = this.next_pointer() else { break };
            out.push(p);
            n += 1;
            n += this.run_after(&p, (max - n) as u64, out) as usize;
        }
        Some(n)
    }
}

impl PointerStream {
    /// Appends to `out` the pointers right after `p` (the last one handed
    /// out) that can be located as a run of consecutive positions of one
    /// dataset's pass, up to `limit`, and says how many. A run: one dataset
    /// in the mixture, every lane this rank's, no restore; the shard order,
    /// within-shard and block shuffles of the pass are applied to the whole
    /// run at once ([`DatasetOrder::locate_run`]). Anything else is 0, and
    /// pointers are located one by one.
    ///
    /// [`DatasetOrder::locate_run`]: super::shuffle::DatasetOrder::locate_run
    fn run_after(&mut self, p: &SamplePtr, limit: u64, out: &mut Vec<SamplePtr>) -> u64 {
        let plan = &*self.plan;
        let Some(c) = &mut self.cursor else { return 0 };
        let seg = &plan.schedule.segments[c.seg];
        if limit == 0
            || self.resume.is_some()
            || seg.active.len() != 1
            || plan.config.lanes.world_size != 1
            || c.g != self.next
        {
            return 0;
        }
        let (d, pos) = plan.position_at_cursor(c);
        let order = &plan.orders[d as usize];
        let Some(layout) = self.cache[d as usize]
            .as_mut()
            .filter(|l| pos.wrapping_sub(l.first) < order.total)
        else {
            return 0;
        };
        let within = pos - layout.first;
        let run = (order.total - within)
            .min(c.seg_end - c.g)
            .min(plan.end.map_or(u64::MAX, |e| e.saturating_sub(c.g)))
            .min(limit);
        if run == 0 {
            return 0;
        }
        let l = plan.config.lanes.canonical_lanes;
        let mut lane = p.lane;
        // Written straight into the reserved room: a push per pointer
        // stored the vector's length and reloaded its buffer each time, and
        // cost as much as locating the pointer.
        let start = out.len();
        out.reserve(run as usize);
        let room = &mut out.spare_capacity_mut()[..run as usize];
        let mut made = 0;
        order.locate_run(layout, within, run, |shard, sample| {
            lane += 1;
            if lane == l {
                lane = 0;
            }
            room[made].write(SamplePtr {
                dataset: d,
                shard,
                sample,
                lane,
            });
            made += 1;
        });
        assert_eq!(made as u64, run, "a run locates one pointer per position");
        // SAFETY: the first `made` slots after `start` were written above.
        unsafe { out.set_len(start + made) };
        if let Some(t) = &mut self.tally {
            t.add(seg.phase, d, run);
        }
        self.next += run;
        *c = Cursor::at(plan, self.next);
        run
    }
}

impl PointerStream {
    /// The pointers as a plain iterator (the stream never waits).
    pub fn pointers(self) -> impl Iterator<Item = SamplePtr> {
        let mut s = self;
        std::iter::from_fn(move || s.next_pointer())
    }

    /// The next pointer of an owned lane, `None` at the end.
    #[inline]
    pub fn next_pointer(&mut self) -> Option<SamplePtr> {
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
            let c = match &mut self.cursor {
                Some(c) if c.g == g => c,
                slot => slot.insert(Cursor::at(&self.plan, g)),
            };
            let lane = c.lane as LaneId;
            let take = self.owned[lane as usize]
                && self
                    .resume
                    .as_ref()
                    .is_none_or(|r| c.round >= r.starts[lane as usize]);
            let p = take.then(|| self.plan.pointer_at_cursor(c, &mut self.cache));
            if let (Some(t), Some(p)) = (&mut self.tally, &p) {
                t.add(self.plan.schedule.segments[c.seg].phase, p.dataset, 1);
            }
            c.advance(&self.plan);
            self.next += 1;
            if p.is_some() {
                return p;
            }
        }
    }

    /// First poll of a checkpointed pipeline being restored: take the lane
    /// cuts off the board.
    #[cold]
    #[inline(never)]
    fn look_for_restore(&mut self) {
        self.board_looked = true;
        // The same first poll registers the schedule's figures with the
        // pipeline's observer.
        if let (Some(t), Some(obs)) = (&self.plan.tally, crate::obs::Observer::current()) {
            let t = t.clone();
            obs.register_schedule(Arc::as_ptr(&t) as usize, move || t.snapshot());
        }
        let Some(board) = crate::cut::Board::current() else {
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
    #[inline]
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

impl PointerStream {
    /// Where the stream stands in its schedule's phases, for `explain()`.
    fn phase_now(&self) -> String {
        let (Some(t), Some(seg)) = (
            &self.plan.tally,
            self.plan
                .schedule
                .segments
                .iter()
                .rev()
                .find(|s| s.start <= self.next),
        ) else {
            return String::new();
        };
        format!(
            "; at global index {}, in phase {} of {}",
            self.next,
            seg.phase + 1,
            t.phases()
        )
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
                "{}; seed {}; {:?} ({} segment(s)){}; lanes {:?} of {}",
                datasets.join(", "),
                c.seed,
                c.exhaustion,
                self.plan.schedule.segments.len(),
                c.mixture_schedule
                    .as_ref()
                    .map(|s| format!("; schedule {s}{}", self.phase_now()))
                    .unwrap_or_default(),
                c.lanes.owned_lanes(),
                c.lanes.canonical_lanes
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::Catalogued;
    use crate::work::ExhaustedPolicy;
    use crate::{BlockShuffle, Dataset, Record, SamplePtr, WorkSource};
    use std::pin::Pin;

    /// Sources whose streams locate pointers incrementally and in runs
    /// (segments, passes, shard ends, lanes, ranks, shuffles on and off).
    fn sources() -> Vec<WorkSource> {
        let ds = |name: &str, lens: &[usize]| {
            Dataset::in_memory(name, lens.iter().map(|&n| vec![Record::new(); n]).collect())
                .unwrap()
        };
        let mut out = Vec::new();
        for shuffled in [false, true] {
            for (lanes, world) in [(1, 1), (3, 1), (4, 2)] {
                for rank in 0..world {
                    let one = WorkSource::builder()
                        .dataset(ds("a", &[7, 1, 12, 5]), 1.0)
                        .shuffle_shards(shuffled)
                        .shuffle_within_shard(shuffled)
                        .chunk_size(3)
                        .passes(3)
                        .canonical_lanes(lanes)
                        .world_size(world)
                        .rank(rank)
                        .build()
                        .unwrap();
                    out.push(one.clone());
                    let mut later = one;
                    later.seek(11);
                    out.push(later);
                    // A dataset that leaves: two segments, the second of
                    // one dataset.
                    out.push(
                        WorkSource::builder()
                            .dataset(ds("a", &[4, 3]), 1.0)
                            .dataset(ds("b", &[9, 20, 6]), 2.0)
                            .exhausted_policy(ExhaustedPolicy::Redistribute)
                            .shuffle_shards(shuffled)
                            .shuffle_within_shard(shuffled)
                            .chunk_size(5)
                            .canonical_lanes(lanes)
                            .world_size(world)
                            .rank(rank)
                            .build()
                            .unwrap(),
                    );
                }
            }
            out.push(
                WorkSource::builder()
                    .dataset(ds("a", &[10, 10]), 1.0)
                    .shuffle_block_size(BlockShuffle::Size(4))
                    .shuffle_within_shard(shuffled)
                    .passes(2)
                    .build()
                    .unwrap(),
            );
        }
        out
    }

    /// The pointers a source owes, each located from its global index alone.
    fn expected(ws: &WorkSource) -> Vec<SamplePtr> {
        let start = ws.state().next_global;
        let end = ws.global_len().unwrap();
        let l = ws.config().lanes.canonical_lanes as u64;
        (start..end)
            .filter(|g| ws.config().lanes.owns((g % l) as u32))
            .map(|g| ws.pointer_at(g))
            .collect()
    }

    #[test]
    fn pointers_one_by_one_are_those_of_their_global_indices() {
        for ws in sources() {
            let got: Vec<SamplePtr> = ws.stream().pointers().collect();
            assert_eq!(got, expected(&ws), "{:?}", ws.config());
        }
    }

    #[test]
    fn pointers_in_runs_are_those_of_their_global_indices() {
        for ws in sources() {
            for max in [1, 2, 5, 64] {
                let got = in_runs(&ws, max);
                assert_eq!(got, expected(&ws), "max {max}, {:?}", ws.config());
            }
        }
    }

    /// Takes the whole stream in runs of at most `max`.
    fn in_runs(ws: &WorkSource, max: usize) -> Vec<SamplePtr> {
        let mut s = ws.stream();
        let mut got = Vec::new();
        loop {
            let before = got.len();
            let n = Pin::new(&mut s).next_pointers(&mut got, max).unwrap();
            assert!(n <= max && got.len() == before + n);
            if n == 0 {
                return got;
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

        /// Runs through shuffled orders (within-shard, block, global) give
        /// exactly the pointers of the one-by-one path.
        #[test]
        fn shuffled_runs_are_the_pointers_one_by_one(
            lens in proptest::collection::vec(1usize..13, 1..6),
            other in proptest::option::of(proptest::collection::vec(1usize..9, 1..4)),
            seed in 0u64..1000,
            shards in proptest::bool::ANY,
            within in proptest::bool::ANY,
            block in 0u64..24,
            lanes in 1u32..5,
            passes in 1u64..4,
            seek in 0u64..20,
            max in 1usize..70,
        ) {
            let ds = |name: &str, lens: &[usize]| {
                Dataset::in_memory(name, lens.iter().map(|&n| vec![Record::new(); n]).collect())
                    .unwrap()
            };
            let block = match block {
                0 => BlockShuffle::Off,
                1 => BlockShuffle::Auto,
                2 => BlockShuffle::Global,
                n => BlockShuffle::Size(n - 2),
            };
            let mut b = WorkSource::builder()
                .dataset(ds("a", &lens), 1.0)
                .seed(seed)
                .shuffle_shards(shards)
                .shuffle_within_shard(within)
                .shuffle_block_size(block)
                .chunk_size(4)
                .canonical_lanes(lanes)
                .passes(passes);
            if let Some(o) = &other {
                b = b
                    .dataset(ds("b", o), 1.0)
                    .exhausted_policy(ExhaustedPolicy::Redistribute);
            }
            let mut ws = b.build().unwrap();
            ws.seek(seek);
            let one_by_one: Vec<SamplePtr> = ws.stream().pointers().collect();
            proptest::prop_assert_eq!(&one_by_one, &expected(&ws));
            proptest::prop_assert_eq!(in_runs(&ws, max), one_by_one);
        }
    }
}
