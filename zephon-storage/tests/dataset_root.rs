//! A dataset reads only what lies under its root, and trusts no count it
//! cannot check: manifests (Zephon's and Streaming's) naming `..`, absolute
//! paths or other buckets are refused on every backend (local, memory, S3
//! on moto_server, HTTP on nginx), as are shards listed twice and counts
//! that cannot be right.

use crate::common;

use common::{Moto, Nginx, cache_opts, read_all};
use serde_json::json;
use std::path::Path;
use zephon_core::Dataset;
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::format::mds::{MdsColumn, encode_shard};
use zephon_storage::{CacheOptions, DatasetExt, RemoteDataset, StorageOptions, UriDatasetExt};

const SECRET: &str = "{\"secret\":\"outside the root\"}\n";
const FOUR: &str = "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n{\"a\":4}\n";

/// The entries every backend must refuse, with what their error must say.
fn escapes() -> Vec<(&'static str, &'static str)> {
    vec![
        ("../secret.jsonl", "`..`"),
        ("../../other/secret.jsonl", "`..`"),
        ("sub/../../secret.jsonl", "`..`"),
        ("/secret.jsonl", "absolute"),
        ("s3://other/secret.jsonl", "URI"),
    ]
}

/// A JSONL manifest: `a.jsonl` (4 samples), then `entry` claiming the secret.
fn jsonl_manifest(entry: &str) -> String {
    json!({"version": 1, "shards": [
        {"path": "a.jsonl", "samples": 4, "bytes": FOUR.len()},
        {"path": entry, "samples": 1, "bytes": SECRET.len()},
    ]})
    .to_string()
}

/// Fails unless `opened` is an error naming the manifest, the entry and why.
fn assert_refused<T>(
    opened: zephon_core::Result<T>,
    entry: &str,
    why: &str,
    show: impl FnOnce(T) -> String,
) {
    match opened {
        Ok(v) => panic!("{entry:?} was followed: {}", show(v)),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("index.json"), "no manifest named: {e}");
            assert!(e.contains(&format!("{entry:?}")), "no entry named: {e}");
            assert!(e.contains(why) && e.contains("shards[1]"), "{e}");
            assert!(!e.contains("outside the root"), "{e}");
        }
    }
}

fn records(ds: Dataset) -> String {
    format!("{:?}", read_all(ds, false).map(|r| common::fields(&r)))
}

fn uncached(dir: &Path) -> StorageOptions {
    cache_opts(dir).cache(CacheOptions::default().enabled(false))
}

#[test]
fn local_manifests_naming_paths_outside_the_folder_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let ds = t.path().join("ds");
    std::fs::create_dir_all(ds.join("sub")).unwrap();
    std::fs::write(t.path().join("secret.bin"), [7u8; 16]).unwrap();
    std::fs::write(ds.join("a.bin"), [1u8; 16]).unwrap();
    let abs = t.path().join("secret.bin").display().to_string();
    for (entry, why) in [
        ("../secret.bin".to_owned(), "`..`"),
        ("sub/../../secret.bin".to_owned(), "`..`"),
        (abs.clone(), "absolute"),
        (format!("file://{abs}"), "URI"),
    ] {
        let m = json!({"version": 1, "format": {"kind": "tokens", "dtype": "u8", "seq_len": 4},
            "shards": [{"path": "a.bin", "samples": 4, "bytes": 16},
                       {"path": entry, "samples": 4, "bytes": 16}]});
        std::fs::write(ds.join("index.json"), m.to_string()).unwrap();
        assert_refused(Dataset::from_path("esc", &ds), &entry, why, records);
        let uri = format!("file://{}", ds.display());
        let opened = Dataset::from_uri_with("esc", &uri, &uncached(t.path()));
        assert_refused(opened, &entry, why, records);
    }
    // A sidecar is a path like any other.
    let m = json!({"version": 1, "format": {"kind": "megatron"},
        "shards": [{"path": "a.bin", "samples": 1, "bytes": 16},
                   {"path": "b.bin", "samples": 1, "bytes": 16, "index": "../secret.bin"}]});
    std::fs::write(ds.join("index.json"), m.to_string()).unwrap();
    let err = Dataset::from_path("esc", &ds).unwrap_err().to_string();
    assert!(
        err.contains("\"../secret.bin\"") && err.contains("sidecar"),
        "{err}"
    );
}

