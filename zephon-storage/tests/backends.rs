//! Local backends through opendal (file://, memory://), compressed shards,
//! the manifest, verification and byte-range reads. No servers needed.

use crate::common;

use common::{cache_opts, fields, local_order, read_all, write_dataset};
use std::io::Write;
use zephon_core::Dataset;
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::scan::build_index;
use zephon_storage::{CacheOptions, RemoteDataset, UriDatasetExt};

fn index(dir: &std::path::Path) {
    let b = Backend::open("d", &dir.display().to_string(), &Default::default()).unwrap();
    runtime::block_on(build_index(&b, "d")).unwrap();
}

#[test]
fn file_uri_and_plain_path_read_like_local() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let want = local_order(&data, &write_dataset(&data, 3, 40));
    let uri = format!("file://{}", data.display());
    let ds = Dataset::from_uri_with("d", &uri, &cache_opts(t.path())).unwrap();
    assert_eq!(fields(&read_all(ds, true).unwrap()), want);
    index(&data);
    let ds =
        Dataset::from_uri_with("d", &data.display().to_string(), &cache_opts(t.path())).unwrap();
    assert_eq!(fields(&read_all(ds, false).unwrap()), want);
}

#[test]
fn memory_uri_reads_what_was_written() {
    let opts =
        zephon_storage::StorageOptions::default().cache(CacheOptions::default().enabled(false));
    let b = Backend::open("m", "memory://backends-test", &opts).unwrap();
    runtime::block_on(b.op.write("a.jsonl", "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n")).unwrap();
    let ds = Dataset::from_uri_with("m", "memory://backends-test", &opts).unwrap();
    let recs = read_all(ds, true).unwrap();
    let mut got: Vec<i64> = recs
        .iter()
        .map(|r| r.get("a").unwrap().as_int().unwrap())
        .collect();
    got.sort();
    assert_eq!(got, vec![1, 2, 3]);
}

fn compress(dir: &std::path::Path, out: &std::path::Path) {
    std::fs::create_dir_all(out).unwrap();
    for (i, e) in std::fs::read_dir(dir).unwrap().enumerate() {
        let p = e.unwrap().path();
        let data = std::fs::read(&p).unwrap();
        let stem = p.file_name().unwrap().to_string_lossy().to_string();
        if i % 2 == 0 {
            std::fs::write(
                out.join(format!("{stem}.zst")),
                zstd::encode_all(&data[..], 3).unwrap(),
            )
            .unwrap();
        } else {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            enc.write_all(&data).unwrap();
            std::fs::write(out.join(format!("{stem}.gz")), enc.finish().unwrap()).unwrap();
        }
    }
}

#[test]
fn compressed_shards_read_like_plain_ones() {
    let t = tempfile::tempdir().unwrap();
    let (plain, packed) = (t.path().join("plain"), t.path().join("packed"));
    let want = local_order(&plain, &write_dataset(&plain, 4, 30));
    compress(&plain, &packed);
    let ds =
        Dataset::from_uri_with("d", &packed.display().to_string(), &cache_opts(t.path())).unwrap();
    assert_eq!(fields(&read_all(ds, false).unwrap()), want);
    index(&packed);
    let ds =
        Dataset::from_uri_with("d", &packed.display().to_string(), &cache_opts(t.path())).unwrap();
    assert_eq!(fields(&read_all(ds, true).unwrap()), want);
}

/// The manifest's checksum of a compressed shard is that of the stored
/// (compressed) bytes, hashed as they download, and its decoded size is
/// recorded; a read checks the checksum.
#[test]
fn build_index_records_a_compressed_shards_stored_checksum() {
    let t = tempfile::tempdir().unwrap();
    let (plain, packed) = (t.path().join("plain"), t.path().join("packed"));
    write_dataset(&plain, 2, 300);
    compress(&plain, &packed);
    index(&packed);
    let m: zephon_storage::Manifest =
        serde_json::from_slice(&std::fs::read(packed.join("index.json")).unwrap()).unwrap();
    assert_eq!(m.shards.len(), 2);
    for e in &m.shards {
        let stored = std::fs::read(packed.join(&e.path)).unwrap();
        let decoded = std::fs::read(plain.join(e.path.rsplit_once('.').unwrap().0)).unwrap();
        assert_eq!(
            e.sha256.as_deref(),
            Some(zephon_storage::manifest::sha256_hex(&stored).as_str()),
            "{}",
            e.path
        );
        assert_eq!(e.uncompressed_bytes, Some(decoded.len() as u64));
    }
    // A shard rewritten after indexing, its size kept, fails the checksum.
    let first = packed.join(&m.shards[0].path);
    let mut b = std::fs::read(&first).unwrap();
    let at = b.len() / 2;
    b[at] ^= 0xff;
    std::fs::write(&first, b).unwrap();
    let (_, err) = first_read_error(&packed, t.path());
    assert!(
        err.contains(&m.shards[0].path) && err.contains("checksum mismatch"),
        "{err}"
    );
}

