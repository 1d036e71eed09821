//! The one-call restore step: a checkpoint is bound to the operator chain
//! it was taken from, and a pipeline built without its restore step is an
//! error instead of a silent restart.

use futures::StreamExt;
use proptest::prelude::*;
use zephon_core::checkpoint::{
    CHAIN_PREFIX, Checkpoint, CheckpointedExt, CheckpointedStreamExt, Progress, Recipe, ResumeExt,
};
use zephon_core::{Dataset, PipelineExt, Record, Runner, ShuffleMode, WorkSource};

fn work(lanes: u32, rank: u32, world: u32) -> WorkSource {
    let ds = Dataset::in_memory(
        "toy",
        vec![
            (0..120)
                .map(|i| Record::new().with("i", i as i64))
                .collect(),
        ],
    )
    .unwrap();
    WorkSource::builder()
        .dataset(ds, 1.0)
        .canonical_lanes(lanes)
        .seed(11)
        .rank(rank)
        .world_size(world)
        .build()
        .unwrap()
}

/// Sample ids of a batch, in order.
fn ids(b: &zephon_core::RecordBatch) -> Vec<i64> {
    b.items
        .iter()
        .map(|r| r.get("i").and_then(|v| v.as_int()).unwrap())
        .collect()
}

/// The chain under test, with execution knobs (`parallelism`, `prefetch`)
/// that may differ between checkpoint and restore.
fn run(
    ws: &WorkSource,
    mut progress: Progress,
    parallelism: usize,
    prefetch: usize,
    buffer: usize,
) -> impl Iterator<Item = zephon_core::Result<zephon_core::RecordBatch>> + use<> {
    let chain = ws
        .stream()
        .fetch(parallelism)
        .shuffle(buffer, ShuffleMode::Reservoir, 3)
        .map_par(Ok, parallelism)
        .batch(4)
        .resume(&mut progress)
        .prefetch_batches(prefetch);
    chain
        .into_blocking_iter(Runner::threads())
        .unwrap()
        .checkpointed(progress)
}

#[test]
fn a_fresh_run_records_its_chain() {
    let (_, ckpt) = head(&work(2, 0, 1), 1, 2, 8);
    let chain: Vec<&String> = ckpt
        .settings
        .keys()
        .filter(|k| k.starts_with(CHAIN_PREFIX))
        .collect();
    // Prefetch and lane interleaving only change how it runs.
    assert_eq!(
        chain,
        [
            "chain 000 work_source",
            "chain 001 fetch",
            "chain 002 shuffle",
            "chain 003 map_par",
            "chain 004 batch"
        ]
    );
}

/// Takes `n` batches of a fresh run and its checkpoint.
fn head(
    ws: &WorkSource,
    n: usize,
    parallelism: usize,
    buffer: usize,
) -> (Vec<Vec<i64>>, Checkpoint) {
    let mut p = Recipe::new(ws).start(ws);
    let mut it = ws
        .stream()
        .fetch(parallelism)
        .shuffle(buffer, ShuffleMode::Reservoir, 3)
        .map_par(Ok, parallelism)
        .batch(4)
        .resume(&mut p)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .checkpointed(p);
    let got = it.by_ref().take(n).map(|b| ids(&b.unwrap())).collect();
    (got, it.checkpoint())
}

#[test]
fn another_chain_is_refused_naming_the_stage() {
    let ws = work(2, 0, 1);
    let (_, ckpt) = head(&ws, 3, 2, 8);
    let recipe = Recipe::new(&ws);
    // Another shuffle buffer.
    let e = run(&ws, recipe.resume(&ws, &ckpt).unwrap(), 2, 0, 16)
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(e.contains("pipeline stage 2 `shuffle`"), "{e}");
    // A stage added before the batch.
    let mut p = recipe.resume(&ws, &ckpt).unwrap();
    let e = ws
        .stream()
        .fetch(2)
        .shuffle(8, ShuffleMode::Reservoir, 3)
        .map_par(Ok, 2)
        .filter_ok(|_| true)
        .batch(4)
        .resume(&mut p)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pipeline stage 4 is `filter` here but `batch`"),
        "{e}"
    );
    // A stage left out.
    let mut p = recipe.resume(&ws, &ckpt).unwrap();
    let e = ws
        .stream()
        .fetch(2)
        .shuffle(8, ShuffleMode::Reservoir, 3)
        .batch(4)
        .resume(&mut p)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pipeline stage 3 is `batch` here but `map_par`"),
        "{e}"
    );
}

