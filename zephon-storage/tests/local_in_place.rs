//! Local datasets are read in place whichever way they are opened, and
//! every way of opening finds the same shards (subfolders, symlinks).

use crate::common;

use common::{cache_opts, fields, read_all, write_dataset};
use std::os::unix::fs::symlink;
use std::path::Path;
use zephon_core::Dataset;
use zephon_storage::format::{FormatOptions, TokenDtype};
use zephon_storage::{DatasetExt, UriDatasetExt};

/// Every way `dir` can be named to `from_uri`.
fn uris(dir: &Path) -> [String; 2] {
    [
        dir.display().to_string(),
        format!("file://{}", dir.display()),
    ]
}

fn assert_no_cache(root: &Path) {
    let cache = root.join("cache");
    let entries = std::fs::read_dir(&cache).map_or(0, |d| d.count());
    assert_eq!(
        entries,
        0,
        "the shard cache at {} was used",
        cache.display()
    );
}

#[test]
fn from_uri_reads_a_local_jsonl_folder_in_place_like_from_path() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_dataset(&data, 3, 40);
    let want = fields(&read_all(Dataset::from_path("d", &data).unwrap(), false).unwrap());
    assert_eq!(want.len(), 120);
    // A cache too small for any shard: opening through it would be refused.
    let mut opts = cache_opts(t.path());
    opts.cache.limit_bytes = 100;
    for uri in uris(&data) {
        let ds = Dataset::from_uri_with("d", &uri, &opts).unwrap();
        assert_eq!(fields(&read_all(ds, true).unwrap()), want, "{uri}");
        assert_no_cache(t.path());
    }
}

#[test]
fn from_uri_reads_a_local_token_file_in_place_like_from_path() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("tokens");
    std::fs::create_dir_all(&data).unwrap();
    let tokens: Vec<u8> = (0u16..4000).flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(data.join("train.bin"), &tokens).unwrap();
    // The manifest says how the flat file is cut, as `zephon run` users write it.
    std::fs::write(
        data.join("index.json"),
        r#"{"version":1,"format":{"kind":"tokens","dtype":"u16","seq_len":33},
            "shards":[{"path":"train.bin","samples":121,"bytes":8000}]}"#,
    )
    .unwrap();
    let opts = FormatOptions::default().seq_len(33).dtype(TokenDtype::U16);
    let want =
        fields(&read_all(Dataset::from_path_with("d", &data, &opts).unwrap(), false).unwrap());
    assert_eq!(want.len(), 4000 / 33);
    for uri in uris(&data) {
        let ds = Dataset::from_uri_with("d", &uri, &cache_opts(t.path())).unwrap();
        assert_eq!(fields(&read_all(ds, true).unwrap()), want, "{uri}");
        assert_no_cache(t.path());
    }
}

/// `data/` holds `000.jsonl`, `sub/001.jsonl`, a symlink to a shard file
/// outside it and a symlink to a folder of shards outside it.
fn linked_dataset(root: &Path) -> std::path::PathBuf {
    let (data, outside) = (root.join("data"), root.join("outside"));
    write_dataset(&data, 1, 10);
    write_dataset(&outside, 4, 10);
    std::fs::create_dir_all(data.join("sub")).unwrap();
    std::fs::rename(outside.join("001.jsonl"), data.join("sub/001.jsonl")).unwrap();
    symlink(outside.join("002.jsonl"), data.join("002.jsonl")).unwrap();
    std::fs::create_dir_all(root.join("more")).unwrap();
    std::fs::rename(outside.join("003.jsonl"), root.join("more/003.jsonl")).unwrap();
    symlink(root.join("more"), data.join("more")).unwrap();
    data
}

fn ids(ds: Dataset) -> Vec<i64> {
    let mut ids: Vec<i64> = read_all(ds, false)
        .unwrap()
        .iter()
        .map(|r| r.get("id").and_then(|v| v.as_int()).unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

#[test]
fn subfolders_and_symlinks_are_read_by_every_way_of_opening() {
    let t = tempfile::tempdir().unwrap();
    let data = linked_dataset(t.path());
    let want: Vec<i64> = (0..40).collect();
    let ds = Dataset::from_path("d", &data).unwrap();
    assert_eq!(ds.shards().len(), 4);
    assert_eq!(ids(ds), want);
    for uri in uris(&data) {
        let ds = Dataset::from_uri_with("d", &uri, &cache_opts(t.path())).unwrap();
        assert_eq!(ids(ds), want, "{uri}");
    }
}

#[test]
fn a_symlink_loop_is_an_error_naming_it_for_every_way_of_opening() {
    let t = tempfile::tempdir().unwrap();
    let data = linked_dataset(t.path());
    symlink(&data, data.join("sub/back")).unwrap();
    let named = |e: zephon_core::Error| {
        let e = e.to_string();
        assert!(e.contains("sub/back") && e.contains("loop"), "{e}");
    };
    named(Dataset::from_path("d", &data).unwrap_err());
    for uri in uris(&data) {
        named(Dataset::from_uri_with("d", &uri, &cache_opts(t.path())).unwrap_err());
    }
}

#[test]
fn a_shard_reached_twice_through_a_symlink_is_an_error_not_a_repeat() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_dataset(&data, 2, 5);
    symlink(data.join("001.jsonl"), data.join("latest.jsonl")).unwrap();
    let e = Dataset::from_path("d", &data).unwrap_err().to_string();
    assert!(
        e.contains("latest.jsonl") && e.contains("001.jsonl") && e.contains("twice"),
        "{e}"
    );
}

#[test]
fn a_broken_symlink_is_an_error_naming_it() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_dataset(&data, 1, 5);
    symlink(t.path().join("gone.jsonl"), data.join("gone.jsonl")).unwrap();
    let e = Dataset::from_path("d", &data).unwrap_err().to_string();
    assert!(
        e.contains("gone.jsonl") && e.contains("broken symlink"),
        "{e}"
    );
}
