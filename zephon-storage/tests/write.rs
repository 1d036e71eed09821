//! DatasetWriter: what it writes opens as a dataset with the documents it
//! was given; a run stopped anywhere (a writer dropped unfinished, as a
//! killed process leaves it, with a half-written file beside it) and
//! started again writes the same bytes as one that ran through; a changed
//! finished shard is redone; a destination of other content or settings
//! is refused; an S3 destination works like a folder.

use crate::common::{Moto, read_all};
use std::collections::BTreeMap;
use std::path::Path;
use zephon_core::{Dataset, Record};
use zephon_core::{PipelineExt, Runner, WorkSource};
use zephon_storage::format::TokenDtype;
use zephon_storage::write::{DatasetWriter, WriteFormat, WriteOptions};
use zephon_storage::{DatasetExt, RemoteDataset, StorageOptions};

fn docs() -> Vec<Vec<u32>> {
    let mut x = 12345u64;
    (0..60)
        .map(|i| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (x >> 33) % 40;
            (0..len as u32).map(|t| (t * 7 + i) % 50_000).collect()
        })
        .collect()
}

fn record(i: usize, ids: &[u32]) -> Record {
    Record::new()
        .with("id", i as i64)
        .with("text", format!("document {i} of {} ids", ids.len()))
}

fn formats() -> Vec<WriteOptions> {
    vec![
        WriteOptions::new(WriteFormat::Tokens {
            dtype: TokenDtype::U16,
            seq_len: 8,
        })
        .shard_bytes(64),
        WriteOptions::new(WriteFormat::Megatron {
            dtype: TokenDtype::U16,
        })
        .shard_bytes(50),
        WriteOptions::new(WriteFormat::Jsonl { fields: None }).shard_samples(7),
        WriteOptions::new(WriteFormat::Mds { columns: None }).shard_bytes(300),
        WriteOptions::new(WriteFormat::WebDataset).shard_samples(9),
        zstd(WriteOptions::new(WriteFormat::Jsonl { fields: None }).shard_samples(11)),
        zstd(WriteOptions::new(WriteFormat::Mds { columns: None }).shard_bytes(400)),
    ]
}

fn zstd(mut o: WriteOptions) -> WriteOptions {
    o.zstd = Some(3);
    o
}

/// Pushes `docs[from..to]`.
fn push(w: &mut DatasetWriter, opts: &WriteOptions, from: usize, to: usize) {
    let docs = docs();
    for (i, d) in docs.iter().enumerate().take(to).skip(from) {
        match opts.format {
            WriteFormat::Tokens { .. } | WriteFormat::Megatron { .. } => w.push_tokens(d).unwrap(),
            _ => w.push_record(&record(i, d)).unwrap(),
        }
    }
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .filter(|(n, _)| !n.ends_with(".partial"))
        .collect()
}

/// Every record in dataset order: shards in manifest order, samples in
/// shard order.
fn in_order(ds: Dataset) -> Vec<Record> {
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .shuffle_shards(false)
        .shuffle_within_shard(false)
        .build()
        .unwrap();
    ws.stream()
        .fetch(4)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .collect::<zephon_core::Result<_>>()
        .unwrap()
}

fn whole(dir: &Path, opts: &WriteOptions) {
    let (mut w, resume) =
        DatasetWriter::create("out", dir.to_str().unwrap(), opts.clone()).unwrap();
    assert_eq!(resume.documents, 0);
    push(&mut w, opts, 0, docs().len());
    w.finish().unwrap();
}

