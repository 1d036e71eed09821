//! `zephon-bench engine` end to end: its configurations run in processes of
//! their own and come back as one line each.

use std::process::Command;

#[test]
fn bench_engine_reports_every_configuration_from_separate_processes() {
    let out = Command::new(env!("CARGO_BIN_EXE_zephon-bench"))
        .args([
            "engine",
            "--records",
            "3000",
            "--batch",
            "16",
            "--repeat",
            "2",
            "--passes",
            "1",
        ])
        .output()
        .expect("zephon runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{stdout}");
    assert!(lines[0].starts_with("configuration"), "{stdout}");
    assert!(lines[1].starts_with("plain loop over a Vec"), "{stdout}");
    for line in &lines[1..] {
        let fields: Vec<&str> = line
            .split("  ")
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .collect();
        // label, records/s, peak MiB, then what the figures are.
        let rate: f64 = fields[1]
            .parse()
            .unwrap_or_else(|_| panic!("no rate in {line:?}"));
        assert!(rate > 0.0, "{line}");
        let peak: f64 = fields[2]
            .parse()
            .unwrap_or_else(|_| panic!("no peak memory in {line:?}"));
        // At least the 3,000 records the process holds, and not absurd.
        assert!(peak > 0.0 && peak < 4096.0, "{line}");
    }
    for line in &lines[2..] {
        let ratio: f64 = line
            .split("x of baseline")
            .next()
            .and_then(|s| s.split_whitespace().last())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no ratio in {line:?}"));
        assert!(ratio > 0.0 && ratio.is_finite(), "{line}");
    }
    // Tracking rows compare with the row above, measured in the same run.
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("(median of paired rounds)"))
            .count(),
        2,
        "{stdout}"
    );
}

