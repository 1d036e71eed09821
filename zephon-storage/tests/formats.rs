//! Shard formats beyond JSONL: each fixture is written here by the format's
//! writer (the `parquet` crate's `ArrowWriter`, the `tar` crate's `Builder`)
//! or, for Megatron and MDS, by this crate's writers that follow the
//! reference layouts (`encode_megatron`, `mds::encode_shard`, and an
//! `index.json` spelled the way Streaming's `MDSWriter` writes it).

mod common;

use common::{Moto, cache_opts, fields, read_all};
use std::path::Path;
use zephon_core::{Dataset, Record, Value};
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::format::FormatOptions;
use zephon_storage::format::mds::{MdsColumn, encode_shard};
use zephon_storage::format::tokens::{TokenDtype, encode_megatron};
use zephon_storage::scan::build_index_with;
use zephon_storage::{DatasetExt, RemoteDataset};

fn rec(fields: Vec<(&str, Value)>) -> Record {
    Record::from_fields(fields)
}

fn tokens(t: Vec<u32>) -> Record {
    rec(vec![("tokens", Value::Tokens(t))])
}

/// Every sample of every shard, read with one `read_run` per shard.
fn sequential(ds: &Dataset) -> Vec<Record> {
    let mut out = Vec::new();
    for s in ds.shards() {
        out.extend(futures::executor::block_on(s.read_run(0, s.len())).unwrap());
    }
    out
}

