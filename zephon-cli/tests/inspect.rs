//! `zephon inspect` on small datasets written here: a Megatron dataset (by
//! zephon-storage's `encode_megatron`, which follows Megatron-LM's `.idx`
//! layout) and a JSONL one.

use std::process::Command;
use zephon_storage::format::tokens::{TokenDtype, encode_megatron};

fn inspect(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .arg("inspect")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn inspect_reports_format_counts_fields_and_first_samples() {
    let t = tempfile::tempdir().unwrap();
    for (name, n) in [("a", 3u32), ("b", 5), ("c", 4)] {
        let docs: Vec<Vec<u32>> = (0..n).map(|d| (0..200 + d).collect()).collect();
        let (bin, idx) = encode_megatron(&docs, TokenDtype::U16).unwrap();
        std::fs::write(t.path().join(format!("{name}.bin")), bin).unwrap();
        std::fs::write(t.path().join(format!("{name}.idx")), idx).unwrap();
    }
    let dir = t.path().display().to_string();
    let (ok, out, err) = inspect(&[&dir, "--json", "-n", "2", "--width", "40"]);
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["format"], "megatron");
    assert_eq!(r["shards"], 3);
    assert_eq!(
        r["samples"],
        serde_json::json!({"min": 3, "median": 4, "max": 5, "total": 12})
    );
    assert_eq!(
        r["fields"],
        serde_json::json!([{"name": "tokens", "type": "tokens"}])
    );
    let first = r["first"].as_array().unwrap();
    assert_eq!(first.len(), 2);
    let shown = first[1]["tokens"].as_str().unwrap();
    assert!(
        shown.starts_with("[0, 1, 2") && shown.ends_with("(201 tokens)"),
        "{shown}"
    );
    assert!(r["bytes"].as_u64().unwrap() > 12 * 200 * 2);

    let (ok, text, _) = inspect(&[&dir]);
    assert!(ok);
    assert!(
        text.contains("format   megatron") && text.contains("12 total"),
        "{text}"
    );
}

#[test]
fn inspect_of_a_mixed_folder_says_what_it_found() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("a.jsonl"), "{\"text\":\"hi\"}\n").unwrap();
    std::fs::write(t.path().join("b.tar"), b"").unwrap();
    let (ok, _, err) = inspect(&[&t.path().display().to_string()]);
    assert!(!ok);
    assert!(
        err.contains("mixed formats") && err.contains("WebDataset"),
        "{err}"
    );
}

#[test]
fn inspect_refuses_a_manifest_naming_files_outside_the_folder() {
    let t = tempfile::tempdir().unwrap();
    let ds = t.path().join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    std::fs::write(ds.join("a.bin"), [1u8; 8]).unwrap();
    std::fs::write(t.path().join("secret.bin"), *b"SECRET!!").unwrap();
    let m = serde_json::json!({"version": 1,
        "format": {"kind": "tokens", "dtype": "u8", "seq_len": 4},
        "shards": [{"path": "a.bin", "samples": 2, "bytes": 8},
                   {"path": "../secret.bin", "samples": 2, "bytes": 8}]});
    std::fs::write(ds.join("index.json"), m.to_string()).unwrap();
    let (ok, out, err) = inspect(&[&ds.display().to_string(), "--json", "-n", "4"]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("index.json") && err.contains("shards[1] \"../secret.bin\""),
        "{err}"
    );
    // b"SECRET" as token ids: 83, 69, 67, 82.
    assert!(!out.contains("83"), "{out}");
}

#[test]
fn inspect_of_a_missing_folder_says_it_does_not_exist() {
    let t = tempfile::tempdir().unwrap();
    for uri in [
        t.path().join("nope").display().to_string(),
        format!("file://{}", t.path().join("nope2").display()),
    ] {
        let (ok, _, err) = inspect(&[&uri]);
        assert!(!ok && err.contains("does not exist"), "{uri}: {err}");
        assert!(!std::path::Path::new(uri.trim_start_matches("file://")).exists());
    }
}

#[test]
fn inspect_escapes_control_characters_in_samples() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(
        t.path().join("a.jsonl"),
        "{\"text\":\"\\u001b[2Jcleared\\u0007\",\"\\u001b]0;k\":1}\n",
    )
    .unwrap();
    let (ok, out, err) = inspect(&[&t.path().display().to_string()]);
    assert!(ok, "{err}");
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(out.contains("\\u{1b}[2Jcleared\\u{7}"), "{out}");
}
