//! Every `zephon` command of the guide's "Getting started" chapter runs, as
//! written there, from the repository's root, and succeeds: the chapter
//! cannot drift from the binary. (`bash scripts/test.sh`, the chapter's
//! other command, is the command that runs this test.)

use std::path::PathBuf;
use std::process::Command;

const PREFIX: &str = "cargo run --release -p zephon-cli -- ";

#[test]
fn every_command_of_getting_started_runs() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let chapter = std::fs::read_to_string(root.join("guide/src/getting-started.md")).unwrap();
    let mut in_sh = false;
    let mut commands = Vec::new();
    for line in chapter.lines() {
        match line.trim() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            l if in_sh && !l.starts_with('#') && !l.is_empty() => commands.push(l.to_owned()),
            _ => {}
        }
    }
    let mut ran = 0;
    for command in &commands {
        if command == "bash scripts/test.sh" {
            continue;
        }
        let args = command
            .strip_prefix(PREFIX)
            .unwrap_or_else(|| panic!("a command this test does not know how to run: {command}"));
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
            .args(args.split_whitespace())
            .current_dir(&root)
            // `demo` writes its corpus under the temporary folder.
            .env("TMPDIR", dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "`{command}` failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    // demo, demo --help, inspect, two recipes.
    assert_eq!(ran, 5, "{commands:?}");
}