/// Random access (a shuffled, repeating index list per shard) must give the
/// records sequential reading gives at those positions.
fn check_random_access(ds: &Dataset) {
    for s in ds.shards() {
        let all = futures::executor::block_on(s.read_run(0, s.len())).unwrap();
        let n = s.len();
        let idx: Vec<u64> = (0..n)
            .map(|i| (i * 7 + 3) % n)
            .chain([0, n - 1, 0])
            .collect();
        let got = futures::executor::block_on(s.read_indices(&idx)).unwrap();
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

/// Two nanoGPT-style `u16` files, cut into samples of 16 tokens (the
/// tails, 5 and 0 tokens, are dropped).
fn write_flat(dir: &Path) -> (FormatOptions, Vec<Record>) {
    std::fs::create_dir_all(dir).unwrap();
    let mut want = Vec::new();
    for (f, n) in [("a.bin", 85u32), ("b.bin", 32)] {
        let toks: Vec<u32> = (0..n).map(|i| i * 3 + n).collect();
        let mut bytes = Vec::new();
        TokenDtype::U16.encode(&toks, &mut bytes).unwrap();
        std::fs::write(dir.join(f), bytes).unwrap();
        want.extend(toks.chunks_exact(16).map(|c| tokens(c.to_vec())));
    }
    (
        FormatOptions::default().seq_len(16).dtype(TokenDtype::U16),
        want,
    )
}

/// Two Megatron shards (u16 and i32), documents of varying length.
fn write_megatron(dir: &Path) -> Vec<Record> {
    std::fs::create_dir_all(dir).unwrap();
    let mut want = Vec::new();
    for (f, dtype, big) in [
        ("s0", TokenDtype::U16, 1000),
        ("s1", TokenDtype::I32, 100_000),
    ] {
        let docs: Vec<Vec<u32>> = (0..23u32)
            .map(|d| (0..(d * 5) % 17 + 1).map(|t| big + d * 100 + t).collect())
            .collect();
        let (bin, idx) = encode_megatron(&docs, dtype).unwrap();
        std::fs::write(dir.join(format!("{f}.bin")), bin).unwrap();
        std::fs::write(dir.join(format!("{f}.idx")), idx).unwrap();
        want.extend(docs.into_iter().map(tokens));
    }
    want
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

fn mds_columns() -> Vec<MdsColumn> {
    let c = |n: &str, e: &str, s: Option<u32>| MdsColumn {
        name: n.into(),
        encoding: e.into(),
        size: s,
    };
    // Streaming sorts columns by name.
    vec![
        c("id", "int", Some(8)),
        c("score", "float32", Some(4)),
        c("text", "str", None),
        c("blob", "bytes", None),
    ]
}

/// Two MDS shards, the second zstd-compressed, with Streaming's index.json.
fn write_mds(dir: &Path) -> Vec<Record> {
    std::fs::create_dir_all(dir).unwrap();
    let cols = mds_columns();
    let mut want = Vec::new();
    let mut shards_json = Vec::new();
    for s in 0..2u32 {
        let samples: Vec<Vec<Vec<u8>>> = (0..15u32)
            .map(|i| {
                let id = (s * 100 + i) as i64;
                let text = format!("doc {id} {}", "z".repeat(i as usize));
                let blob = vec![i as u8; i as usize];
                want.push(rec(vec![
                    ("id", Value::Int(id)),
                    ("score", Value::Float(i as f32 as f64 * 0.5)),
                    ("text", Value::Text(text.clone())),
                    ("blob", Value::Bytes(blob.clone().into())),
                ]));
                vec![
                    id.to_le_bytes().to_vec(),
                    (i as f32 * 0.5).to_le_bytes().to_vec(),
                    text.into_bytes(),
                    blob,
                ]
            })
            .collect();
        let raw = encode_shard(&cols, &samples);
        let raw_name = format!("shard.{s:05}.mds");
        let zip = if s == 1 {
            let z = zstd::encode_all(&raw[..], 3).unwrap();
            std::fs::write(dir.join(format!("{raw_name}.zstd")), &z).unwrap();
            serde_json::json!({"basename": format!("{raw_name}.zstd"), "bytes": z.len(), "hashes": {}})
        } else {
            std::fs::write(dir.join(&raw_name), &raw).unwrap();
            serde_json::Value::Null
        };
        shards_json.push(serde_json::json!({
            "column_encodings": cols.iter().map(|c| c.encoding.clone()).collect::<Vec<_>>(),
            "column_names": cols.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
            "column_sizes": cols.iter().map(|c| c.size).collect::<Vec<_>>(),
            "compression": if s == 1 { serde_json::json!("zstd") } else { serde_json::Value::Null },
            "format": "mds",
            "hashes": [],
            "raw_data": {"basename": raw_name, "bytes": raw.len(), "hashes": {}},
            "samples": 15,
            "size_limit": 67108864,
            "version": 2,
            "zip_data": zip,
        }));
    }
    let index = serde_json::json!({"version": 2, "shards": shards_json});
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
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
            .set_max_row_group_size(7)
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
    let (opts, want) = write_flat(t.path());
    let ds = check_local(t.path(), &opts, &want);
    assert_eq!(ds.num_samples(), 5 + 2);
}

#[test]
fn megatron_bin_idx_pairs_read_as_documents() {
    let t = tempfile::tempdir().unwrap();
    let want = write_megatron(t.path());
    check_local(t.path(), &FormatOptions::default(), &want);
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
    let want = write_mds(t.path());
    check_local(t.path(), &FormatOptions::default(), &want);
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
/// `build_index_with` (Megatron, sidecars named in it) all read like local.
#[test]
fn every_format_over_s3_reads_like_local() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    let (flat_opts, _) = write_flat(&root.join("flat"));
    write_megatron(&root.join("megatron"));
    write_tar(&root.join("tar"));
    write_mds(&root.join("mds"));
    #[cfg(feature = "parquet")]
    write_parquet(&root.join("parquet"));
    let b = Backend::open(
        "d",
        &root.join("megatron").display().to_string(),
        &Default::default(),
    )
    .unwrap();
    let m = runtime::block_on(build_index_with(&b, "d", &FormatOptions::default())).unwrap();
    assert_eq!(m.format.name(), "megatron");
    let moto = Moto::start(t.path());
    let mut names = vec!["flat", "megatron", "tar", "mds"];
    if cfg!(feature = "parquet") {
        names.push("parquet");
    }
    for name in names {
        let opts = if name == "flat" {
            flat_opts.clone()
        } else {
            FormatOptions::default()
        };
        let local = Dataset::from_path_with("d", root.join(name), &opts).unwrap();
        let want = fields(&read_all(local, false).unwrap());
        moto.upload("bkt", name, &root.join(name));
        let sopts = moto.opts(cache_opts(&t.path().join(name))).format(opts);
        let rd = RemoteDataset::open("d", &format!("s3://bkt/{name}"), &sopts).unwrap();
        assert_eq!(
            fields(&read_all(rd.dataset().clone(), true).unwrap()),
            want,
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
    write_megatron(t.path());
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
    write_megatron(t.path());
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
    write_mds(t.path());
    std::fs::remove_file(t.path().join("shard.00001.mds.zstd")).unwrap();
    let err = err_of(Dataset::from_path("d", t.path()));
    assert!(err.contains("shard.00001.mds.zstd"), "{err}");
    // Over a backend the shard is found missing when read, and named then.
    let opts = zephon_storage::StorageOptions::default()
        .cache(zephon_storage::CacheOptions::default().enabled(false));
    let rd = RemoteDataset::open("d", &t.path().display().to_string(), &opts).unwrap();
    let s = &rd.dataset().shards()[1];
    let err = err_of(futures::executor::block_on(s.read_run(0, 1)));
    assert!(err.contains("shard.00001.mds.zstd"), "{err}");
}

#[test]
fn corrupt_mds_offsets_name_the_shard() {
    let t = tempfile::tempdir().unwrap();
    write_mds(t.path());
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
/// (Megatron), and everything reads like local.
#[test]
fn token_files_over_s3_by_byte_range_read_like_local() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    let (flat_opts, _) = write_flat(&root.join("flat"));
    write_megatron(&root.join("megatron"));
    let moto = Moto::start(t.path());
    for (name, opts) in [("flat", flat_opts), ("megatron", FormatOptions::default())] {
        let local = Dataset::from_path_with("d", root.join(name), &opts).unwrap();
        let want = fields(&read_all(local, false).unwrap());
        moto.upload("bkt", name, &root.join(name));
        let sopts = moto
            .opts(cache_opts(&t.path().join(name)))
            .format(opts)
            .byte_range(true);
        let uri = format!("s3://bkt/{name}");
        let rd = RemoteDataset::open("d", &uri, &sopts).unwrap();
        let before = rd.cache_stats().bytes_downloaded;
        let one = futures::executor::block_on(rd.dataset().shards()[0].read_indices(&[1])).unwrap();
        let got = rd.cache_stats().bytes_downloaded - before;
        let want_bytes = 2 * one[0].tokens("tokens").unwrap().len() as u64;
        assert_eq!(got, want_bytes, "{name}: one sample, its bytes only");
        assert!(!rd.is_cached(0), "{name}: range reads bypass the cache");
        let rd = RemoteDataset::open("d", &uri, &sopts).unwrap();
        assert_eq!(
            fields(&read_all(rd.dataset().clone(), true).unwrap()),
            want,
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
    write_tar(&root.join("tar"));
    write_mds(&root.join("mds"));
    let b = Backend::open(
        "d",
        &root.join("tar").display().to_string(),
        &Default::default(),
    )
    .unwrap();
    runtime::block_on(build_index_with(&b, "d", &FormatOptions::default())).unwrap();
    let nginx = common::Nginx::start(t.path(), &root);
    for name in ["tar", "mds"] {
        let want =
            fields(&read_all(Dataset::from_path("d", root.join(name)).unwrap(), false).unwrap());
        let opts = cache_opts(&t.path().join(name));
        let rd = RemoteDataset::open("d", &format!("{}/{name}", nginx.uri()), &opts).unwrap();
        assert_eq!(
            fields(&read_all(rd.dataset().clone(), true).unwrap()),
            want,
            "{name}"
        );
    }
}

/// A manifest written for flat token files records `seq_len` and dtype, so
/// the folder then opens with default options.
#[test]
fn a_written_manifest_carries_the_token_layout() {
    let t = tempfile::tempdir().unwrap();
    let (opts, want) = write_flat(t.path());
    let b = Backend::open("d", &t.path().display().to_string(), &Default::default()).unwrap();
    let m = runtime::block_on(build_index_with(&b, "d", &opts)).unwrap();
    assert_eq!(m.shards.iter().map(|s| s.samples).sum::<u64>(), 7);
    check_local(t.path(), &FormatOptions::default(), &want);
}
