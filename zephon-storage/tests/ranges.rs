//! Byte-range reads of token files from real servers on 127.0.0.1 (nginx,
//! moto_server): a shuffled pass delivers what the local read delivers, in
//! the same order, whatever the request window, gap and concurrency;
//! neighbours share requests; a response shorter than asked is an error
//! naming the shard's URI and the range.

use crate::common;

use common::{Moto, Nginx, cache_opts};
use proptest::prelude::*;
use std::path::Path;
use zephon_core::{BlockShuffle, Dataset, PipelineExt, Runner, WorkSource};
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::format::TokenDtype;
use zephon_storage::scan::build_index_with;
use zephon_storage::{DatasetExt, FormatOptions, RemoteDataset, StorageOptions};

/// Tokens per sample of the test files.
const SEQ: u64 = 16;

fn format() -> FormatOptions {
    FormatOptions::default().seq_len(SEQ).dtype(TokenDtype::U16)
}

/// Writes flat `u16` token files `a.bin` and `b.bin` (samples of [`SEQ`]
/// tokens, every token distinct within a file) with their `index.json`.
fn token_dataset(dir: &Path, samples: [u64; 2]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, n) in ["a.bin", "b.bin"].into_iter().zip(samples) {
        let salt = name.as_bytes()[0] as u64;
        let bytes: Vec<u8> = (0..n * SEQ)
            .flat_map(|t| (((t * 7 + salt) % 65_521) as u16).to_le_bytes())
            .collect();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    let b = Backend::open("d", &dir.display().to_string(), &Default::default()).unwrap();
    runtime::block_on(build_index_with(&b, "d", &format())).unwrap();
}

/// Every sample's tokens in the order a pass delivers them: a global
/// shuffle of `seed`, or the stored order, read `window` pointers per
/// request group.
fn pass(ds: Dataset, seed: Option<u64>, window: usize) -> zephon_core::Result<Vec<Vec<u32>>> {
    pass_with(ds, seed, window, false)
}

/// [`pass`], with fetch's windows across shards on or off.
fn pass_with(
    ds: Dataset,
    seed: Option<u64>,
    window: usize,
    across: bool,
) -> zephon_core::Result<Vec<Vec<u32>>> {
    let ws = WorkSource::builder().dataset(ds, 1.0);
    let ws = match seed {
        Some(s) => ws.seed(s).shuffle_block_size(BlockShuffle::Global),
        None => ws.shuffle_within_shard(false).shuffle_shards(false),
    };
    ws.build()?
        .stream()
        .fetch(4)
        .max_group(window)
        .across_shards(across)
        .into_blocking_iter(Runner::Threads { workers: 2 })?
        .map(|r| r.map(|r| r.token_ids("tokens").expect("a tokens field").to_vec()))
        .collect()
}

fn ranged(dir: &Path, base: StorageOptions) -> StorageOptions {
    let mut o = cache_opts(dir).byte_range(true);
    o.format = format();
    o.range_concurrency = base.range_concurrency;
    o.range_gap = base.range_gap;
    o.range_part_gap = base.range_part_gap;
    o.range_parts = base.range_parts;
    o
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// Over HTTP, by byte ranges, any seed, request window (per shard or
    /// across shards), gaps, concurrency and spans per request: the same
    /// samples in the same order as the local read.
    #[test]
    fn ranged_global_shuffle_over_http_matches_the_local_order(
        seed in 0u64..1_000,
        window in 1usize..400,
        gap in prop::sample::select(vec![0u64, 32, 4096, 1 << 20]),
        part_gap in prop::sample::select(vec![0u64, 32, 4096, 1 << 20]),
        concurrency in 1usize..80,
        across in any::<bool>(),
        parts in prop::sample::select(vec![1usize, 2, 7, 256]),
    ) {
        let t = tempfile::tempdir().unwrap();
        let data = t.path().join("data");
        token_dataset(&data, [700, 333]);
        let local = Dataset::from_path_with("d", &data, &format()).unwrap();
        let want = pass(local, Some(seed), window).unwrap();
        prop_assert_eq!(want.len(), 1033);
        let nginx = Nginx::start(t.path(), &data);
        let opts = ranged(
            t.path(),
            StorageOptions::default()
                .range_gap(gap)
                .range_part_gap(part_gap)
                .range_concurrency(concurrency)
                .range_parts(parts),
        );
        let rd = RemoteDataset::open("d", &nginx.uri(), &opts).unwrap();
        let got = pass_with(rd.dataset().clone(), Some(seed), window, across).unwrap();
        prop_assert!(got == want, "seed {seed}, window {window}, gap {gap}, part gap {part_gap}, across {across}, parts {parts}: another order");
        prop_assert_eq!(nginx.gets(".bin HTTP"), 0, "no whole-file download");
    }
}

