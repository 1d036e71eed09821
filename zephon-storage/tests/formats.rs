//! Shard formats beyond JSONL. The flat token, Megatron and MDS fixtures
//! are files in `tests/fixtures`, written once by `make_fixtures.py` with
//! NumPy from the formats' published layouts (not by this crate), with the
//! records they hold in `expected.json`; the WebDataset and Parquet ones are
//! written here by their formats' own crates (`tar`'s `Builder`, the
//! `parquet` crate's `ArrowWriter`). Every read, local or remote, is
//! compared with what the writer put in.

use crate::common;

use common::{Moto, cache_opts, fields, read_all};
use std::path::Path;
use zephon_core::{Dataset, Record, Value};
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::format::FormatOptions;
use zephon_storage::format::tokens::TokenDtype;
use zephon_storage::scan::build_index_with;
use zephon_storage::{DatasetExt, RemoteDataset};

fn rec(fields: Vec<(&str, Value)>) -> Record {
    Record::from_fields(fields)
}

/// Runs a read as the inline runner does: on a current-thread runtime
/// (reads refuse to run outside any runtime).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Every sample of every shard, read with one `read_run` per shard.
fn sequential(ds: &Dataset) -> Vec<Record> {
    let mut out = Vec::new();
    for s in ds.shards() {
        out.extend(block_on(s.read_run(0, s.len())).unwrap());
    }
    out
}

/// Record fields, sorted: what a shuffled pipeline must deliver, in some
/// order.
fn sorted_fields(records: &[Record]) -> Vec<String> {
    let mut f = fields(records);
    f.sort();
    f
}

/// Random access (a shuffled, repeating index list per shard) must give the
/// records sequential reading gives at those positions.
fn check_random_access(ds: &Dataset) {
    for s in ds.shards() {
        let all = block_on(s.read_run(0, s.len())).unwrap();
        let n = s.len();
        let idx: Vec<u64> = (0..n)
            .map(|i| (i * 7 + 3) % n)
            .chain([0, n - 1, 0])
            .collect();
        let got = block_on(s.read_indices(&idx)).unwrap();
        let want: Vec<Record> = idx.iter().map(|&i| all[i as usize].clone()).collect();
        assert_eq!(fields(&got), fields(&want), "shard {}", s.name());
    }
}

fn check_local(dir: &Path, opts: &FormatOptions, want: &[Record]) -> Dataset {
    let ds = Dataset::from_path_with("d", dir, opts).unwrap();
    assert_eq!(fields(&sequential(&ds)), fields(want));
    check_random_access(&ds);
    ds
}

fn err_of<T: std::fmt::Debug>(r: zephon_core::Result<T>) -> String {
    r.unwrap_err().to_string()
}

// ---- fixtures -------------------------------------------------------------

/// Copies the fixture dataset `name` (`flat`, `megatron`, `mds`) into
/// `dir`, so a test may add to it or corrupt it; returns the options to
/// read it with and the records `make_fixtures.py` wrote, in shard order.
fn fixture(name: &str, dir: &Path) -> (FormatOptions, Vec<Record>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    std::fs::create_dir_all(dir).unwrap();
    for e in std::fs::read_dir(root.join(name)).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("expected.json")).unwrap())
            .unwrap();
    let ds = &expected[name];
    let mut opts = FormatOptions::default();
    if let Some(n) = ds["options"]["seq_len"].as_u64() {
        opts = opts.seq_len(n);
    }
    if let Some(d) = ds["options"]["dtype"].as_str() {
        opts = opts.dtype(TokenDtype::parse(d).unwrap());
    }
    let columns: Vec<(String, String)> = serde_json::from_value(ds["columns"].clone()).unwrap();
    let ints = |v: &serde_json::Value| -> Vec<u64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    let records = ds["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let fields = columns.iter().map(|(col, kind)| {
                let v = &r[col.as_str()];
                let value = match kind.as_str() {
                    "tokens" => Value::Tokens(ints(v).into_iter().map(|t| t as u32).collect()),
                    "bytes" => Value::Bytes(
                        ints(v)
                            .into_iter()
                            .map(|b| b as u8)
                            .collect::<Vec<u8>>()
                            .into(),
                    ),
                    "int" => Value::Int(v.as_i64().unwrap()),
                    "float" => Value::Float(v.as_f64().unwrap()),
                    "text" => Value::Text(v.as_str().unwrap().to_string()),
                    other => panic!("expected.json: unknown column kind `{other}`"),
                };
                (col.as_str(), value)
            });
            rec(fields.collect())
        })
        .collect();
    (opts, records)
}

