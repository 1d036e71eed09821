//! A compressed remote shard read through the shard cache is decoded
//! straight into the cache's folder, not into the temporary folder and
//! then copied: a temporary folder too small for the decoded shard does
//! not stop the read, the entry is whole when read back, and a second
//! open reads it without downloading. One test in this file: it changes
//! `TMPDIR` for the whole process. The small temporary folder is a tmpfs,
//! which needs root: the test prints why and passes without checking
//! anything where mount fails.

mod common;

use common::{Tmpfs, cache_opts, disk_entries};
use zephon_storage::RemoteDataset;
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::scan::build_index;

#[test]
fn a_compressed_shard_is_decoded_into_the_cache_not_the_temporary_folder() {
    let t = tempfile::tempdir().unwrap();
    let tmp = t.path().join("tmp");
    let Some(_fs) = Tmpfs::mount(&tmp, "8m") else {
        return;
    };
    // About 21 MB decoded, a few hundred KB compressed: the download fits
    // the 8 MiB temporary folder, the decoded shard does not.
    let lines = 400_000;
    let text: String = (0..lines)
        .map(|i| format!("{{\"id\":{i},\"text\":\"the same few words again\"}}\n"))
        .collect();
    let data = t.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let z = zstd::encode_all(text.as_bytes(), 3).unwrap();
    assert!(z.len() < 2 << 20 && text.len() > 16 << 20);
    std::fs::write(data.join("000.jsonl.zst"), z).unwrap();
    let b = Backend::open("d", &data.display().to_string(), &Default::default()).unwrap();
    runtime::block_on(build_index(&b, "d")).unwrap();
    // SAFETY: the only test of this process, and no other thread is running.
    unsafe { std::env::set_var("TMPDIR", &tmp) };

    let ids = |rd: &RemoteDataset| -> Vec<i64> {
        let s = &rd.dataset().shards()[0];
        runtime::block_on(s.read_run(0, s.len()))
            .unwrap()
            .iter()
            .map(|r| r.get("id").and_then(|v| v.as_int()).unwrap())
            .collect()
    };
    let want: Vec<i64> = (0..lines).collect();
    let opts = cache_opts(t.path());
    let rd = RemoteDataset::open("d", &data.display().to_string(), &opts).unwrap();
    assert_eq!(ids(&rd), want);
    let s = rd.cache_stats();
    assert!(!s.disk_degraded && s.misses == 1, "{s:?}");
    let (entries, bytes) = disk_entries(t.path());
    assert!(
        entries == 1 && bytes > text.len() as u64,
        "{entries} entries, {bytes} bytes"
    );
    drop(rd);

    // A new process's open reads the published entry (checked by its CRC).
    let rd = RemoteDataset::open("d", &data.display().to_string(), &opts).unwrap();
    assert_eq!(ids(&rd), want);
    let s = rd.cache_stats();
    assert!(s.misses == 0 && s.bytes_downloaded == 0, "{s:?}");
}
