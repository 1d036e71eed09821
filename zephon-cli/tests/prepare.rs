//! `zephon prepare`: the token ids written are the tokenizer's own for each
//! document, end-of-text between them; the bytes are the same for any
//! parallelism, and after `kill -9` at several moments and the same
//! command again; `--dedup` drops what it says; bad destinations and
//! inputs are refused by name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use zephon_core::{Dataset, PipelineExt, Runner, WorkSource};
use zephon_storage::DatasetExt;

fn zephon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zephon"))
}

fn tokenizer() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/data/tokenizer.json")
}

/// `shards` JSONL files of `per` documents each, some repeated with other
/// spacing (for `--dedup`).
fn corpus(dir: &Path, shards: usize, per: usize) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let words = [
        "the", "loader", "streams", "shards", "while", "models", "train", "on", "tokens",
    ];
    let mut texts = Vec::new();
    for s in 0..shards {
        let mut lines = String::new();
        for i in 0..per {
            let n = s * per + i;
            let text = if n % 10 == 9 {
                // A copy of document n - 1 with other whitespace.
                format!(
                    "  {}  ",
                    texts
                        .last()
                        .map(|t: &String| t.replace(' ', "   "))
                        .unwrap()
                )
            } else {
                (0..(n * 7 % 40 + 3))
                    .map(|w| words[(n * 13 + w * 5) % words.len()])
                    .collect::<Vec<_>>()
                    .join(" ")
                    + &format!(" {n}")
            };
            lines.push_str(&serde_json::json!({ "text": text, "id": n }).to_string());
            lines.push('\n');
            texts.push(text);
        }
        std::fs::write(dir.join(format!("part-{s:03}.jsonl")), lines).unwrap();
    }
    texts
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.to_string_lossy().ends_with(".partial"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

fn prepare(src: &Path, dest: &Path, extra: &[&str]) -> std::process::Output {
    let out = zephon()
        .arg("prepare")
        .arg(src)
        .arg(dest)
        .arg("--tokenizer")
        .arg(tokenizer())
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn in_order(dir: &Path) -> Vec<zephon_core::Record> {
    let ds = Dataset::from_path("out", dir).unwrap();
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .shuffle_shards(false)
        .shuffle_within_shard(false)
        .build()
        .unwrap();
    ws.stream()
        .fetch(2)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .collect::<zephon_core::Result<_>>()
        .unwrap()
}

#[test]
fn token_files_hold_the_tokenizers_ids_for_any_parallelism() {
    let tmp = tempfile::tempdir().unwrap();
    let texts = corpus(&tmp.path().join("src"), 3, 40);
    let config = zephon_ops::TokenizeConfig::from_file(tokenizer()).unwrap();
    let tok = config.tokenizer();
    let eos = tok.token_to_id("<|endoftext|>").unwrap();
    let mut want: Vec<u32> = Vec::new();
    for t in &texts {
        want.extend(tok.encode(t.as_str(), false).unwrap().get_ids());
        want.push(eos);
    }
    let flags = ["--eos", "--seq-len", "16", "--shard-bytes", "500"];
    let one = tmp.path().join("p1");
    let many = tmp.path().join("p3");
    prepare(
        &tmp.path().join("src"),
        &one,
        &[&flags[..], &["--parallelism", "1"]].concat(),
    );
    prepare(
        &tmp.path().join("src"),
        &many,
        &[&flags[..], &["--parallelism", "3"]].concat(),
    );
    assert_eq!(files(&one), files(&many));
    let got: Vec<u32> = in_order(&one)
        .iter()
        .flat_map(|r| r.token_ids("tokens").unwrap().iter().collect::<Vec<_>>())
        .collect();
    let whole = want.len() / 16 * 16;
    assert_eq!(got, want[..whole]);

    // Megatron: one sequence per document, the same ids.
    let meg = tmp.path().join("meg");
    prepare(
        &tmp.path().join("src"),
        &meg,
        &["--format", "megatron", "--eos", "--shard-samples", "25"],
    );
    let docs = in_order(&meg);
    assert_eq!(docs.len(), texts.len());
    let first: Vec<u32> = docs[0].token_ids("tokens").unwrap().iter().collect();
    let mut want0 = tok
        .encode(texts[0].as_str(), false)
        .unwrap()
        .get_ids()
        .to_vec();
    want0.push(eos);
    assert_eq!(first, want0);
    assert!(files(&meg).keys().any(|k| k.ends_with(".idx")));
}

#[test]
fn killed_anywhere_and_run_again_it_writes_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    corpus(&src, 4, 1500);
    let flags = [
        "--eos",
        "--seq-len",
        "32",
        "--shard-bytes",
        "4096",
        "--json",
    ];
    let reference = tmp.path().join("ref");
    prepare(&src, &reference, &flags);
    let want = files(&reference);
    assert!(want.len() > 20, "{} files", want.len());
    let mut resumed = 0;
    for (i, delay) in [40u64, 120, 300, 700, 1500].into_iter().enumerate() {
        let dest = tmp.path().join(format!("run-{i}"));
        let mut child = zephon()
            .arg("prepare")
            .arg(&src)
            .arg(&dest)
            .arg("--tokenizer")
            .arg(tokenizer())
            .args(flags)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        // SIGKILL: nothing of the process runs after it.
        let _ = child.kill();
        let _ = child.wait();
        let out = prepare(&src, &dest, &flags);
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if line["resumed_from_document"].as_u64().unwrap() > 0 {
            resumed += 1;
        }
        assert_eq!(files(&dest), want, "killed after {delay} ms: {line}");
    }
    println!("{resumed} of 5 runs were killed after their first shard and resumed");
}

#[test]
fn dedup_drops_the_repeated_documents() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let texts = corpus(&src, 2, 50);
    let dest = tmp.path().join("out");
    let out = zephon()
        .args(["prepare", "--format", "jsonl", "--dedup", "--json"])
        .arg(&src)
        .arg(&dest)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["duplicates_dropped"], 10, "{line}");
    let got = in_order(&dest);
    assert_eq!(got.len(), texts.len() - 10);
    assert!(
        got.iter()
            .all(|r| r.get("id").unwrap().as_int().unwrap() % 10 != 9)
    );
}