/// Two WebDataset tars: a caption, metadata, a class and an "image" per key.
fn write_tar(dir: &Path) -> Vec<Record> {
    std::fs::create_dir_all(dir).unwrap();
    let mut want = Vec::new();
    for s in 0..2 {
        let mut b = tar::Builder::new(Vec::new());
        for k in 0..12 {
            let key = format!("imgs/{s}{k:04}");
            let members: Vec<(&str, Vec<u8>)> = vec![
                ("cls", format!("{}", k % 3).into_bytes()),
                ("jpg", vec![k as u8; 100 + k * 37]),
                ("json", format!("{{\"w\":{k}}}").into_bytes()),
                ("txt", format!("caption {s}/{k}").into_bytes()),
            ];
            let mut r = rec(vec![("__key__", Value::Text(key.clone()))]);
            for (ext, data) in members {
                let mut h = tar::Header::new_gnu();
                h.set_size(data.len() as u64);
                h.set_mode(0o644);
                h.set_cksum();
                b.append_data(&mut h, format!("{key}.{ext}"), &data[..])
                    .unwrap();
                let v = match ext {
                    "cls" => Value::Int((k % 3) as i64),
                    "jpg" => Value::Bytes(data.into()),
                    "json" => Value::Json(serde_json::json!({"w": k})),
                    _ => Value::Text(String::from_utf8(data).unwrap()),
                };
                r.set(ext, v);
            }
            want.push(r);
        }
        std::fs::write(
            dir.join(format!("shard-{s:04}.tar")),
            b.into_inner().unwrap(),
        )
        .unwrap();
    }
    want
}

#[cfg(feature = "parquet")]
fn write_parquet(dir: &Path) -> Vec<Record> {
    use arrow_array::types::Int32Type;
    use arrow_array::{ArrayRef, Int64Array, ListArray, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use std::sync::Arc;
    std::fs::create_dir_all(dir).unwrap();
    let mut want = Vec::new();
    for s in 0..2i64 {
        let ids: Vec<i64> = (0..30).map(|i| s * 1000 + i).collect();
        let texts: Vec<String> = ids.iter().map(|i| format!("row {i}")).collect();
        let toks: Vec<Vec<u32>> = ids
            .iter()
            .map(|&i| (0..(i % 5 + 1) as u32).map(|t| t + i as u32).collect())
            .collect();
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(ids.clone())) as ArrayRef),
            (
                "text",
                Arc::new(StringArray::from(texts.clone())) as ArrayRef,
            ),
            (
                "input_ids",
                Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(
                    toks.iter()
                        .map(|t| Some(t.iter().map(|&x| Some(x as i32)).collect::<Vec<_>>())),
                )) as ArrayRef,
            ),
        ])
        .unwrap();
        // Row groups of 7 rows, so reads cross row-group boundaries.
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(7))
            .build();
        let file = std::fs::File::create(dir.join(format!("part-{s}.parquet"))).unwrap();
        let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        for ((id, text), t) in ids.into_iter().zip(texts).zip(toks) {
            want.push(rec(vec![
                ("id", Value::Int(id)),
                ("input_ids", Value::Tokens(t)),
                ("text", Value::Text(text)),
            ]));
        }
    }
    want
}

// ---- reading --------------------------------------------------------------

#[test]
fn flat_token_files_read_as_fixed_length_samples() {
    let t = tempfile::tempdir().unwrap();
    let (opts, want) = fixture("flat", t.path());
    let ds = check_local(t.path(), &opts, &want);
    assert_eq!(ds.num_samples(), 5 + 2);
}

#[test]
fn megatron_bin_idx_pairs_read_as_documents() {
    let t = tempfile::tempdir().unwrap();
    let (opts, want) = fixture("megatron", t.path());
    check_local(t.path(), &opts, &want);
}

#[test]
fn webdataset_tars_group_members_by_key() {
    let t = tempfile::tempdir().unwrap();
    let want = write_tar(t.path());
    check_local(t.path(), &FormatOptions::default(), &want);
}

