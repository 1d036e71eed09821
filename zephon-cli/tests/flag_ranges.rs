//! Command-line flags outside their documented ranges are refused by name
//! before anything runs.

use std::process::Command;

#[test]
fn out_of_range_flags_are_named() {
    for args in [
        &["demo", "--batch-size", "0"][..],
        &["demo", "--lanes", "4294967295"],
        &["demo", "--shuffle-buffer", "0"],
        &["demo", "--parallelism", "100000"],
        &["demo", "--shards", "0"],
        &["rank-run", "--data", ".", "--out", "x", "--steps", "0"],
        &[
            "rank-run", "--data", ".", "--out", "x", "--steps", "1", "--lanes", "0",
        ],
        &[
            "rank-run",
            "--data",
            ".",
            "--out",
            "x",
            "--steps",
            "1",
            "--world-size",
            "100000",
        ],
        &[
            "rank-run",
            "--data",
            ".",
            "--out",
            "x",
            "--steps",
            "1",
            "--batch-size",
            "0",
        ],
        &["timing", "-c", "x.yaml", "--epochs", "0"],
        &["inspect", ".", "--seq-len", "0"],
        &["inspect", ".", "--samples", "100001"],
        &["inspect", ".", "--width", "3"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let flag = args[args.len() - 2];
        assert!(!out.status.success(), "{args:?} was accepted: {err}");
        assert!(
            err.contains(flag) && err.contains("invalid value"),
            "{args:?}: {err}"
        );
    }
}
