//! `dedup_window`, an operator of a crate other than zephon's, takes part in
//! checkpoint cuts: checkpointed on one rank count, restored on another,
//! nothing is replayed and every later global batch is the uninterrupted
//! run's, whether the operator is the most upstream stateful one or sits
//! below a shuffle, with a map holding elements in flight after it or not.

use dedup_window::{DedupWindowExt, NAME, STATE_VERSION};
use proptest::prelude::*;
use std::collections::BTreeMap;
use zephon_core::checkpoint::{Checkpoint, OpState, Progress, Recipe, ResumeExt};
use zephon_core::{
    BlockingIter, Dataset, LaneId, PipelineExt, Record, Runner, ShuffleMode, Tracking, WorkSource,
};

/// Lanes of every run: checkpoints and restores on 4, 2 and 1 ranks.
const LANES: u32 = 4;

/// Texts with near-duplicates close together (case, punctuation and
/// spacing differ) and further apart than a small window.
fn corpus(docs: usize) -> Dataset {
    let shards = (0..3)
        .map(|s| {
            (0..docs)
                .map(|i| {
                    let n = (i * 7 + s * 3) % 11;
                    let text = match i % 4 {
                        0 => format!("Topic number {n}"),
                        1 => format!("topic  NUMBER {n}!"),
                        2 => format!("a fresh text {i} of shard {s}"),
                        _ => format!("Topic, number: {n}."),
                    };
                    Record::new().with("text", text)
                })
                .collect()
        })
        .collect();
    Dataset::in_memory("near", shards).unwrap()
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    docs: usize,
    seed: u64,
    window: usize,
    /// A shuffle between the work source and `dedup_window`; without it,
    /// `dedup_window` is the most upstream stateful operator.
    shuffle: bool,
    /// A `map_par` between `dedup_window` and `batch`, whose micro-batches
    /// hold elements in flight when a cut is taken.
    map: bool,
    batch: usize,
}

impl Shape {
    fn work(&self, rank: u32, world: u32) -> WorkSource {
        WorkSource::builder()
            .dataset(corpus(self.docs), 1.0)
            .seed(self.seed)
            .canonical_lanes(LANES)
            .rank(rank)
            .world_size(world)
            .build()
            .unwrap()
    }

    fn progress(&self, ws: &WorkSource, ckpt: Option<&Checkpoint>) -> Progress {
        let recipe = Recipe::new(ws)
            .setting("dedup_window", self.window)
            .setting("pipeline", (self.shuffle, self.map, self.batch));
        match ckpt {
            Some(c) => recipe.resume(ws, c).unwrap(),
            None => recipe.start(ws),
        }
    }

    fn pipeline(
        &self,
        ws: &WorkSource,
        progress: &Progress,
    ) -> BlockingIter<zephon_core::Batch<Record>> {
        let fetched = ws.stream().fetch(2);
        let fetched: futures::stream::BoxStream<'static, zephon_core::Result<Record>> =
            if self.shuffle {
                Box::pin(fetched.shuffle(6, ShuffleMode::Reservoir, self.seed))
            } else {
                Box::pin(fetched)
            };
        let deduped = fetched.dedup_window("text", self.window);
        let deduped: futures::stream::BoxStream<'static, zephon_core::Result<Record>> = if self.map
        {
            Box::pin(deduped.map_par(Ok, 3))
        } else {
            Box::pin(deduped)
        };
        deduped
            .batch(self.batch)
            .resume_from(progress)
            .lane_mux_from(progress)
            .into_blocking_iter(Runner::Threads { workers: 2 })
            .unwrap()
    }
}

/// Global batches: step -> lane -> record digests.
type Global = BTreeMap<u64, BTreeMap<LaneId, Vec<u64>>>;

