//! The audio batch sequence is the same for every parallelism, runner and
//! rank count, and after a checkpoint restore: every random choice comes
//! from the seed and the sample's identity.

use super::audio_common::varied_wav;
use proptest::prelude::*;
use std::collections::BTreeMap;
use zephon_core::checkpoint::{Checkpoint, CheckpointedExt, Progress, Recipe, ResumeExt};
use zephon_core::{Dataset, PipelineExt, Record, Runner, Value, WorkSource};
use zephon_media::{
    AudioBatch, AudioCollateConfig, AudioDecodeConfig, AudioPipelineExt, CropAudio, OnError, Remix,
    Resample,
};

fn dataset(shards: u64, per: u64, salt: u64) -> Dataset {
    let shards = (0..shards)
        .map(|s| {
            (0..per)
                .map(|i| {
                    let n = s * 1000 + i;
                    let bytes = if n % 11 == 5 {
                        // A corrupt member now and then, for the skip policy.
                        b"RIFF\x24\0\0\0WAVEfmt not really a wav".to_vec()
                    } else {
                        varied_wav(n, salt)
                    };
                    Record::new()
                        .with("wav", Value::Bytes(bytes.into()))
                        .with("cls", (n % 10) as i64)
                        .with("__key__", format!("s{s}_{i:04}"))
                })
                .collect()
        })
        .collect();
    Dataset::in_memory("speech", shards).unwrap()
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

/// Decode, resample to 16 kHz, mono, a random crop of 0.1 s: fused into
/// the decode task or as separate stages.
fn decode(seed: u64, fused: bool) -> (AudioDecodeConfig, Option<(Resample, Remix, CropAudio)>) {
    let decode = AudioDecodeConfig::new("wav").on_error(OnError::Skip);
    let steps = (
        Resample::new(16_000),
        Remix::mono(),
        CropAudio::random(1600, seed),
    );
    if fused {
        (decode.then(steps.0).then(steps.1).then(steps.2), None)
    } else {
        (decode, Some(steps))
    }
}

type Samples = futures::stream::BoxStream<'static, zephon_core::Result<zephon_media::AudioSample>>;

fn samples(ws: &WorkSource, p: usize, seed: u64, fused: bool) -> Samples {
    let (config, steps) = decode(seed, fused);
    let decoded = ws.stream().fetch(p).decode_audio(config, p);
    match steps {
        None => Box::pin(decoded),
        Some((resample, remix, crop)) => Box::pin(
            decoded
                .resample(resample, p)
                .remix(remix, p)
                .crop_audio(crop, p),
        ),
    }
}

/// Every batch of one rank.
fn run(ws: WorkSource, p: usize, runner: Runner, seed: u64, fused: bool) -> Vec<AudioBatch> {
    let lanes = ws.owned_lanes();
    samples(&ws, p, seed, fused)
        .batch(3)
        .lane_mux(lanes)
        .collate_audio(AudioCollateConfig::new().label("cls"))
        .into_blocking_iter(runner)
        .unwrap()
        .collect::<zephon_core::Result<_>>()
        .unwrap()
}

/// One rank from `progress`: the first `take` batches (all if `None`) and
/// the checkpoint after them.
fn run_checkpointed(
    ws: &WorkSource,
    progress: Progress,
    p: usize,
    seed: u64,
    take: Option<usize>,
) -> (Vec<AudioBatch>, Checkpoint) {
    let mut progress = progress;
    let batches = samples(ws, p, seed, false)
        .batch(3)
        .resume(&mut progress)
        .collate_audio(AudioCollateConfig::new().label("cls"))
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    let mut it = batches.checkpointed(progress);
    let out: Vec<AudioBatch> = it
        .by_ref()
        .take(take.unwrap_or(usize::MAX))
        .map(Result::unwrap)
        .collect();
    (out, it.checkpoint())
}

fn checksum(batches: &[AudioBatch]) -> u64 {
    batches
        .iter()
        .fold(0, |h, b| zephon_core::hash::combine(h, b.digest()))
}

/// Each lane's batches by (lane, index): what ranks split between them.
fn by_lane(batches: Vec<AudioBatch>) -> BTreeMap<(u32, u64), u64> {
    batches
        .into_iter()
        .map(|b| ((b.lane, b.index), b.digest()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, failure_persistence: None, ..ProptestConfig::default() })]

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

    #[test]
    fn a_restored_run_goes_on_with_the_batches_of_an_uninterrupted_one(
        seed in 0u64..1000, salt in 0u64..1000, per in 6u64..14, stop in 1usize..5, p in 1usize..4,
    ) {
        let ws = work(dataset(2, per, salt), seed, 0, 1);
        let recipe = Recipe::new(&ws).setting("audio", (seed, 16_000, 1600));
        let (all, _) = run_checkpointed(&ws, recipe.start(&ws), 2, seed, None);
        let (head, ckpt) = run_checkpointed(&ws, recipe.start(&ws), p, seed, Some(stop));
        // Through its bytes, as a training job would store it.
        let ckpt = Checkpoint::from_bytes(&ckpt.to_bytes()).unwrap();
        let (rest, _) = run_checkpointed(&ws, recipe.resume(&ws, &ckpt).unwrap(), 3 - p % 2, seed, None);
        prop_assert_eq!(head.len(), stop.min(all.len()));
        let joined: Vec<u64> = head.iter().chain(&rest).map(AudioBatch::digest).collect();
        prop_assert_eq!(joined, all.iter().map(AudioBatch::digest).collect::<Vec<_>>());
    }
}

#[test]
fn another_seed_gives_other_crops_and_the_sounds_are_all_there() {
    let ds = dataset(2, 12, 1);
    let a = run(work(ds.clone(), 1, 0, 1), 2, Runner::threads(), 1, false);
    let b = run(work(ds, 2, 0, 1), 2, Runner::threads(), 2, false);
    assert_ne!(checksum(&a), checksum(&b));
    // 24 samples, of which the corrupt ones (n % 11 == 5: 5 and 1006) skipped.
    let n: usize = a.iter().map(|b| b.batch_size).sum();
    assert_eq!(n, 22);
    assert!(
        a.iter()
            .all(|b| b.shape()[1..] == [1, 1600] && b.sample_rate == 16_000)
    );
    // Clips shorter than 0.1 s are padded, and say so.
    assert!(a.iter().flat_map(|b| &b.lengths).any(|&l| l < 1600));
    assert!(
        a.iter()
            .flat_map(|b| &b.lengths)
            .all(|&l| l <= 1600 && l > 0)
    );
}
