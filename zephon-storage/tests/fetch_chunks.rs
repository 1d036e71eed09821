//! Local format shards read for `fetch -> batch` straight into the chunks
//! batch closes its batches at (MDS fills each record in its place; other
//! formats place what they decoded): the same batches as fetching one
//! record at a time and batching those, whatever the parallelism, read
//! group size, runner, lanes or shuffle; and a sample that does not decode
//! is an error naming its shard and sample, not a short chunk. The
//! expected batches are made without fetch: each sample read alone through
//! `read_indices`, batched as a plain stream.

use crate::common;

use common::write_mds;
use proptest::prelude::*;
use std::path::Path;
use zephon_core::{Batch, Dataset, Lineage, PipelineExt, Record, Runner, SamplePtr, WorkSource};
use zephon_storage::DatasetExt;
use zephon_storage::format::FormatOptions;
use zephon_storage::format::tokens::TokenDtype;

fn source(ds: Dataset, lanes: u32, shuffled: bool, seed: u64) -> WorkSource {
    WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(seed)
        .shuffle_shards(shuffled)
        .shuffle_within_shard(shuffled)
        .canonical_lanes(lanes)
        .build()
        .unwrap()
}

/// `shards` flat u16 token files of `per_shard` samples of 3 tokens.
fn write_tokens(dir: &Path, shards: usize, per_shard: usize) -> FormatOptions {
    std::fs::create_dir_all(dir).unwrap();
    for s in 0..shards {
        let bytes: Vec<u8> = (0..per_shard * 3)
            .flat_map(|t| ((s * 10_000 + t) as u16).to_le_bytes())
            .collect();
        std::fs::write(dir.join(format!("{s:03}.bin")), bytes).unwrap();
    }
    FormatOptions::default().seq_len(3).dtype(TokenDtype::U16)
}

/// The batches expected of `fetch -> batch`, made without fetch: each
/// pointer's sample read alone through `read_indices`, its lane and
/// lineage set from the pointer, and the records batched as a plain stream.
fn expected_batches(ds: &Dataset, ws: &WorkSource, size: usize) -> Vec<Batch<Record>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let records: Vec<zephon_core::Result<Record>> = ws
        .stream()
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .map(|p| {
            let p: SamplePtr = p.unwrap();
            let shard = &ds.shards()[p.shard as usize];
            let mut r = rt
                .block_on(shard.read_indices(&[p.sample]))
                .unwrap()
                .remove(0);
            r.lane = p.lane;
            r.lineage = Lineage::from_buf([p]);
            Ok(r)
        })
        .collect();
    futures::stream::iter(records)
        .batch(size)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn local_shards_read_into_chunks_give_the_batches_of_one_record_at_a_time(
        shards in 1usize..4,
        per_shard in 1usize..70,
        lanes in prop_oneof![Just(1u32), Just(1), Just(2), Just(3)],
        shuffled in any::<bool>(),
        seed in any::<u64>(),
        size in 1usize..12,
        max_group in 1usize..40,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let mds = tmp.path().join("mds");
        write_mds(&mds, shards, per_shard);
        let tokens = tmp.path().join("tokens");
        let token_opts = write_tokens(&tokens, shards, per_shard);
        for (dir, opts) in [(mds, FormatOptions::default()), (tokens, token_opts)] {
            let ds = Dataset::from_path_with("chunks", &dir, &opts).unwrap();
            let ws = source(ds.clone(), lanes, shuffled, seed);
            let expected = expected_batches(&ds, &ws, size);
            prop_assert_eq!(
                expected.iter().map(|b| b.items.len()).sum::<usize>(),
                shards * per_shard
            );
            for (p, runner) in [(1, Runner::Inline), (3, Runner::Threads { workers: 2 })] {
                let got: Vec<Batch<Record>> = ws
                    .stream()
                    .fetch(p)
                    .max_group(max_group)
                    .batch(size)
                    .into_blocking_iter(runner)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                prop_assert_eq!(&got, &expected, "{:?} p={} {:?}", dir, p, runner);
            }
        }
    }
}

/// A text column that is not UTF-8 in one sample of a group: the read of
/// the group is an error naming the shard and the sample, under both
/// runners, and nothing after it is delivered as if the group were whole.
#[test]
fn a_sample_that_does_not_decode_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mds");
    write_mds(&dir, 1, 20);
    let shard = dir.join("shard.00000.mds");
    let mut data = std::fs::read(&shard).unwrap();
    let text = b"sample 7 of shard 0";
    let at = data
        .windows(text.len())
        .position(|w| w == text)
        .expect("sample 7's text");
    data[at] = 0xff;
    std::fs::write(&shard, data).unwrap();
    let ds = Dataset::from_path("bad", &dir).unwrap();
    for runner in [Runner::Inline, Runner::Threads { workers: 2 }] {
        let ws = source(ds.clone(), 1, false, 0);
        let got: Vec<_> = ws
            .stream()
            .fetch(2)
            .max_group(8)
            .batch(4)
            .into_blocking_iter(runner)
            .unwrap()
            .collect();
        let err = got
            .iter()
            .find_map(|b| b.as_ref().err())
            .expect("an error")
            .to_string();
        assert!(
            err.contains("shard.00000.mds") && err.contains("sample 7") && err.contains("UTF-8"),
            "{err}"
        );
        // Batches before the bad group's are whole and in order.
        let before: Vec<i64> = got
            .iter()
            .map_while(|b| b.as_ref().ok())
            .flat_map(|b| {
                b.items
                    .iter()
                    .map(|r| r.get("id").unwrap().as_int().unwrap())
            })
            .collect();
        assert_eq!(before, (0..before.len() as i64).collect::<Vec<_>>());
        assert!(before.len() < 8, "{before:?}");
    }
}