/// Every rank of `world`, from `ckpt` (or fresh) up to step `until`: the
/// global batches, the merged checkpoint, and the lane-batches
/// `resume_from` dropped (replayed rather than restored from a cut).
fn ranks(
    shape: &Shape,
    world: u32,
    ckpt: Option<&Checkpoint>,
    until: u64,
) -> (Global, Checkpoint, u64) {
    let (mut global, mut parts, mut replayed) = (Global::new(), Vec::new(), 0);
    for rank in 0..world {
        let ws = shape.work(rank, world);
        let mut progress = shape.progress(&ws, ckpt);
        let mut it = shape.pipeline(&ws, &progress);
        let obs = it.enable_observability(Tracking::Operator);
        loop {
            let Some(b) = it.next() else {
                // Every lane ran dry: a merge does not take the lanes'
                // different counts for different steps.
                progress.mark_ended();
                break;
            };
            let b = b.unwrap();
            if b.index >= until {
                break;
            }
            progress.record_delivered(&b);
            let items = b.items.iter().map(Record::digest).collect();
            let prev = global.entry(b.index).or_default().insert(b.lane, items);
            assert!(prev.is_none(), "lane {} batch {} twice", b.lane, b.index);
        }
        drop(it);
        let m = obs.metrics_snapshot();
        let r = m
            .operators
            .iter()
            .find(|o| o.name == "resume_from")
            .unwrap();
        replayed += r.elements_in - r.elements_out;
        parts.push(progress.checkpoint());
    }
    (global, Checkpoint::merge(parts).unwrap(), replayed)
}

/// Checkpoints `shape` at step `step` on `from` ranks and restores on each
/// of `to`: nothing replayed, every lane cut (with `dedup_window` in it),
/// the global batches the uninterrupted run's. Returns the run's length in
/// steps, and how many records `dedup_window` dropped in it.
fn check(shape: &Shape, step: u64, from: u32, to: &[u32]) -> (usize, usize) {
    let (full, _, _) = ranks(shape, 1, None, u64::MAX);
    let (head, ckpt, _) = ranks(shape, from, None, step);
    assert_eq!(
        ckpt.cuts.len(),
        LANES as usize,
        "{shape:?}: every lane was cut"
    );
    for cut in ckpt.cuts.values() {
        let ours = cut
            .ops
            .iter()
            .find(|o| o.op == NAME)
            .expect("the cut holds dedup_window's");
        assert_eq!(ours.state.version(), STATE_VERSION);
    }
    // Through both forms, as a restarted process reads them.
    let ckpt = Checkpoint::from_bytes(&ckpt.to_bytes()).unwrap();
    assert_eq!(Checkpoint::from_json(&ckpt.to_json()).unwrap(), ckpt);
    for &world in to {
        let (rest, _, replayed) = ranks(shape, world, Some(&ckpt), u64::MAX);
        assert_eq!(
            replayed, 0,
            "{shape:?}, step {step}, {from} -> {world} ranks: nothing replayed"
        );
        let mut joined = head.clone();
        joined.extend(rest);
        assert_eq!(
            joined, full,
            "{shape:?}, step {step}, {from} -> {world} ranks"
        );
    }
    let delivered: usize = full.values().flat_map(|l| l.values()).map(Vec::len).sum();
    (full.len(), 3 * shape.docs - delivered)
}

fn shape(shuffle: bool, map: bool) -> Shape {
    Shape {
        docs: 40,
        seed: 17,
        window: 3,
        shuffle,
        map,
        batch: 2,
    }
}

#[test]
fn checkpointed_on_4_ranks_restores_on_2_and_1_from_the_cuts() {
    for (shuffle, map) in [(false, false), (true, false), (false, true), (true, true)] {
        let s = shape(shuffle, map);
        for step in [1, 3, 5] {
            let (steps, dropped) = check(&s, step, 4, &[2, 1]);
            assert!(steps > 5, "{s:?}: a run of {steps} steps");
            assert!(dropped > 0, "{s:?}: near-duplicates were dropped");
        }
    }
}

#[test]
fn a_map_after_it_leaves_elements_in_flight_that_the_cut_lists() {
    let s = shape(true, true);
    let (_, ckpt, _) = ranks(&s, 2, None, 3);
    let in_flight: u64 = ckpt
        .cuts
        .values()
        .flat_map(|c| c.ops.iter().filter(|o| o.op == NAME))
        .map(|o| o.preamble.in_flight)
        .sum();
    // map_par takes what dedup_window has ready, a micro-batch at a time.
    assert!(in_flight > 0, "dedup_window listed elements in flight");
    check(&s, 3, 2, &[4, 1]);
}

