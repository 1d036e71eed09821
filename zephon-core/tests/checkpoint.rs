//! Checkpoint and restore: exact continuation, elastic rank counts, changed
//! micro-batch sizes, and refusals that say what is wrong.

use proptest::prelude::*;
use std::collections::BTreeMap;
use zephon_core::checkpoint::{
    CHECKPOINT_VERSION, Checkpoint, CheckpointedExt, Progress, Recipe, ResumeExt,
};
use zephon_core::{
    BlockShuffle, Dataset, Error, LaneId, Ownership, PipelineExt, Record, Runner, ShuffleMode,
    WorkSource,
};

fn corpus(shards: &[usize]) -> Dataset {
    Dataset::in_memory(
        "c",
        shards
            .iter()
            .enumerate()
            .map(|(s, &n)| {
                (0..n)
                    .map(|i| Record::new().with("text", format!("shard {s} doc {i}")))
                    .collect()
            })
            .collect(),
    )
    .unwrap()
}

#[derive(Clone, Debug)]
struct Shape {
    shards: Vec<usize>,
    seed: u64,
    lanes: u32,
    passes: u64,
    buffer: usize,
    mode: ShuffleMode,
    /// Drop the records whose text hashes to a multiple of this, right
    /// after fetch: a lane's elements no longer sit at the work source's
    /// positions.
    filter: Option<u64>,
}

impl Shape {
    fn work(&self, rank: u32, world: u32, ownership: Ownership) -> WorkSource {
        WorkSource::builder()
            .dataset(corpus(&self.shards), 1.0)
            .seed(self.seed)
            .shuffle_block_size(BlockShuffle::Size(5))
            .passes(self.passes)
            .canonical_lanes(self.lanes)
            .rank(rank)
            .world_size(world)
            .ownership(ownership)
            .build()
            .unwrap()
    }

    fn recipe(&self, ws: &WorkSource) -> Recipe {
        Recipe::new(ws)
            .setting("shuffle", (self.buffer, self.mode, self.seed))
            .setting("filter", self.filter)
    }

    /// Fetch, then the shape's filter if it has one.
    fn fetched(
        &self,
        ws: &WorkSource,
        parallelism: usize,
    ) -> impl futures::Stream<Item = Result<Record, Error>> + Send + 'static + use<> {
        let fetched = ws.stream().fetch(parallelism);
        match self.filter {
            Some(m) => futures::future::Either::Left(fetched.filter_ok(move |r: &Record| {
                !zephon_core::hash::bytes(r.text("text").unwrap_or_default().as_bytes())
                    .is_multiple_of(m)
            })),
            None => futures::future::Either::Right(fetched),
        }
    }
}

/// (lane, index, record digests) of one lane-batch.
type Out = (LaneId, u64, Vec<u64>);

/// How one rank executes: everything here is a performance knob.
#[derive(Clone, Copy, Debug)]
struct Exec {
    rank: u32,
    world: u32,
    ownership: Ownership,
    parallelism: usize,
    runner: Runner,
    prefetch: usize,
    batch: usize,
}

impl Exec {
    fn single(batch: usize) -> Self {
        Exec {
            rank: 0,
            world: 1,
            ownership: Ownership::Contiguous,
            parallelism: 1,
            runner: Runner::Inline,
            prefetch: 0,
            batch,
        }
    }
    fn rank(self, rank: u32, world: u32) -> Self {
        Exec {
            rank,
            world,
            ..self
        }
    }
}

/// Runs one rank from `checkpoint` (or fresh), taking at most `take` batches;
/// returns what it delivered and its checkpoint afterwards.
fn run(
    shape: &Shape,
    exec: Exec,
    checkpoint: Option<&Checkpoint>,
    take: usize,
) -> Result<(Vec<Out>, Checkpoint), Error> {
    let ws = shape.work(exec.rank, exec.world, exec.ownership);
    let recipe = shape.recipe(&ws);
    let progress: Progress = match checkpoint {
        Some(c) => recipe.resume(&ws, c)?,
        None => recipe.start(&ws),
    };
    let batches = shape
        .fetched(&ws, exec.parallelism)
        .map_par(Ok, exec.parallelism)
        .shuffle(shape.buffer, shape.mode, shape.seed)
        .batch(exec.batch)
        .resume_from(&progress)
        .lane_mux_from(&progress)
        .prefetch_batches(exec.prefetch);
    let mut it = batches
        .into_blocking_iter(exec.runner)?
        .checkpointed(progress);
    let mut out = Vec::new();
    for b in it.by_ref().take(take) {
        let b = b?;
        out.push((
            b.lane,
            b.index,
            b.items.iter().map(Record::digest).collect(),
        ));
    }
    Ok((out, it.checkpoint()))
}

