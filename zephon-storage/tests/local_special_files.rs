//! A local dataset's names can be anything a file system holds: a FIFO
//! (opening one waits for a writer), a link to a device that reads without
//! end (`/dev/zero`), a manifest of any length, two names of one file. Each
//! is an error naming the path, returned at once; none hangs the open,
//! takes all the memory or reads a sample twice.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;
use zephon_core::Dataset;
use zephon_storage::{DatasetExt, StorageOptions, UriDatasetExt};

const TOKENS: &str = r#"{"version":1,"format":{"kind":"tokens","dtype":"u16","seq_len":4},"shards":[{"path":"z.bin","samples":2,"bytes":16}]}"#;

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
}

/// The error opening `dir` gives, which must come within 20 s: before,
/// a FIFO hung the open for good.
fn open_error(dir: &Path, opts: StorageOptions) -> String {
    let (tx, rx) = mpsc::channel();
    let uri = dir.display().to_string();
    std::thread::spawn(move || {
        let _ = tx.send(Dataset::from_uri_with("special", &uri, &opts).map(|d| d.num_samples()));
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(n)) => panic!("opened with {n} samples"),
        Ok(Err(e)) => e.to_string(),
        Err(_) => panic!("the open still waits after 20 s"),
    }
}

/// Makes a special file at a path.
type Make = fn(&Path);

/// A FIFO, or a link to `/dev/zero`, with what the error must call it.
const SPECIAL: [(Make, &str); 2] = [
    (mkfifo, "not a regular file but a FIFO"),
    (link_to_zero, "not a regular file but a character device"),
];

fn link_to_zero(path: &Path) {
    std::os::unix::fs::symlink("/dev/zero", path).unwrap();
}

#[test]
fn a_manifest_that_is_a_fifo_or_a_device_is_refused_at_once() {
    for (make, what) in SPECIAL {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.jsonl"), "{\"a\":1}\n").unwrap();
        make(&dir.path().join("index.json"));
        let err = open_error(dir.path(), StorageOptions::default());
        assert!(err.contains("index.json") && err.contains(what), "{err}");
    }
}

#[test]
fn shards_a_manifest_names_that_are_a_fifo_or_a_device_are_refused() {
    for (make, what) in SPECIAL {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.json"), TOKENS).unwrap();
        make(&dir.path().join("z.bin"));
        let err = open_error(dir.path(), StorageOptions::default());
        assert!(err.contains("z.bin") && err.contains(what), "{err}");
    }
}

#[test]
fn a_local_manifest_longer_than_the_limit_is_refused_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let tokens: Vec<u8> = (0u16..8).flat_map(|t| t.to_le_bytes()).collect();
    std::fs::write(dir.path().join("z.bin"), &tokens).unwrap();
    // Valid JSON, padded past 2 KiB with spaces.
    let padded = format!("{TOKENS}{}", " ".repeat(4096));
    std::fs::write(dir.path().join("index.json"), &padded).unwrap();
    let err = open_error(dir.path(), StorageOptions::default().manifest_limit(2048));
    assert!(
        err.contains("index.json")
            && err.contains("longer than the limit of 2048 bytes")
            && err.contains("manifest_limit"),
        "{err}"
    );
    // Within the default limit, the same folder opens.
    let ds = Dataset::from_path("special", dir.path()).unwrap();
    assert_eq!(ds.num_samples(), 2);
}

#[test]
fn a_manifest_naming_one_file_under_two_names_is_refused() {
    let link = |kind: &str, dir: &Path| match kind {
        "symlink" => std::os::unix::fs::symlink("z.bin", dir.join("y.bin")).unwrap(),
        _ => std::fs::hard_link(dir.join("z.bin"), dir.join("y.bin")).unwrap(),
    };
    for kind in ["symlink", "hard link"] {
        let dir = tempfile::tempdir().unwrap();
        let tokens: Vec<u8> = (0u16..8).flat_map(|t| t.to_le_bytes()).collect();
        std::fs::write(dir.path().join("z.bin"), &tokens).unwrap();
        link(kind, dir.path());
        let both = TOKENS.replace(r#"}]}"#, r#"},{"path":"y.bin","samples":2,"bytes":16}]}"#);
        std::fs::write(dir.path().join("index.json"), both).unwrap();
        let err = open_error(dir.path(), StorageOptions::default());
        assert!(
            err.contains(r#""z.bin" and "y.bin""#) && err.contains("read twice"),
            "{kind}: {err}"
        );
    }
}