#[test]
fn a_cut_of_another_layout_or_window_is_refused() {
    let s = shape(true, false);
    let (_, ckpt, _) = ranks(&s, 2, None, 2);
    fn ours(c: &mut Checkpoint) -> &mut zephon_core::checkpoint::OpLaneCut {
        let ops = &mut c.cuts.get_mut(&1).unwrap().ops;
        ops.iter_mut().find(|o| o.op == NAME).unwrap()
    }
    // A window larger than its capacity: refused on load, by the check the
    // operator registered, naming the file's origin.
    let mut c = ckpt.clone();
    let op = ours(&mut c);
    let mut v = op.state.value().clone();
    v["capacity"] = 0.into();
    op.state = OpState::from_value(STATE_VERSION, v).unwrap();
    let e = Checkpoint::from_slice(&c.to_bytes(), "rank1.ckpt")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rank1.ckpt")
            && e.contains("`dedup_window`")
            && e.contains("in a capacity of 0"),
        "{e}"
    );
    // Another state layout version: refused, naming both.
    let mut c = ckpt.clone();
    let op = ours(&mut c);
    op.state = OpState::from_value(STATE_VERSION + 1, op.state.value().clone()).unwrap();
    let e = Checkpoint::from_json(&c.to_json()).unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "layout version {}, this build reads version {STATE_VERSION}",
            STATE_VERSION + 1
        )),
        "{e}"
    );
    // Restored into a pipeline with another window: an error naming both.
    let other = Shape { window: 5, ..s };
    let ws = other.work(0, 1);
    let progress = Recipe::new(&ws)
        .setting("dedup_window", s.window)
        .setting("pipeline", (s.shuffle, s.map, s.batch))
        .resume(&ws, &ckpt)
        .unwrap();
    let e = other
        .pipeline(&ws, &progress)
        .find_map(Result::err)
        .expect("an error")
        .to_string();
    assert!(e.contains("window of 3") && e.contains("of 5"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any cut point, any pair of rank counts, either pipeline shape.
    #[test]
    fn any_cut_restores_on_any_rank_count(
        seed in any::<u64>(),
        window in 1usize..6,
        shuffle in any::<bool>(),
        map in any::<bool>(),
        batch in 1usize..4,
        frac in 0.0f64..1.0,
        from in prop_oneof![Just(1u32), Just(2), Just(4)],
        to in prop_oneof![Just(1u32), Just(2), Just(4)],
    ) {
        let s = Shape { docs: 24, seed, window, shuffle, map, batch };
        let (full, _, _) = ranks(&s, 1, None, u64::MAX);
        // Lanes run dry at different steps: cut where every lane has data left.
        let shortest = (0..LANES)
            .map(|lane| full.values().filter(|l| l.contains_key(&lane)).count())
            .min()
            .unwrap_or(0) as u64;
        prop_assume!(shortest > 1);
        let step = 1 + ((frac * (shortest - 1) as f64) as u64).min(shortest - 2);
        check(&s, step, from, &[to]);
    }
}

/// The operator attaches through `Probe::join`, so it has metrics of its
/// own (through `Board::register` it had none) and explain() and the
/// metrics agree on its queue.
#[test]
fn the_operator_has_metrics_of_its_own() {
    let ws = WorkSource::builder()
        .dataset(corpus(40), 1.0)
        .seed(3)
        .canonical_lanes(2)
        .build()
        .unwrap();
    let pipeline = || ws.stream().fetch(2).dedup_window("text", 8).batch(4);
    let plan = pipeline().explain(Runner::Inline);
    let mut it = pipeline().into_blocking_iter(Runner::Inline).unwrap();
    let obs = it.enable_observability(Tracking::Operator);
    let kept: usize = it.by_ref().map(|b| b.unwrap().items.len()).sum();
    let m = obs.metrics_snapshot();
    let op = m
        .operators
        .iter()
        .find(|o| o.name == NAME)
        .expect("dedup_window's metrics");
    assert_eq!(op.elements_in, 120);
    assert_eq!(op.elements_out, kept as u64);
    assert!(kept < 120, "near-duplicates were dropped");
    let stage = plan.stages.iter().find(|s| s.name == NAME).unwrap();
    assert_eq!(op.queue_capacity, stage.queue_capacity);
}