/// Runs every rank of `world` for `steps` steps (all lanes, `steps` batches
/// each); returns the batches and the merged checkpoint.
fn run_ranks(
    shape: &Shape,
    exec: Exec,
    world: u32,
    checkpoint: Option<&Checkpoint>,
    steps: usize,
) -> (Vec<Out>, Checkpoint) {
    let per_rank = shape.lanes as usize / world as usize;
    let mut all = Vec::new();
    let mut parts = Vec::new();
    for r in 0..world {
        let (out, c) = run(shape, exec.rank(r, world), checkpoint, steps * per_rank).unwrap();
        all.extend(out);
        parts.push(c);
    }
    (all, Checkpoint::merge(parts).unwrap())
}

/// A rank's progress: fresh, or resumed from `ckpt`.
fn progress_of(shape: &Shape, ws: &WorkSource, ckpt: Option<&Checkpoint>) -> Progress {
    let recipe = shape.recipe(ws);
    match ckpt {
        Some(c) => recipe.resume(ws, c).unwrap(),
        None => recipe.start(ws),
    }
}

/// Drains `it` up to step `until`, recording what it takes into `progress`
/// (lanes run dry at different steps: it stops at a step, and counts only
/// what was taken); the batches and the lane-batches resume_from replayed.
fn drain_until(
    mut it: zephon_core::BlockingIter<zephon_core::Batch<Record>>,
    progress: &mut Progress,
    until: u64,
) -> (Vec<Out>, u64) {
    let obs = it.enable_observability(zephon_core::Tracking::Operator);
    let mut out = Vec::new();
    for b in it.by_ref() {
        let b = b.unwrap();
        if b.index >= until {
            break;
        }
        progress.record_delivered(&b);
        out.push((
            b.lane,
            b.index,
            b.items.iter().map(Record::digest).collect(),
        ));
    }
    drop(it);
    let m = obs.metrics_snapshot();
    let r = m
        .operators
        .iter()
        .find(|o| o.name == "resume_from")
        .unwrap();
    (out, r.elements_in - r.elements_out)
}

/// Per lane, the flat sequence of delivered elements.
fn per_lane(out: &[Out]) -> BTreeMap<LaneId, Vec<u64>> {
    let mut m: BTreeMap<LaneId, Vec<u64>> = BTreeMap::new();
    for (lane, _, items) in out {
        m.entry(*lane).or_default().extend(items);
    }
    m
}

/// Global batches: step -> lane -> elements.
fn global(out: &[Out]) -> BTreeMap<u64, BTreeMap<LaneId, Vec<u64>>> {
    let mut m: BTreeMap<u64, BTreeMap<LaneId, Vec<u64>>> = BTreeMap::new();
    for (lane, index, items) in out {
        let prev = m.entry(*index).or_default().insert(*lane, items.clone());
        assert!(prev.is_none(), "lane {lane} batch {index} delivered twice");
    }
    m
}

fn shapes() -> impl Strategy<Value = Shape> {
    (
        prop::collection::vec(1usize..50, 1..4),
        any::<u64>(),
        prop_oneof![Just(1u32), Just(2), Just(4)],
        1u64..3,
        1usize..30,
        prop_oneof![
            Just(ShuffleMode::Reservoir),
            Just(ShuffleMode::Block),
            Just(ShuffleMode::BlockWarmup)
        ],
        prop_oneof![Just(None), (2u64..5).prop_map(Some)],
    )
        .prop_map(
            |(shards, seed, lanes, passes, buffer, mode, filter)| Shape {
                shards,
                seed,
                lanes,
                passes,
                buffer,
                mode,
                filter,
            },
        )
}