/// Streaming's index, one shard per basename.
fn mds_index(basenames: &[(&str, usize)]) -> String {
    let shards: Vec<_> = basenames
        .iter()
        .map(|(b, bytes)| {
            json!({"column_encodings": ["str"], "column_names": ["text"], "column_sizes": [null],
                "compression": null, "format": "mds", "hashes": [],
                "raw_data": {"basename": b, "bytes": bytes, "hashes": {}},
                "samples": 2, "size_limit": 67108864, "version": 2, "zip_data": null})
        })
        .collect();
    json!({"version": 2, "shards": shards}).to_string()
}

fn mds_shard(texts: &[&str]) -> Vec<u8> {
    let cols = [MdsColumn::new("text", "str", None)];
    let samples: Vec<Vec<Vec<u8>>> = texts.iter().map(|t| vec![t.as_bytes().to_vec()]).collect();
    encode_shard(&cols, &samples)
}

#[test]
fn an_mds_basename_with_dotdot_is_refused_locally_in_memory_and_on_s3() {
    let t = tempfile::tempdir().unwrap();
    let ds = t.path().join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    let ok = mds_shard(&["in", "side"]);
    let secret = mds_shard(&["outside the root", "too"]);
    std::fs::write(ds.join("shard.00000.mds"), &ok).unwrap();
    std::fs::write(t.path().join("shard.00001.mds"), &secret).unwrap();
    let entry = "../shard.00001.mds";
    let index = mds_index(&[("shard.00000.mds", ok.len()), (entry, secret.len())]);
    std::fs::write(ds.join("index.json"), &index).unwrap();
    assert_refused(Dataset::from_path("mds", &ds), entry, "`..`", records);

    let mem = "memory://root-mds/ds";
    let b = Backend::open("w", mem, &StorageOptions::default()).unwrap();
    runtime::block_on(b.op.write("shard.00000.mds", ok.clone())).unwrap();
    runtime::block_on(b.op.write("index.json", index.clone())).unwrap();
    assert_refused(
        Dataset::from_uri_with("mds", mem, &uncached(t.path())),
        entry,
        "`..`",
        records,
    );

    let moto = Moto::start(t.path());
    moto.upload("data", "ds", &ds);
    let root = Backend::open("w", "s3://data", &moto.opts(StorageOptions::default())).unwrap();
    runtime::block_on(root.op.write("shard.00001.mds", secret)).unwrap();
    let opened = RemoteDataset::open("mds", "s3://data/ds", &moto.opts(uncached(t.path())));
    assert_refused(opened, entry, "`..`", |d| records(d.dataset().clone()));
    assert_eq!(
        moto.gets("shard.00001"),
        0,
        "nothing outside the prefix was read"
    );
}

#[test]
fn s3_manifests_reach_neither_outside_the_prefix_nor_another_bucket() {
    let t = tempfile::tempdir().unwrap();
    let (ds, other) = (t.path().join("ds"), t.path().join("other"));
    std::fs::create_dir_all(&ds).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(ds.join("a.jsonl"), FOUR).unwrap();
    std::fs::write(ds.join("index.json"), jsonl_manifest("a.jsonl")).unwrap();
    std::fs::write(other.join("secret.jsonl"), SECRET).unwrap();
    let moto = Moto::start(t.path());
    moto.upload("data", "ds", &ds);
    moto.upload("other", "", &other);
    let root = Backend::open("w", "s3://data", &moto.opts(StorageOptions::default())).unwrap();
    runtime::block_on(root.op.write("secret.jsonl", SECRET)).unwrap();
    let inner = Backend::open("w", "s3://data/ds", &moto.opts(StorageOptions::default())).unwrap();
    for (entry, why) in escapes() {
        runtime::block_on(inner.op.write("index.json", jsonl_manifest(entry))).unwrap();
        for byte_range in [false, true] {
            let opts = moto.opts(uncached(t.path())).byte_range(byte_range);
            let opened = RemoteDataset::open("esc", "s3://data/ds", &opts);
            assert_refused(opened, entry, why, |d| records(d.dataset().clone()));
        }
    }
    assert_eq!(
        moto.gets("secret"),
        0,
        "no object outside the prefix was read"
    );
}

