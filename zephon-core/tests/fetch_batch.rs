//! `fetch` followed straight by `batch`, where batch takes fetch's read
//! records in runs of one lane rather than polling for each: the same
//! batches as batching the fetched records one by one, whatever the
//! parallelism, read group size, runner, lanes or shuffle.

use proptest::prelude::*;
use std::collections::BTreeMap;
use zephon_core::{Batch, Dataset, PipelineExt, Record, Runner, Value, WorkSource};

fn source(shards: &[usize], lanes: u32, shuffled: bool, seed: u64) -> WorkSource {
    let ds = Dataset::in_memory(
        "fb",
        shards
            .iter()
            .enumerate()
            .map(|(s, &n)| {
                (0..n)
                    .map(|i| Record::new().with("id", Value::Int((s * 1000 + i) as i64)))
                    .collect()
            })
            .collect(),
    )
    .unwrap();
    WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(seed)
        .shuffle_shards(shuffled)
        .shuffle_within_shard(shuffled)
        .canonical_lanes(lanes)
        .build()
        .unwrap()
}

/// The batches `batch` makes of `records`, one element at a time: each
/// lane's open batch closes when full; the partial ones follow in lane order.
fn batched(records: Vec<Record>, size: usize) -> Vec<Batch<Record>> {
    let mut open: BTreeMap<u32, (u64, Vec<Record>)> = BTreeMap::new();
    let mut out = Vec::new();
    for r in records {
        let lane = r.lane;
        let (index, items) = open.entry(lane).or_default();
        items.push(r);
        if items.len() == size {
            out.push(Batch {
                lane,
                index: *index,
                items: std::mem::take(items),
                cut: None,
            });
            *index += 1;
        }
    }
    for (lane, (index, items)) in open {
        if !items.is_empty() {
            out.push(Batch {
                lane,
                index,
                items,
                cut: None,
            });
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn fetch_then_batch_equals_batching_each_fetched_record(
        shards in prop::collection::vec(1usize..80, 1..5),
        lanes in prop_oneof![Just(1u32), Just(2), Just(3), Just(4)],
        shuffled in any::<bool>(),
        seed in any::<u64>(),
        size in 1usize..12,
        max_group in 1usize..40,
    ) {
        let ws = source(&shards, lanes, shuffled, seed);
        let records: Vec<Record> = ws
            .stream()
            .fetch(1)
            .max_group(1)
            .into_blocking_iter(Runner::Inline)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        prop_assert_eq!(records.len(), shards.iter().sum::<usize>());
        let expected = batched(records, size);
        for (p, runner) in [
            (1, Runner::Inline),
            (8, Runner::Inline),
            (2, Runner::Threads { workers: 2 }),
            (8, Runner::Threads { workers: 4 }),
        ] {
            let got: Vec<Batch<Record>> = ws
                .stream()
                .fetch(p)
                .max_group(max_group)
                .batch(size)
                .into_blocking_iter(runner)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            prop_assert_eq!(&got, &expected, "p={} {:?}", p, runner);
        }
    }
}
