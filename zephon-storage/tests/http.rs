//! Reading through HTTP from a real nginx on 127.0.0.1.

use crate::common;

use common::{Nginx, cache_opts, fields, indexed_dataset, read_all, write_dataset};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use zephon_core::Dataset;
use zephon_storage::backend::runtime;
use zephon_storage::{DatasetExt, RemoteDataset};

#[test]
fn http_reads_like_local_and_the_second_pass_is_served_from_the_cache() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 3, 60);
    let nginx = Nginx::start(t.path(), &data);
    let rd = RemoteDataset::open("d", &nginx.uri(), &cache_opts(t.path())).unwrap();
    assert_eq!(fields(&read_all(rd.dataset().clone(), true).unwrap()), want);
    let first: Vec<usize> = (0..3)
        .map(|s| nginx.gets(&format!("{s:03}.jsonl HTTP")))
        .collect();
    assert_eq!(first, vec![1, 1, 1]);
    assert_eq!(
        fields(&read_all(rd.dataset().clone(), false).unwrap()),
        want
    );
    let second: Vec<usize> = (0..3)
        .map(|s| nginx.gets(&format!("{s:03}.jsonl HTTP")))
        .collect();
    assert_eq!(second, first, "the second pass downloads nothing");
    let ranged =
        RemoteDataset::open("r", &nginx.uri(), &cache_opts(t.path()).byte_range(true)).unwrap();
    assert_eq!(
        fields(&read_all(ranged.dataset().clone(), true).unwrap()),
        want
    );
    assert_eq!(
        nginx.gets("000.jsonl HTTP"),
        1,
        "range reads download no whole shard"
    );
}

#[test]
fn http_without_manifest_is_a_clear_error() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_dataset(&data, 1, 5);
    let nginx = Nginx::start(t.path(), &data);
    let err = RemoteDataset::open("d", &nginx.uri(), &cache_opts(t.path()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("index.json") && err.contains(&nginx.uri().trim_end_matches('/').to_string()),
        "{err}"
    );
}

#[test]
fn a_server_stopped_mid_pass_fails_naming_the_uri_and_a_restart_completes_the_pass() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 3, 40);
    let mut nginx = Nginx::start(t.path(), &data);
    let rd = RemoteDataset::open("d", &nginx.uri(), &cache_opts(t.path())).unwrap();
    let shards = rd.dataset().shards().to_vec();
    runtime::block_on(shards[0].read_run(0, 5)).unwrap();
    nginx.stop();
    let err = runtime::block_on(shards[1].read_run(0, 5))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("{}001.jsonl", nginx.uri())), "{err}");
    assert!(rd.backend_stats().retries >= 1, "{:?}", rd.backend_stats());
    assert!(
        rd.is_cached(0) && !rd.is_cached(1),
        "no partial shard is cached"
    );
    nginx.restart();
    assert_eq!(fields(&read_all(rd.dataset().clone(), true).unwrap()), want);
    assert_eq!(
        nginx.gets("000.jsonl HTTP"),
        1,
        "shard 0 came from the cache"
    );
}

#[test]
fn a_cache_too_small_for_the_working_set_is_reported_as_thrashing() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    // Four shards of about 1.9 MB, two blocks of 1 MiB each: a 6 MiB cache
    // holds three shards' blocks, not four, and a memory tier of 1 MiB one
    // block.
    indexed_dataset(&data, 4, 30_000);
    let local = Dataset::from_path("d", &data).unwrap();
    let nginx = Nginx::start(t.path(), &data);
    let opts = cache_opts(t.path()).cache(
        zephon_storage::CacheOptions::default()
            .root(t.path().join("small-cache"))
            .limit_bytes(6 << 20)
            .memory_bytes(1 << 20)
            .block_bytes(1 << 20),
    );
    let rd = RemoteDataset::open("d", &nginx.uri(), &opts).unwrap();
    // Shard after shard, one read at a time: a cyclic scan larger than the
    // cache. The disk tier is written off the reading path (on the blocking
    // pool), so after a download each read waits until the disk tier's
    // files show the write, which keeps the eviction order the test expects.
    let disk = t.path().join("small-cache");
    for pass in 0..3 {
        for (s, (remote, local)) in rd.dataset().shards().iter().zip(local.shards()).enumerate() {
            let (before, hits) = (disk_tier(&disk), rd.cache_stats().hits);
            let n = local.len();
            let got = runtime::block_on(remote.read_run(0, n)).unwrap();
            let want = runtime::block_on(local.read_run(0, n)).unwrap();
            assert_eq!(
                fields(&got),
                fields(&want),
                "pass {pass}: every record despite the evictions"
            );
            let downloaded = rd.cache_stats().hits == hits;
            let deadline = Instant::now() + Duration::from_secs(10);
            while downloaded && disk_tier(&disk) == before {
                assert!(
                    Instant::now() < deadline,
                    "pass {pass}, shard {s}: downloaded, but not written to the disk tier at `{}` within 10 s",
                    disk.display()
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let s = rd.cache_stats();
    assert!(s.misses > 4 && s.redownloads > 0, "{s:?}");
    assert!(
        s.memory_evictions > 0,
        "the memory tier keeps to its size: {s:?}"
    );
    assert!(
        s.thrashing,
        "a shard downloaded 3 times flags thrashing: {s:?}"
    );
}

/// Every file under `dir` (the disk tier's block files) with its size and
/// modification time: a write to the disk tier changes one of them.
fn disk_tier(dir: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    let mut files = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                todo.push(e.path());
            } else {
                files.insert(e.path(), (m.len(), m.modified().unwrap()));
            }
        }
    }
    files
}
