//! Bad local input gives errors that name the file, the line or the path.

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
