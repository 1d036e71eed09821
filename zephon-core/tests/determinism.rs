//! The determinism promise: parallelism, runner and prefetch depth are
//! performance knobs only; rank count only splits the lanes.

use proptest::prelude::*;
use std::collections::BTreeMap;
use zephon_core::{
    BlockShuffle, Dataset, LaneId, Ownership, PipelineExt, Record, Runner, ShuffleMode, Value,
    WorkSource,
};

/// The text of every sample, shard by shard: each names its sample, so the
/// texts are the samples' identities.
fn texts(shards: &[usize]) -> Vec<Vec<String>> {
    shards
        .iter()
        .enumerate()
        .map(|(s, &n)| {
            (0..n)
                .map(|i| format!("shard {s} doc {i} {}", "x".repeat(i % 7)))
                .collect()
        })
        .collect()
}

fn corpus(shards: &[usize]) -> Dataset {
    Dataset::in_memory(
        "p",
        texts(shards)
            .into_iter()
            .map(|t| {
                t.into_iter()
                    .map(|t| Record::new().with("text", t))
                    .collect()
            })
            .collect(),
    )
    .unwrap()
}

/// One batch as it left the pipeline: (lane, index, (text, digest) per item).
type Out = (LaneId, u64, Vec<(String, u64)>);
/// Per lane, its batches: (index, (text, digest) per item).
type Lanes = BTreeMap<LaneId, Vec<(u64, Vec<(String, u64)>)>>;

/// Every sample of the corpus exactly once: the sorted texts of `out` equal
/// the corpus's. Equal runs could otherwise agree on losing one record and
/// repeating another.
fn assert_permutation(out: &[Out], shards: &[usize]) -> Result<(), TestCaseError> {
    let mut seen: Vec<&str> = out
        .iter()
        .flat_map(|b| b.2.iter().map(|(t, _)| t.as_str()))
        .collect();
    seen.sort_unstable();
    let corpus = texts(shards);
    let mut expected: Vec<&str> = corpus.iter().flatten().map(String::as_str).collect();
    expected.sort_unstable();
    if seen != expected {
        // Counts per text: positive where the output repeats, negative where
        // it lost.
        let mut diff: BTreeMap<&str, i64> = BTreeMap::new();
        for t in &seen {
            *diff.entry(t).or_default() += 1;
        }
        for t in &expected {
            *diff.entry(t).or_default() -= 1;
        }
        diff.retain(|_, n| *n != 0);
        prop_assert!(
            false,
            "the output is not a permutation of the corpus ({} samples out, {} in); surplus (+) and missing (-): {:?}",
            seen.len(),
            expected.len(),
            diff
        );
    }
    Ok(())
}

#[derive(Clone, Debug)]
struct Shape {
    shards: Vec<usize>,
    seed: u64,
    batch: usize,
    buffer: usize,
    mode: ShuffleMode,
    lanes: u32,
}

fn shapes() -> impl Strategy<Value = Shape> {
    (
        prop::collection::vec(1usize..60, 1..5),
        any::<u64>(),
        1usize..9,
        1usize..40,
        prop_oneof![
            Just(ShuffleMode::Reservoir),
            Just(ShuffleMode::Block),
            Just(ShuffleMode::BlockWarmup)
        ],
        prop_oneof![Just(1u32), Just(2), Just(4)],
    )
        .prop_map(|(shards, seed, batch, buffer, mode, lanes)| Shape {
            shards,
            seed,
            batch,
            buffer,
            mode,
            lanes,
        })
}