#[test]
fn bad_destinations_and_inputs_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    corpus(&src, 1, 5);
    let busy = tmp.path().join("busy");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("mine.txt"), "keep").unwrap();
    let fail = |args: &[&str], dest: &Path, want: &str| {
        let out = zephon()
            .arg("prepare")
            .arg(&src)
            .arg(dest)
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    };
    let tok = tokenizer();
    let tok = tok.to_str().unwrap();
    fail(&["--tokenizer", tok], &busy, "mine.txt");
    assert_eq!(std::fs::read(busy.join("mine.txt")).unwrap(), b"keep");
    fail(
        &["--tokenizer", tok, "--field", "body"],
        &tmp.path().join("a"),
        "`body`",
    );
    fail(&[], &tmp.path().join("b"), "tokens");
    fail(
        &["--tokenizer", tok, "--shard-bytes", "0"],
        &tmp.path().join("c"),
        "shard_bytes",
    );
    // Other settings on an earlier run's output.
    let done = tmp.path().join("done");
    prepare(&src, &done, &["--seq-len", "8"]);
    fail(
        &["--tokenizer", tok, "--seq-len", "8", "--eos"],
        &done,
        "other settings",
    );
}

/// A WebDataset tar of `n` samples: `KEY.jpg` (bytes), `KEY.cls`, `KEY.txt`.
fn webdataset(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let mut tar = tar::Builder::new(Vec::new());
    for i in 0..n {
        let jpg: Vec<u8> = (0..(100 + i * 37)).map(|b| (b * 31 + i) as u8).collect();
        for (ext, data) in [
            ("jpg", jpg),
            ("cls", (i % 10).to_string().into_bytes()),
            ("txt", format!("caption {i}").into_bytes()),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            tar.append_data(&mut h, format!("s{i:04}.{ext}"), data.as_slice())
                .unwrap();
        }
    }
    std::fs::write(dir.join("shard-000.tar"), tar.into_inner().unwrap()).unwrap();
}

#[test]
fn webdataset_to_mds_and_back_keeps_every_member() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("wds");
    webdataset(&src, 30);
    let mds = tmp.path().join("mds");
    let back = tmp.path().join("back");
    for (from, to, format) in [(&src, &mds, "mds"), (&mds, &back, "webdataset")] {
        let out = zephon()
            .args(["prepare", "--format", format, "--shard-bytes", "2000"])
            .arg(from)
            .arg(to)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(files(&mds).keys().filter(|k| k.ends_with(".mds")).count() > 1);
    let (a, b, c) = (in_order(&src), in_order(&mds), in_order(&back));
    assert_eq!(a.len(), 30);
    for ((x, y), z) in a.iter().zip(&b).zip(&c) {
        for field in ["__key__", "jpg", "cls", "txt"] {
            assert_eq!(x.get(field), y.get(field), "{field}");
            assert_eq!(x.get(field), z.get(field), "{field}");
        }
    }
}
