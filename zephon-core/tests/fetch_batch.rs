//! `fetch` followed straight by `batch`, where batch takes fetch's read
//! records in runs of one lane rather than polling for each: the same
//! batches as batching the fetched records one by one, whatever the
//! parallelism, read group size, runner, lanes or shuffle.

use futures::future::BoxFuture;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use zephon_core::{Batch, Dataset, PipelineExt, Record, Runner, Shard, Value, WorkSource};

/// A shard that implements only what a shard must (`read_run`), so fetch
/// reads it through the trait's default `read_indices` and `read_pointers`.
#[derive(Debug)]
struct RunsOnly {
    name: String,
    records: Vec<Record>,
}

impl Shard for RunsOnly {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> u64 {
        self.records.len() as u64
    }
    fn read_run(&self, start: u64, count: u64) -> BoxFuture<'_, zephon_core::Result<Vec<Record>>> {
        let res = zephon_core::dataset::check_run("runs", self, start, count)
            .map(|()| self.records[start as usize..(start + count) as usize].to_vec());
        Box::pin(std::future::ready(res))
    }
}

fn records(shards: &[usize]) -> Vec<Vec<Record>> {
    shards
        .iter()
        .enumerate()
        .map(|(s, &n)| {
            (0..n)
                .map(|i| Record::new().with("id", Value::Int((s * 1000 + i) as i64)))
                .collect()
        })
        .collect()
}

fn source(shards: &[usize], lanes: u32, shuffled: bool, seed: u64) -> WorkSource {
    let ds = Dataset::in_memory("fb", records(shards)).unwrap();
    source_of(ds, lanes, shuffled, seed)
}

fn source_of(ds: Dataset, lanes: u32, shuffled: bool, seed: u64) -> WorkSource {
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

/// A shard read through the trait's defaults gives the records an in-memory
/// shard gives, lane and lineage set from their pointers: one pointer each,
/// the sample's own.
#[test]
fn a_shard_read_through_the_defaults_gets_lane_and_lineage_from_its_pointers() {
    let shards = [37, 5, 64];
    let stored: Vec<Arc<dyn Shard>> = records(&shards)
        .into_iter()
        .enumerate()
        .map(|(i, mut records)| {
            // Lineage a shard has no business giving: fetch replaces it.
            for r in &mut records {
                r.lineage.push(zephon_core::SamplePtr {
                    dataset: 9,
                    shard: 9,
                    sample: 9,
                    lane: 9,
                });
            }
            Arc::new(RunsOnly {
                name: format!("runs/{i}"),
                records,
            }) as Arc<dyn Shard>
        })
        .collect();
    let runs = Dataset::new("fb", "runs", stored).unwrap();
    for shuffled in [false, true] {
        let run = |ws: WorkSource| -> Vec<Batch<Record>> {
            ws.stream()
                .fetch(3)
                .max_group(16)
                .batch(7)
                .into_blocking_iter(Runner::Threads { workers: 2 })
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        let got = run(source_of(runs.clone(), 3, shuffled, 11));
        let expected = run(source(&shards, 3, shuffled, 11));
        assert_eq!(got, expected, "shuffled: {shuffled}");
        for r in got.iter().flat_map(|b| &b.items) {
            let [p] = r.lineage.as_slice() else {
                panic!("lineage {:?}", r.lineage)
            };
            let id = r.get("id").and_then(Value::as_int).unwrap() as u64;
            assert_eq!((p.shard as u64 * 1000 + p.sample, p.lane), (id, r.lane));
        }
    }
}
