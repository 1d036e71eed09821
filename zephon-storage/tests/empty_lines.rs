//! An empty line in a JSONL shard is no record: every way of indexing a
//! shard refuses it, naming the shard and the line, before any record of
//! the shard is delivered (local plain and compressed shards at open;
//! remote shards, whole, compressed or read by blocks, at their first read;
//! remote shards counted by a listing, at open), instead of failing only
//! when a read reaches it, after an index of 4 bytes a newline was built.

use crate::common;

use common::{Moto, Nginx, open_error, small_cache};
use zephon_core::Dataset;
use zephon_storage::StorageOptions;
use zephon_storage::backend::runtime;
use zephon_storage::manifest::{Manifest, ShardEntry};
use zephon_storage::{DatasetExt, RemoteDataset};

/// `n` lines of JSON with an empty line in place of line `empty`.
fn lines_with_a_gap(n: usize, empty: usize, pad: usize) -> String {
    (1..=n)
        .map(|i| {
            if i == empty {
                "\n".to_owned()
            } else {
                format!("{{\"i\":{i},\"pad\":\"{}\"}}\n", "x".repeat(pad))
            }
        })
        .collect()
}

fn assert_names(err: &str, shard: &str, line: usize) {
    assert!(
        err.contains(shard) && err.contains(&format!("line {line}")) && err.contains("empty"),
        "{err}"
    );
}

#[test]
fn a_local_shard_plain_or_compressed_is_refused_at_open_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.jsonl"), lines_with_a_gap(4, 3, 1)).unwrap();
    let err = Dataset::from_path("blank", dir.path())
        .unwrap_err()
        .to_string();
    assert_names(&err, "a.jsonl", 3);

    let packed = tempfile::tempdir().unwrap();
    let text = lines_with_a_gap(50, 41, 3);
    let zst = zstd::encode_all(text.as_bytes(), 3).unwrap();
    std::fs::write(packed.path().join("b.jsonl.zst"), zst).unwrap();
    let err = Dataset::from_path("blank", packed.path())
        .unwrap_err()
        .to_string();
    assert_names(&err, "b.jsonl.zst", 41);
}

/// Serves shard `name` (its text `text`, stored as `stored`) alone with a
/// manifest that counts its lines, and reads its first sample (a good
/// line) through a cache of 64 KiB blocks; the error of that read.
fn remote_error(name: &str, text: &str, stored: Vec<u8>) -> String {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut entry = ShardEntry::new(name, text.lines().count() as u64, stored.len() as u64);
    if name.ends_with(".zst") {
        entry.uncompressed_bytes = Some(text.len() as u64);
    }
    std::fs::write(data.join(name), stored).unwrap();
    std::fs::write(
        data.join("index.json"),
        Manifest::new(vec![entry]).to_json(),
    )
    .unwrap();
    let nginx = Nginx::start(t.path(), &data);
    let opts = small_cache(t.path(), 4 << 20, 16 << 20);
    let rd = RemoteDataset::open("blank", &nginx.uri(), &opts).unwrap();
    let shard = rd.dataset().shards()[0].clone();
    match runtime::block_on(shard.read_run(0, 1)) {
        Ok(_) => panic!("{name}: its first line was read"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_remote_shard_whole_compressed_or_by_blocks_is_refused_naming_the_line() {
    let small = lines_with_a_gap(6, 2, 1);
    assert_names(
        &remote_error("a.jsonl", &small, small.clone().into_bytes()),
        "a.jsonl",
        2,
    );

    let text = lines_with_a_gap(300, 257, 3);
    let zst = zstd::encode_all(text.as_bytes(), 3).unwrap();
    assert_names(&remote_error("b.jsonl.zst", &text, zst), "b.jsonl.zst", 257);

    // About 200 KB: four blocks of 64 KiB, the empty line in the third.
    let big = lines_with_a_gap(2000, 1400, 80);
    assert!(big.len() > 3 * (64 << 10));
    assert_names(
        &remote_error("c.jsonl", &big, big.clone().into_bytes()),
        "c.jsonl",
        1400,
    );
}

/// A dataset with no manifest on a server that lists is counted by
/// indexing each shard at open: the count is refused there.
#[test]
fn a_listed_shard_is_refused_at_open() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("a.jsonl"), lines_with_a_gap(3, 3, 0)).unwrap();
    let moto = Moto::start(t.path());
    moto.upload("bucket", "blank", &data);
    let opts = moto.opts(StorageOptions::default());
    let err = open_error(
        "s3://bucket/blank",
        &opts,
        "a shard with an empty line was counted",
    );
    assert_names(&err, "a.jsonl", 3);
}
