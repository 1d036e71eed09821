//! A local dataset of more shards than the kernel lets a process map at
//! once (`vm.max_map_count`): with every shard mapped for the dataset's
//! life, opening such a folder failed with "Cannot allocate memory"; shards
//! are now mapped while they are read (`zephon_storage::local::mapped_files`),
//! every file of them: an MDS shard's offset table and a Megatron shard's
//! `.idx` too, which kept a map each for the dataset's life.
//! One test in this file: it takes tens of thousands of maps.

use std::collections::BTreeSet;
use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
use zephon_storage::format::TokenDtype;
use zephon_storage::format::mds::{MdsColumn, encode_shard};
use zephon_storage::format::tokens::encode_megatron;
use zephon_storage::{DatasetExt, FormatOptions};

/// Reads `ds` whole, shards and samples shuffled; `id` names each record.
fn read_ids(ds: Dataset, id: impl Fn(&Record) -> i64) -> BTreeSet<i64> {
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(3)
        .build()
        .unwrap();
    let mut seen = BTreeSet::new();
    for b in ws
        .stream()
        .fetch(4)
        .batch(256)
        .into_blocking_iter(Runner::threads())
        .unwrap()
    {
        for r in b.unwrap().items {
            let i = id(&r);
            assert!(seen.insert(i), "sample {i} read twice");
        }
    }
    seen
}

/// JSONL shards (read by the JSONL reader), flat token files (by the
/// other formats' reader), MDS shards (whose offset table is read in the
/// shard) and Megatron pairs (two files a shard), each more than the limit.
#[test]
fn a_folder_of_more_shards_than_the_kernel_maps_opens_and_reads_each_sample_once() {
    // Where the limit cannot be passed here, the test cannot check; under
    // CI=true that is a failure, not a pass.
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let Some(limit) = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
    else {
        assert!(!ci, "CI=true: no vm.max_map_count to pass, nothing checked");
        eprintln!("skipped: no vm.max_map_count here");
        return;
    };
    if limit > 200_000 {
        assert!(
            !ci,
            "CI=true: vm.max_map_count is {limit}, too many files to write to pass it"
        );
        eprintln!("skipped: vm.max_map_count is {limit}: too many files to write to pass it");
        return;
    }
    let n = limit + 2_000;
    let want: BTreeSet<i64> = (0..n as i64).collect();

    let jsonl = tempfile::tempdir().unwrap();
    for i in 0..n {
        let p = jsonl.path().join(format!("{i:06}.jsonl"));
        std::fs::write(p, format!("{{\"i\":{i}}}\n")).unwrap();
    }
    let ds = Dataset::from_path("many", jsonl.path()).unwrap();
    assert_eq!(ds.shards().len(), n);
    let ids = read_ids(ds, |r| r.get("i").and_then(|v| v.as_int()).unwrap());
    assert!(ids == want, "{} samples of {n}", ids.len());
    drop(jsonl);

    // One window of two u32 tokens a file: [i, i + 1].
    let tokens = tempfile::tempdir().unwrap();
    for i in 0..n as u32 {
        let mut bytes = i.to_le_bytes().to_vec();
        bytes.extend_from_slice(&(i + 1).to_le_bytes());
        std::fs::write(tokens.path().join(format!("{i:06}.bin")), bytes).unwrap();
    }
    let format = FormatOptions::default().seq_len(2).dtype(TokenDtype::U32);
    let ds = Dataset::from_path_with("many", tokens.path(), &format).unwrap();
    assert_eq!(ds.shards().len(), n);
    let ids = read_ids(ds, |r| {
        let t = r.token_ids("tokens").unwrap();
        let (a, b) = (t.get(0).unwrap(), t.get(1).unwrap());
        assert_eq!(b, a + 1);
        a as i64
    });
    assert!(ids == want, "{} samples of {n}", ids.len());
    drop(tokens);

    // One sample a shard, its id and a text; Streaming's index.json.
    let mds = tempfile::tempdir().unwrap();
    let columns = [
        MdsColumn::new("id", "int", Some(8)),
        MdsColumn::new("text", "str", None),
    ];
    let mut shards = Vec::with_capacity(n);
    for i in 0..n as i64 {
        let raw = encode_shard(
            &columns,
            &[vec![i.to_le_bytes().to_vec(), format!("t{i}").into_bytes()]],
        );
        let name = format!("shard.{i:06}.mds");
        std::fs::write(mds.path().join(&name), &raw).unwrap();
        shards.push(serde_json::json!({
            "column_encodings": ["int", "str"], "column_names": ["id", "text"],
            "column_sizes": [8, null], "compression": null, "format": "mds", "hashes": [],
            "raw_data": {"basename": name, "bytes": raw.len(), "hashes": {}},
            "samples": 1, "size_limit": 1 << 26, "version": 2, "zip_data": null,
        }));
    }
    let index = serde_json::json!({"version": 2, "shards": shards});
    std::fs::write(mds.path().join("index.json"), index.to_string()).unwrap();
    let ds = Dataset::from_path("many", mds.path()).unwrap();
    assert_eq!(ds.shards().len(), n);
    let ids = read_ids(ds, |r| {
        let i = r.get("id").and_then(|v| v.as_int()).unwrap();
        assert_eq!(r.text("text"), Some(format!("t{i}").as_str()));
        i
    });
    assert!(ids == want, "{} samples of {n}", ids.len());
    drop(mds);

    // Megatron pairs of one sequence, [i, i + 1]: 2n files to map.
    let megatron = tempfile::tempdir().unwrap();
    for i in 0..n as u32 {
        let (bin, idx) = encode_megatron(&[vec![i, i + 1]], TokenDtype::U32).unwrap();
        std::fs::write(megatron.path().join(format!("{i:06}.bin")), bin).unwrap();
        std::fs::write(megatron.path().join(format!("{i:06}.idx")), idx).unwrap();
    }
    let ds = Dataset::from_path("many", megatron.path()).unwrap();
    assert_eq!(ds.shards().len(), n);
    let ids = read_ids(ds, |r| {
        let t = r.token_ids("tokens").unwrap();
        assert_eq!((t.len(), t.get(1).unwrap()), (2, t.get(0).unwrap() + 1));
        t.get(0).unwrap() as i64
    });
    assert!(ids == want, "{} samples of {n}", ids.len());
}
