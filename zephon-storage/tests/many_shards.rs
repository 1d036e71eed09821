//! A local dataset of more shards than the kernel lets a process map at
//! once (`vm.max_map_count`): with every shard mapped for the dataset's
//! life, opening such a folder failed with "Cannot allocate memory"; shards
//! are now mapped while they are read (`zephon_storage::local::mapped_files`).
//! One test in this file: it takes tens of thousands of maps.

use std::collections::BTreeSet;
use zephon_core::{Dataset, PipelineExt, Runner, WorkSource};
use zephon_storage::DatasetExt;

#[test]
fn a_folder_of_more_shards_than_the_kernel_maps_opens_and_reads_each_sample_once() {
    let Some(limit) = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
    else {
        return; // no such limit here
    };
    if limit > 200_000 {
        eprintln!("vm.max_map_count is {limit}: too many files to write to pass it");
        return;
    }
    let n = limit + 2_000;
    let dir = tempfile::tempdir().unwrap();
    for i in 0..n {
        std::fs::write(
            dir.path().join(format!("{i:06}.jsonl")),
            format!("{{\"i\":{i}}}\n"),
        )
        .unwrap();
    }
    let ds = Dataset::from_path("many", dir.path()).unwrap();
    assert_eq!(ds.shards().len(), n);
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
            let i = r.get("i").and_then(|v| v.as_int()).unwrap();
            assert!(seen.insert(i), "sample {i} read twice");
        }
    }
    assert_eq!(seen.len(), n, "every sample once");
    assert_eq!(seen.last(), Some(&(n as i64 - 1)));
}
