//! WorkSource: reproducible pointer sequences, exact mixtures, scoped shuffles.

use std::collections::BTreeSet;
use zephon_core::{BlockShuffle, Dataset, Record, SamplePtr, WorkSource, WorkSourceBuilder};

fn dataset(name: &str, shard_lens: &[usize]) -> Dataset {
    Dataset::in_memory(
        name,
        shard_lens.iter().map(|&n| vec![Record::new(); n]).collect(),
    )
    .unwrap()
}

fn pointers(b: WorkSourceBuilder) -> Vec<SamplePtr> {
    b.build().unwrap().stream().pointers().collect()
}

#[test]
fn same_config_and_seed_give_the_same_sequence() {
    let make = |seed| {
        WorkSource::builder()
            .dataset(dataset("a", &[10, 20, 5]), 2.0)
            .dataset(dataset("b", &[7, 7]), 1.0)
            .seed(seed)
            .chunk_size(9)
            .shuffle_block_size(BlockShuffle::Size(6))
            .canonical_lanes(3)
    };
    assert_eq!(pointers(make(5)), pointers(make(5)));
    assert_ne!(pointers(make(5)), pointers(make(6)));
}

#[test]
fn every_sample_appears_exactly_once_per_pass() {
    for block in [
        BlockShuffle::Off,
        BlockShuffle::Size(7),
        BlockShuffle::Auto,
        BlockShuffle::Global,
    ] {
        let ptrs = pointers(
            WorkSource::builder()
                .dataset(dataset("a", &[13, 1, 40, 6]), 1.0)
                .seed(3)
                .shuffle_block_size(block)
                .passes(2),
        );
        assert_eq!(ptrs.len(), 120, "{block:?}");
        for pass in ptrs.chunks(60) {
            let set: BTreeSet<(u32, u64)> = pass.iter().map(|p| (p.shard, p.sample)).collect();
            assert_eq!(set.len(), 60, "{block:?}: duplicates within a pass");
        }
        assert_ne!(
            ptrs[..60],
            ptrs[60..],
            "{block:?}: the second pass is reshuffled"
        );
    }
}

#[test]
fn each_chunk_holds_the_exact_largest_remainder_quota() {
    let ptrs = pointers(
        WorkSource::builder()
            .dataset(dataset("a", &[500, 500]), 0.7)
            .dataset(dataset("b", &[300, 300]), 0.3)
            .chunk_size(64)
            .seed(11),
    );
    // 0.7 * 64 = 44.8 -> 45, 0.3 * 64 = 19.2 -> 19.
    let full_chunks = ptrs.len() / 64;
    assert!(full_chunks >= 10);
    for chunk in ptrs.chunks_exact(64) {
        assert_eq!(chunk.iter().filter(|p| p.dataset == 0).count(), 45);
    }
}

#[test]
fn stop_policy_ends_at_the_first_exhausted_dataset() {
    let ws = WorkSource::builder()
        .dataset(dataset("a", &[100]), 0.5)
        .dataset(dataset("b", &[10]), 0.5)
        .chunk_size(10)
        .build()
        .unwrap();
    let ptrs: Vec<_> = ws.stream().pointers().collect();
    assert_eq!(ptrs.iter().filter(|p| p.dataset == 1).count(), 10);
    assert_eq!(ptrs.len() as u64, ws.len().unwrap());
}

#[test]
fn shard_shuffle_permutes_shards_only() {
    let ptrs = pointers(
        WorkSource::builder()
            .dataset(dataset("a", &[5, 6, 7, 8]), 1.0)
            .shuffle_within_shard(false)
            .seed(1),
    );
    // Each shard appears as one contiguous run, in sample order.
    let mut runs: Vec<u32> = ptrs.iter().map(|p| p.shard).collect();
    runs.dedup();
    assert_eq!(runs.len(), 4);
    assert_ne!(runs, vec![0, 1, 2, 3], "seed 1 moves the shards");
    for s in 0..4 {
        let samples: Vec<u64> = ptrs
            .iter()
            .filter(|p| p.shard == s)
            .map(|p| p.sample)
            .collect();
        assert_eq!(samples, (0..samples.len() as u64).collect::<Vec<_>>());
    }
}

#[test]
fn within_shard_shuffle_stays_within_each_shard() {
    let ptrs = pointers(
        WorkSource::builder()
            .dataset(dataset("a", &[9, 9, 9]), 1.0)
            .shuffle_shards(false)
            .seed(2),
    );
    for (s, chunk) in ptrs.chunks(9).enumerate() {
        assert!(
            chunk.iter().all(|p| p.shard == s as u32),
            "shard {s} left its place"
        );
        let mut samples: Vec<u64> = chunk.iter().map(|p| p.sample).collect();
        assert_ne!(samples, (0..9).collect::<Vec<_>>());
        samples.sort();
        assert_eq!(samples, (0..9).collect::<Vec<_>>());
    }
}

#[test]
fn block_shuffle_permutes_within_blocks_only() {
    let ptrs = pointers(
        WorkSource::builder()
            .dataset(dataset("a", &[10, 10, 10]), 1.0)
            .shuffle_shards(false)
            .shuffle_within_shard(false)
            .shuffle_block_size(BlockShuffle::Size(8))
            .seed(4),
    );
    let flat: Vec<u64> = ptrs
        .iter()
        .map(|p| p.shard as u64 * 10 + p.sample)
        .collect();
    for (b, block) in flat.chunks(8).enumerate() {
        let mut sorted = block.to_vec();
        sorted.sort();
        let start = b as u64 * 8;
        assert_eq!(
            sorted,
            (start..start + block.len() as u64).collect::<Vec<_>>()
        );
    }
    assert_ne!(flat, (0..30).collect::<Vec<_>>());
}

