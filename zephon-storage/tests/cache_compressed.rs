//! A compressed remote shard read through the shard cache is decoded
//! straight into the cache's folder, not into the temporary folder and
//! then copied: a temporary folder too small for the decoded shard does
//! not stop the read, the entry is whole when read back, and a second
//! open reads it without downloading. One test in this file: it changes
//! `TMPDIR` for the whole process. The small temporary folder is a tmpfs,
//! which needs root: the test prints why and passes without checking
//! anything where mount fails.

mod common;

use common::{Tmpfs, alike_zst_shard, cache_opts, disk_entries, shard_ids};
use zephon_storage::RemoteDataset;

#[test]
fn a_compressed_shard_is_decoded_into_the_cache_not_the_temporary_folder() {
    let t = tempfile::tempdir().unwrap();
    let tmp = t.path().join("tmp");
    let Some(_fs) = Tmpfs::mount(&tmp, "8m") else {
        return;
    };
    // About 21 MB decoded, a few hundred KB compressed: the download fits
    // the 8 MiB temporary folder, the decoded shard does not.
    let lines = 450_000;
    let data = t.path().join("data");
    let (decoded, compressed) = alike_zst_shard(&data, lines);
    assert!(compressed < 2 << 20 && decoded > 16 << 20);
    // SAFETY: the only test of this process, and no other thread is running.
    unsafe { std::env::set_var("TMPDIR", &tmp) };

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
}
