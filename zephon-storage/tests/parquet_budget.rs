//! A Parquet shard whose decoded row groups do not fit the process's
//! budget, shuffled within itself: every row still arrives once, and one
//! warning names the dataset and the shard and says what to change. Read
//! with a block shuffle instead, or with the budget raised to hold it, it
//! does not warn. One test: the budget is the process's.

mod common;

use common::warnings::Capture;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tracing_subscriber::layer::SubscriberExt;
use zephon_core::{BlockShuffle, Dataset, PipelineExt, Runner, Value, WorkSource};
use zephon_storage::DatasetExt;
use zephon_storage::format::parquet::{
    DECODED_BUDGET, arrow_array, decoded_budget, parquet, set_decoded_budget,
};

const ROWS: i64 = 12_000;
const GROUP: usize = 1_000;

/// One shard of `ROWS` rows in groups of `GROUP`, about 2.4 MB decoded.
fn write_shard(dir: &Path) {
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    let ids: Vec<i64> = (0..ROWS).collect();
    let texts: Vec<String> = ids
        .iter()
        .map(|i| format!("row {i:06} {}", "x".repeat(180)))
        .collect();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
        ("text", Arc::new(StringArray::from(texts)) as ArrayRef),
    ])
    .unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(GROUP))
        .build();
    let file = std::fs::File::create(dir.join("big.parquet")).unwrap();
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// Every id read from the dataset at `dir` under `ws`'s settings, in order.
fn read(dir: &Path, name: &str, block: Option<u64>) -> Vec<i64> {
    let ds = Dataset::from_path(name, dir).unwrap();
    let ws = WorkSource::builder().dataset(ds, 1.0).seed(3);
    let ws = match block {
        Some(b) => ws
            .shuffle_within_shard(false)
            .shuffle_block_size(BlockShuffle::Size(b)),
        None => ws,
    }
    .build()
    .unwrap();
    let mut ids = Vec::new();
    for b in ws
        .stream()
        .fetch(2)
        .batch(64)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
    {
        for r in &b.unwrap().items {
            match r.get("id") {
                Some(&Value::Int(i)) => ids.push(i),
                other => panic!("id {other:?}"),
            }
        }
    }
    ids
}

#[test]
fn a_shard_past_the_budget_warns_once_and_still_reads_every_row() {
    let warnings = Arc::new(Mutex::new(Vec::new()));
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(Capture(warnings.clone())),
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    write_shard(tmp.path());
    let shard = tmp.path().join("big.parquet").display().to_string();
    let every: Vec<i64> = (0..ROWS).collect();
    let taken = |w: &Arc<Mutex<Vec<String>>>| std::mem::take(&mut *w.lock().unwrap());

    // 1 MiB holds about five of the twelve groups.
    set_decoded_budget(1 << 20).unwrap();
    let mut ids = read(tmp.path(), "starved", None);
    assert_ne!(ids, every, "shuffled within the shard");
    ids.sort_unstable();
    assert_eq!(ids, every, "every row once");
    let warned = taken(&warnings);
    assert_eq!(warned.len(), 1, "{warned:?}");
    for part in [
        "dataset=\"starved\"",
        &format!("shard={shard:?}"),
        "shuffle_block_size",
        "parquet_decoded_bytes",
    ] {
        assert!(warned[0].contains(part), "no {part} in {}", warned[0]);
    }

    // Blocks of consecutive rows stay within a group or two at a time.
    let mut ids = read(tmp.path(), "blocks", Some(500));
    ids.sort_unstable();
    assert_eq!(ids, every);
    assert_eq!(taken(&warnings), Vec::<String>::new());

    // A budget that holds the shard decoded.
    set_decoded_budget(64 << 20).unwrap();
    let mut ids = read(tmp.path(), "roomy", None);
    ids.sort_unstable();
    assert_eq!(ids, every);
    assert_eq!(taken(&warnings), Vec::<String>::new());

    set_decoded_budget(DECODED_BUDGET as u64).unwrap();
    assert_eq!(decoded_budget(), DECODED_BUDGET as u64);
}
