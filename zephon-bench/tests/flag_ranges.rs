//! Benchmark flags outside their documented ranges are refused by name
//! before anything runs.

use std::process::Command;

#[test]
fn out_of_range_flags_are_named() {
    for args in [
        &["engine", "--batch", "0"][..],
        &["engine", "--repeat", "0"],
        &["fetch", "--prefetch-buffer", "0"],
        &["formats", "--parallelism", "0"],
        &["tokens", "--file", "f", "--seq-len", "18446744073709551615"],
        &["tokens", "--file", "f", "--batch", "0"],
        &["tokens", "--file", "f", "--repeat", "0"],
        &["tokens", "--file", "f", "--range-parts", "0"],
        &["tokens", "--file", "f", "--range-gap", "17000000"],
        &["tokens", "--file", "f", "--range-part-gap", "17000000"],
        &["tokens", "--file", "f", "--cache-block-bytes", "65535"],
        &[
            "tokens",
            "--file",
            "f",
            "--nginx-http",
            "server { listen 80; }",
        ],
        &["tokens", "--file", "f", "--nginx-http", "sendfile on"],
        &[
            "tokenize-pack",
            "--corpus",
            ".",
            "--tokenizer",
            "t",
            "--seq-len",
            "0",
        ],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_zephon-bench"))
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