#[test]
fn state_restores_the_rest_of_the_sequence() {
    let b = WorkSource::builder()
        .dataset(dataset("a", &[30, 20]), 1.0)
        .dataset(dataset("b", &[25]), 1.0)
        .canonical_lanes(2)
        .seed(9);
    let full = pointers(b.clone());
    let mut ws = b.clone().build().unwrap();
    let mut s = ws.stream();
    for _ in 0..17 {
        s.next_pointer().unwrap();
    }
    ws.seek(s.position());
    let state = ws.state();
    let json = serde_json::to_string(&state).unwrap();
    let mut fresh = b.build().unwrap();
    fresh
        .restore(&serde_json::from_str(&json).unwrap())
        .unwrap();
    let rest: Vec<_> = fresh.stream().pointers().collect();
    assert_eq!(rest, full[17..]);
}

#[test]
fn restore_refuses_another_run() {
    let base = || {
        WorkSource::builder()
            .dataset(dataset("a", &[30]), 1.0)
            .canonical_lanes(4)
    };
    let state = base().seed(1).build().unwrap().state();
    let err = base()
        .seed(2)
        .build()
        .unwrap()
        .restore(&state)
        .unwrap_err()
        .to_string();
    assert!(err.contains("seed"), "{err}");
    let err = base()
        .seed(1)
        .canonical_lanes(8)
        .build()
        .unwrap()
        .restore(&state)
        .unwrap_err()
        .to_string();
    assert!(err.contains("canonical_lanes"), "{err}");
    let other = WorkSource::builder()
        .dataset(dataset("a", &[31]), 1.0)
        .canonical_lanes(4)
        .seed(1);
    let err = other
        .build()
        .unwrap()
        .restore(&state)
        .unwrap_err()
        .to_string();
    assert!(err.contains("fingerprint"), "{err}");
}

#[test]
fn configuration_errors_say_what_and_where() {
    let err = WorkSource::builder()
        .dataset(dataset("web", &[10]), 1.0)
        .dataset(dataset("code", &[10]), 0.0)
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("`code`") && err.contains("weight"), "{err}");
    let err = WorkSource::builder()
        .dataset(dataset("web", &[10]), 1.0)
        .canonical_lanes(2)
        .world_size(4)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("canonical_lanes") && err.contains("world_size 4"),
        "{err}"
    );
    let err = WorkSource::builder().build().unwrap_err().to_string();
    assert!(err.contains("datasets"), "{err}");
}

/// The stream walks the sequence with what it remembers of the last
/// pointer (the pass, the shard, its shuffle key); random access starts
/// from nothing each time. Both must agree everywhere: across shard
/// boundaries, empty shards, passes, block and within-shard shuffles,
/// interleaved datasets and lanes another rank owns.
#[test]
fn the_stream_agrees_with_random_access_at_every_index() {
    let configs = [
        (false, false, BlockShuffle::Off, 0),
        (true, true, BlockShuffle::Off, 1),
        (true, false, BlockShuffle::Size(5), 0),
        (false, true, BlockShuffle::Auto, 1),
        (true, true, BlockShuffle::Global, 0),
    ];
    for (shards, within, block, rank) in configs {
        let ws = WorkSource::builder()
            .dataset(dataset("a", &[7, 0, 3, 11, 1]), 0.6)
            .dataset(dataset("b", &[4, 9]), 0.4)
            .seed(11)
            .canonical_lanes(4)
            .world_size(2)
            .rank(rank)
            .shuffle_shards(shards)
            .shuffle_within_shard(within)
            .shuffle_block_size(block)
            .repeat()
            .build()
            .unwrap();
        let streamed: Vec<SamplePtr> = ws.stream().pointers().take(400).collect();
        let expected: Vec<SamplePtr> = (0..)
            .map(|g| ws.pointer_at(g))
            .filter(|p| ws.owned_lanes().contains(&p.lane))
            .take(400)
            .collect();
        assert_eq!(
            streamed, expected,
            "{shards} {within} {block:?} rank {rank}"
        );
    }
}

/// Two datasets of one name would share per-dataset policies, token
/// estimates and figures: refused at build, naming both; so is a name
/// that is empty.
#[test]
fn an_empty_name_and_two_datasets_of_one_name_are_refused() {
    let err = WorkSource::builder()
        .dataset(dataset("web", &[4]), 1.0)
        .dataset(dataset("books", &[4]), 1.0)
        .dataset(dataset("web", &[8]), 1.0)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("datasets 0 and 2 are both named `web`"),
        "{err}"
    );
    let err = WorkSource::builder()
        .dataset(dataset("", &[4]), 1.0)
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("dataset 0 has an empty name"), "{err}");
    let same_folder_two_names = WorkSource::builder()
        .dataset(dataset("web", &[4]), 1.0)
        .dataset(dataset("web-again", &[4]), 1.0)
        .build();
    assert!(same_folder_two_names.is_ok());
}
