//! Bad local input gives errors that name the file, the line or the path.

use crate::common;

use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
use zephon_storage::DatasetExt;

/// Every record of `ds`, shards in order and each read front to back.
fn drain(ds: Dataset) -> zephon_core::Result<Vec<Record>> {
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .shuffle_shards(false)
        .shuffle_within_shard(false)
        .build()?;
    let mut records = Vec::new();
    for b in ws
        .stream()
        .fetch(2)
        .batch(4)
        .into_blocking_iter(Runner::threads())?
    {
        records.extend(b?.items);
    }
    Ok(records)
}

#[test]
fn a_line_that_is_not_json_names_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.jsonl"), "{\"t\":1}\n{\"t\":2}\n").unwrap();
    std::fs::write(
        dir.path().join("b.jsonl"),
        "{\"t\":3}\n{\"t\":4}\n{\"t\": oops}\n{\"t\":6}\n",
    )
    .unwrap();
    let ds = Dataset::from_path("bad", dir.path()).unwrap();
    let err = drain(ds).unwrap_err().to_string();
    assert!(err.contains("b.jsonl"), "{err}");
    assert!(err.contains("line 3"), "{err}");
    assert!(err.contains("`bad`"), "{err}");
}

#[test]
fn a_line_that_is_not_an_object_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.jsonl"), "{\"t\":1}\n[1, 2]\n").unwrap();
    let err = drain(Dataset::from_path("arr", dir.path()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 2") && err.contains("JSON object"),
        "{err}"
    );
}

#[test]
fn missing_and_empty_folders_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let err = Dataset::from_path("m", &missing).unwrap_err().to_string();
    assert!(err.contains(&missing.display().to_string()), "{err}");
    std::fs::write(dir.path().join("readme.txt"), "not a shard").unwrap();
    let err = Dataset::from_path("e", dir.path()).unwrap_err().to_string();
    assert!(
        err.contains(&dir.path().display().to_string()) && err.contains("no *.jsonl"),
        "{err}"
    );
}

#[test]
fn a_local_read_gives_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    for s in 0..3 {
        let lines: String = (0..25)
            .map(|i| format!("{{\"id\":{}}}\n", s * 100 + i))
            .collect();
        std::fs::write(dir.path().join(format!("{s}.jsonl")), lines).unwrap();
    }
    let ids: Vec<i64> = drain(Dataset::from_path("ok", dir.path()).unwrap())
        .unwrap()
        .iter()
        .map(|r| r.get("id").and_then(|v| v.as_int()).unwrap())
        .collect();
    let want: Vec<i64> = (0..3)
        .flat_map(|s| (0..25).map(move |i| s * 100 + i))
        .collect();
    assert_eq!(ids, want);
}

/// A local MDS shard's offset table is read in its memory map: one
/// rewritten in place after the dataset was opened (an offset past the
/// shard's end) gives an error naming the sample, not a panic or a read
/// past the map.
#[test]
fn an_mds_offset_table_rewritten_after_open_is_an_error() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().unwrap();
    common::write_mds(dir.path(), 1, 20);
    let ds = Dataset::from_path("rewritten", dir.path()).unwrap();
    // The end of sample 7 (the start of sample 8) is the table's entry 8,
    // after the sample count.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("shard.00000.mds"))
        .unwrap();
    f.seek(SeekFrom::Start(4 + 4 * 8)).unwrap();
    f.write_all(&u32::MAX.to_le_bytes()).unwrap();
    f.sync_all().unwrap();
    let err = drain(ds).unwrap_err().to_string();
    assert!(
        err.contains("sample 7") && err.contains("outside") && err.contains("shard.00000.mds"),
        "{err}"
    );
}

/// The same for a Megatron `.idx`, read in its map: a length made
/// negative and an offset past the `.bin` after the dataset was opened
/// give errors naming the sequence.
#[test]
fn a_megatron_index_rewritten_after_open_is_an_error() {
    use std::io::{Seek, SeekFrom, Write};
    use zephon_storage::format::tokens::{TokenDtype, encode_megatron};
    let docs: Vec<Vec<u32>> = (0..10u32).map(|d| (0..=d).collect()).collect();
    let (bin, idx) = encode_megatron(&docs, TokenDtype::U16).unwrap();
    // Header: magic 9, version 8, dtype 1, sequences 8, documents 8.
    let (lengths, pointers) = (34u64, 34 + 4 * 10);
    for (at, value, what) in [
        (
            lengths + 4 * 3,
            (-1i32).to_le_bytes().to_vec(),
            "sequence 3",
        ),
        (
            pointers + 8 * 5,
            (1i64 << 40).to_le_bytes().to_vec(),
            "sequence 5",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c.bin"), &bin).unwrap();
        std::fs::write(dir.path().join("c.idx"), &idx).unwrap();
        let ds = Dataset::from_path("rewritten", dir.path()).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("c.idx"))
            .unwrap();
        f.seek(SeekFrom::Start(at)).unwrap();
        f.write_all(&value).unwrap();
        f.sync_all().unwrap();
        let err = drain(ds).unwrap_err().to_string();
        assert!(err.contains(what) && err.contains("c.bin"), "{err}");
    }
}

