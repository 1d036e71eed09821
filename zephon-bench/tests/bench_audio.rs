//! `zephon-bench audio` on clips it makes: the plain loop's line, then
//! Zephon's with its ratio to it, and one batch checksum at any
//! parallelism (another seed, other crops and order).

use std::process::Command;

fn bench(extra: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_zephon-bench"))
        .args(["audio", "--clips", "24", "--seconds", "1", "--batch", "5"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

#[test]
fn bench_audio_gives_one_checksum_at_any_parallelism_and_its_ratio_to_the_loop() {
    let one = bench(&["--parallelism", "1"]);
    let two = bench(&["--parallelism", "2"]);
    assert_eq!(one.len(), 2, "{one:?}");
    assert_eq!(one[0]["system"], "raw");
    assert_eq!(one[0]["clips"], 24);
    let (a, b) = (&one[1], &two[1]);
    assert_eq!(a["system"], "zephon");
    assert_eq!(a["clips"], 24);
    for key in [
        "clips_per_s",
        "first_batch_s",
        "seconds",
        "peak_rss_anon_mb",
    ] {
        assert!(a[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {a}");
    }
    assert!(a["clips_per_s_ratio_to_raw"].as_f64().is_some(), "{a}");
    assert_eq!(a["checksum"], b["checksum"], "{a}\n{b}");
    let c = &bench(&["--parallelism", "1", "--seed", "5"])[1];
    assert_ne!(a["checksum"], c["checksum"]);
}
