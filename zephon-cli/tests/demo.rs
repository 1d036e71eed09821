//! `zephon demo` end to end on a small corpus: the runs agree, the report
//! names a limiter, and the elastic restart gives the uninterrupted batches.

use std::process::Command;

#[test]
fn demo_shows_equal_runs_a_report_and_an_exact_restart() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .args([
            "demo",
            "--shards",
            "3",
            "--docs-per-shard",
            "300",
            "--batch-size",
            "8",
            "--shuffle-buffer",
            "64",
            "--min-time-ms",
            "200",
            "--dir",
        ])
        .arg(dir.path())
        .output()
        .expect("zephon runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("checksums equal"), "{stdout}");
    assert!(stdout.contains("bottleneck:"), "{stdout}");
    // Three runs (inline, threads at parallelism 1 and at all cores), each
    // timed over passes until 200 ms have gone.
    assert_eq!(stdout.matches(", parallelism ").count(), 3, "{stdout}");
    assert!(
        stdout.contains("over the threads runner at parallelism 1"),
        "{stdout}"
    );
    // 900 documents, 4 lanes of batches of 8: 28 steps; 9 on two ranks,
    // then 4 on one, every lane's batch of every step compared.
    assert!(
        stdout.contains("global batches identical to the uninterrupted run: yes (52 of 52)"),
        "{stdout}"
    );
    // --dir keeps the corpus.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
    // A second demo into it is refused: it would read the 3 shards there
    // beside its own, and print figures for a corpus it did not run.
    let again = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .args(["demo", "--shards", "2", "--dir"])
        .arg(dir.path())
        .output()
        .expect("zephon runs");
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success(), "{err}");
    assert!(
        err.contains(&dir.path().display().to_string()) && err.contains("not empty"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
}