/// A local compressed shard of a followed manifest is held to the decoded
/// size the manifest gives, as a remote one is: a manifest that says less
/// stops the decode there (a bomb would say little), one that says more is
/// refused once the shard ends short of it; both name the shard.
#[test]
fn a_local_compressed_shard_is_held_to_its_manifest_decoded_size() {
    let dir = tempfile::tempdir().unwrap();
    // 1,000 samples of 4 u16 tokens: 8,000 bytes decoded.
    let tokens: Vec<u8> = (0..4000u16).flat_map(|t| t.to_le_bytes()).collect();
    let z = zstd::encode_all(&tokens[..], 3).unwrap();
    std::fs::write(dir.path().join("a.bin.zst"), &z).unwrap();
    let manifest = |decoded: u64| {
        let m = serde_json::json!({
            "version": 1,
            "format": {"kind": "tokens", "dtype": "u16", "seq_len": 4},
            "shards": [{"path": "a.bin.zst", "samples": 1000, "bytes": z.len(),
                        "uncompressed_bytes": decoded}],
        });
        std::fs::write(dir.path().join("index.json"), m.to_string()).unwrap();
    };

    manifest(8000);
    let records = drain(Dataset::from_path("t", dir.path()).unwrap()).unwrap();
    assert_eq!(records.len(), 1000);

    manifest(2000);
    let err = Dataset::from_path("t", dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("a.bin.zst") && err.contains("expected 2000 bytes, got more"),
        "{err}"
    );

    manifest(9000);
    let err = Dataset::from_path("t", dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("a.bin.zst") && err.contains("expected 9000 bytes, got 8000"),
        "{err}"
    );
}

/// An `index.json` that is not a manifest this reader knows (a key
/// misspelled, a file cut short, a later version) is refused, naming it:
/// ignored, the flat token file beside it was cut with the default
/// `seq_len` and dtype, and the samples came out wrong with nothing said.
#[test]
fn a_manifest_that_cannot_be_read_as_one_is_refused_not_ignored() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.bin"), vec![1u8; 4096]).unwrap();
    let good = r#"{"version":1,"format":{"kind":"tokens","dtype":"u32","seq_len":4},"shards":[{"path":"t.bin","samples":256,"bytes":4096}]}"#;
    let manifest = dir.path().join("index.json");
    std::fs::write(&manifest, good).unwrap();
    let ds = Dataset::from_path("tok", dir.path()).unwrap();
    assert_eq!(ds.num_samples(), 256);
    for (bad, says) in [
        (good.replace("seq_len", "seqlen"), "not a Zephon manifest"),
        (good[..good.len() - 1].to_owned(), "not a Zephon manifest"),
        ("not json".to_owned(), "not a Zephon manifest"),
        (
            good.replace("\"version\":1", "\"version\":2"),
            "version 2 is not one this build reads",
        ),
    ] {
        std::fs::write(&manifest, &bad).unwrap();
        let err = Dataset::from_path("tok", dir.path())
            .err()
            .unwrap_or_else(|| panic!("{bad}: opened"))
            .to_string();
        assert!(
            err.contains(says) && err.contains(&manifest.display().to_string()),
            "{bad}: {err}"
        );
    }
}

/// A shard whose size is not the manifest's `bytes` is refused, naming the
/// shard, both sizes and the manifest: a JSONL shard edited to as many
/// lines kept its count, so nothing else noticed, and the folder read
/// otherwise than its copy in a bucket does, where the object's size is
/// held to the manifest.
#[test]
fn a_shard_that_changed_after_its_manifest_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let lines = "{\"t\":1}\n{\"t\":2}\n";
    std::fs::write(dir.path().join("a.jsonl"), lines).unwrap();
    let manifest = |bytes: usize| {
        let m = serde_json::json!({
            "version": 1,
            "format": {"kind": "jsonl"},
            "shards": [{"path": "a.jsonl", "samples": 2, "bytes": bytes}],
        });
        std::fs::write(dir.path().join("index.json"), m.to_string()).unwrap();
    };
    manifest(lines.len());
    let records = drain(Dataset::from_path("t", dir.path()).unwrap()).unwrap();
    assert_eq!(records.len(), 2);

    // Same two lines, one longer: the count still matches.
    std::fs::write(dir.path().join("a.jsonl"), "{\"t\":1}\n{\"t\":22}\n").unwrap();
    let err = Dataset::from_path("t", dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("a.jsonl")
            && err.contains(&format!("is {} bytes", lines.len() + 1))
            && err.contains(&format!("says {}", lines.len()))
            && err.contains("index.json"),
        "{err}"
    );
}
