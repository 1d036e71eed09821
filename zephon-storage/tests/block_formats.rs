//! MDS, Parquet and WebDataset shards read by blocks against a real S3
//! server (moto_server): datasets larger than the cache's memory tier read
//! like their local copies in a shuffled order, a read downloads only the
//! blocks it needs (the header or footer, then the samples' or projected
//! column chunks' blocks; a tar is indexed by one pass over its blocks),
//! and a truncated object is an error naming it.

use crate::common;

use common::{Moto, answered_gets, fields, noise, read_all, small_cache, write_mds};
use std::path::Path;
use zephon_core::{Dataset, Record};
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::format::FormatOptions;
use zephon_storage::scan::build_index_with;
use zephon_storage::{DatasetExt, RemoteDataset};

const BLOCK: u64 = 64 << 10;

/// `shards` Parquet shards of `rows` rows in row groups of `group` rows: a
/// narrow `id`, a `text`, and four wide columns of noise (about 1.2 KB a
/// row together), uncompressed; then a Zephon manifest, so opening the
/// dataset remotely downloads nothing.
#[cfg(feature = "parquet")]
fn write_parquet(dir: &Path, shards: usize, rows: usize, group: usize) {
    use std::sync::Arc;
    use zephon_storage::format::parquet::arrow_array::{
        ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray,
    };
    use zephon_storage::format::parquet::parquet::arrow::ArrowWriter;
    use zephon_storage::format::parquet::parquet::file::properties::WriterProperties;
    std::fs::create_dir_all(dir).unwrap();
    for s in 0..shards {
        let ids: Vec<i64> = (0..rows).map(|i| (s * rows + i) as i64).collect();
        let mut cols: Vec<(String, ArrayRef)> = vec![
            ("id".into(), Arc::new(Int64Array::from(ids.clone()))),
            (
                "text".into(),
                Arc::new(StringArray::from_iter_values(
                    ids.iter().map(|i| format!("row {i}")),
                )),
            ),
        ];
        for w in 0..4u64 {
            let blobs: Vec<Vec<u8>> = ids.iter().map(|&i| noise(i as u64 * 8 + w, 300)).collect();
            cols.push((
                format!("wide{w}"),
                Arc::new(BinaryArray::from_iter_values(blobs.iter())),
            ));
        }
        let batch = RecordBatch::try_from_iter(cols).unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(group))
            .set_dictionary_enabled(false)
            .build();
        let file = std::fs::File::create(dir.join(format!("part-{s}.parquet"))).unwrap();
        let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    let b = Backend::open("d", &dir.display().to_string(), &Default::default()).unwrap();
    runtime::block_on(build_index_with(&b, "d", &FormatOptions::default())).unwrap();
}

/// `shards` WebDataset tars of `per_shard` samples (a text and a few
/// hundred bytes of noise each), then a Zephon manifest.
fn write_tar(dir: &Path, shards: usize, per_shard: usize) {
    use zephon_storage::format::webdataset::tar;
    std::fs::create_dir_all(dir).unwrap();
    for s in 0..shards {
        let file = std::fs::File::create(dir.join(format!("{s:03}.tar"))).unwrap();
        let mut b = tar::Builder::new(file);
        for i in 0..per_shard {
            let id = (s * per_shard + i) as u64;
            let members = [
                ("txt", format!("sample {i} of shard {s}").into_bytes()),
                ("bin", noise(id, 300 + i % 300)),
            ];
            for (ext, body) in members {
                let mut h = tar::Header::new_gnu();
                h.set_size(body.len() as u64);
                h.set_mode(0o644);
                h.set_cksum();
                b.append_data(&mut h, format!("s{s}/{id:06}.{ext}"), &body[..])
                    .unwrap();
            }
        }
        b.finish().unwrap();
    }
    let b = Backend::open("d", &dir.display().to_string(), &Default::default()).unwrap();
    runtime::block_on(build_index_with(&b, "d", &FormatOptions::default())).unwrap();
}

/// `dir` read locally, in work-source order (seeded shuffles).
fn local(dir: &Path, format: &FormatOptions) -> Vec<String> {
    let ds = Dataset::from_path_with("d", dir, format).unwrap();
    fields(&read_all(ds, false).unwrap())
}