#[test]
fn a_checkpoint_without_a_chain_still_resumes() {
    // Written by the two-call restore step, which records no chain.
    let ws = work(2, 0, 1);
    let p = Recipe::new(&ws).start(&ws);
    let mut it = ws
        .stream()
        .fetch(2)
        .shuffle(8, ShuffleMode::Reservoir, 3)
        .map_par(Ok, 2)
        .batch(4)
        .resume_from(&p)
        .lane_mux_from(&p)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .checkpointed(p);
    let first: Vec<Vec<i64>> = it.by_ref().take(3).map(|b| ids(&b.unwrap())).collect();
    let ckpt = it.checkpoint();
    assert!(!ckpt.settings.keys().any(|k| k.starts_with(CHAIN_PREFIX)));
    let rest: Vec<Vec<i64>> = run(&ws, Recipe::new(&ws).resume(&ws, &ckpt).unwrap(), 2, 0, 8)
        .map(|b| ids(&b.unwrap()))
        .collect();
    let all: Vec<Vec<i64>> = run(&ws, Recipe::new(&ws).start(&ws), 1, 0, 8)
        .map(|b| ids(&b.unwrap()))
        .collect();
    assert_eq!([first, rest].concat(), all);
}

#[test]
fn a_forgotten_restore_step_is_an_error_in_the_async_loop_too() {
    let ws = work(2, 0, 1);
    let (_, ckpt) = head(&ws, 3, 2, 8);
    let p = Recipe::new(&ws).resume(&ws, &ckpt).unwrap();
    let mut batches = ws
        .stream()
        .fetch(2)
        .shuffle(8, ShuffleMode::Reservoir, 3)
        .map_par(Ok, 2)
        .batch(4)
        .lane_mux(ws.owned_lanes())
        .checkpointed_stream(p);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let e = rt
        .block_on(batches.next())
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(e.contains("lane 0 delivered its batch 0 again"), "{e}");
    assert!(e.contains("counts 2 batches"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Checkpoint after any number of batches on 1 or 2 of 4 ranks' worth of
    /// lanes, resume with other execution settings on another rank count:
    /// the batches of every lane are those of one uninterrupted run.
    #[test]
    fn resume_is_exact_whatever_runs_it(
        taken in 0usize..40,
        p1 in 1usize..4,
        p2 in 1usize..8,
        prefetch in 0usize..4,
        world in prop::sample::select(vec![1u32, 2, 4]),
    ) {
        let reference: Vec<Vec<i64>> = run(&work(4, 0, 1), Recipe::new(&work(4, 0, 1)).start(&work(4, 0, 1)), 1, 0, 8)
            .map(|b| ids(&b.unwrap()))
            .collect();
        let ws = work(4, 0, 1);
        let (first, ckpt) = head(&ws, taken.min(reference.len()), p1, 8);
        prop_assert_eq!(&first[..], &reference[..first.len()]);
        let bytes = ckpt.to_bytes();
        // Each rank resumes its lanes; their batches, lane by lane, are the
        // reference's.
        let mut by_lane: std::collections::BTreeMap<u32, Vec<Vec<i64>>> = Default::default();
        for r in 0..world {
            let ws = work(4, r, world);
            let p = Recipe::new(&ws).resume(&ws, &Checkpoint::from_bytes(&bytes).unwrap()).unwrap();
            let mut pr = p;
            let it = ws.stream().fetch(p2).shuffle(8, ShuffleMode::Reservoir, 3).map_par(Ok, p2).batch(4)
                .resume(&mut pr).prefetch_batches(prefetch)
                .into_blocking_iter(Runner::threads()).unwrap().checkpointed(pr);
            for b in it {
                let b = b.unwrap();
                by_lane.entry(b.lane).or_default().push(ids(&b));
            }
        }
        let mut expected: std::collections::BTreeMap<u32, Vec<Vec<i64>>> = Default::default();
        let ws = work(4, 0, 1);
        let p = Recipe::new(&ws).start(&ws);
        let mut pr = p;
        let full = ws.stream().fetch(1).shuffle(8, ShuffleMode::Reservoir, 3).map_par(Ok, 1).batch(4)
            .resume(&mut pr).into_blocking_iter(Runner::Inline).unwrap().checkpointed(pr);
        for (i, b) in full.enumerate() {
            let b = b.unwrap();
            if i < first.len() {
                continue;
            }
            expected.entry(b.lane).or_default().push(ids(&b));
        }
        prop_assert_eq!(by_lane, expected);
    }
}