/// A global shuffle over two shards interleaves them: with windows across
/// shards, each read sees its shard's share of 256 upcoming samples, and
/// neighbours merge into far fewer requests than per-shard groups make.
#[test]
fn windows_across_shards_merge_a_global_shuffle_into_fewer_requests() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    token_dataset(&data, [512, 512]);
    let local = Dataset::from_path_with("d", &data, &format()).unwrap();
    let want = pass(local, Some(5), 256).unwrap();
    let nginx = Nginx::start(t.path(), &data);
    // A gap of 1 KiB spans the 32 samples around each wanted one.
    let opts = ranged(t.path(), StorageOptions::default().range_gap(1 << 10));
    let mut requests = Vec::new();
    for across in [false, true] {
        let rd = RemoteDataset::open("d", &nginx.uri(), &opts).unwrap();
        let before = nginx.range_gets(".bin HTTP");
        assert_eq!(
            pass_with(rd.dataset().clone(), Some(5), 256, across).unwrap(),
            want
        );
        requests.push(nginx.range_gets(".bin HTTP") - before);
    }
    assert!(
        requests[1] * 4 < requests[0] && requests[1] < 1024 / 8,
        "range requests for 1,024 samples: {} per shard, {} across shards",
        requests[0],
        requests[1]
    );
}

/// Samples read in stored order with groups of 64: neighbours share one
/// request (far fewer requests than samples); with the gap at 0, samples
/// one apart do not, and with a gap of one sample they do (one span per
/// request, as object stores read them).
#[test]
fn neighbours_share_range_requests_within_the_gap() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    token_dataset(&data, [640, 64]);
    let local = Dataset::from_path_with("d", &data, &format()).unwrap();
    let want = pass(local.clone(), None, 64).unwrap();
    let nginx = Nginx::start(t.path(), &data);
    let opts = ranged(t.path(), StorageOptions::default().range_gap(0));
    let rd = RemoteDataset::open("d", &nginx.uri(), &opts).unwrap();
    assert_eq!(pass(rd.dataset().clone(), None, 64).unwrap(), want);
    let requests = nginx.range_gets("a.bin HTTP");
    assert!(
        (1..=20).contains(&requests),
        "640 adjacent samples in groups of 64 took {requests} range requests"
    );

    // Every other sample of a.bin, one group: one request per sample at
    // gap 0, a single request once the gap covers a sample (32 bytes).
    let every_other: Vec<u64> = (0..640).step_by(2).collect();
    let wanted = runtime::block_on(local.shards()[0].read_indices(&every_other)).unwrap();
    for (gap, most) in [(0u64, 320usize), (32, 1)] {
        let opts = ranged(
            t.path(),
            StorageOptions::default().range_gap(gap).range_parts(1),
        );
        let rd = RemoteDataset::open("d", &nginx.uri(), &opts).unwrap();
        let before = nginx.range_gets("a.bin HTTP");
        let got = runtime::block_on(rd.dataset().shards()[0].read_indices(&every_other)).unwrap();
        assert_eq!(
            got.iter()
                .map(|r| r.token_ids("tokens").unwrap().to_vec())
                .collect::<Vec<_>>(),
            wanted
                .iter()
                .map(|r| r.token_ids("tokens").unwrap().to_vec())
                .collect::<Vec<_>>(),
        );
        let requests = nginx.range_gets("a.bin HTTP") - before;
        assert_eq!(
            requests, most,
            "gap {gap}: {requests} requests for 320 samples"
        );
    }
}