fn err_of(r: zephon_core::Result<Vec<Record>>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn an_mds_dataset_larger_than_the_memory_tier_reads_by_blocks() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_mds(&data, 2, 3000);
    let want = local(&data, &FormatOptions::default());
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let memory = 128 << 10;
    let opts = moto.opts(small_cache(t.path(), memory, 64 << 20));
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    let sizes: Vec<u64> = rd.manifest().shards.iter().map(|e| e.bytes).collect();
    assert!(sizes.iter().all(|&b| b > 4 * memory), "{sizes:?}");
    for prefetch in [false, true] {
        let got = fields(&read_all(rd.dataset().clone(), prefetch).unwrap());
        assert_eq!(got, want, "prefetch {prefetch}");
    }
    let s = rd.cache_stats();
    let blocks: u64 = sizes.iter().map(|b| b.div_ceil(BLOCK)).sum();
    assert_eq!(s.misses, blocks, "one download per block: {s:?}");
    assert_eq!(s.bytes_downloaded, sizes.iter().sum::<u64>());
    assert!(s.memory_peak_bytes <= memory, "{s:?}");
    assert_eq!(
        answered_gets(&moto, "shard.00000.mds HTTP"),
        sizes[0].div_ceil(BLOCK) as usize
    );
}

#[test]
fn an_mds_read_downloads_the_header_and_its_samples_blocks_only() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_mds(&data, 1, 6000);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let opts = moto.opts(small_cache(t.path(), 16 << 20, 64 << 20));
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    let size = rd.manifest().shards[0].bytes;
    let shard = rd.dataset().shards()[0].clone();
    let local = Dataset::from_path("d", &data).unwrap().shards()[0].clone();
    // Samples in the middle of the shard: the header's block and the
    // blocks holding these 20 samples (a few hundred bytes each).
    let idx: Vec<u64> = (3000..3020).rev().collect();
    let got = runtime::block_on(shard.read_indices(&idx)).unwrap();
    assert_eq!(
        fields(&got),
        fields(&runtime::block_on(local.read_indices(&idx)).unwrap())
    );
    let s = rd.cache_stats();
    assert!(
        s.misses <= 3 && s.bytes_downloaded <= 3 * BLOCK,
        "{size} bytes in the shard: {s:?}"
    );
}

#[cfg(feature = "parquet")]
#[test]
fn a_parquet_dataset_larger_than_the_memory_tier_reads_by_blocks() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_parquet(&data, 2, 2000, 500);
    let want = local(&data, &FormatOptions::default());
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let memory = 256 << 10;
    let opts = moto.opts(small_cache(t.path(), memory, 64 << 20));
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    let sizes: Vec<u64> = rd.manifest().shards.iter().map(|e| e.bytes).collect();
    assert!(sizes.iter().all(|&b| b > 4 * memory), "{sizes:?}");
    for prefetch in [false, true] {
        let got = fields(&read_all(rd.dataset().clone(), prefetch).unwrap());
        assert_eq!(got, want, "prefetch {prefetch}");
    }
    let s = rd.cache_stats();
    let blocks: u64 = sizes.iter().map(|b| b.div_ceil(BLOCK)).sum();
    // Every block holds some column chunk or the footer; none twice.
    assert!(s.misses <= blocks && s.redownloads == 0, "{s:?}");
    assert!(s.memory_peak_bytes <= memory, "{s:?}");
    assert!(answered_gets(&moto, "part-0.parquet HTTP") as u64 <= sizes[0].div_ceil(BLOCK));
}

#[cfg(feature = "parquet")]
#[test]
fn a_parquet_projection_downloads_only_its_column_chunks() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_parquet(&data, 1, 4000, 500);
    let format = FormatOptions::default().columns(["id"]);
    let want = local(&data, &format);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let opts = moto
        .opts(small_cache(t.path(), 16 << 20, 64 << 20))
        .format(format);
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    let size = rd.manifest().shards[0].bytes;
    let got = fields(&read_all(rd.dataset().clone(), true).unwrap());
    assert_eq!(got, want);
    assert!(rd.is_cached(0), "what the projection reads is cached");
    // Eight row groups: each group's `id` chunk (4 KB) in one or two
    // blocks, and the footer's block; the wide columns stay remote.
    let s = rd.cache_stats();
    assert!(
        s.bytes_downloaded <= 17 * BLOCK && s.bytes_downloaded < size / 4,
        "{size} bytes in the shard: {s:?}"
    );
}