#[test]
fn the_output_opens_with_the_documents_it_was_given() {
    let tmp = tempfile::tempdir().unwrap();
    let all = docs();
    for (k, opts) in formats().into_iter().enumerate() {
        let dir = tmp.path().join(k.to_string());
        whole(&dir, &opts);
        let ds = Dataset::from_path("out", &dir).unwrap();
        let got = in_order(ds);
        match opts.format {
            WriteFormat::Tokens { seq_len, .. } => {
                let flat: Vec<u32> = all.concat();
                let want: Vec<&[u32]> = flat.chunks_exact(seq_len as usize).collect();
                let got: Vec<Vec<u32>> = got
                    .iter()
                    .map(|r| r.token_ids("tokens").unwrap().iter().collect())
                    .collect();
                assert_eq!(got, want);
            }
            WriteFormat::Megatron { .. } => {
                let got: Vec<Vec<u32>> = got
                    .iter()
                    .map(|r| r.token_ids("tokens").unwrap().iter().collect())
                    .collect();
                assert_eq!(got, all);
            }
            _ => {
                assert_eq!(got.len(), all.len(), "format {k}");
                for (i, r) in got.iter().enumerate() {
                    assert_eq!(
                        r.text("text"),
                        record(i, &all[i]).text("text"),
                        "format {k}"
                    );
                    assert_eq!(
                        r.get("id").and_then(|v| v.as_int()),
                        Some(i as i64),
                        "format {k}"
                    );
                }
            }
        }
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
        assert!(
            manifest["shards"].as_array().unwrap().len() > 2,
            "{manifest}"
        );
        if opts.zstd.is_some() {
            assert!(
                files(&dir)
                    .keys()
                    .any(|k| k.ends_with(".zst") || k.ends_with(".zstd")),
                "format {k}"
            );
        }
        if matches!(opts.format, WriteFormat::Mds { .. }) {
            // Streaming's own index, version 2.
            assert_eq!(manifest["version"], 2, "{manifest}");
            assert_eq!(
                manifest["shards"][0]["column_names"],
                serde_json::json!(["id", "text"])
            );
        } else {
            assert!(manifest["shards"][0]["sha256"].is_string());
        }
    }
}

#[test]
fn a_run_stopped_anywhere_and_started_again_writes_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let n = docs().len();
    for (k, opts) in formats().into_iter().enumerate() {
        let reference = tmp.path().join(format!("ref-{k}"));
        whole(&reference, &opts);
        let want = files(&reference);
        for stop in [0, 1, 9, 23, 37, n - 1, n] {
            let dir = tmp.path().join(format!("run-{k}-{stop}"));
            let (mut w, _) =
                DatasetWriter::create("out", dir.to_str().unwrap(), opts.clone()).unwrap();
            push(&mut w, &opts, 0, stop);
            drop(w);
            // What a process killed while writing a shard leaves.
            std::fs::write(dir.join("part-00099.bin.partial"), b"half").unwrap();
            let (mut w, resume) =
                DatasetWriter::create("out", dir.to_str().unwrap(), opts.clone()).unwrap();
            assert!(resume.documents as usize <= stop, "{resume:?}");
            assert!(!resume.complete);
            push(&mut w, &opts, resume.documents as usize, n);
            w.finish().unwrap();
            assert_eq!(
                files(&dir),
                want,
                "format {k}, stopped after {stop} documents"
            );
            assert!(!dir.join("part-00099.bin.partial").exists());
        }
    }
}

#[test]
fn a_run_killed_after_a_shard_was_renamed_but_before_the_journal_listed_it_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let n = docs().len();
    for (k, opts) in formats().into_iter().enumerate() {
        let reference = tmp.path().join(format!("ref-{k}"));
        whole(&reference, &opts);
        let want = files(&reference);
        let first = want
            .keys()
            .find(|name| !matches!(name.as_str(), "index.json" | "prepare.json"))
            .unwrap_or_else(|| panic!("format {k}: no shard"))
            .clone();
        let dir = tmp.path().join(format!("run-{k}"));
        let (w, _) = DatasetWriter::create("out", dir.to_str().unwrap(), opts.clone()).unwrap();
        drop(w);
        // The first shard in place under its name, the journal not yet
        // listing it: what a kill between the two leaves.
        std::fs::write(dir.join(&first), b"a shard the journal never listed").unwrap();
        let (mut w, resume) =
            DatasetWriter::create("out", dir.to_str().unwrap(), opts.clone()).unwrap();
        assert_eq!(resume.documents, 0, "format {k}: {resume:?}");
        push(&mut w, &opts, 0, n);
        w.finish().unwrap();
        assert_eq!(files(&dir), want, "format {k}");
    }
}