#[test]
fn mds_datasets_open_from_streamings_index() {
    let t = tempfile::tempdir().unwrap();
    let (opts, want) = fixture("mds", t.path());
    check_local(t.path(), &opts, &want);
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_rows_across_row_groups_and_projection() {
    let t = tempfile::tempdir().unwrap();
    let want = write_parquet(t.path());
    check_local(t.path(), &FormatOptions::default(), &want);
    let opts = FormatOptions::default().columns(["text"]);
    let texts: Vec<Record> = want
        .iter()
        .map(|r| rec(vec![("text", r.get("text").unwrap().clone())]))
        .collect();
    check_local(t.path(), &opts, &texts);
    let err = err_of(Dataset::from_path_with(
        "d",
        t.path(),
        &FormatOptions::default().columns(["nope"]),
    ));
    assert!(err.contains("nope") && err.contains("input_ids"), "{err}");
}

/// One moto server for every format: listing-based discovery (flat tokens,
/// tar, parquet), Streaming's index (MDS) and a Zephon manifest written by
/// `build_index_with` (Megatron, sidecars named in it) all read what the
/// writers put in, in shard order and through a prefetching pipeline.
#[test]
fn every_format_over_s3_reads_what_was_written() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    let mut sets = vec![
        ("flat", fixture("flat", &root.join("flat"))),
        ("megatron", fixture("megatron", &root.join("megatron"))),
        (
            "tar",
            (FormatOptions::default(), write_tar(&root.join("tar"))),
        ),
        ("mds", fixture("mds", &root.join("mds"))),
    ];
    #[cfg(feature = "parquet")]
    sets.push((
        "parquet",
        (
            FormatOptions::default(),
            write_parquet(&root.join("parquet")),
        ),
    ));
    let b = Backend::open(
        "d",
        &root.join("megatron").display().to_string(),
        &Default::default(),
    )
    .unwrap();
    let m = runtime::block_on(build_index_with(&b, "d", &FormatOptions::default())).unwrap();
    assert_eq!(m.format.name(), "megatron");
    let moto = Moto::start(t.path());
    for (name, (opts, want)) in sets {
        moto.upload("bkt", name, &root.join(name));
        let sopts = moto.opts(cache_opts(&t.path().join(name))).format(opts);
        let rd = RemoteDataset::open("d", &format!("s3://bkt/{name}"), &sopts).unwrap();
        assert_eq!(fields(&sequential(rd.dataset())), fields(&want), "{name}");
        assert_eq!(
            sorted_fields(&read_all(rd.dataset().clone(), true).unwrap()),
            sorted_fields(&want),
            "{name}"
        );
        check_random_access(rd.dataset());
        assert!(rd.is_cached(0), "{name}: shards go through the cache");
    }
}

// ---- detection ------------------------------------------------------------

#[test]
fn mixed_and_unknown_folders_list_what_they_hold() {
    let t = tempfile::tempdir().unwrap();
    fixture("megatron", t.path());
    std::fs::write(t.path().join("x.jsonl"), "{}\n").unwrap();
    let err = err_of(Dataset::from_path("d", t.path()));
    assert!(
        err.contains("mixed formats") && err.contains("2 Megatron") && err.contains("1 JSONL"),
        "{err}"
    );
    let u = tempfile::tempdir().unwrap();
    std::fs::write(u.path().join("notes.txt"), "hi").unwrap();
    std::fs::write(u.path().join("data.csv"), "a,b").unwrap();
    let err = err_of(Dataset::from_path("d", u.path()));
    assert!(
        err.contains("no shards") && err.contains("1 *.csv") && err.contains("1 *.txt"),
        "{err}"
    );
}

// ---- corrupt input --------------------------------------------------------

#[test]
fn megatron_idx_disagreeing_with_bin_names_the_shard() {
    let t = tempfile::tempdir().unwrap();
    fixture("megatron", t.path());
    let bin = t.path().join("s1.bin");
    let mut b = std::fs::read(&bin).unwrap();
    b.truncate(b.len() - 8);
    std::fs::write(&bin, b).unwrap();
    let err = err_of(Dataset::from_path("d", t.path()));
    assert!(
        err.contains("s1.bin") && err.contains("sequence 22"),
        "{err}"
    );
}

#[test]
fn truncated_tar_member_names_the_shard() {
    let t = tempfile::tempdir().unwrap();
    write_tar(t.path());
    let tar = t.path().join("shard-0001.tar");
    let mut b = std::fs::read(&tar).unwrap();
    b.truncate(b.len() / 2 + 100);
    std::fs::write(&tar, b).unwrap();
    let err = err_of(Dataset::from_path("d", t.path()));
    assert!(
        err.contains("shard-0001.tar") && err.contains("truncated"),
        "{err}"
    );
}

#[test]
fn mds_index_naming_a_missing_shard_names_it() {
    let t = tempfile::tempdir().unwrap();
    fixture("mds", t.path());
    std::fs::remove_file(t.path().join("shard.00001.mds.zstd")).unwrap();
    let err = err_of(Dataset::from_path("d", t.path()));
    assert!(err.contains("shard.00001.mds.zstd"), "{err}");
    // Over a backend the shard is found missing when read, and named then.
    let opts = zephon_storage::StorageOptions::default()
        .cache(zephon_storage::CacheOptions::default().enabled(false));
    let rd = RemoteDataset::open("d", &t.path().display().to_string(), &opts).unwrap();
    let s = &rd.dataset().shards()[1];
    let err = err_of(block_on(s.read_run(0, 1)));
    assert!(err.contains("shard.00001.mds.zstd"), "{err}");
}