/// Where to cut a run of `len` batches: `frac` of the way through, so the
/// remainder a restore must deliver is never empty (a cut at the end would
/// make "nothing repeated, nothing lost" hold trivially).
fn cut_at(frac: f64, len: usize) -> usize {
    ((frac * len as f64) as usize).min(len.saturating_sub(1))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A checkpoint after any number of batches, restored in a fresh pipeline
    /// with other execution settings, continues batch for batch.
    #[test]
    fn exact_resume(
        shape in shapes(),
        batch in 1usize..7,
        frac in 0.0f64..1.0,
        parallelism in 1usize..5,
        threads in any::<bool>(),
        prefetch in 0usize..4,
    ) {
        let exec = Exec::single(batch);
        let (full, _) = run(&shape, exec, None, usize::MAX).unwrap();
        // A filter may drop every record of a tiny corpus: nothing to cut.
        prop_assume!(!full.is_empty());
        let cut = cut_at(frac, full.len());
        let (head, ckpt) = run(&shape, exec, None, cut).unwrap();
        prop_assert_eq!(&head[..], &full[..cut]);
        // Through the binary form, as a restarted process would read it.
        let ckpt = Checkpoint::from_bytes(&ckpt.to_bytes()).unwrap();
        let resumed = Exec {
            parallelism,
            runner: if threads { Runner::Threads { workers: 2 } } else { Runner::Inline },
            prefetch,
            ..exec
        };
        let (rest, _) = run(&shape, resumed, Some(&ckpt), usize::MAX).unwrap();
        prop_assert!(!rest.is_empty(), "cut {} of {}: the restore delivered nothing", cut, full.len());
        prop_assert_eq!(&rest[..], &full[cut..]);
    }

    /// Checkpointed on 2 ranks at any step, restored on 4 ranks, on 1, or on
    /// 2 with the other ownership: every later global batch is the same.
    #[test]
    fn elastic_resume(shape in shapes(), batch in 1usize..5, frac in 0.0f64..1.0) {
        let shape = Shape { lanes: 4, ..shape };
        let exec = Exec::single(batch);
        let (full, _) = run_ranks(&shape, exec, 2, None, usize::MAX / 8);
        prop_assume!(!full.is_empty());
        // A rank takes `k` batches per lane it owns, whichever lanes they
        // come from once one runs dry; something is left after the cut
        // when one rank delivered more than that in the whole run.
        let per_rank = 2;
        let most = (0..2)
            .map(|r| full.iter().filter(|(lane, _, _)| lane / per_rank == r).count())
            .max()
            .unwrap();
        let k = cut_at(frac, most.div_ceil(per_rank as usize));
        let full = global(&full);
        let (head, ckpt) = run_ranks(&shape, exec, 2, None, k);
        let head = global(&head);
        // Compared lane by lane: with a filter, lanes differ in length, and
        // a head cut by a batch count may end inside a step.
        prop_assert!(head.iter().all(|(t, g)| g
            .iter()
            .all(|(lane, items)| full.get(t).and_then(|f| f.get(lane)) == Some(items))));
        for (world, ownership) in [(4, Ownership::Contiguous), (1, Ownership::Contiguous), (2, Ownership::Interleaved)] {
            let e = Exec { ownership, ..exec };
            let (rest, _) = run_ranks(&shape, e, world, Some(&ckpt), usize::MAX / 8);
            prop_assert!(!rest.is_empty(), "step {} of {}, {} ranks: the restore delivered nothing", k, full.len(), world);
            let mut joined = head.clone();
            for (t, g) in global(&rest) {
                let slot = joined.entry(t).or_default();
                for (lane, items) in g {
                    prop_assert!(slot.insert(lane, items).is_none(), "step {} lane {} repeated", t, lane);
                }
            }
            prop_assert_eq!(&joined, &full);
        }
    }
}

/// 8 lanes, 2 passes of 192 samples: 6 steps of 4 per lane in each epoch.
fn epochs_shape() -> Shape {
    Shape {
        shards: vec![100, 92],
        seed: 11,
        lanes: 8,
        passes: 2,
        buffer: 7,
        mode: ShuffleMode::Reservoir,
        filter: None,
    }
}

