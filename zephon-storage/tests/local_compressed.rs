//! Compressed local shards are decoded into a temporary file and mapped,
//! not held in the process's memory: records read as from the plain
//! shard, across many decode buffers, and a temporary folder that cannot
//! take the file is an error naming it and the shard. One test in this
//! file: it changes `TMPDIR` for the whole process.

use zephon_core::Dataset;
use zephon_storage::DatasetExt;

#[test]
fn compressed_shards_decode_to_disk_and_name_a_folder_that_fails() {
    let plain = tempfile::tempdir().unwrap();
    let packed = tempfile::tempdir().unwrap();
    // About 5 MB decoded: five of the 1 MiB decode buffers.
    let text: String = (0..60_000)
        .map(|i| format!("{{\"id\":{i},\"text\":\"line {i} of the shard\"}}\n"))
        .collect();
    std::fs::write(plain.path().join("a.jsonl"), &text).unwrap();
    let zst = zstd::encode_all(text.as_bytes(), 3).unwrap();
    std::fs::write(packed.path().join("a.jsonl.zst"), &zst).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, text.as_bytes()).unwrap();
    std::fs::write(packed.path().join("b.jsonl.gz"), gz.finish().unwrap()).unwrap();

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let ids = |dir: &std::path::Path| -> Vec<Vec<i64>> {
        let ds = Dataset::from_path("packed", dir).unwrap();
        ds.shards()
            .iter()
            .map(|s| {
                let records = rt.block_on(s.read_run(0, s.len())).unwrap();
                records
                    .iter()
                    .map(|r| r.get("id").and_then(|v| v.as_int()).unwrap())
                    .collect()
            })
            .collect()
    };
    let want: Vec<i64> = (0..60_000).collect();
    assert_eq!(ids(packed.path()), [want.clone(), want.clone()]);
    assert_eq!(ids(plain.path()), [want]);

    let missing = packed.path().join("no-such-folder");
    // SAFETY: the only test of this process, and no other thread is running.
    unsafe { std::env::set_var("TMPDIR", &missing) };
    let err = Dataset::from_path("packed", packed.path())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no-such-folder") && err.contains("a.jsonl.zst"),
        "{err}"
    );
}
