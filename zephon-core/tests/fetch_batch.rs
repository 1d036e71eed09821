//! `fetch` followed straight by `batch`, where batch takes fetch's read
//! records in runs of one lane rather than polling for each: the same
//! batches as batching the fetched records one by one, whatever the
//! parallelism, read group size, runner, lanes or shuffle.

use futures::future::BoxFuture;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use zephon_core::{
    Batch, Dataset, InMemoryShard, PipelineExt, Record, Runner, SamplePtr, Shard, Value, WorkSource,
};

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

/// A shard that cuts the records of a read into chunks of its own lengths
/// (`cuts`, in turn), wherever fetch asked for the cuts.
#[derive(Debug)]
struct OwnCuts {
    inner: InMemoryShard,
    cuts: Vec<usize>,
}

impl Shard for OwnCuts {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_run(&self, start: u64, count: u64) -> BoxFuture<'_, zephon_core::Result<Vec<Record>>> {
        self.inner.read_run(start, count)
    }
    fn read_pointer_chunks<'a>(
        &'a self,
        ptrs: &'a [SamplePtr],
        _first: usize,
        _len: usize,
    ) -> BoxFuture<'a, zephon_core::Result<Vec<Vec<Record>>>> {
        Box::pin(async move {
            let mut records = self.inner.read_pointers(ptrs).await?.into_iter();
            let mut chunks = Vec::new();
            for &n in self.cuts.iter().cycle() {
                let chunk: Vec<Record> = records.by_ref().take(n).collect();
                if chunk.is_empty() && records.len() == 0 {
                    break;
                }
                chunks.push(chunk);
            }
            Ok(chunks)
        })
    }
}

/// A shard whose reads are done at once or wait first, by the pattern
/// `waits` (in turn, per read): fetch takes a read done at once without
/// queueing it, and must still hand out every read in the order sent.
#[derive(Debug)]
struct SometimesWaits {
    inner: InMemoryShard,
    waits: Vec<u32>,
    reads: std::sync::atomic::AtomicUsize,
}

impl Shard for SometimesWaits {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_run(&self, start: u64, count: u64) -> BoxFuture<'_, zephon_core::Result<Vec<Record>>> {
        self.inner.read_run(start, count)
    }
    fn read_pointer_chunks<'a>(
        &'a self,
        ptrs: &'a [SamplePtr],
        first: usize,
        len: usize,
    ) -> BoxFuture<'a, zephon_core::Result<Vec<Vec<Record>>>> {
        let k = self
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let waits = self.waits[k % self.waits.len()];
        Box::pin(async move {
            // Pending `waits` times (each wake-up asked for at once), on
            // whatever thread polls.
            for _ in 0..waits {
                tokio::task::yield_now().await;
            }
            self.inner.read_pointer_chunks(ptrs, first, len).await
        })
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