/// The remote dataset in `dir` (a cache under `cache`) and the error its
/// first shard's first read gives.
fn first_read_error(dir: &std::path::Path, cache: &std::path::Path) -> (RemoteDataset, String) {
    let rd = RemoteDataset::open("d", &dir.display().to_string(), &cache_opts(cache)).unwrap();
    let err = read_error(&rd, 0);
    (rd, err)
}

/// The error reading the first sample of shard `shard` fails with.
fn read_error(rd: &RemoteDataset, shard: usize) -> String {
    runtime::block_on(rd.dataset().shards()[shard].read_run(0, 1))
        .unwrap_err()
        .to_string()
}

/// One JSONL shard of `lines` lines, zstd-compressed as `000.jsonl.zst`
/// in `dir/packed` and indexed; the folder and the compressed bytes.
fn one_zst_shard(dir: &std::path::Path, lines: usize) -> (std::path::PathBuf, Vec<u8>) {
    let (plain, packed) = (dir.join("plain"), dir.join("packed"));
    write_dataset(&plain, 1, lines);
    std::fs::create_dir_all(&packed).unwrap();
    let z = zstd::encode_all(&std::fs::read(plain.join("000.jsonl")).unwrap()[..], 3).unwrap();
    std::fs::write(packed.join("000.jsonl.zst"), &z).unwrap();
    index(&packed);
    (packed, z)
}

#[test]
fn truncated_zst_is_an_error_naming_the_shard_and_nothing_is_cached() {
    let t = tempfile::tempdir().unwrap();
    let (packed, z) = one_zst_shard(t.path(), 200);
    // Truncate and fix the manifest's size and checksum, so only decompression can notice.
    let cut = &z[..z.len() / 2];
    std::fs::write(packed.join("000.jsonl.zst"), cut).unwrap();
    let mut m: zephon_storage::Manifest =
        serde_json::from_slice(&std::fs::read(packed.join("index.json")).unwrap()).unwrap();
    m.shards[0].bytes = cut.len() as u64;
    m.shards[0].sha256 = Some(zephon_storage::manifest::sha256_hex(cut));
    std::fs::write(packed.join("index.json"), m.to_json()).unwrap();
    let (rd, err) = first_read_error(&packed, t.path());
    assert!(
        err.contains("000.jsonl.zst") && err.contains("truncated"),
        "{err}"
    );
    assert!(!rd.is_cached(0));
    assert_eq!(rd.cache_stats().failures, 1);
}

/// A compressed shard is checked as it streams in and as it decodes: more
/// bytes than the manifest says, or a decoded size past its
/// `uncompressed_bytes`, stop the download or the decode with an error
/// naming the shard, and nothing is cached.
#[test]
fn a_compressed_shard_larger_than_its_manifest_says_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let (packed, z) = one_zst_shard(t.path(), 2000);
    let manifest = std::fs::read(packed.join("index.json")).unwrap();
    let read = |cache_dir: &str| {
        let (rd, err) = first_read_error(&packed, &t.path().join(cache_dir));
        assert!(!rd.is_cached(0));
        assert_eq!(rd.cache_stats().failures, 1);
        err
    };

    // The stored object grew after indexing: more bytes than the manifest's.
    let mut longer = z.clone();
    longer.extend_from_slice(&z);
    std::fs::write(packed.join("000.jsonl.zst"), &longer).unwrap();
    let err = read("a");
    assert!(
        err.contains("000.jsonl.zst") && err.contains("size mismatch") && err.contains("got more"),
        "{err}"
    );

    // The manifest says it decodes to less than it does (a bomb would say
    // little): the decode stops past that size.
    std::fs::write(packed.join("000.jsonl.zst"), &z).unwrap();
    let mut m: zephon_storage::Manifest = serde_json::from_slice(&manifest).unwrap();
    let real = m.shards[0].uncompressed_bytes.unwrap();
    m.shards[0].uncompressed_bytes = Some(real / 3);
    std::fs::write(packed.join("index.json"), m.to_json()).unwrap();
    let err = read("b");
    assert!(
        err.contains("000.jsonl.zst")
            && err.contains("decompressed size mismatch")
            && err.contains(&format!("expected {} bytes, got more", real / 3)),
        "{err}"
    );
}