#[test]
fn http_manifests_reach_nothing_outside_the_dataset_path() {
    let t = tempfile::tempdir().unwrap();
    let served = t.path().join("www");
    let ds = served.join("ds");
    std::fs::create_dir_all(served.join("other")).unwrap();
    std::fs::create_dir_all(&ds).unwrap();
    std::fs::write(ds.join("a.jsonl"), FOUR).unwrap();
    std::fs::write(served.join("secret.jsonl"), SECRET).unwrap();
    std::fs::write(served.join("other/secret.jsonl"), SECRET).unwrap();
    let nginx = Nginx::start(t.path(), &served);
    let uri = format!("{}ds", nginx.uri());
    for (entry, why) in escapes() {
        std::fs::write(ds.join("index.json"), jsonl_manifest(entry)).unwrap();
        let opened = RemoteDataset::open("esc", &uri, &uncached(t.path()));
        assert_refused(opened, entry, why, |d| records(d.dataset().clone()));
    }
    assert_eq!(
        nginx.gets("secret"),
        0,
        "nothing outside the dataset was read"
    );
}

#[test]
fn a_shard_listed_twice_is_refused_naming_both_entries() {
    let t = tempfile::tempdir().unwrap();
    let mem = "memory://root-twice/ds";
    let b = Backend::open("w", mem, &StorageOptions::default()).unwrap();
    runtime::block_on(b.op.write("a.jsonl", FOUR)).unwrap();
    let m = json!({"version": 1, "shards": [
        {"path": "a.jsonl", "samples": 4, "bytes": FOUR.len()},
        {"path": "a.jsonl", "samples": 4, "bytes": FOUR.len()}]});
    runtime::block_on(b.op.write("index.json", m.to_string())).unwrap();
    let err = match Dataset::from_uri_with("twice", mem, &uncached(t.path())) {
        Ok(ds) => panic!(
            "opened with {} samples from a 4-line file",
            ds.num_samples()
        ),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("shards[0]") && err.contains("shards[1]") && err.contains("\"a.jsonl\""),
        "{err}"
    );

    // Locally too: a token file listed twice would be served twice.
    let ds = t.path().join("tok");
    std::fs::create_dir_all(&ds).unwrap();
    std::fs::write(ds.join("a.bin"), [3u8; 16]).unwrap();
    let m = json!({"version": 1, "format": {"kind": "tokens", "dtype": "u8", "seq_len": 4},
        "shards": [{"path": "a.bin", "samples": 4, "bytes": 16},
                   {"path": "a.bin", "samples": 4, "bytes": 16}]});
    std::fs::write(ds.join("index.json"), m.to_string()).unwrap();
    let err = match Dataset::from_path("twice", &ds) {
        Ok(ds) => panic!("opened with {} samples from 4", ds.num_samples()),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("shards[0] and shards[1]"), "{err}");
}