/// Every record, fetched one at a time on the caller's thread.
fn one_at_a_time(ws: &WorkSource) -> Vec<Record> {
    ws.stream()
        .fetch(1)
        .max_group(1)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The batches of `fetch(p) -> batch(size)`, fetch taking groups of up to
/// `max_group` pointers.
fn fetched_batches(
    ws: &WorkSource,
    p: usize,
    max_group: usize,
    size: usize,
    runner: Runner,
) -> Vec<Batch<Record>> {
    ws.stream()
        .fetch(p)
        .max_group(max_group)
        .batch(size)
        .into_blocking_iter(runner)
        .unwrap()
        .map(Result::unwrap)
        .collect()
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
        let records = one_at_a_time(&ws);
        prop_assert_eq!(records.len(), shards.iter().sum::<usize>());
        let expected = batched(records, size);
        for (p, runner) in [
            (1, Runner::Inline),
            (8, Runner::Inline),
            (2, Runner::Threads { workers: 2 }),
            (8, Runner::Threads { workers: 4 }),
        ] {
            let got = fetched_batches(&ws, p, max_group, size, runner);
            prop_assert_eq!(&got, &expected, "p={} {:?}", p, runner);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Fetch asks a shard for its records cut where batches close, and
    /// batch takes a full chunk of one lane as a batch when that lane's
    /// open batch is empty; a shard that cuts elsewhere (empty chunks,
    /// chunks of a batch's size starting mid-batch, of mixed lanes) gets
    /// the same batches.
    #[test]
    fn chunks_cut_anywhere_give_the_batches_of_one_record_at_a_time(
        shards in prop::collection::vec(1usize..80, 1..4),
        lanes in prop_oneof![Just(1u32), Just(1), Just(2), Just(3)],
        shuffled in any::<bool>(),
        seed in any::<u64>(),
        size in 1usize..12,
        max_group in 1usize..40,
        cuts in prop::collection::vec(prop_oneof![Just(0usize), 1usize..6, Just(usize::MAX)], 1..6),
    ) {
        let expected = {
            let ws = source(&shards, lanes, shuffled, seed);
            batched(one_at_a_time(&ws), size)
        };
        // usize::MAX stands for a chunk of a batch's size.
        let cuts: Vec<usize> = cuts.iter().map(|&n| if n == usize::MAX { size } else { n }).collect();
        prop_assume!(cuts.iter().any(|&n| n > 0));
        let stored: Vec<Arc<dyn Shard>> = records(&shards)
            .into_iter()
            .enumerate()
            .map(|(i, records)| {
                Arc::new(OwnCuts {
                    inner: InMemoryShard::new(format!("cuts/{i}"), records),
                    cuts: cuts.clone(),
                }) as Arc<dyn Shard>
            })
            .collect();
        let ws = source_of(Dataset::new("fb", "cuts", stored).unwrap(), lanes, shuffled, seed);
        for (p, runner) in [(1, Runner::Inline), (4, Runner::Threads { workers: 2 })] {
            let got = fetched_batches(&ws, p, max_group, size, runner);
            prop_assert_eq!(&got, &expected, "p={} {:?} cuts {:?}", p, runner, &cuts);
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

proptest! {
    // A failing case hangs until its deadline: few shrinking steps.
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 4, ..ProptestConfig::default() })]

    /// Reads done at once (a mapped or in-memory shard) and reads that wait
    /// (a remote one), mixed: the batches are those of one record at a
    /// time, whatever the parallelism and runner.
    #[test]
    fn reads_done_at_once_and_reads_that_wait_keep_their_order(
        shards in prop::collection::vec(1usize..80, 1..4),
        lanes in prop_oneof![Just(1u32), Just(2)],
        shuffled in any::<bool>(),
        seed in any::<u64>(),
        size in 1usize..12,
        max_group in 1usize..20,
        waits in prop::collection::vec(0u32..3, 1..6),
    ) {
        let expected = {
            let ws = source(&shards, lanes, shuffled, seed);
            batched(one_at_a_time(&ws), size)
        };
        for (p, runner) in [
            (1, Runner::Inline),
            (3, Runner::Inline),
            (8, Runner::Threads { workers: 2 }),
        ] {
            let stored: Vec<Arc<dyn Shard>> = records(&shards)
                .into_iter()
                .enumerate()
                .map(|(i, records)| {
                    Arc::new(SometimesWaits {
                        inner: InMemoryShard::new(format!("waits/{i}"), records),
                        waits: waits.clone(),
                        reads: Default::default(),
                    }) as Arc<dyn Shard>
                })
                .collect();
            let ws = source_of(Dataset::new("fb", "waits", stored).unwrap(), lanes, shuffled, seed);
            // A read whose wake-up is lost is never polled again: a hang,
            // reported here as a failure.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(fetched_batches(&ws, p, max_group, size, runner));
            });
            let got = rx.recv_timeout(std::time::Duration::from_secs(10));
            prop_assert!(got.is_ok(), "p={} {:?} waits {:?}: no end within 10 s", p, runner, &waits);
            prop_assert_eq!(&got.unwrap(), &expected, "p={} {:?} waits {:?}", p, runner, &waits);
        }
    }
}