#[cfg(feature = "parquet")]
#[test]
fn truncated_mds_and_parquet_objects_are_errors_naming_them() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_mds(&data.join("mds"), 1, 3000);
    write_parquet(&data.join("parquet"), 1, 2000, 500);
    let moto = Moto::start(t.path());
    for (name, shard) in [("mds", "shard.00000.mds"), ("parquet", "part-0.parquet")] {
        let dir = data.join(name);
        moto.upload("bkt", name, &dir);
        let cache = small_cache(&t.path().join(name), 16 << 20, 64 << 20);
        let rd = RemoteDataset::open("d", &format!("s3://bkt/{name}"), &moto.opts(cache)).unwrap();
        // The object loses its last 100 KB after the manifest was written.
        let full = std::fs::read(dir.join(shard)).unwrap();
        let b = Backend::open(
            "up",
            &format!("s3://bkt/{name}"),
            &moto.opts(Default::default()),
        )
        .unwrap();
        runtime::block_on(b.op.write(shard, full[..full.len() - 100_000].to_vec())).unwrap();
        let uri = format!("s3://bkt/{name}/{shard}");
        let err = err_of(read_all(rd.dataset().clone(), false));
        assert!(
            err.contains(&uri) && err.contains("range read"),
            "{name}: {err}"
        );
    }
}

#[cfg(feature = "parquet")]
#[test]
fn a_parquet_footer_pointing_past_the_start_is_an_error_naming_the_shard() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_parquet(&data, 1, 2000, 500);
    let p = data.join("part-0.parquet");
    let mut raw = std::fs::read(&p).unwrap();
    let at = raw.len() - 8;
    raw[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&p, &raw).unwrap();
    // Without its checksum, the manifest still says the file's size.
    let m = data.join("index.json");
    let mut json: serde_json::Value = serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
    json["shards"][0].as_object_mut().unwrap().remove("sha256");
    std::fs::write(&m, json.to_string()).unwrap();
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let opts = moto.opts(small_cache(t.path(), 16 << 20, 64 << 20));
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    let err = err_of(read_all(rd.dataset().clone(), false));
    assert!(
        err.contains("s3://bkt/ds/part-0.parquet") && err.contains("footer"),
        "{err}"
    );
}

#[test]
fn a_webdataset_larger_than_the_memory_tier_reads_by_blocks() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_tar(&data, 2, 1500);
    let want = local(&data, &FormatOptions::default());
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let memory = 128 << 10;
    let opts = moto.opts(small_cache(t.path(), memory, 64 << 20));
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    let sizes: Vec<u64> = rd.manifest().shards.iter().map(|e| e.bytes).collect();
    assert!(sizes.iter().all(|&b| b > 4 * memory), "{sizes:?}");
    for prefetch in [false, true] {
        let got = fields(&read_all(rd.dataset().clone(), prefetch).unwrap());
        assert_eq!(got, want, "prefetch {prefetch}");
    }
    // The indexing pass downloads each block once, the reads find them
    // cached; no tar's trailing padding is needed beyond its end blocks.
    let s = rd.cache_stats();
    let blocks: u64 = sizes.iter().map(|b| b.div_ceil(BLOCK)).sum();
    assert!(s.misses <= blocks && s.redownloads == 0, "{s:?}");
    assert!(s.memory_peak_bytes <= memory, "{s:?}");
    assert!(answered_gets(&moto, "000.tar HTTP") as u64 <= sizes[0].div_ceil(BLOCK));
}

#[test]
fn a_truncated_tar_object_is_an_error_naming_it() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_tar(&data, 1, 1500);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let opts = moto.opts(small_cache(t.path(), 16 << 20, 64 << 20));
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    let full = std::fs::read(data.join("000.tar")).unwrap();
    let b = Backend::open("up", "s3://bkt/ds", &moto.opts(Default::default())).unwrap();
    runtime::block_on(b.op.write("000.tar", full[..full.len() / 2].to_vec())).unwrap();
    let err = err_of(read_all(rd.dataset().clone(), false));
    assert!(
        err.contains("s3://bkt/ds/000.tar") && err.contains("range read"),
        "{err}"
    );
}
