//! `zephon-bench tokens` (workload W2) on small token files written here.

use std::process::Command;

fn bench(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_zephon-bench"))
        .args(["tokens"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A successful run's JSON lines, one per system, with the systems' names.
fn bench_lines(args: &[&str]) -> (Vec<serde_json::Value>, Vec<String>, String) {
    let (ok, out, err) = bench(args);
    assert!(ok, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names = lines
        .iter()
        .map(|l| l["system"].as_str().unwrap_or_default().to_owned())
        .collect();
    (lines, names, out)
}

fn token_file(dir: &std::path::Path, tokens: u16) -> String {
    let path = dir.join("train.bin");
    let bytes: Vec<u8> = (0..tokens).flat_map(|t| t.to_le_bytes()).collect();
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

#[test]
fn bench_tokens_prints_the_peer_keys_and_counts_every_window_once() {
    let t = tempfile::tempdir().unwrap();
    // 1000 tokens: 62 windows of 16 (seq_len 15 + the label), 15 batches of 4.
    let file = token_file(t.path(), 1000);
    for collate in ["u32", "u16"] {
        let (lines, _, out) = bench_lines(&[
            "--file",
            &file,
            "--seq-len",
            "15",
            "--batch",
            "4",
            "--seed",
            "3",
            "--collate",
            collate,
        ]);
        assert_eq!(lines.len(), 1, "{out}");
        let r = &lines[0];
        for key in [
            "system",
            "batches",
            "samples",
            "tokens",
            "seconds",
            "tokens_per_s",
            "samples_per_s",
            "first_batch_s",
            "peak_rss_anon_mb",
        ] {
            assert!(r.get(key).is_some(), "no `{key}` in {r}");
        }
        assert_eq!(r["system"], "zephon");
        assert_eq!(r["batches"], 15, "{r}");
        assert_eq!(r["samples"], 60, "{r}");
        // Tokens as the peers count them: every delivered window, label included.
        assert_eq!(r["tokens"], 15 * 4 * 16, "{r}");
        assert!(r["tokens_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["peak_rss_anon_mb"].as_f64().unwrap() > 0.0, "{r}");
        let first = r["first_batch_s"].as_f64().unwrap();
        assert!(
            first > 0.0 && first <= r["seconds"].as_f64().unwrap(),
            "{r}"
        );
    }
}

#[test]
fn bench_tokens_runs_a_peer_and_reports_ratios_to_it() {
    let t = tempfile::tempdir().unwrap();
    let file = token_file(t.path(), 1000);
    let peer = r#"printf '%s\n' 'warming up' '{"system": "fake", "seconds": 2.0, "tokens_per_s": 480, "first_batch_s": 0.5}'"#;
    let (lines, _, out) = bench_lines(&[
        "--file",
        &file,
        "--seq-len",
        "15",
        "--batch",
        "4",
        "--peer",
        peer,
    ]);
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0]["system"], "fake");
    assert!(lines[0].get("peak_rss_anon_mb").is_some(), "{}", lines[0]);
    let z = &lines[1];
    assert_eq!(z["system"], "zephon");
    let want = z["tokens_per_s"].as_f64().unwrap() / 480.0;
    let got = z["tokens_per_s_ratio_to_fake"].as_f64().unwrap();
    assert!((got - want).abs() <= 0.001 * want.max(1.0), "{z}");
    let want = z["first_batch_s"].as_f64().unwrap() / 0.5;
    let got = z["first_batch_ratio_to_fake"].as_f64().unwrap();
    assert!((got - want).abs() <= 0.001 + 0.001 * want, "{z}");
}

#[test]
fn bench_tokens_refuses_bad_files_naming_them() {
    let t = tempfile::tempdir().unwrap();
    // Fewer windows than one batch: no batch, an error rather than a zero rate.
    let file = token_file(t.path(), 40);
    let (ok, _, err) = bench(&["--file", &file, "--seq-len", "15", "--batch", "4"]);
    assert!(!ok);
    assert!(
        err.contains("train.bin") && err.contains("not one batch"),
        "{err}"
    );
    // An odd number of bytes is not a u16 token file.
    std::fs::write(&file, [1u8, 2, 3]).unwrap();
    let (ok, _, err) = bench(&["--file", &file, "--seq-len", "1", "--batch", "1"]);
    assert!(!ok);
    assert!(
        err.contains("train.bin") && err.to_lowercase().contains("u16"),
        "{err}"
    );
    let missing = t.path().join("missing.bin").display().to_string();
    let (ok, _, err) = bench(&["--file", &missing]);
    assert!(!ok);
    assert!(err.contains("missing.bin"), "{err}");
}

/// `--serve http` (nginx on 127.0.0.1): a plain download of the file, a
/// global shuffle read by byte ranges, a block shuffle through the block
/// cache cold and warm, each pass counting every window once (the
/// download every byte) and giving its ratio to the local run, its own
/// CPU time, and its ratio to the download.
#[test]
fn bench_tokens_reads_the_file_over_http_beside_the_local_run() {
    let t = tempfile::tempdir().unwrap();
    let file = token_file(t.path(), 1000);
    for (shuffle, systems) in [
        ("global", vec!["zephon", "download", "zephon-ranges"]),
        (
            "block",
            vec![
                "zephon",
                "download",
                "zephon-cache-cold",
                "zephon-cache-warm",
            ],
        ),
    ] {
        let (lines, names, out) = bench_lines(&[
            "--file",
            &file,
            "--seq-len",
            "15",
            "--batch",
            "4",
            "--serve",
            "http",
            "--shuffle",
            shuffle,
            "--block-size",
            "8",
            "--range-gap",
            "0",
            "--range-part-gap",
            "0",
        ]);
        assert_eq!(names, systems, "{out}");
        for l in lines.iter().filter(|l| l["system"] == "zephon-ranges") {
            assert_eq!(l["range_gap"], 0, "{l}");
            assert_eq!(l["range_part_gap"], 0, "{l}");
        }
        for l in lines.iter().filter(|l| l["system"] != "download") {
            assert_eq!(l["samples"], 60, "{l}");
            assert_eq!(l["shuffle"], shuffle, "{l}");
        }
        // The whole file, remainder included: 1000 u16 tokens.
        assert_eq!(lines[1]["bytes"], 2000, "{out}");
        assert_eq!(lines[1]["tokens"], 1000, "{out}");
        for l in &lines {
            assert!(l["cpu_s"].as_f64().unwrap() >= 0.0, "{l}");
        }
        for l in &lines[1..] {
            assert!(
                l["tokens_per_s_ratio_to_local"].as_f64().unwrap() > 0.0,
                "{l}"
            );
            assert!(
                l["uri"].as_str().unwrap().starts_with("http://127.0.0.1:"),
                "{l}"
            );
            // nginx's CPU over a pass of a 2 KB file may round to no tick:
            // no bound is then given, never a zero or infinite one.
            let server = l["server_cpu_s"].as_f64().unwrap();
            for key in ["server_bound_ratio_to_local", "cpu_bound_ratio_to_local"] {
                assert!(l[key].is_null() || l[key].as_f64().unwrap() > 0.0, "{l}");
            }
            assert_eq!(
                server > 0.0,
                l["server_bound_ratio_to_local"].is_number(),
                "{l}"
            );
            // A worker per core, as the local line counts them.
            assert_eq!(l["server_cores"], lines[0]["cores"], "{l}");
        }
        // The server went with the benchmark, its workers too: nothing
        // answers on its port any more.
        let port: u16 = lines[1]["uri"].as_str().unwrap()["http://127.0.0.1:".len()..]
            .trim_end_matches('/')
            .parse()
            .unwrap();
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "nginx still serves port {port} after the benchmark"
        );
        for l in &lines[2..] {
            assert!(
                l["tokens_per_s_ratio_to_download"].as_f64().unwrap() > 0.0,
                "{l}"
            );
        }
    }
    let (ok, _, err) = bench(&["--file", &file, "--serve", "ftp"]);
    assert!(!ok && err.contains("--serve"), "{err}");
}

/// `--nginx-http` configures the nginx of `--serve http`: the byte-range
/// pass reads every window with nginx gathering parts into 64 KB writes,
/// and the line says which directives served it; a directive nginx refuses
/// is an error with nginx's own words, not a wait for a port.
#[test]
fn bench_tokens_takes_the_directives_of_its_nginx() {
    let t = tempfile::tempdir().unwrap();
    let file = token_file(t.path(), 1000);
    let directives = "sendfile off; output_buffers 32 8k; postpone_output 65536;";
    let (lines, names, out) = bench_lines(&[
        "--file",
        &file,
        "--seq-len",
        "15",
        "--batch",
        "4",
        "--serve",
        "http",
        "--range-part-gap",
        "0",
        "--nginx-http",
        directives,
    ]);
    assert_eq!(names, ["zephon", "download", "zephon-ranges"], "{out}");
    assert_eq!(lines[2]["samples"], 60, "{out}");
    for l in &lines[1..] {
        assert_eq!(l["nginx_http"], directives, "{l}");
    }
    let (ok, _, err) = bench(&[
        "--file",
        &file,
        "--serve",
        "http",
        "--nginx-http",
        "sendfile on; no_such_directive 1;",
    ]);
    assert!(!ok, "{err}");
    assert!(
        err.contains("no_such_directive") && err.contains("nginx exited"),
        "{err}"
    );
}

/// `--serve s3 --shuffle block` (moto_server on 127.0.0.1): each pass runs
/// in a process of its own, so each line's peak memory is its pass's own.
/// The cold pass keeps the file's blocks in the cache's memory tier; the
/// local pass, run after it in the second round, does not carry them.
#[test]
fn bench_tokens_reports_each_pass_its_own_peak_memory() {
    let t = tempfile::tempdir().unwrap();
    // 32 MB of tokens: 8 blocks of the cache, held by the cold pass.
    let path = t.path().join("train.bin");
    let bytes: Vec<u8> = (0..16u32 << 20)
        .flat_map(|t| (t as u16).to_le_bytes())
        .collect();
    std::fs::write(&path, bytes).unwrap();
    let file = path.display().to_string();
    let (lines, names, out) = bench_lines(&[
        "--file",
        &file,
        "--serve",
        "s3",
        "--shuffle",
        "block",
        "--repeat",
        "2",
    ]);
    assert_eq!(
        names,
        [
            "zephon",
            "download",
            "zephon-cache-cold",
            "zephon-cache-warm"
        ],
        "{out}"
    );
    let peak = |l: &serde_json::Value| l["peak_rss_anon_mb"].as_f64().unwrap();
    let (local, cold) = (peak(&lines[0]), peak(&lines[2]));
    assert!(local > 0.0 && local + 24.0 < cold, "{out}");
    for l in &lines[1..] {
        assert!(l["server_cpu_s"].as_f64().is_some(), "{l}");
    }
}