/// Out-of-range settings are refused when the dataset is opened, naming
/// the key.
#[test]
fn range_settings_out_of_range_are_refused_by_name() {
    let t = tempfile::tempdir().unwrap();
    let uri = format!("memory://ranges-settings-{}", std::process::id());
    for (opts, key) in [
        (
            StorageOptions::default().range_concurrency(0),
            "range_concurrency",
        ),
        (StorageOptions::default().range_gap(1 << 40), "range_gap"),
        (
            StorageOptions::default().range_part_gap(1 << 40),
            "range_part_gap",
        ),
        (StorageOptions::default().range_parts(0), "range_parts"),
        (StorageOptions::default().range_parts(5000), "range_parts"),
    ] {
        let err = RemoteDataset::open("d", &uri, &ranged(t.path(), opts)).unwrap_err();
        assert!(err.to_string().contains(key), "{err}");
    }
    // Opening a dataset checks every request setting, not only the
    // byte-range ones: Duration::MAX overflowed the HTTP client's clock (a
    // panic), usize::MAX retries retried a dead endpoint forever, and a
    // concurrency past the semaphore's limit panicked at open.
    use std::time::Duration;
    let o = || cache_opts(t.path());
    for (opts, key) in [
        (o().io_timeout(Duration::MAX), "io_timeout"),
        (o().timeout(Duration::ZERO), "timeout"),
        (o().retries(usize::MAX), "retries"),
        (o().concurrency(usize::MAX), "concurrency"),
        (o().concurrency(0), "concurrency"),
        (
            o().retry_min_delay(Duration::from_secs(9))
                .retry_max_delay(Duration::from_secs(1)),
            "retry_max_delay",
        ),
    ] {
        let err = RemoteDataset::open("d", &uri, &opts).unwrap_err();
        assert!(err.to_string().contains(key), "{err}");
    }
}

/// A token file that shrank after its manifest was written, over HTTP
/// (nginx answers the range that runs past the end with what there is)
/// and over S3: an error naming the file's URI and the byte range, no
/// panic, no short sample.
#[test]
fn a_truncated_object_is_an_error_naming_the_uri_and_the_range() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    token_dataset(&data, [100, 10]);
    let full = std::fs::read(data.join("a.bin")).unwrap();
    let cut = &full[..full.len() - 10];

    let moto = Moto::start(t.path());
    moto.upload("ranges", "data", &data);
    // Gap 0: the two samples read below are two spans, one of them cut.
    let base = || StorageOptions::default().range_gap(0).range_part_gap(0);
    let s3 = moto.opts(ranged(t.path(), base()));
    let b = Backend::open("up", "s3://ranges/data", &s3).unwrap();
    runtime::block_on(b.op.write("a.bin", cut.to_vec())).unwrap();

    let nginx = Nginx::start(t.path(), &data);
    let http = ranged(t.path(), base());
    std::fs::write(data.join("a.bin"), cut).unwrap();

    for (uri, opts) in [(nginx.uri(), http), ("s3://ranges/data".to_string(), s3)] {
        let rd = RemoteDataset::open("d", &uri, &opts).unwrap();
        let shard = rd.dataset().shards()[0].clone();
        // The first samples are whole: read alone, they are fine.
        assert_eq!(
            runtime::block_on(shard.read_indices(&[0, 1]))
                .unwrap()
                .len(),
            2
        );
        let err = runtime::block_on(shard.read_indices(&[3, 99]))
            .unwrap_err()
            .to_string();
        let file = format!("{}/a.bin", uri.trim_end_matches('/'));
        assert!(
            err.contains(&file) && err.contains("3168..3200") && err.contains("`d`"),
            "{uri}: {err}"
        );
    }
}
