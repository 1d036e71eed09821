//! The batch sequence is the same for every parallelism, runner and rank
//! count, and after a checkpoint restore: every random choice comes from the
//! seed and the sample's identity.

use super::common::encoded;
use proptest::prelude::*;
use std::collections::BTreeMap;
use zephon_core::checkpoint::{Checkpoint, CheckpointedExt, Progress, Recipe, ResumeExt};
use zephon_core::{Dataset, PipelineExt, Record, Runner, Value, WorkSource};
use zephon_media::{
    CollateConfig, DecodeConfig, Flip, ImageBatch, Layout, MediaPipelineExt, Normalize, OnError,
    RandomResizedCrop, Resize,
};

fn dataset(shards: u64, per: u64, salt: u64) -> Dataset {
    let shards = (0..shards)
        .map(|s| {
            (0..per)
                .map(|i| {
                    let n = s * 1000 + i;
                    let bytes = if n % 11 == 5 {
                        // A corrupt member now and then, for the skip policy.
                        b"\xff\xd8\xff\xe0 not really a jpeg".to_vec()
                    } else {
                        encoded(n, salt)
                    };
                    Record::new()
                        .with("img", Value::Bytes(bytes.into()))
                        .with("cls", (n % 10) as i64)
                        .with("__key__", format!("s{s}_{i:04}"))
                })
                .collect()
        })
        .collect();
    Dataset::in_memory("imgs", shards).unwrap()
}

fn work(ds: Dataset, seed: u64, rank: u32, world: u32) -> WorkSource {
    WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(seed)
        .canonical_lanes(4)
        .rank(rank)
        .world_size(world)
        .build()
        .unwrap()
}

/// Every batch of one rank, fused (augmentations inside decode) or as
/// separate stages.
fn run(ws: WorkSource, p: usize, runner: Runner, seed: u64, fused: bool) -> Vec<ImageBatch> {
    let lanes = ws.owned_lanes();
    let crop = RandomResizedCrop::new(20, 16).seed(seed);
    let flip = Flip::new(0.5, seed);
    let decode = DecodeConfig::new("img").on_error(OnError::Skip);
    let samples = ws.stream().fetch(p);
    let collate = CollateConfig::new(Layout::Chw).label("cls");
    let out: zephon_core::Result<Vec<ImageBatch>> = if fused {
        samples
            .decode_image(decode.then(crop).then(flip), p)
            .batch(3)
            .lane_mux(lanes)
            .collate_images(collate)
            .into_blocking_iter(runner)
            .unwrap()
            .collect()
    } else {
        samples
            .decode_image(decode, p)
            .resize(Resize::shorter_side(18), p)
            .random_resized_crop(crop, p)
            .flip(flip, p)
            .normalize(Normalize::imagenet(), p)
            .batch(3)
            .lane_mux(lanes)
            .collate_images(collate)
            .into_blocking_iter(runner)
            .unwrap()
            .collect()
    };
    out.unwrap()
}

/// One rank from `progress`, augmentations inside decode: the first `take`
/// batches (all if `None`) and the checkpoint after them.
fn run_checkpointed(
    ws: &WorkSource,
    progress: Progress,
    p: usize,
    seed: u64,
    take: Option<usize>,
) -> (Vec<ImageBatch>, Checkpoint) {
    let mut progress = progress;
    let crop = RandomResizedCrop::new(20, 16).seed(seed);
    let decode = DecodeConfig::new("img").on_error(OnError::Skip);
    let batches = ws
        .stream()
        .fetch(p)
        .decode_image(decode.then(crop).then(Flip::new(0.5, seed)), p)
        .batch(3)
        .resume(&mut progress)
        .collate_images(CollateConfig::new(Layout::Chw).label("cls"))
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    let mut it = batches.checkpointed(progress);
    let out: Vec<ImageBatch> = it
        .by_ref()
        .take(take.unwrap_or(usize::MAX))
        .map(Result::unwrap)
        .collect();
    (out, it.checkpoint())
}

