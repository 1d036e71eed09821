//! The commands find a local dataset's shards by one rule: subfolders and
//! symlinks included, a symlink loop an error naming it. `inspect` and
//! `rank-run` here; `run` opens its datasets through `Dataset::from_uri`,
//! which zephon-storage's tests hold to the same rule.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

fn zephon(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn shard(path: &Path, ids: std::ops::Range<u32>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text: String = ids.map(|i| format!("{{\"id\":{i}}}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// `data/` holds `a.jsonl` (ids 0..5), `sub/b.jsonl` (5..10), a symlink
/// to `c.jsonl` (10..15) outside it and a symlink to a folder outside it
/// holding `d.jsonl` (15..20).
fn linked(root: &Path) -> PathBuf {
    let data = root.join("data");
    shard(&data.join("a.jsonl"), 0..5);
    shard(&data.join("sub/b.jsonl"), 5..10);
    shard(&root.join("elsewhere/c.jsonl"), 10..15);
    shard(&root.join("folder/d.jsonl"), 15..20);
    symlink(root.join("elsewhere/c.jsonl"), data.join("c.jsonl")).unwrap();
    symlink(root.join("folder"), data.join("linked")).unwrap();
    data
}

#[test]
fn inspect_counts_shards_in_subfolders_and_behind_symlinks() {
    let t = tempfile::tempdir().unwrap();
    let data = linked(t.path());
    for uri in [
        data.display().to_string(),
        format!("file://{}", data.display()),
    ] {
        let (ok, out, err) = zephon(&["inspect", &uri, "--json"]);
        assert!(ok, "{err}");
        let r: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(r["shards"], 4, "{out}");
        assert_eq!(r["samples"]["total"], 20, "{out}");
    }
}

#[test]
fn inspect_names_a_symlink_loop() {
    let t = tempfile::tempdir().unwrap();
    let data = linked(t.path());
    symlink(&data, data.join("sub/again")).unwrap();
    let (ok, _, err) = zephon(&["inspect", &data.display().to_string()]);
    assert!(!ok);
    assert!(err.contains("sub/again") && err.contains("loop"), "{err}");
}

#[test]
fn rank_run_reads_shards_in_subfolders_and_behind_symlinks() {
    let t = tempfile::tempdir().unwrap();
    let data = linked(t.path());
    let out = t.path().join("batches.jsonl");
    let (ok, _, err) = zephon(&[
        "rank-run",
        "--data",
        &data.display().to_string(),
        "--lanes",
        "1",
        "--steps",
        "100",
        "--out",
        &out.display().to_string(),
    ]);
    assert!(ok, "{err}");
    let mut ids: Vec<i64> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .flat_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_i64().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..20).collect::<Vec<_>>());
}

/// `build-index` writes inside the folder it is given: a linked folder's
/// shards are indexed in the manifest, but their line-index sidecars are
/// not written where the link leads (it wrote `folder/d.jsonl.idx`), and a
/// sidecar or manifest name that is a symbolic link is an error, not a
/// write through it (which truncated the file it led to).
#[test]
fn build_index_writes_only_inside_the_folder_it_is_given() {
    let t = tempfile::tempdir().unwrap();
    let data = linked(t.path());
    let (ok, _, err) = zephon(&["build-index", &data.display().to_string()]);
    assert!(ok, "{err}");
    assert!(data.join("index.json").exists());
    assert!(data.join("a.jsonl.idx").exists() && data.join("sub/b.jsonl.idx").exists());
    assert!(!t.path().join("folder/d.jsonl.idx").exists());
    let (ok, out, err) = zephon(&["inspect", &data.display().to_string(), "--json"]);
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["samples"]["total"], 20, "{out}");

    for name in ["a.jsonl.idx", "index.json"] {
        let victim = t.path().join("victim.txt");
        std::fs::write(&victim, "keep me").unwrap();
        std::fs::remove_file(data.join(name)).unwrap();
        symlink(&victim, data.join(name)).unwrap();
        let (ok, _, err) = zephon(&["build-index", &data.display().to_string()]);
        assert!(!ok, "{name}: written through a link");
        assert!(
            err.contains(name) && err.contains("symbolic link"),
            "{name}: {err}"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        std::fs::remove_file(data.join(name)).unwrap();
    }
}

/// `build-index` records per-chunk sums of the shards it reads; flat token
/// files, counted from their size, get them (and a SHA-256) only with
/// `--checksums`.
#[test]
fn build_index_checksums_reads_token_files_too() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("tok");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.bin"), vec![1u8; 3 << 20]).unwrap();
    let manifest = |args: &[&str]| {
        let (ok, out, err) = zephon(args);
        assert!(ok, "{out}{err}");
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
        m["shards"][0].clone()
    };
    let uri = dir.display().to_string();
    let plain = manifest(&["build-index", &uri]);
    assert!(
        plain.get("chunks").is_none() && plain.get("sha256").is_none(),
        "{plain}"
    );
    let full = manifest(&["build-index", &uri, "--checksums"]);
    assert_eq!(full["chunks"]["bytes"], 1 << 20, "{full}");
    assert_eq!(
        full["chunks"]["crc32c"].as_array().unwrap().len(),
        3,
        "{full}"
    );
    assert!(full["sha256"].is_string(), "{full}");
}