/// Runs fetch -> map_par -> shuffle -> batch -> lane_mux -> prefetch_batches
/// and returns the batches.
fn run(
    shape: &Shape,
    parallelism: usize,
    runner: Runner,
    prefetch: usize,
    rank: u32,
    world: u32,
    ownership: Ownership,
) -> Vec<Out> {
    let ws = WorkSource::builder()
        .dataset(corpus(&shape.shards), 1.0)
        .seed(shape.seed)
        .shuffle_block_size(BlockShuffle::Size(5))
        .canonical_lanes(shape.lanes)
        .rank(rank)
        .world_size(world)
        .ownership(ownership)
        .build()
        .unwrap();
    let lanes = ws.owned_lanes();
    ws.stream()
        .fetch(parallelism)
        .map_par(
            |mut r: Record| {
                let n = r.text("text").map_or(0, str::len) as i64;
                r.set("len", Value::Int(n));
                Ok(r)
            },
            parallelism,
        )
        .shuffle(shape.buffer, shape.mode, shape.seed)
        .batch(shape.batch)
        .lane_mux(lanes)
        .prefetch_batches(prefetch)
        .into_blocking_iter(runner)
        .unwrap()
        .map(|b| {
            let b = b.unwrap();
            (
                b.lane,
                b.index,
                b.items
                    .iter()
                    .map(|r| (r.text("text").unwrap().to_string(), r.digest()))
                    .collect(),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn parallelism_runner_and_prefetch_do_not_change_the_output(shape in shapes()) {
        let reference = run(&shape, 1, Runner::Inline, 0, 0, 1, Ownership::Contiguous);
        assert_permutation(&reference, &shape.shards)?;
        for (p, runner, prefetch) in [
            (2, Runner::Inline, 1),
            (8, Runner::Inline, 4),
            (1, Runner::Threads { workers: 2 }, 0),
            (2, Runner::Threads { workers: 2 }, 2),
            (8, Runner::Threads { workers: 4 }, 16),
        ] {
            prop_assert_eq!(&run(&shape, p, runner, prefetch, 0, 1, Ownership::Contiguous), &reference, "p={} {:?} prefetch={}", p, runner, prefetch);
        }
    }

    /// At least two lanes, so that some rank count splits them.
    #[test]
    fn ranks_see_the_same_per_lane_batch_sequences(
        shape in shapes(),
        lanes in prop_oneof![Just(2u32), Just(4)],
    ) {
        let shape = Shape { lanes, ..shape };
        let per_lane = |world: u32, ownership: Ownership| {
            let mut lanes: Lanes = BTreeMap::new();
            let mut all = Vec::new();
            for rank in 0..world {
                let out = run(&shape, 2, Runner::Threads { workers: 2 }, 2, rank, world, ownership);
                for (lane, index, items) in &out {
                    lanes.entry(*lane).or_default().push((*index, items.clone()));
                }
                all.extend(out);
            }
            (lanes, all)
        };
        let (one, all) = per_lane(1, Ownership::Contiguous);
        assert_permutation(&all, &shape.shards)?;
        let mut compared = 0;
        for world in [2u32, 4] {
            for ownership in [Ownership::Contiguous, Ownership::Interleaved] {
                if shape.lanes.is_multiple_of(world) {
                    let (split, all) = per_lane(world, ownership);
                    assert_permutation(&all, &shape.shards)?;
                    prop_assert_eq!(&split, &one, "world size {} {:?}", world, ownership);
                    compared += 1;
                }
            }
        }
        prop_assert!(compared >= 2, "{} lanes: no rank count split them", shape.lanes);
    }
}

#[test]
fn four_lanes_split_over_one_two_and_four_ranks() {
    let shape = Shape {
        shards: vec![37, 50, 13],
        seed: 99,
        batch: 4,
        buffer: 16,
        mode: ShuffleMode::Reservoir,
        lanes: 4,
    };
    let gather = |world: u32, ownership: Ownership| {
        let mut lanes: Lanes = BTreeMap::new();
        for rank in 0..world {
            let out = run(
                &shape,
                4,
                Runner::Threads { workers: 2 },
                2,
                rank,
                world,
                ownership,
            );
            // Each rank emits its lanes in strict round robin.
            let order: Vec<LaneId> = out.iter().map(|b| b.0).collect();
            let mut owned = order.clone();
            owned.sort();
            owned.dedup();
            for (i, lane) in order.iter().enumerate().take(owned.len() * 3) {
                assert_eq!(
                    *lane,
                    owned[i % owned.len()],
                    "rank {rank} of {world}: not round robin"
                );
            }
            for (lane, index, items) in out {
                lanes.entry(lane).or_default().push((index, items));
            }
        }
        lanes
    };
    let one = gather(1, Ownership::Contiguous);
    assert_eq!(one.len(), 4);
    let all: Vec<Out> = one
        .iter()
        .flat_map(|(lane, batches)| batches.iter().map(|(i, items)| (*lane, *i, items.clone())))
        .collect();
    assert_permutation(&all, &shape.shards).unwrap();
    for ownership in [Ownership::Contiguous, Ownership::Interleaved] {
        assert_eq!(gather(2, ownership), one, "{ownership:?}");
        assert_eq!(gather(4, ownership), one, "{ownership:?}");
    }
}
