//! `zephon bench engine` end to end: its configurations run in processes of
//! their own and come back as one line each.

use std::process::Command;

#[test]
fn bench_engine_reports_every_configuration_from_separate_processes() {
    let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .args([
            "bench",
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
    let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .args(["bench", "engine", "--child", "9"])
        .output()
        .expect("zephon runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--child 9"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