#[test]
fn a_changed_finished_shard_is_redone_with_those_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = formats().remove(0);
    let reference = tmp.path().join("ref");
    whole(&reference, &opts);
    let dir = tmp.path().join("run");
    let (mut w, _) = DatasetWriter::create("out", dir.to_str().unwrap(), opts.clone()).unwrap();
    push(&mut w, &opts, 0, 40);
    drop(w);
    let mut bytes = std::fs::read(dir.join("part-00001.bin")).unwrap();
    bytes[3] ^= 1;
    std::fs::write(dir.join("part-00001.bin"), bytes).unwrap();
    let (mut w, resume) =
        DatasetWriter::create("out", dir.to_str().unwrap(), opts.clone()).unwrap();
    assert_eq!(resume.shards, 1);
    assert_eq!(resume.redone.as_deref(), Some("part-00001.bin"));
    push(&mut w, &opts, resume.documents as usize, docs().len());
    w.finish().unwrap();
    assert_eq!(files(&dir), files(&reference));

    // Whole already: started again, it checks and writes nothing.
    let (mut w, resume) = DatasetWriter::create("out", dir.to_str().unwrap(), opts).unwrap();
    assert!(resume.complete, "{resume:?}");
    let e = w.push_tokens(&[1]).unwrap_err();
    assert!(e.to_string().contains("already whole"), "{e}");
    w.finish().unwrap();
    assert_eq!(files(&dir), files(&reference));
}

#[test]
fn a_destination_of_other_content_or_settings_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let opts = formats().remove(0);
    let e = DatasetWriter::create("out", dir.to_str().unwrap(), opts.clone()).unwrap_err();
    assert!(
        e.to_string().contains("notes.txt") && e.to_string().contains("not empty"),
        "{e}"
    );
    std::fs::remove_file(dir.join("notes.txt")).unwrap();
    whole(&dir, &opts);
    let other = opts.clone().settings("tokenizer=other");
    let e = DatasetWriter::create("out", dir.to_str().unwrap(), other).unwrap_err();
    assert!(
        e.to_string().contains("prepare.json") && e.to_string().contains("other settings"),
        "{e}"
    );
    for bad in [opts.clone().shard_bytes(0), opts.clone().shard_samples(0)] {
        let e =
            DatasetWriter::create("out", tmp.path().join("x").to_str().unwrap(), bad).unwrap_err();
        assert!(e.to_string().contains("shard_"), "{e}");
    }
    let megatron_u32 = WriteOptions::new(WriteFormat::Megatron {
        dtype: TokenDtype::U32,
    });
    let e = DatasetWriter::create("out", tmp.path().join("y").to_str().unwrap(), megatron_u32)
        .unwrap_err();
    assert!(e.to_string().contains("dtype"), "{e}");
}

#[test]
fn an_s3_destination_writes_what_a_folder_gets() {
    let tmp = tempfile::tempdir().unwrap();
    let moto = Moto::start(tmp.path());
    moto.create_bucket("out");
    let local = tmp.path().join("local");
    let opts = formats().remove(1);
    whole(&local, &opts);
    let mut remote = opts.clone();
    remote.storage = moto.opts(StorageOptions::default());
    let (mut w, _) = DatasetWriter::create("out", "s3://out/megatron", remote.clone()).unwrap();
    push(&mut w, &remote, 0, 30);
    drop(w);
    let (mut w, resume) =
        DatasetWriter::create("out", "s3://out/megatron", remote.clone()).unwrap();
    assert!(resume.shards > 0, "{resume:?}");
    push(&mut w, &remote, resume.documents as usize, docs().len());
    w.finish().unwrap();
    let cache = tmp.path().join("cache");
    let read = crate::common::cache_opts(&cache);
    let rd = RemoteDataset::open("out", "s3://out/megatron", &moto.opts(read)).unwrap();
    let theirs = read_all(rd.dataset().clone(), false).unwrap();
    let ours = read_all(Dataset::from_path("out", &local).unwrap(), false).unwrap();
    assert_eq!(theirs.len(), ours.len());
    for (a, b) in theirs.iter().zip(&ours) {
        assert_eq!(a.token_ids("tokens"), b.token_ids("tokens"));
    }
}
