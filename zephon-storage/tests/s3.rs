//! Reading through S3 from a real moto_server on 127.0.0.1.

use crate::common;

use common::{Moto, cache_opts, fields, indexed_dataset, read_all, signal, write_dataset};
use std::time::{Duration, Instant};
use zephon_storage::RemoteDataset;
use zephon_storage::backend::runtime;

#[test]
fn s3_reads_like_local_and_the_second_pass_is_served_from_the_cache() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 3, 60);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let opts = moto.opts(cache_opts(t.path()));
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    assert_eq!(fields(&read_all(rd.dataset().clone(), true).unwrap()), want);
    let first: Vec<usize> = (0..3)
        .map(|s| moto.gets(&format!("{s:03}.jsonl HTTP")))
        .collect();
    assert_eq!(first, vec![1, 1, 1], "one download per shard");
    assert_eq!(
        fields(&read_all(rd.dataset().clone(), false).unwrap()),
        want
    );
    let second: Vec<usize> = (0..3)
        .map(|s| moto.gets(&format!("{s:03}.jsonl HTTP")))
        .collect();
    assert_eq!(second, first, "the second pass downloads nothing");
    let stats = rd.cache_stats();
    assert_eq!(stats.misses, 3);
    assert!(stats.hits > 0 && !stats.thrashing, "{stats:?}");
}

#[test]
fn s3_without_manifest_is_discovered_by_listing_and_by_range() {
    let t = tempfile::tempdir().unwrap();
    let (data, bare) = (t.path().join("data"), t.path().join("bare"));
    let want = indexed_dataset(&data, 2, 40);
    write_dataset(&bare, 2, 40);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "bare", &bare);
    moto.upload("bkt", "idx", &data);
    let opts = moto.opts(cache_opts(t.path()));
    let listed = RemoteDataset::open("d", "s3://bkt/bare", &opts).unwrap();
    assert_eq!(
        fields(&read_all(listed.dataset().clone(), false).unwrap()),
        want
    );
    let ranged = RemoteDataset::open("d", "s3://bkt/idx", &opts.clone().byte_range(true)).unwrap();
    assert_eq!(
        fields(&read_all(ranged.dataset().clone(), true).unwrap()),
        want
    );
    assert_eq!(
        moto.gets("idx/000.jsonl HTTP"),
        0,
        "range mode never downloads a whole shard"
    );
}

#[test]
fn eight_concurrent_readers_of_one_uncached_shard_cause_one_download() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    indexed_dataset(&data, 1, 500);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &moto.opts(cache_opts(t.path()))).unwrap();
    let shard = rd.dataset().shards()[0].clone();
    let reads = (0..8u64).map(|i| {
        let s = shard.clone();
        async move { s.read_run(i * 10, 10).await }
    });
    let out = runtime::block_on(futures::future::join_all(reads));
    for (i, r) in out.into_iter().enumerate() {
        let r = r.unwrap();
        assert_eq!(r[0].get("id").and_then(|v| v.as_int()), Some(i as i64 * 10));
    }
    assert_eq!(moto.gets("000.jsonl HTTP"), 1);
    assert_eq!(rd.cache_stats().misses, 1);
}

#[test]
fn a_frozen_server_gives_an_error_within_the_timeout_and_retries() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    indexed_dataset(&data, 1, 50);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &moto.opts(cache_opts(t.path()))).unwrap();
    signal(moto.pid(), "STOP");
    let started = Instant::now();
    let err = runtime::block_on(rd.dataset().shards()[0].read_run(0, 1));
    let took = started.elapsed();
    signal(moto.pid(), "CONT");
    let err = err.unwrap_err().to_string();
    assert!(err.contains("s3://bkt/ds/000.jsonl"), "{err}");
    // 1 s per attempt, 3 attempts, short backoff: well under 10 s.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(rd.backend_stats().retries >= 1, "{:?}", rd.backend_stats());
    assert!(!rd.is_cached(0));
}