#[test]
fn elastic_at_every_step_including_epoch_boundaries() {
    let shape = epochs_shape();
    let exec = Exec::single(4);
    let (full, _) = run_ranks(&shape, exec, 2, None, usize::MAX / 8);
    let full = global(&full);
    assert_eq!(full.len(), 12, "two epochs of 6 steps");
    // Step 5 is the last step of epoch 1, 6 the first of epoch 2, 12 the end.
    for k in [0, 1, 5, 6, 7, 11, 12] {
        let (_, ckpt) = run_ranks(&shape, exec, 2, None, k);
        assert!(ckpt.is_complete());
        assert!(ckpt.lanes.values().all(|p| p.batches == k as u64));
        for world in [4, 1] {
            let exec = Exec {
                parallelism: 3,
                runner: Runner::Threads { workers: 2 },
                prefetch: 2,
                ..exec
            };
            let (rest, _) = run_ranks(&shape, exec, world, Some(&ckpt), usize::MAX / 8);
            let rest = global(&rest);
            let expected: BTreeMap<_, _> = full
                .range(k as u64..)
                .map(|(t, g)| (*t, g.clone()))
                .collect();
            assert_eq!(
                rest, expected,
                "checkpoint at step {k}, restored on {world} ranks"
            );
        }
    }
}

/// The promise as the README words it: checkpointed on 8 ranks, resumed on
/// 4, checkpointed again, resumed on 1, with parallelism 8 on the restores;
/// the global batches are the uninterrupted run's, at every step and lane.
#[test]
fn eight_ranks_resume_on_four_then_on_one() {
    let restore = Exec {
        parallelism: 8,
        runner: Runner::Threads { workers: 4 },
        prefetch: 3,
        ..Exec::single(4)
    };
    for shape in [
        epochs_shape(),
        Shape {
            mode: ShuffleMode::Block,
            filter: Some(3),
            ..epochs_shape()
        },
    ] {
        let exec = Exec::single(4);
        let (full, _) = run_ranks(&shape, exec, 8, None, usize::MAX / 8);
        let full = global(&full);
        let (one, _) = run_ranks(&shape, exec, 1, None, usize::MAX / 8);
        assert_eq!(global(&one), full, "{shape:?}: 8 ranks and 1 agree");
        let steps = full.len();
        // Unfiltered, epoch 1 ends after step 5: cuts inside it, on it,
        // across it.
        for (on_8, on_4) in [(1, 2), (3, 3), (5, 1), (6, 3), (2, 7)] {
            assert!(on_8 + on_4 < steps, "{shape:?}: {steps} steps");
            let (head, at_8) = run_ranks(&shape, exec, 8, None, on_8);
            let at_8 = Checkpoint::from_bytes(&at_8.to_bytes()).unwrap();
            let (middle, at_4) = run_ranks(&shape, restore, 4, Some(&at_8), on_4);
            let at_4 = Checkpoint::from_bytes(&at_4.to_bytes()).unwrap();
            let (tail, _) = run_ranks(&shape, restore, 1, Some(&at_4), usize::MAX / 8);
            let context = format!("{shape:?}: {on_8} steps on 8 ranks, {on_4} on 4, the rest on 1");
            assert!(
                !middle.is_empty() && !tail.is_empty(),
                "{context}: a restore delivered nothing"
            );
            let mut joined = global(&head);
            for (t, g) in global(&middle).into_iter().chain(global(&tail)) {
                let slot = joined.entry(t).or_default();
                for (lane, items) in g {
                    assert!(
                        slot.insert(lane, items).is_none(),
                        "{context}: step {t} lane {lane} delivered twice"
                    );
                }
            }
            assert_eq!(joined, full, "{context}");
        }
    }
}

#[test]
fn micro_batch_size_may_change_on_restore() {
    let shape = epochs_shape();
    // Global batch: 4 elements per lane per step.
    let (full, _) = run_ranks(&shape, Exec::single(4), 2, None, usize::MAX / 8);
    for (k, micro, world) in [(3, 2, 4), (6, 1, 1), (2, 8, 2), (4, 8, 1)] {
        let (head, ckpt) = run_ranks(&shape, Exec::single(4), 2, None, k);
        // Gradient accumulation: 4 / micro micro-batches per lane per step.
        let (rest, _) = run_ranks(
            &shape,
            Exec::single(micro),
            world,
            Some(&ckpt),
            usize::MAX / 8,
        );
        let mut joined = per_lane(&head);
        for (lane, items) in per_lane(&rest) {
            joined.entry(lane).or_default().extend(items);
        }
        assert_eq!(joined, per_lane(&full), "step {k}, micro-batch {micro}");
    }
}

