//! `fetch` with windows across shards: a group of upcoming pointers of any
//! shards is read as one read per shard and put back in pointer order, so
//! the records, their lanes and lineage equal those of per-shard groups.

use proptest::prelude::*;
use zephon_core::{BlockShuffle, Dataset, PipelineExt, Record, Runner, SamplePtr, WorkSource};

fn dataset(shards: &[usize]) -> Dataset {
    let shards = shards
        .iter()
        .enumerate()
        .map(|(s, &n)| {
            (0..n)
                .map(|i| Record::new().with("id", (s * 1000 + i) as i64))
                .collect()
        })
        .collect();
    Dataset::in_memory("w", shards).unwrap()
}

/// `(id, lane, pointer)` of every record of one pass.
fn pass(
    shards: &[usize],
    seed: u64,
    window: usize,
    parallelism: usize,
    across: bool,
    runner: Runner,
) -> Vec<(i64, u32, SamplePtr)> {
    WorkSource::builder()
        .dataset(dataset(shards), 1.0)
        .seed(seed)
        .canonical_lanes(4)
        .shuffle_block_size(BlockShuffle::Global)
        .build()
        .unwrap()
        .stream()
        .fetch(parallelism)
        .max_group(window)
        .across_shards(across)
        .into_blocking_iter(runner)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            let id = r.get("id").and_then(|v| v.as_int()).unwrap();
            (id, r.lane, r.lineage[0])
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn windows_across_shards_deliver_the_per_shard_order(
        shards in prop::collection::vec(1usize..80, 1..6),
        seed in any::<u64>(),
        window in 1usize..70,
        parallelism in 1usize..9,
        threads in any::<bool>(),
    ) {
        let want = pass(&shards, seed, 1, 1, false, Runner::Inline);
        prop_assert_eq!(want.len(), shards.iter().sum::<usize>());
        for (id, _, p) in &want {
            prop_assert_eq!(*id, (p.shard as u64 * 1000 + p.sample) as i64);
        }
        let runner = if threads { Runner::Threads { workers: 2 } } else { Runner::Inline };
        let got = pass(&shards, seed, window, parallelism, true, runner);
        prop_assert_eq!(got, want);
    }
}

/// A window naming a shard the catalog lacks fails with that pointer, as
/// a per-shard group does.
#[test]
fn a_window_with_an_unknown_shard_is_an_error_naming_the_pointer() {
    use futures::StreamExt;
    let ds = dataset(&[3, 3]);
    let catalog: zephon_core::Catalog = vec![ds].into();
    let ptr = |shard, sample| SamplePtr {
        dataset: 0,
        shard,
        sample,
        lane: 0,
    };
    let ptrs = vec![ptr(0, 1), ptr(1, 2), ptr(7, 0), ptr(0, 2)];
    let out: Vec<_> = futures::executor::block_on(
        zephon_core::ops::fetch::Fetch::new(
            futures::stream::iter(ptrs.into_iter().map(Ok)),
            catalog,
            2,
        )
        .across_shards(true)
        .collect::<Vec<_>>(),
    );
    let err = out
        .iter()
        .find_map(|r| r.as_ref().err())
        .expect("an error")
        .to_string();
    assert!(err.contains(&ptr(7, 0).to_string()), "{err}");
}

/// `(id, lane, pointer)` of every record of `ws`, its pointers taken in
/// runs (`fetch`) or polled one by one (`fetch_from`).
fn records_of(
    ws: &WorkSource,
    runs: bool,
    window: usize,
    parallelism: usize,
    across: bool,
) -> Vec<(i64, u32, SamplePtr)> {
    let s = ws.stream();
    let fetched = if runs {
        s.fetch(parallelism)
    } else {
        s.fetch_from(ws.catalog().clone(), parallelism)
    };
    fetched
        .max_group(window)
        .across_shards(across)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (
                r.get("id").and_then(|v| v.as_int()).unwrap(),
                r.lane,
                r.lineage[0],
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn pointers_taken_in_runs_deliver_the_polled_order(
        shards in prop::collection::vec(1usize..80, 1..6),
        shuffled in any::<bool>(),
        lanes in 1u32..5,
        seek in 0u64..40,
        window in 1usize..70,
        parallelism in 1usize..5,
        across in any::<bool>(),
    ) {
        let mut ws = WorkSource::builder()
            .dataset(dataset(&shards), 1.0)
            .shuffle_shards(shuffled)
            .shuffle_within_shard(shuffled)
            .canonical_lanes(lanes)
            .passes(2)
            .build()
            .unwrap();
        ws.seek(seek);
        let want = records_of(&ws, false, window, parallelism, across);
        prop_assert_eq!(want.len() as u64, 2 * shards.iter().sum::<usize>() as u64 - seek.min(2 * shards.iter().sum::<usize>() as u64));
        prop_assert_eq!(records_of(&ws, true, window, parallelism, across), want);
    }
}

/// `(lane, index, ids)` of every batch: `fetch(..).batch(..)` takes the
/// records fetch has read straight from it, the trait's `batch` polls
/// fetch for each.
fn batches_of(
    ws: &WorkSource,
    taken: bool,
    size: usize,
    drop_last: bool,
    parallelism: usize,
    runner: Runner,
) -> Vec<(u32, u64, Vec<i64>)> {
    let fetched = ws.stream().fetch(parallelism).max_group(7);
    let batched = if taken {
        fetched.batch_with(size, drop_last)
    } else {
        PipelineExt::batch_with(fetched, size, drop_last)
    };
    batched
        .into_blocking_iter(runner)
        .unwrap()
        .map(|b| {
            let b = b.unwrap();
            let ids = b
                .items
                .iter()
                .map(|r| r.get("id").and_then(|v| v.as_int()).unwrap())
                .collect();
            (b.lane, b.index, ids)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn batches_taking_read_records_equal_polled_batches(
        shards in prop::collection::vec(1usize..80, 1..5),
        seed in any::<u64>(),
        lanes in 1u32..5,
        size in 1usize..40,
        drop_last in any::<bool>(),
        parallelism in 1usize..4,
        threads in any::<bool>(),
    ) {
        let ws = WorkSource::builder()
            .dataset(dataset(&shards), 1.0)
            .seed(seed)
            .canonical_lanes(lanes)
            .build()
            .unwrap();
        let runner = if threads { Runner::Threads { workers: 2 } } else { Runner::Inline };
        let want = batches_of(&ws, false, size, drop_last, parallelism, Runner::Inline);
        let n: usize = want.iter().map(|b| b.2.len()).sum();
        prop_assert!(n <= shards.iter().sum::<usize>());
        prop_assert_eq!(batches_of(&ws, true, size, drop_last, parallelism, runner), want);
    }
}