#[test]
fn bench_engine_refuses_an_unknown_child_configuration() {
    let out = Command::new(env!("CARGO_BIN_EXE_zephon-bench"))
        .args(["engine", "--child", "9"])
        .output()
        .expect("zephon runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--child 9"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn zephon_bench(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_zephon-bench"))
        .args(args)
        .output()
        .expect("zephon runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A small corpus of `docs` documents in two shards.
fn corpus(docs: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for shard in 0..2 {
        let mut text = String::new();
        for i in (shard..docs).step_by(2) {
            let doc = format!(
                "document {i}: {}",
                "the quick brown fox jumps ".repeat(1 + i % 7)
            );
            text.push_str(&serde_json::json!({ "text": doc }).to_string());
            text.push('\n');
        }
        std::fs::write(dir.path().join(format!("{shard}.jsonl")), text).unwrap();
    }
    dir
}

const TOKENIZER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/data/tokenizer.json"
);

#[test]
fn tokenize_pack_raw_counts_the_same_tokens_as_the_pipeline_and_reports_memory() {
    let dir = corpus(300);
    let corpus = dir.path().to_str().unwrap();
    let (ok, stdout, stderr) = zephon_bench(&[
        "tokenize-pack",
        "--corpus",
        corpus,
        "--tokenizer",
        TOKENIZER,
        "--seq-len",
        "64",
        "--batch",
        "3",
        "--raw",
        "--observe",
        "--repeat",
        "2",
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    let tokens = v["tokens"].as_u64().unwrap();
    // Whole batches of 3 rows of 64 tokens, and the raw tokenizer's count cut
    // the same way.
    assert!(tokens > 0 && tokens.is_multiple_of(64 * 3), "{v}");
    assert_eq!(v["raw_tokens"].as_u64(), Some(tokens), "{v}");
    assert_eq!(v["rounds"].as_u64(), Some(2), "{v}");
    for key in ["ratio_to_raw", "ratio_to_raw_best", "observed_ratio_median"] {
        let r = v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"));
        assert!(r > 0.0 && r.is_finite(), "{key}: {v}");
    }
    // Two rounds: their median is the middle of their range.
    let range: Vec<f64> = v["ratio_to_raw_range"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
        .unwrap_or_default();
    let median = v["ratio_to_raw"].as_f64().unwrap();
    assert!(
        range.len() == 2 && (median - (range[0] + range[1]) / 2.0).abs() < 0.002,
        "{v}"
    );
    for key in [
        "peak_rss_anon_mib",
        "raw_peak_rss_anon_mib",
        "observed_peak_rss_anon_mib",
    ] {
        let m = v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"));
        assert!(m > 0.0 && m < 4096.0, "{key}: {v}");
    }
}

#[test]
fn tokenize_pack_runs_a_peer_beside_it_and_refuses_one_that_delivered_other_tokens() {
    let dir = corpus(120);
    let corpus = dir.path().to_str().unwrap();
    let base = [
        "tokenize-pack",
        "--corpus",
        corpus,
        "--tokenizer",
        TOKENIZER,
        "--seq-len",
        "64",
        "--batch",
        "2",
    ];
    let (ok, stdout, stderr) = zephon_bench(&base);
    assert!(ok, "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    let tokens = v["tokens"].as_u64().unwrap();
    // A peer that takes 0.4 s for the same tokens, holding 48 MB in a
    // child process: its line comes first, then the ratios to it.
    let scripts = tempfile::tempdir().unwrap();
    let peer = |n: u64| {
        let script = scripts.path().join(format!("peer-{n}.sh"));
        std::fs::write(
            &script,
            format!(
                "python3 -c 'import time; b = b\"x\" * (48 << 20); time.sleep(0.4)' & wait\n\
                 echo '{{\"system\": \"slow\", \"tokens\": {n}, \"seconds\": 0.4}}'\n"
            ),
        )
        .unwrap();
        format!("sh {}", script.display())
    };
    let cmd = peer(tokens);
    let mut args = base.to_vec();
    args.extend(["--peer", &cmd]);
    let (ok, stdout, stderr) = zephon_bench(&args);
    assert!(ok, "{stdout}\n{stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON lines"))
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0]["system"], "slow", "{stdout}");
    let peak = lines[0]["peak_rss_anon_mb"].as_f64().unwrap();
    assert!(peak >= 45.0, "the child's memory counts: {stdout}");
    // The ratio of the two times, from the rate (the printed seconds are
    // rounded to milliseconds, too coarse for a run of a few).
    let ratio = lines[1]["tokens_per_s_ratio_to_slow"].as_f64().unwrap();
    let rate = lines[1]["tokens_per_s"].as_f64().unwrap();
    let expected = 0.4 * rate / tokens as f64;
    assert!(
        (ratio - expected).abs() < 0.01 * expected + 0.002,
        "{stdout}"
    );
    assert!(
        lines[1]["peak_rss_anon_ratio_to_slow"].as_f64().unwrap() > 0.0,
        "{stdout}"
    );
    // One token more than the pipeline delivered: not the same work.
    let cmd = peer(tokens + 1);
    let mut args = base.to_vec();
    args.extend(["--peer", &cmd]);
    let (ok, stdout, stderr) = zephon_bench(&args);
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("tokens, the pipeline"), "{stderr}");
}

#[test]
fn tokenize_pack_refuses_a_document_without_text_and_says_where() {
    let dir = corpus(10);
    std::fs::write(
        dir.path().join("1.jsonl"),
        "{\"text\": \"fine\"}\n{\"body\": 3}\n",
    )
    .unwrap();
    let (ok, stdout, stderr) = zephon_bench(&[
        "tokenize-pack",
        "--corpus",
        dir.path().to_str().unwrap(),
        "--tokenizer",
        TOKENIZER,
        "--raw",
    ]);
    assert!(!ok, "{stdout}");
    // The pipeline runs first and names the sample (shard 1, sample 1).
    assert!(
        stderr.contains("shard 1, sample 1") && stderr.contains("`text`"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bench_formats_compares_one_thread_with_one_thread_and_reports_memory() {
    let (ok, stdout, stderr) = zephon_bench(&[
        "formats",
        "--samples",
        "400",
        "--shards",
        "2",
        "--repeat",
        "2",
        "--parallelism",
        "3",
        "--only",
        "jsonl,tokens",
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines[1].contains("plain 1t /s") && lines[1].contains("zephon 1t /s"),
        "{stdout}"
    );
    assert!(lines[1].contains("zephon 3t /s"), "{stdout}");
    assert!(lines[1].contains("in order 1t /s"), "{stdout}");
    assert!(
        lines[1].contains("plain sh /s") && lines[1].contains("1t:sh"),
        "{stdout}"
    );
    for (line, format) in lines[2..].iter().zip(["jsonl", "tokens"]) {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[0], format, "{stdout}");
        assert_eq!(f[1], "400", "{stdout}");
        // Rates and ratios (the plain loop in order and shuffled, zephon
        // shuffled, in order, more threads), then four peaks in MiB.
        for x in &f[2..] {
            let x: f64 = x.parse().unwrap_or_else(|_| panic!("{x} in {line}"));
            assert!(x > 0.0 && x.is_finite(), "{line}");
        }
        assert_eq!(f.len(), 16, "{line}");
    }
}

/// Every format's plain loop, in file order and shuffled, reads every
/// sample once (the bench stops when a side's count differs from another's)
/// and the JSON carries both baselines' ratios.
#[test]
fn bench_formats_json_compares_every_format_with_both_plain_orders() {
    let (ok, stdout, stderr) = zephon_bench(&[
        "formats",
        "--samples",
        "301",
        "--shards",
        "3",
        "--seq-len",
        "16",
        "--repeat",
        "1",
        "--json",
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    let rows = v["rows"].as_array().expect("rows");
    let formats: Vec<&str> = rows.iter().filter_map(|r| r["format"].as_str()).collect();
    assert_eq!(
        formats,
        [
            "jsonl",
            "tokens",
            "megatron",
            "parquet",
            "mds",
            "webdataset"
        ],
        "{v}"
    );
    for row in rows {
        assert_eq!(row["samples"], 301, "{row}");
        for key in [
            "plain_1t_per_s",
            "plain_1t_shuffled_per_s",
            "ratio_1t_median",
            "ratio_1t_to_plain_shuffled_median",
            "ratio_1t_in_order_median",
            "ratio_nt_to_plain_shuffled_median",
        ] {
            assert!(
                row[key].as_f64().is_some_and(|x| x > 0.0 && x.is_finite()),
                "{key} in {row}"
            );
        }
    }
}

#[test]
fn bench_engine_json_carries_ratios_and_peaks() {
    let (ok, stdout, stderr) = zephon_bench(&[
        "engine",
        "--records",
        "2000",
        "--repeat",
        "1",
        "--passes",
        "1",
        "--runner",
        "inline",
        "--json",
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    let rows = v["rows"].as_array().expect("rows");
    // The baseline and the two inline configurations.
    assert_eq!(rows.len(), 3, "{v}");
    for row in rows {
        assert!(
            row["records_per_s"].as_f64().is_some_and(|r| r > 0.0),
            "{row}"
        );
        assert!(
            row["peak_rss_anon_mib"].as_f64().is_some_and(|m| m > 0.0),
            "{row}"
        );
    }
    for row in &rows[1..] {
        let median = row["ratio_to_baseline_median"].as_f64().unwrap_or(0.0);
        assert!(median > 0.0, "{row}");
        // The rounds' range holds their median.
        let range: Vec<f64> = row["ratio_to_baseline_range"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        assert!(
            range.len() == 2 && range[0] <= median && median <= range[1],
            "{row}"
        );
    }
    assert!(
        rows[2]["ratio_to_tracking_off_median"].as_f64().is_some(),
        "{v}"
    );
}

/// Without s3s-fs to start, `bench fetch --s3-server s3s` stops with an
/// error naming the server and how to install it (or what to pass instead),
/// never a panic or a pass against no server.
#[test]
fn bench_fetch_without_its_s3_server_says_which_and_how_to_get_it() {
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_zephon-bench"))
        .args(["fetch", "--shards", "1", "--records", "10"])
        .args(["--repeat", "1", "--s3-server", "s3s"])
        .env("PATH", empty.path())
        .output()
        .expect("zephon runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("s3s-fs"), "{stderr}");
    assert!(stderr.contains("cargo install s3s-fs"), "{stderr}");
    assert!(stderr.contains("--endpoint"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let (ok, _, stderr) = zephon_bench(&["fetch", "--s3-server", "minio"]);
    assert!(!ok && stderr.contains("--s3-server"), "{stderr}");
}

#[test]
fn benches_refuse_zero_sizes_with_an_error_naming_the_option() {
    for (args, option) in [
        (&["engine", "--batch", "0"][..], "--batch"),
        (&["formats", "--shards", "0"][..], "--shards"),
        (&["fetch", "--records", "0"][..], "--records"),
        (
            &[
                "tokenize-pack",
                "--corpus",
                ".",
                "--tokenizer",
                TOKENIZER,
                "--seq-len",
                "0",
            ][..],
            "--seq-len",
        ),
    ] {
        let (ok, stdout, stderr) = zephon_bench(args);
        assert!(!ok, "{args:?}: {stdout}");
        assert!(stderr.contains(option), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn bench_prepare_writes_the_tokenizers_own_ids_and_refuses_a_peer_that_does_not() {
    let dir = corpus(300);
    let corpus = dir.path().to_str().unwrap();
    let base = ["prepare", "--corpus", corpus, "--tokenizer", TOKENIZER];
    let (ok, stdout, stderr) = zephon_bench(&[&base[..], &["--repeat", "2"]].concat());
    assert!(ok, "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(v["ids_equal"], true, "{v}");
    assert!(v["tokens"].as_u64().unwrap() > 300, "{v}");
    for key in ["ratio_to_raw", "peak_rss_anon_mb", "raw_peak_rss_anon_mb"] {
        let r = v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"));
        assert!(r > 0.0 && r.is_finite(), "{key}: {v}");
    }
    // A peer whose file holds other ids is refused, by its command.
    let peer = r#"sh -c 'printf "\001\000\002\000" > {out}; echo "{\"system\":\"wrong\",\"tokens\":2,\"seconds\":0.1}"'"#;
    let (ok, stdout, stderr) = zephon_bench(&[&base[..], &["--peer", peer]].concat());
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("other token ids"), "{stderr}");
}

#[test]
fn bench_autotune_reports_each_side_on_the_same_tokens() {
    let dir = corpus(600);
    let corpus = dir.path().to_str().unwrap();
    let (ok, stdout, stderr) = zephon_bench(&[
        "autotune",
        "--corpus",
        corpus,
        "--tokenizer",
        TOKENIZER,
        "--seq-len",
        "32",
        "--step-ms",
        "5",
        "--slow-batches",
        "10",
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert!(v["tokens"].as_u64().unwrap() > 0, "{v}");
    for key in [
        "ratio_auto_to_best",
        "ratio_fixed_1_to_best",
        "ratio_slow_auto_cpu_to_best",
    ] {
        let r = v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"));
        assert!(r > 0.0 && r.is_finite(), "{key}: {v}");
    }
    assert!(
        v["auto_changes"].is_array() && v["slow_auto_changes"].is_array(),
        "{v}"
    );
}
