//! Messages about bad input say what is wrong and show it safely: a
//! missing folder does not exist (it is not empty), `build-index` names the
//! line that is not JSON, tar member names are escaped.

use std::path::Path;
use zephon_core::Dataset;
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::format::webdataset::tar;
use zephon_storage::scan::build_index;
use zephon_storage::{CacheOptions, DatasetExt, StorageOptions, UriDatasetExt};

const FOUR: &str = "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n{\"a\":4}\n";

fn uncached(dir: &Path) -> StorageOptions {
    StorageOptions::default().cache(
        CacheOptions::default()
            .root(dir.join("cache"))
            .enabled(false),
    )
}

#[test]
fn a_missing_folder_says_it_does_not_exist() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("nope");
    let local = Dataset::from_path("m", &missing).unwrap_err().to_string();
    let uri = format!("file://{}", missing.display());
    let remote = Dataset::from_uri_with("m", &uri, &uncached(t.path()))
        .unwrap_err()
        .to_string();
    for err in [local, remote] {
        assert!(
            err.contains("does not exist") && !err.contains("empty"),
            "{err}"
        );
        assert!(err.contains(&missing.display().to_string()), "{err}");
    }
}

#[test]
fn build_index_refuses_a_jsonl_file_that_is_not_json_lines() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("a.jsonl"), FOUR).unwrap();
    std::fs::write(t.path().join("b.jsonl"), "{\"a\":1}\n<html>\n{\"a\":3}\n").unwrap();
    let b = Backend::open("d", &t.path().display().to_string(), &Default::default()).unwrap();
    let err = runtime::block_on(build_index(&b, "d"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("b.jsonl") && err.contains("line 2"), "{err}");
    assert!(
        !t.path().join("index.json").exists(),
        "no manifest vouches for it"
    );
}

/// A one-member tar whose member name is `name` and whose header claims
/// `size` bytes of data while holding `held`.
fn tar_with(name: &[u8], size: u64, held: usize) -> Vec<u8> {
    let mut h = tar::Header::new_ustar();
    h.as_old_mut().name[..name.len()].copy_from_slice(name);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    let mut out = h.as_bytes().to_vec();
    out.extend(std::iter::repeat_n(b'x', held));
    out
}

#[test]
fn tar_member_names_in_errors_are_escaped() {
    let t = tempfile::tempdir().unwrap();
    let name = b"\x1b[2J\x1b]0;pwned\x07\xff.txt";
    std::fs::write(t.path().join("a.tar"), tar_with(name, 4096, 10)).unwrap();
    let err = Dataset::from_path("tar", t.path()).unwrap_err().to_string();
    assert!(
        !err.chars().any(char::is_control),
        "raw control bytes: {err:?}"
    );
    assert!(
        err.contains("\\u{1b}[2J") && err.contains("truncated"),
        "{err}"
    );
}
