//! Opening a local dataset indexes its shards on every core: the shards
//! still come in their order, each with its own samples, and of several
//! shards that cannot be opened the error names the first.

use zephon_core::Dataset;
use zephon_storage::DatasetExt;
use zephon_storage::format::FormatOptions;

/// Lines of shard `i`: uneven, so threads finish shards at different times.
fn lines(i: usize) -> usize {
    (i * 7) % 23 + 1
}

fn write_shards(dir: &std::path::Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        let text: String = (0..lines(i))
            .map(|l| format!("{{\"shard\":{i},\"line\":{l}}}\n"))
            .collect();
        std::fs::write(dir.join(format!("{i:03}.jsonl")), text).unwrap();
    }
}

#[test]
fn shards_opened_on_every_core_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    write_shards(dir.path(), 40);
    let ds = Dataset::from_path("many", dir.path()).unwrap();
    assert_eq!(ds.shards().len(), 40);
    for (i, shard) in ds.shards().iter().enumerate() {
        assert!(
            shard.name().ends_with(&format!("{i:03}.jsonl")),
            "{}",
            shard.name()
        );
        assert_eq!(shard.len(), lines(i) as u64, "{}", shard.name());
    }
    assert_eq!(
        ds.num_samples(),
        (0..40).map(|i| lines(i) as u64).sum::<u64>()
    );
    // However many threads open it, the same shards in the same order.
    let names = |ds: &Dataset| -> Vec<(String, u64)> {
        ds.shards()
            .iter()
            .map(|s| (s.name().to_owned(), s.len()))
            .collect()
    };
    for threads in [1, 3, 64] {
        let opts = FormatOptions::default().open_threads(threads);
        let again = Dataset::from_path_with("many", dir.path(), &opts).unwrap();
        assert_eq!(names(&again), names(&ds), "{threads} threads");
    }
    let opts = FormatOptions::default().open_threads(4097);
    let err = Dataset::from_path_with("many", dir.path(), &opts)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("open_threads") && err.contains("4097"),
        "{err}"
    );
}

#[test]
fn of_several_broken_shards_the_first_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_shards(dir.path(), 40);
    // Not gzip at all: opening decodes compressed shards, and fails.
    for i in [13, 27, 39] {
        std::fs::remove_file(dir.path().join(format!("{i:03}.jsonl"))).unwrap();
        std::fs::write(dir.path().join(format!("{i:03}.jsonl.gz")), b"not gzip").unwrap();
    }
    for _ in 0..5 {
        let err = Dataset::from_path("broken", dir.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("013.jsonl.gz") && err.contains("corrupt"),
            "{err}"
        );
    }
}

/// A JSONL folder's `index.json` is followed as a remote one is: its
/// shards, in its order, and no file it does not list; a count it gets
/// wrong is an error naming the shard. Before, the folder was listed and
/// the manifest read past, so the same dataset gave other samples on disk
/// than in a bucket; read both ways, they are the same now.
#[test]
fn a_jsonl_manifest_is_followed_as_it_is_remotely() {
    let dir = tempfile::tempdir().unwrap();
    for (file, n) in [("a.jsonl", 2), ("b.jsonl", 3), ("c.jsonl", 4)] {
        let text: String = (0..n).map(|i| format!("{{\"id\":{i}}}\n")).collect();
        std::fs::write(dir.path().join(file), text).unwrap();
    }
    let size = |f: &str| std::fs::metadata(dir.path().join(f)).unwrap().len();
    let manifest = |b_samples: u64| {
        format!(
            r#"{{"version":1,"shards":[{{"path":"b.jsonl","samples":{b_samples},"bytes":{}}},{{"path":"a.jsonl","samples":2,"bytes":{}}}]}}"#,
            size("b.jsonl"),
            size("a.jsonl")
        )
    };
    std::fs::write(dir.path().join("index.json"), manifest(3)).unwrap();
    let ds = Dataset::from_path("web", dir.path()).unwrap();
    // The same folder through the remote backend and the shard cache (as
    // a bucket is read): the same samples in the same seeded order.
    let cache = tempfile::tempdir().unwrap();
    let remote = zephon_storage::RemoteDataset::open(
        "web",
        &dir.path().display().to_string(),
        &crate::common::cache_opts(cache.path()),
    )
    .unwrap();
    assert_eq!(
        crate::common::fields(&crate::common::read_all(ds.clone(), false).unwrap()),
        crate::common::fields(&crate::common::read_all(remote.dataset().clone(), false).unwrap())
    );
    let names: Vec<String> = ds
        .shards()
        .iter()
        .map(|s| s.name().rsplit('/').next().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["b.jsonl", "a.jsonl"]);
    assert_eq!(ds.num_samples(), 5);
    std::fs::write(dir.path().join("index.json"), manifest(4)).unwrap();
    let err = Dataset::from_path("web", dir.path())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("b.jsonl") && err.contains("has 3 samples but the manifest"),
        "{err}"
    );
}