/// A compressed shard whose manifest does not give its decoded size, and
/// which decodes to more than the cache holds, is refused by name once
/// its decode passes the limit; the disk tier stays on for the others.
#[test]
fn a_compressed_shard_decoding_past_the_cache_is_refused_by_name() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // 2 MB of one line repeated: a few KB compressed.
    let big = "{\"text\":\"the same line again and again\"}\n".repeat(50_000);
    let small = "{\"text\":\"short\"}\n".repeat(10);
    for (name, text) in [("a.jsonl.zst", &big), ("b.jsonl.zst", &small)] {
        std::fs::write(
            data.join(name),
            zstd::encode_all(text.as_bytes(), 19).unwrap(),
        )
        .unwrap();
    }
    index(&data);
    let mut m: zephon_storage::Manifest =
        serde_json::from_slice(&std::fs::read(data.join("index.json")).unwrap()).unwrap();
    for e in &mut m.shards {
        e.uncompressed_bytes = None;
    }
    std::fs::write(data.join("index.json"), m.to_json()).unwrap();
    let mut opts = cache_opts(t.path());
    opts.cache.limit_bytes = 1 << 20;
    opts.cache.memory_bytes = 1 << 20;
    opts.cache.block_bytes = 64 << 10;
    let rd = RemoteDataset::open("d", &data.display().to_string(), &opts).unwrap();
    let err = read_error(&rd, 0);
    assert!(
        err.contains("a.jsonl.zst") && err.contains("cache.limit_bytes"),
        "{err}"
    );
    assert!(!rd.is_cached(0));
    let r = runtime::block_on(rd.dataset().shards()[1].read_run(0, 1)).unwrap();
    assert_eq!(r[0].text("text"), Some("short"));
    assert!(rd.is_cached(1));
    assert!(!rd.cache_stats().disk_degraded);
}

#[test]
fn size_disagreeing_with_manifest_is_an_error_and_nothing_is_cached() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_dataset(&data, 2, 20);
    index(&data);
    std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("001.jsonl"))
        .unwrap()
        .write_all(b"{\"extra\":1}\n")
        .unwrap();
    let rd = RemoteDataset::open("d", &data.display().to_string(), &cache_opts(t.path())).unwrap();
    let err = read_error(&rd, 1);
    assert!(
        err.contains("001.jsonl") && err.contains("size mismatch"),
        "{err}"
    );
    assert!(!rd.is_cached(1));
    runtime::block_on(rd.dataset().shards()[0].read_run(0, 1)).unwrap();
    assert!(rd.is_cached(0));
}

#[test]
fn cache_smaller_than_a_compressed_shard_is_refused_at_open() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_dataset(&data, 1, 8000);
    // Decoded whole (it cannot be read by range): about 600 KB to cache.
    let plain = data.join("000.jsonl");
    let packed = zstd::encode_all(&std::fs::read(&plain).unwrap()[..], 3).unwrap();
    std::fs::write(data.join("000.jsonl.zst"), packed).unwrap();
    std::fs::remove_file(&plain).unwrap();
    let mut opts = cache_opts(t.path());
    opts.cache.limit_bytes = 256 << 10;
    opts.cache.block_bytes = 64 << 10;
    let err = RemoteDataset::open("d", &data.display().to_string(), &opts)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cache.limit_bytes") && err.contains("largest compressed shard"),
        "{err}"
    );
}

#[test]
fn byte_range_reads_match_whole_shard_reads() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let written = write_dataset(&data, 3, 50);
    index(&data);
    let want = local_order(&data, &written);
    let opts = cache_opts(t.path()).byte_range(true);
    let rd = RemoteDataset::open("d", &data.display().to_string(), &opts).unwrap();
    assert!(
        rd.cache().is_none(),
        "all shards are range-read: no cache needed"
    );
    assert_eq!(fields(&read_all(rd.dataset().clone(), true).unwrap()), want);
    assert!(rd.cache_stats().bytes_downloaded > 0);
}

/// A line-index sidecar longer than the manifest's sample count says
/// (rewritten, or a hostile object of any size) is refused by name. (Its
/// read stops past the expected size, which this test does not see.)
#[test]
fn a_line_index_longer_than_its_manifest_says_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_dataset(&data, 2, 50);
    index(&data);
    let sidecar = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".idx"))
        .min()
        .expect("build-index writes line indexes");
    let mut long = std::fs::read(&sidecar).unwrap();
    long.extend(std::iter::repeat_n(0u8, 4 << 20));
    std::fs::write(&sidecar, long).unwrap();
    let opts = cache_opts(t.path()).byte_range(true);
    let rd = RemoteDataset::open("d", &data.display().to_string(), &opts).unwrap();
    let err = read_error(&rd, 0);
    let name = sidecar.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        err.contains(&name) && err.contains("index does not match the manifest"),
        "{err}"
    );
}

#[test]
fn unsupported_scheme_names_the_uri() {
    let err = Dataset::from_uri("d", "ftp://host/x")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ftp://host/x") && err.contains("unsupported scheme"),
        "{err}"
    );
}

/// A scheme and nothing after it is refused, naming what the URI lacks;
/// before, trailing slashes were trimmed first and `s3://` opened as the
/// local folder `s3:`.
#[test]
fn a_uri_with_only_a_scheme_says_what_it_lacks() {
    for (uri, lacks) in [
        ("s3://", "needs a bucket"),
        ("S3:///", "needs a bucket"),
        ("gs://", "needs a bucket"),
        ("azblob://", "needs a container"),
        ("http://", "needs a host"),
        ("https:///x", "needs a host"),
        ("file://", "needs a path"),
        ("", "an empty URI"),
        (" ", "an empty URI"),
    ] {
        let err = Dataset::from_uri("d", uri).unwrap_err().to_string();
        assert!(err.contains(lacks), "{uri}: {err}");
        assert!(!err.contains("does not exist"), "{uri}: {err}");
    }
}
