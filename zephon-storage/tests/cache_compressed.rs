//! A compressed remote shard read through the shard cache is downloaded
//! and decoded straight into the cache's folder, not into the temporary
//! folder and then copied: with no usable temporary folder at all the read
//! goes through, the entry is whole when read back, and a second open
//! reads it without downloading. One test in this file: it changes
//! `TMPDIR` for the whole process.

mod common;

use common::{alike_zst_shard, cache_opts, disk_entries, shard_ids};
use zephon_storage::RemoteDataset;

#[test]
fn a_compressed_shard_goes_into_the_cache_not_the_temporary_folder() {
    let t = tempfile::tempdir().unwrap();
    // About 21 MB decoded, a few hundred KB compressed.
    let lines = 450_000;
    let data = t.path().join("data");
    let (decoded, _) = alike_zst_shard(&data, lines);
    // SAFETY: the only test of this process, and no other thread is running.
    unsafe { std::env::set_var("TMPDIR", t.path().join("no-such-folder")) };

    let want: Vec<i64> = (0..lines).collect();
    let opts = cache_opts(t.path());
    let rd = RemoteDataset::open("d", &data.display().to_string(), &opts).unwrap();
    assert_eq!(shard_ids(rd.dataset(), 0), want);
    let s = rd.cache_stats();
    assert!(!s.disk_degraded && s.misses == 1, "{s:?}");
    let (entries, bytes) = disk_entries(t.path());
    assert!(
        entries == 1 && bytes > decoded as u64,
        "{entries} entries, {bytes} bytes"
    );
    drop(rd);

    // A new process's open reads the published entry (checked by its CRC).
    let rd = RemoteDataset::open("d", &data.display().to_string(), &opts).unwrap();
    assert_eq!(shard_ids(rd.dataset(), 0), want);
    let s = rd.cache_stats();
    assert!(s.misses == 0 && s.bytes_downloaded == 0, "{s:?}");

    // Without the cache, the temporary folder is where it goes: an error
    // naming it.
    let off = opts.cache(zephon_storage::CacheOptions::default().enabled(false));
    let rd = RemoteDataset::open("d", &data.display().to_string(), &off).unwrap();
    let s = &rd.dataset().shards()[0];
    let err = zephon_storage::backend::runtime::block_on(s.read_run(0, 1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no-such-folder"), "{err}");
}