#[test]
fn a_batch_straddling_the_checkpoint_is_an_error() {
    let shape = epochs_shape();
    let (_, ckpt) = run_ranks(&shape, Exec::single(4), 2, None, 1);
    let err = run(&shape, Exec::single(3), Some(&ckpt), usize::MAX)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("lane 0") && err.contains("4 elements"),
        "{err}"
    );
}

#[test]
fn restore_refuses_another_run_and_says_why() {
    let shape = epochs_shape();
    let (_, ckpt) = run_ranks(&shape, Exec::single(4), 2, None, 2);
    let err = |s: &Shape| {
        run(s, Exec::single(4), Some(&ckpt), 1)
            .unwrap_err()
            .to_string()
    };

    let e = err(&Shape {
        seed: 12,
        ..shape.clone()
    });
    assert!(e.contains("seed differs") && e.contains("11"), "{e}");
    let e = err(&Shape {
        lanes: 4,
        ..shape.clone()
    });
    assert!(
        e.contains("canonical_lanes differs") && e.contains("8 lanes"),
        "{e}"
    );
    let e = err(&Shape {
        buffer: 8,
        ..shape.clone()
    });
    assert!(
        e.contains("recipe fingerprint") && e.contains("shuffle (differs)"),
        "{e}"
    );
    let e = err(&Shape {
        shards: vec![100, 93],
        ..shape.clone()
    });
    assert!(e.contains("work source fingerprint"), "{e}");

    let mut old = ckpt.clone();
    old.version = CHECKPOINT_VERSION + 1;
    let e = Checkpoint::from_json(&old.to_json())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("format version {}", CHECKPOINT_VERSION + 1)),
        "{e}"
    );
    let e = Checkpoint::from_bytes(&old.to_bytes())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not supported"), "{e}");
}

#[test]
fn a_rank_checkpoint_alone_does_not_cover_another_layout() {
    let shape = epochs_shape();
    let exec = Exec::single(4);
    let (_, rank0) = run(&shape, exec.rank(0, 2), None, 4).unwrap();
    assert_eq!(rank0.missing_lanes(), vec![4, 5, 6, 7]);
    let e = run(&shape, exec, Some(&rank0), 1).unwrap_err().to_string();
    assert!(e.contains("[4, 5, 6, 7]") && e.contains("merge"), "{e}");
    // The same rank at a later step does not merge with it.
    let (_, later) = run(&shape, exec.rank(0, 2), None, 8).unwrap();
    let e = Checkpoint::merge([rank0, later]).unwrap_err().to_string();
    assert!(e.contains("different steps"), "{e}");
}