#[test]
fn counts_that_cannot_be_right_are_refused_and_wrong_ones_fail_at_read() {
    let t = tempfile::tempdir().unwrap();
    let mem = "memory://root-counts/ds";
    let b = Backend::open("w", mem, &StorageOptions::default()).unwrap();
    runtime::block_on(b.op.write("a.jsonl", FOUR)).unwrap();
    let z = zstd::encode_all(FOUR.as_bytes(), 3).unwrap();
    runtime::block_on(b.op.write("b.jsonl.zst", z.clone())).unwrap();
    runtime::block_on(b.op.write("c.jsonl.zst", z.clone())).unwrap();
    let open = |m: serde_json::Value| {
        runtime::block_on(b.op.write("index.json", m.to_string())).unwrap();
        Dataset::from_uri_with("counts", mem, &uncached(t.path()))
    };

    // 2^64-1 samples in a 32-byte file.
    let m = json!({"version": 1, "shards": [
        {"path": "a.jsonl", "samples": u64::MAX, "bytes": FOUR.len()}]});
    let err = open(m).map(|d| d.num_samples()).unwrap_err().to_string();
    assert!(
        err.contains("shards[0]") && err.contains("32 bytes"),
        "{err}"
    );

    // Counts whose sum wraps around (compressed: no size to check against).
    let m = json!({"version": 1, "shards": [
        {"path": "b.jsonl.zst", "samples": u64::MAX / 2 + 1, "bytes": z.len()},
        {"path": "c.jsonl.zst", "samples": u64::MAX / 2 + 1, "bytes": z.len()}]});
    let err = open(m).map(|d| d.shards().len()).unwrap_err().to_string();
    assert!(err.contains("shards[1]") && err.contains("add up"), "{err}");

    // A count that is merely wrong: reading past the real end names the shard.
    let m = json!({"version": 1, "shards": [
        {"path": "b.jsonl.zst", "samples": 8, "bytes": z.len()}]});
    let ds = open(m).unwrap();
    let err = read_all(ds, false).unwrap_err().to_string();
    assert!(
        err.contains("b.jsonl.zst") && err.contains("manifest says 8"),
        "{err}"
    );
}

#[test]
fn local_shards_holding_other_counts_than_their_manifest_are_refused_at_open() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("a.bin"), [1u8; 16]).unwrap();
    let m = json!({"version": 1, "format": {"kind": "tokens", "dtype": "u8", "seq_len": 4},
        "shards": [{"path": "a.bin", "samples": 8, "bytes": 16}]});
    std::fs::write(t.path().join("index.json"), m.to_string()).unwrap();
    let err = match Dataset::from_path("n", t.path()) {
        Ok(ds) => panic!("opened with {} samples", ds.num_samples()),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("a.bin") && err.contains("has 4 samples") && err.contains("says 8"),
        "{err}"
    );

    // Streaming's index claims 2 samples per shard; this shard holds 3.
    let mds = t.path().join("mds");
    std::fs::create_dir_all(&mds).unwrap();
    let shard = mds_shard(&["a", "b", "c"]);
    std::fs::write(mds.join("shard.00000.mds"), &shard).unwrap();
    std::fs::write(
        mds.join("index.json"),
        mds_index(&[("shard.00000.mds", shard.len())]),
    )
    .unwrap();
    let err = match Dataset::from_path("n", &mds) {
        Ok(ds) => panic!("opened with {} samples", ds.num_samples()),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("shard.00000.mds") && err.contains("says 2"),
        "{err}"
    );
}

#[test]
fn a_listed_key_that_is_not_a_plain_path_is_refused() {
    let t = tempfile::tempdir().unwrap();
    // Object stores keep such keys as they are; S3's clients would fold
    // the `..` and read another object than the one listed.
    let mem = "memory://root-listing/ds";
    let b = Backend::open("w", mem, &StorageOptions::default()).unwrap();
    runtime::block_on(b.op.write("a.jsonl", FOUR)).unwrap();
    runtime::block_on(b.op.write("sub/../b.jsonl", SECRET)).unwrap();
    let err = match Dataset::from_uri_with("list", mem, &uncached(t.path())) {
        Ok(ds) => panic!("opened: {}", records(ds)),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("listed object \"sub/../b.jsonl\"") && err.contains("`..`"),
        "{err}"
    );
}
