//! Skipped steps: the same global batches are left out on any rank count,
//! the skip is kept across restores, and only steps to come can be skipped.

use zephon_core::checkpoint::{Checkpoint, CheckpointedExt, Progress, Recipe, ResumeExt};
use zephon_core::{Dataset, PipelineExt, Record, Runner, ShuffleMode, WorkSource};

const LANES: u32 = 4;

fn work(rank: u32, world: u32) -> WorkSource {
    let ds = Dataset::in_memory(
        "toy",
        vec![
            (0..400)
                .map(|i| Record::new().with("i", i as i64))
                .collect(),
        ],
    )
    .unwrap();
    WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(3)
        .canonical_lanes(LANES)
        .rank(rank)
        .world_size(world)
        .build()
        .unwrap()
}

/// (lane, index, ids) of every batch a rank delivers from `progress`, up to
/// `steps` more steps.
fn run(ws: &WorkSource, mut p: Progress, steps: usize) -> (Vec<(u32, u64, Vec<i64>)>, Checkpoint) {
    let mut it = ws
        .stream()
        .fetch(2)
        .shuffle(8, ShuffleMode::Reservoir, 1)
        .batch(5)
        .resume(&mut p)
        .into_blocking_iter(Runner::threads())
        .unwrap()
        .checkpointed(p);
    let lanes = ws.owned_lanes().len();
    let got = it
        .by_ref()
        .take(steps * lanes)
        .map(|b| {
            let b = b.unwrap();
            let ids = b
                .items
                .iter()
                .map(|r| r.get("i").and_then(|v| v.as_int()).unwrap())
                .collect();
            (b.lane, b.index, ids)
        })
        .collect();
    (got, it.checkpoint())
}

#[test]
fn skipped_steps_are_the_same_on_any_rank_count_and_kept_across_restores() {
    // Reference: one rank, no skip.
    let ws = work(0, 1);
    let (all, _) = run(&ws, Recipe::new(&ws).start(&ws), 20);
    // Three steps on one rank, then steps 5..8 skipped, resumed on 2 ranks.
    let (head, ckpt) = run(&ws, Recipe::new(&ws).start(&ws), 3);
    let mut got = head.clone();
    let mut parts = Vec::new();
    for r in 0..2 {
        let ws = work(r, 2);
        let mut p = Recipe::new(&ws).resume(&ws, &ckpt).unwrap();
        p.skip_steps(5, 3).unwrap();
        let (more, part) = run(&ws, p, 4);
        got.extend(more);
        parts.push(part);
    }
    // Steps 3 and 4, then 8 and 9: the skipped ones never handed out.
    let want: Vec<_> = all
        .iter()
        .filter(|(_, index, _)| matches!(index, 0..=4 | 8..=9))
        .cloned()
        .collect();
    let key = |b: &(u32, u64, Vec<i64>)| (b.1, b.0);
    let (mut got, mut want) = (got, want);
    got.sort_by_key(key);
    want.sort_by_key(key);
    assert_eq!(got, want);
    // The merged checkpoint records the skip, counts the skipped steps as
    // delivered, and a resume on 4 ranks goes on at step 10.
    let merged = Checkpoint::merge(parts).unwrap();
    assert!(
        merged.settings.contains_key("skip steps 5..8"),
        "{:?}",
        merged.settings.keys()
    );
    assert_eq!(merged.step, 10);
    for r in 0..4 {
        let ws = work(r, 4);
        let p = Recipe::new(&ws).resume(&ws, &merged).unwrap();
        assert_eq!(p.skips(), std::slice::from_ref(&(5..8)));
        let (next, _) = run(&ws, p, 1);
        let want: Vec<_> = all
            .iter()
            .filter(|b| b.1 == 10 && ws.owned_lanes().contains(&b.0))
            .cloned()
            .collect();
        assert_eq!(next, want, "rank {r} of 4");
    }
}

#[test]
fn only_steps_to_come_can_be_skipped() {
    let ws = work(0, 1);
    let (_, ckpt) = run(&ws, Recipe::new(&ws).start(&ws), 6);
    let mut p = Recipe::new(&ws).resume(&ws, &ckpt).unwrap();
    let e = p.skip_steps(4, 3).unwrap_err().to_string();
    assert!(e.contains("`skip`") && e.contains("before step 6"), "{e}");
    let e = p.skip_steps(8, 0).unwrap_err().to_string();
    assert!(e.contains("`skip`"), "{e}");
    p.skip_steps(8, 4).unwrap();
    let e = p.skip_steps(10, 1).unwrap_err().to_string();
    assert!(
        e.contains("overlap the recorded skip of steps 8..12"),
        "{e}"
    );
    let e = p.skip_steps(u64::MAX, 2).unwrap_err().to_string();
    assert!(e.contains("within 64 bits"), "{e}");
}