#[test]
fn files_round_trip_and_corrupt_files_name_themselves() {
    let shape = epochs_shape();
    let (_, ckpt) = run_ranks(&shape, Exec::single(4), 2, None, 3);
    let dir = std::env::temp_dir().join(format!("zephon-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("step3.ckpt");
    let json = dir.join("step3.json");
    ckpt.save(&bin).unwrap();
    ckpt.save(&json).unwrap();
    assert_eq!(Checkpoint::load(&bin).unwrap(), ckpt);
    assert_eq!(Checkpoint::load(&json).unwrap(), ckpt);
    assert!(
        std::fs::read_to_string(&json)
            .unwrap()
            .contains("\"recipe_fingerprint\"")
    );
    // Per lane: its counts and its cut (shuffle and batch), a few dozen bytes.
    assert_eq!(ckpt.cuts.len(), 8, "every lane was cut");
    assert!(std::fs::metadata(&bin).unwrap().len() < 1024);

    let bytes = std::fs::read(&bin).unwrap();
    for (name, data) in [
        ("truncated.ckpt", bytes[..bytes.len() / 2].to_vec()),
        ("garbage.ckpt", b"\x00\x01\x02 not a checkpoint".to_vec()),
        ("bad.json", b"{\"version\": 1, \"seed\": true}".to_vec()),
        ("empty.json", Vec::new()),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        let e = Checkpoint::load(&p).unwrap_err().to_string();
        assert!(e.contains(name), "{name}: {e}");
    }
    let e = Checkpoint::load(dir.join("missing.ckpt"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.ckpt"), "{e}");
    let e = Checkpoint::load_all([&bin, &dir.join("garbage.ckpt")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("garbage.ckpt"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn observability_shows_the_replay() {
    let shape = epochs_shape();
    let (_, cut) = run_ranks(&shape, Exec::single(4), 2, None, 3);
    // Restored from lane cuts, nothing is replayed; without them (as from a
    // pipeline with a filter), the 3 steps are.
    let mut uncut = cut.clone();
    uncut.cuts.clear();
    for (ckpt, replayed) in [(cut, 0), (uncut, 3 * 8)] {
        observe_restore(&shape, &ckpt, 4, replayed);
    }
}

/// A filter right after fetch, and batch the only stateful operator: the cut
/// says how many elements each lane's filter read, so the restore replays
/// nothing, and the continuation is the uninterrupted run's, on another
/// rank count too. With a shuffle below the filter, lanes are replayed.
#[test]
fn a_filtered_pipeline_restores_from_cuts() {
    let shape = Shape {
        filter: Some(3),
        ..epochs_shape()
    };
    // Every rank of `world` for `steps` steps; global batches, the merged
    // checkpoint and the lane-batches resume_from replayed.
    let ranks = |world: u32, ckpt: Option<&Checkpoint>, steps: usize| {
        let (mut out, mut parts, mut replayed) = (Vec::new(), Vec::new(), 0);
        for rank in 0..world {
            let ws = shape.work(rank, world, Ownership::Contiguous);
            let mut progress = progress_of(&shape, &ws, ckpt);
            let until = progress.steps() + steps as u64;
            let it = shape
                .fetched(&ws, 2)
                .map_par(Ok, 2)
                .batch(3)
                .resume_from(&progress)
                .lane_mux_from(&progress)
                .into_blocking_iter(Runner::Threads { workers: 2 })
                .unwrap();
            let (o, r) = drain_until(it, &mut progress, until);
            out.extend(o);
            replayed += r;
            parts.push(progress.checkpoint());
        }
        (global(&out), Checkpoint::merge(parts).unwrap(), replayed)
    };
    let (full, _, _) = ranks(2, None, 1000);
    let (mut head, ckpt, _) = ranks(2, None, 4);
    assert_eq!(ckpt.cuts.len(), 8, "every lane was cut");
    assert!(
        ckpt.cuts
            .values()
            .all(|c| c.ops.last().is_some_and(|o| o.op == "filter")),
        "the filter is the most upstream operator of every cut"
    );
    let (rest, _, replayed) = ranks(1, Some(&ckpt), 1000);
    assert_eq!(replayed, 0, "restored from cuts, nothing replayed");
    head.extend(rest);
    assert_eq!(head, full);

    // A shuffle below the filter lists its buffer (and a block's pending
    // elements) in the cut: restored on 4 ranks and on 1, nothing replayed,
    // every later global batch the same.
    for mode in [
        ShuffleMode::Reservoir,
        ShuffleMode::Block,
        ShuffleMode::BlockWarmup,
    ] {
        let shape = Shape {
            mode,
            ..shape.clone()
        };
        let exec = Exec::single(3);
        let (full, _) = run_ranks(&shape, exec, 2, None, usize::MAX / 8);
        let full = global(&full);
        for k in [1, 3, 6] {
            let (head, ckpt) = run_ranks(&shape, exec, 2, None, k);
            assert_eq!(ckpt.cuts.len(), 8, "{mode:?}: every lane was cut");
            let shuffle = &ckpt.cuts[&0].ops[1];
            assert_eq!(shuffle.op, "shuffle");
            assert!(
                shuffle.preamble.computed == 0
                    // A warmup block may just have left whole at this step.
                    && (mode == ShuffleMode::BlockWarmup
                        || shuffle.preamble.listed.len() as u64 > shuffle.preamble.in_flight)
                    && shuffle.state.value()["listed"] == true,
                "{mode:?}: the shuffle listed its buffer"
            );
            let json = Checkpoint::from_json(&ckpt.to_json()).unwrap();
            let ckpt = Checkpoint::from_bytes(&ckpt.to_bytes()).unwrap();
            assert_eq!(json, ckpt, "both forms carry the listed buffers");
            for world in [4, 1] {
                let (rest, _) = run_ranks(&shape, exec, world, Some(&ckpt), usize::MAX / 8);
                let mut joined = global(&head);
                joined.extend(global(&rest));
                assert_eq!(
                    joined, full,
                    "{mode:?}, checkpoint at step {k}, {world} ranks"
                );
            }
            observe_restore(&shape, &ckpt, 3, 0);
        }
    }
}

fn observe_restore(shape: &Shape, ckpt: &Checkpoint, batch: usize, replayed: u64) {
    let ws = shape.work(0, 1, Ownership::Contiguous);
    let progress = shape.recipe(&ws).resume(&ws, ckpt).unwrap();
    let mut it = shape
        .fetched(&ws, 2)
        .shuffle(shape.buffer, shape.mode, shape.seed)
        .batch(batch)
        .resume_from(&progress)
        .lane_mux_from(&progress)
        .into_blocking_iter(Runner::Inline)
        .unwrap();
    let obs = it.enable_observability(zephon_core::Tracking::Operator);
    let delivered = it.by_ref().map(Result::unwrap).count() as u64;
    let m = obs.metrics_snapshot();
    let replay = m
        .operators
        .iter()
        .find(|o| o.name == "resume_from")
        .expect("resume_from is observed");
    assert_eq!(replay.elements_out, delivered);
    assert_eq!(
        replay.elements_in,
        delivered + replayed,
        "lane-batches replayed"
    );
}

/// A map that drops the lineage makes the elements reaching shuffle
/// unrecognisable as the work source's pointers: the restore notices before
/// emitting anything and replays every lane instead, with the same output.
#[test]
fn a_cut_that_does_not_fit_the_work_source_falls_back_to_a_replay() {
    let shape = epochs_shape();
    let run = |ckpt: Option<&Checkpoint>, take: usize| {
        let ws = shape.work(0, 1, Ownership::Contiguous);
        let recipe = shape.recipe(&ws);
        let mut progress = match ckpt {
            Some(c) => recipe.resume(&ws, c).unwrap(),
            None => recipe.start(&ws),
        };
        let mut it = ws
            .stream()
            .fetch(2)
            .map_par(
                |mut r: Record| {
                    r.lineage.clear();
                    Ok(r)
                },
                1,
            )
            .shuffle(shape.buffer, shape.mode, shape.seed)
            .batch(4)
            .resume_from(&progress)
            .lane_mux_from(&progress)
            .into_blocking_iter(Runner::Inline)
            .unwrap();
        let obs = it.enable_observability(zephon_core::Tracking::Operator);
        let mut out: Vec<Out> = Vec::new();
        for b in it.by_ref().take(take) {
            let b = b.unwrap();
            progress.record_delivered(&b);
            out.push((
                b.lane,
                b.index,
                b.items.iter().map(Record::digest).collect(),
            ));
        }
        drop(it);
        let m = obs.metrics_snapshot();
        let r = m
            .operators
            .iter()
            .find(|o| o.name == "resume_from")
            .unwrap();
        (out, progress.checkpoint(), r.elements_in - r.elements_out)
    };
    let (full, _, _) = run(None, usize::MAX);
    let (head, ckpt, _) = run(None, 20);
    assert_eq!(ckpt.cuts.len(), 8, "the lanes were cut");
    let (rest, _, replayed) = run(Some(&ckpt), usize::MAX);
    assert_eq!(replayed, 20, "every delivered lane-batch replayed");
    assert_eq!([head, rest].concat(), full);
}

/// A pipeline whose shuffle differs from the checkpoint's (under a recipe
/// that does not name it) is refused by the shuffle's own check of its cut,
/// before anything is emitted, not replayed.
#[test]
fn a_cut_of_other_shuffle_settings_is_refused() {
    let shape = epochs_shape();
    let (_, ckpt) = run_ranks(&shape, Exec::single(4), 2, None, 2);
    let ws = shape.work(0, 1, Ownership::Contiguous);
    let progress = shape.recipe(&ws).resume(&ws, &ckpt).unwrap();
    let e = ws
        .stream()
        .fetch(2)
        .shuffle(shape.buffer + 2, shape.mode, shape.seed)
        .batch(4)
        .resume_from(&progress)
        .lane_mux_from(&progress)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the checkpoint shuffled Reservoir with 7 slots")
            && e.contains("this pipeline Reservoir with 9"),
        "{e}"
    );
}

/// An operator that does not describe its cut registers as uncuttable: its
/// pipeline's checkpoints carry no cuts, and a restore replays the lanes,
/// with the same output. (One that does, from another crate, is the
/// `dedup-window` example's.)
#[test]
fn an_uncuttable_operator_makes_the_lanes_replay() {
    use futures::{Stream, StreamExt};
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use zephon_core::context::CutRole;
    use zephon_core::context::Probe;

    struct Opaque<S> {
        inner: S,
        probe: Probe,
    }
    impl<S: Stream<Item = Result<Record, Error>> + Unpin> Stream for Opaque<S> {
        type Item = Result<Record, Error>;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            if let Err(e) = self.probe.join("opaque", 1, None, || CutRole::Uncuttable) {
                return Poll::Ready(Some(Err(e)));
            }
            self.inner.poll_next_unpin(cx)
        }
    }

    let shape = epochs_shape();
    let run = |ckpt: Option<&Checkpoint>, steps: u64| {
        let ws = shape.work(0, 1, Ownership::Contiguous);
        let mut progress = progress_of(&shape, &ws, ckpt);
        let until = progress.steps() + steps;
        let opaque = Opaque {
            inner: ws.stream().fetch(2).boxed(),
            probe: Probe::default(),
        };
        let it = opaque
            .shuffle(shape.buffer, shape.mode, shape.seed)
            .batch(4)
            .resume_from(&progress)
            .lane_mux_from(&progress)
            .into_blocking_iter(Runner::Inline)
            .unwrap();
        let (out, replayed) = drain_until(it, &mut progress, until);
        (global(&out), progress.checkpoint(), replayed)
    };
    let (full, _, _) = run(None, 1000);
    let (mut head, ckpt, _) = run(None, 3);
    assert!(ckpt.cuts.is_empty(), "no lane was cut");
    let (rest, _, replayed) = run(Some(&ckpt), 1000);
    assert_eq!(replayed, 3 * 8, "every delivered lane-batch replayed");
    head.extend(rest);
    assert_eq!(head, full);
}

/// Elements in flight in a map between two stateful operators when a cut is
/// taken must not be lost by a restore.
#[test]
fn a_map_between_shuffle_and_batch_keeps_its_elements_in_flight() {
    let shape = epochs_shape();
    let run = |ckpt: Option<&Checkpoint>, steps: u64| {
        let ws = shape.work(0, 1, Ownership::Contiguous);
        let mut progress = progress_of(&shape, &ws, ckpt);
        let until = progress.steps() + steps;
        let it = ws
            .stream()
            .fetch(2)
            .shuffle(shape.buffer, shape.mode, shape.seed)
            .map_par(Ok, 4)
            .batch(4)
            .resume_from(&progress)
            .lane_mux_from(&progress)
            .into_blocking_iter(Runner::Threads { workers: 2 })
            .unwrap();
        let (out, replayed) = drain_until(it, &mut progress, until);
        (global(&out), progress.checkpoint(), replayed)
    };
    let (full, _, _) = run(None, 1000);
    let mut listed = 0;
    for k in [1, 2, 3, 4, 5] {
        let (mut head, ckpt, _) = run(None, k);
        listed += ckpt
            .cuts
            .values()
            .filter(|c| c.ops[1].op == "shuffle")
            .map(|c| c.ops[1].preamble.in_flight)
            .sum::<u64>();
        let lanes_cut = ckpt.cuts.len() as u64;
        let (rest, _, replayed) = run(Some(&ckpt), 1000);
        head.extend(rest);
        assert_eq!(head, full, "checkpoint at step {k}");
        assert_eq!(lanes_cut, 8, "checkpoint at step {k}: every lane cut");
        assert_eq!(replayed, 0, "checkpoint at step {k}: nothing replayed");
    }
    // map_par takes what the shuffle has ready, up to a micro-batch of 64,
    // so a cut at a batch of 4 always finds elements in flight.
    assert!(listed > 0, "the shuffle listed elements in flight");
}

/// `explain()` of a fresh run says so, rather than "replays 4 lanes, 0
/// delivered elements to drop".
#[test]
fn explain_of_a_fresh_run_says_nothing_of_replay() {
    let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 16]]).unwrap();
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .canonical_lanes(4)
        .build()
        .unwrap();
    let p = Recipe::new(&ws).start(&ws);
    let plan = ws
        .stream()
        .fetch(2)
        .batch(2)
        .resume_from(&p)
        .lane_mux_from(&p)
        .explain(Runner::Inline);
    let stage = plan
        .stages
        .iter()
        .find(|s| s.name == "resume_from")
        .unwrap();
    assert_eq!(stage.detail, "a fresh run: nothing to restore");
}