#[test]
fn corrupt_mds_offsets_name_the_shard() {
    let t = tempfile::tempdir().unwrap();
    fixture("mds", t.path());
    let p = t.path().join("shard.00000.mds");
    let mut b = std::fs::read(&p).unwrap();
    b.truncate(b.len() - 3);
    std::fs::write(&p, b).unwrap();
    let err = err_of(Dataset::from_path("d", t.path()));
    assert!(err.contains("shard.00000.mds"), "{err}");
}

#[cfg(feature = "parquet")]
#[test]
fn truncated_parquet_footer_names_the_shard() {
    let t = tempfile::tempdir().unwrap();
    write_parquet(t.path());
    let p = t.path().join("part-1.parquet");
    let mut b = std::fs::read(&p).unwrap();
    b.truncate(b.len() - 6);
    std::fs::write(&p, b).unwrap();
    let err = err_of(Dataset::from_path("d", t.path()));
    assert!(
        err.contains("part-1.parquet") && err.contains("Parquet"),
        "{err}"
    );
}

/// With byte-range reads on, token files are never downloaded whole: a
/// sample costs its own bytes (flat) or its sequence plus the `.idx`
/// (Megatron), and everything reads as written.
#[test]
fn token_files_over_s3_by_byte_range_read_what_was_written() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    let moto = Moto::start(t.path());
    for name in ["flat", "megatron"] {
        let (opts, want) = fixture(name, &root.join(name));
        moto.upload("bkt", name, &root.join(name));
        let sopts = moto
            .opts(cache_opts(&t.path().join(name)))
            .format(opts)
            .byte_range(true);
        let uri = format!("s3://bkt/{name}");
        let rd = RemoteDataset::open("d", &uri, &sopts).unwrap();
        let before = rd.cache_stats().bytes_downloaded;
        let one = block_on(rd.dataset().shards()[0].read_indices(&[1])).unwrap();
        let got = rd.cache_stats().bytes_downloaded - before;
        let want_bytes = 2 * one[0].token_ids("tokens").unwrap().len() as u64;
        assert_eq!(got, want_bytes, "{name}: one sample, its bytes only");
        assert_eq!(fields(&one), fields(&want[1..2]), "{name}: sample 1");
        assert!(!rd.is_cached(0), "{name}: range reads bypass the cache");
        let rd = RemoteDataset::open("d", &uri, &sopts).unwrap();
        assert_eq!(fields(&sequential(rd.dataset())), fields(&want), "{name}");
        assert_eq!(
            sorted_fields(&read_all(rd.dataset().clone(), true).unwrap()),
            sorted_fields(&want),
            "{name}"
        );
        check_random_access(rd.dataset());
    }
}

/// HTTP cannot list: a WebDataset folder opens from the manifest
/// `build_index_with` wrote, an MDS folder from Streaming's own index.json.
#[test]
fn formats_over_http_open_from_their_manifests() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("www");
    let tar = write_tar(&root.join("tar"));
    let (_, mds) = fixture("mds", &root.join("mds"));
    let b = Backend::open(
        "d",
        &root.join("tar").display().to_string(),
        &Default::default(),
    )
    .unwrap();
    runtime::block_on(build_index_with(&b, "d", &FormatOptions::default())).unwrap();
    let nginx = common::Nginx::start(t.path(), &root);
    for (name, want) in [("tar", tar), ("mds", mds)] {
        let opts = cache_opts(&t.path().join(name));
        let rd = RemoteDataset::open("d", &format!("{}/{name}", nginx.uri()), &opts).unwrap();
        assert_eq!(fields(&sequential(rd.dataset())), fields(&want), "{name}");
        assert_eq!(
            sorted_fields(&read_all(rd.dataset().clone(), true).unwrap()),
            sorted_fields(&want),
            "{name}"
        );
    }
}

/// A manifest written for flat token files records `seq_len` and dtype, so
/// the folder then opens with default options.
#[test]
fn a_written_manifest_carries_the_token_layout() {
    let t = tempfile::tempdir().unwrap();
    let (opts, want) = fixture("flat", t.path());
    let b = Backend::open("d", &t.path().display().to_string(), &Default::default()).unwrap();
    let m = runtime::block_on(build_index_with(&b, "d", &opts)).unwrap();
    assert_eq!(m.shards.iter().map(|s| s.samples).sum::<u64>(), 7);
    check_local(t.path(), &FormatOptions::default(), &want);
}