fn checksum(batches: &[ImageBatch]) -> u64 {
    batches
        .iter()
        .fold(0, |h, b| zephon_core::hash::combine(h, b.digest()))
}

/// Each lane's batches by (lane, index): what ranks split between them.
fn by_lane(batches: Vec<ImageBatch>) -> BTreeMap<(u32, u64), u64> {
    batches
        .into_iter()
        .map(|b| ((b.lane, b.index), b.digest()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn batches_do_not_depend_on_parallelism_runner_or_ranks(
        seed in 0u64..1000, salt in 0u64..1000, per in 5u64..14, fused in any::<bool>(),
    ) {
        let ds = dataset(2, per, salt);
        let base = run(work(ds.clone(), seed, 0, 1), 1, Runner::Inline, seed, fused);
        prop_assert!(!base.is_empty());
        let want = checksum(&base);
        for (p, runner) in [
            (2, Runner::Inline),
            (1, Runner::Threads { workers: 2 }),
            (2, Runner::Threads { workers: 2 }),
            (8, Runner::Threads { workers: 4 }),
        ] {
            let got = run(work(ds.clone(), seed, 0, 1), p, runner, seed, fused);
            prop_assert_eq!(checksum(&got), want, "parallelism {} under {:?}", p, runner);
        }
        // Four ranks of one lane each make the lanes one rank makes alone.
        let mut ranks = BTreeMap::new();
        for r in 0..4 {
            ranks.extend(by_lane(run(work(ds.clone(), seed, r, 4), 2, Runner::threads(), seed, fused)));
        }
        prop_assert_eq!(ranks, by_lane(base));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, failure_persistence: None, ..ProptestConfig::default() })]

    /// Checkpointed after a random number of batches, restored through the
    /// checkpoint's bytes at another parallelism: the batches of an
    /// uninterrupted run, crops and flips included.
    #[test]
    fn a_restored_run_goes_on_with_the_batches_of_an_uninterrupted_one(
        seed in 0u64..1000, salt in 0u64..1000, per in 6u64..14, stop in 1usize..5, p in 1usize..4,
    ) {
        let ws = work(dataset(2, per, salt), seed, 0, 1);
        let recipe = Recipe::new(&ws).setting("images", (seed, 20, 16));
        let (all, _) = run_checkpointed(&ws, recipe.start(&ws), 2, seed, None);
        let (head, ckpt) = run_checkpointed(&ws, recipe.start(&ws), p, seed, Some(stop));
        let ckpt = Checkpoint::from_bytes(&ckpt.to_bytes()).unwrap();
        let (rest, _) = run_checkpointed(&ws, recipe.resume(&ws, &ckpt).unwrap(), 3 - p % 2, seed, None);
        prop_assert_eq!(head.len(), stop.min(all.len()));
        let joined: Vec<u64> = head.iter().chain(&rest).map(ImageBatch::digest).collect();
        prop_assert_eq!(joined, all.iter().map(ImageBatch::digest).collect::<Vec<_>>());
    }
}

#[test]
fn another_seed_gives_other_crops_and_the_images_are_all_there() {
    let ds = dataset(2, 12, 1);
    let a = run(work(ds.clone(), 1, 0, 1), 2, Runner::threads(), 1, false);
    let b = run(work(ds, 2, 0, 1), 2, Runner::threads(), 2, false);
    assert_ne!(checksum(&a), checksum(&b));
    // 24 samples, of which the corrupt ones (n % 11 == 5: 5 and 1006) skipped.
    let n: usize = a.iter().map(|b| b.batch_size).sum();
    assert_eq!(n, 22);
    assert!(a.iter().all(|b| b.shape()[1..] == [3, 16, 20]));
    assert!(a.iter().all(|b| b.pixels.as_f32().is_some()));
}
