//! The manifest and the sidecars go through the node's cache as shards do:
//! datasets opened over one cache folder (each with a memory tier of its
//! own, as the processes of a node have) download `index.json` and each
//! `.idx` once between them, and read the new ones once they change.
//! Against nginx, whose ETags change with every write.

use crate::common;

use common::{Nginx, indexed_dataset, read_all, small_cache, sorted_fields};
use zephon_storage::RemoteDataset;

/// Opens the dataset `opens` times over the cache folder of `opts`, one
/// after the other (each dropped before the next, so each builds a fresh
/// cache over the folder), reading every sample each time; returns what
/// the last read.
fn open_and_read(uri: &str, opts: &zephon_storage::StorageOptions, opens: usize) -> Vec<String> {
    let mut last = Vec::new();
    for _ in 0..opens {
        let rd = RemoteDataset::open("d", uri, opts).unwrap();
        last = sorted_fields(&read_all(rd.dataset().clone(), false).unwrap());
    }
    last
}

#[test]
fn datasets_sharing_a_cache_folder_download_the_manifest_and_each_sidecar_once() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let mut written = indexed_dataset(&data, 3, 200);
    written.sort();
    let nginx = Nginx::start(t.path(), &data);
    // By blocks (sidecars through the block cache's shards) and by byte
    // range (no shard cached, the sidecars still are).
    for (mode, byte_range) in [("blocks", false), ("ranges", true)] {
        let before = |needle: &str| nginx.gets(needle);
        let (manifest, sidecars) = (before("index.json"), before(".idx"));
        let before_each: Vec<usize> = (0..3)
            .map(|s| before(&format!("/{s:03}.jsonl.idx")))
            .collect();
        let opts = small_cache(&t.path().join(mode), 4 << 20, 16 << 20).byte_range(byte_range);
        assert_eq!(open_and_read(&nginx.uri(), &opts, 4), written, "{mode}");
        assert_eq!(
            nginx.gets("index.json") - manifest,
            1,
            "{mode}: GETs of index.json"
        );
        assert_eq!(
            nginx.gets(".idx") - sidecars,
            3,
            "{mode}: GETs of the 3 sidecars"
        );
        for (s, before) in before_each.iter().enumerate() {
            let name = format!("/{s:03}.jsonl.idx");
            assert_eq!(nginx.gets(&name) - before, 1, "{mode}: {name}");
        }
    }
}

#[test]
fn a_changed_manifest_and_sidecar_are_read_afresh() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let mut written = indexed_dataset(&data, 2, 100);
    written.sort();
    let nginx = Nginx::start(t.path(), &data);
    let opts = small_cache(t.path(), 4 << 20, 16 << 20);
    assert_eq!(open_and_read(&nginx.uri(), &opts, 2), written);
    assert_eq!(nginx.gets("index.json"), 1);

    // Other shards, of other lengths, and one more: index.json (of
    // another length too, so its ETag changes whenever it is written) and
    // both sidecars change.
    std::fs::remove_dir_all(&data).unwrap();
    let mut rewritten = indexed_dataset(&data, 3, 130);
    rewritten.sort();
    assert_ne!(rewritten, written);
    assert_eq!(open_and_read(&nginx.uri(), &opts, 2), rewritten);
    assert_eq!(nginx.gets("index.json"), 2, "one GET per version");
}
