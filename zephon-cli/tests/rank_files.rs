//! `zephon rank-run` given rank files that do not make one checkpoint:
//! files of different steps are refused, whatever the shuffle buffer holds.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// 3 shards of 40 lines: 15 samples on each of 8 lanes, fewer than the
/// shuffle buffer holds, so no lane cut says how much data is left.
fn dataset(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for s in 0..3 {
        let lines: String = (0..40)
            .map(|i| format!("{{\"id\": {}}}\n", s * 40 + i))
            .collect();
        std::fs::write(dir.join(format!("shard-{s}.jsonl")), lines).unwrap();
    }
}

fn rank_run(data: &Path, out: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zephon"));
    cmd.arg("rank-run");
    for v in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "SLURM_PROCID",
        "SLURM_NTASKS",
    ] {
        cmd.env_remove(v);
    }
    cmd.arg("--data")
        .arg(data)
        .arg("--out")
        .arg(out)
        .args([
            "--lanes",
            "8",
            "--batch-size",
            "4",
            "--shuffle-buffer",
            "16",
        ])
        .args(args)
        .output()
        .unwrap()
}

/// Rank `rank` of `world` after `steps` steps; returns its checkpoint file.
fn save(dir: &Path, data: &Path, rank: u32, world: u32, steps: u64) -> PathBuf {
    let ckpt = dir.join(format!("r{rank}of{world}s{steps}.ckpt"));
    let out = rank_run(
        data,
        &dir.join(format!("r{rank}of{world}s{steps}.jsonl")),
        &[
            "--rank",
            &rank.to_string(),
            "--world-size",
            &world.to_string(),
            "--steps",
            &steps.to_string(),
            "--checkpoint-out",
            ckpt.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ckpt
}

fn resume(dir: &Path, data: &Path, files: &[&PathBuf], rank: u32, world: u32) -> Output {
    let mut args = vec![
        "--rank".to_string(),
        rank.to_string(),
        "--world-size".into(),
        world.to_string(),
        "--steps".into(),
        "1".into(),
        "--resume".into(),
    ];
    args.extend(files.iter().map(|f| f.to_str().unwrap().to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    rank_run(data, &dir.join("resumed.jsonl"), &args)
}

#[test]
fn rank_files_of_different_steps_are_refused_even_when_no_cut_shows_data_left() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    dataset(&data);
    let (a2, b3) = (
        save(t.path(), &data, 0, 2, 2),
        save(t.path(), &data, 1, 2, 3),
    );
    let (a1, b4) = (
        save(t.path(), &data, 0, 2, 1),
        save(t.path(), &data, 1, 2, 4),
    );
    for (files, rank, world) in [
        (vec![&a2, &b3], 0, 1),
        (vec![&a2, &b3], 0, 2),
        (vec![&a1, &b4], 1, 2),
    ] {
        let out = resume(t.path(), &data, &files, rank, world);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{files:?} resumed: {err}");
        assert!(err.contains("different steps"), "{err}");
    }
    // The same step merges, and so does a rank whose data ran out (all
    // lanes hold 4 batches) with one that asked for more steps.
    let b2 = save(t.path(), &data, 1, 2, 2);
    let out = resume(t.path(), &data, &[&a2, &b2], 0, 1);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (a9, b4) = (
        save(t.path(), &data, 0, 2, 9),
        save(t.path(), &data, 1, 2, 4),
    );
    let out = resume(t.path(), &data, &[&a9, &b4], 0, 1);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Saves rank 0 of 1 after 1 step over `data`, changes the data with
/// `change`, and resumes: the resume must be refused naming a shard.
fn refused_after(name: &str, change: impl FnOnce(&Path)) {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    dataset(&data);
    let ckpt = save(t.path(), &data, 0, 1, 1);
    change(&data);
    let out = resume(t.path(), &data, &[&ckpt], 0, 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{name}: resumed over changed data");
    assert!(err.contains("dataset `data` shard"), "{name}: {err}");
}

#[test]
fn data_changed_under_a_checkpoint_is_refused_naming_the_shard() {
    let shard = |d: &Path, s: u32| d.join(format!("shard-{s}.jsonl"));
    refused_after("same size, same lines, other content", |d| {
        let lines: String = (0..40)
            .map(|i| format!("{{\"id\": {}}}\n", 40 + (i + 1) % 40))
            .collect();
        std::fs::write(shard(d, 1), lines).unwrap();
    });
    refused_after("two shards swapped", |d| {
        std::fs::rename(shard(d, 0), d.join("tmp")).unwrap();
        std::fs::rename(shard(d, 2), shard(d, 0)).unwrap();
        std::fs::rename(d.join("tmp"), shard(d, 2)).unwrap();
    });
    refused_after("a shard renamed, its order changed", |d| {
        std::fs::rename(shard(d, 0), d.join("shard-9.jsonl")).unwrap();
    });
    refused_after("a shard moved into a subfolder", |d| {
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::rename(shard(d, 2), d.join("sub").join("shard-2.jsonl")).unwrap();
    });
    refused_after("one line edited in place", |d| {
        let text =
            std::fs::read_to_string(shard(d, 1))
                .unwrap()
                .replacen("\"id\": 45", "\"id\": 54", 1);
        std::fs::write(shard(d, 1), text).unwrap();
    });
    // The same data copied elsewhere resumes.
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    dataset(&data);
    let ckpt = save(t.path(), &data, 0, 1, 1);
    let copy = t.path().join("elsewhere").join("data");
    std::fs::create_dir_all(&copy).unwrap();
    for s in 0..3 {
        std::fs::copy(shard(&data, s), shard(&copy, s)).unwrap();
    }
    std::fs::remove_dir_all(&data).unwrap();
    let out = resume(t.path(), &copy, &[&ckpt], 0, 1);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Outputs that are inputs, each other, or special files are refused
/// before anything is written, and the dataset is left as it was.
#[test]
fn outputs_that_would_destroy_an_input_or_each_other_are_refused_first() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    dataset(&data);
    let shard = data.join("shard-1.jsonl");
    let before = std::fs::read(&shard).unwrap();
    let log = t.path().join("log.jsonl");
    let ckpt = t.path().join("c.ckpt");
    let fifo = t.path().join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let folder = t.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    let cases: Vec<(&str, PathBuf, Option<PathBuf>, &str)> = vec![
        (
            "--out a shard",
            shard.clone(),
            None,
            "inside the dataset folder",
        ),
        (
            "--checkpoint-out a shard",
            log.clone(),
            Some(shard.clone()),
            "inside the dataset folder",
        ),
        (
            "--out equal to --checkpoint-out",
            ckpt.clone(),
            Some(ckpt.clone()),
            "the same file as --out",
        ),
        ("--out a FIFO", fifo.clone(), None, "a FIFO"),
        (
            "--checkpoint-out a FIFO",
            log.clone(),
            Some(fifo.clone()),
            "a FIFO",
        ),
        (
            "--checkpoint-out a folder",
            log.clone(),
            Some(folder.clone()),
            "a folder",
        ),
    ];
    for (name, out, checkpoint, says) in cases {
        let mut args = vec!["--steps".to_string(), "2".into()];
        if let Some(c) = &checkpoint {
            args.extend(["--checkpoint-out".to_string(), c.to_str().unwrap().into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = rank_run(&data, &out, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{name}: ran");
        assert!(err.contains(says), "{name}: {err}");
        assert_eq!(
            std::fs::read(&shard).unwrap(),
            before,
            "{name}: the shard changed"
        );
        assert!(
            !log.exists() && !ckpt.exists(),
            "{name}: an output was written"
        );
    }
    // A link planted where a temporary file used to be named is not
    // written through, and no temporary file is left beside the outputs.
    let victim = t.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    std::os::unix::fs::symlink(&victim, t.path().join("c.ckpt.tmp")).unwrap();
    let o = rank_run(
        &data,
        &log,
        &["--steps", "1", "--checkpoint-out", ckpt.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    let left: Vec<_> = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") && n != "c.ckpt.tmp")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The new checkpoint may replace the one resumed from; the batch log
    // may not.
    let c = ckpt.to_str().unwrap();
    let o = rank_run(
        &data,
        &log,
        &["--steps", "1", "--resume", c, "--checkpoint-out", c],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = rank_run(&data, &ckpt, &["--steps", "1", "--resume", c]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("resumed from"));
}

/// One byte edited in a large shard, between the places its fingerprint
/// samples, keeps the size and the line count: the fingerprint misses it,
/// `--verify-data` (on both runs) refuses the resume, naming the shard.
#[test]
fn verify_data_catches_an_edit_the_fingerprint_misses() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // About 2 MiB: hashed by samples, not whole.
    let lines: String = (0..20_000)
        .map(|i| format!("{{\"id\": {i}, \"text\": \"line {i:08} of the large shard xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}\n"))
        .collect();
    std::fs::write(data.join("big.jsonl"), &lines).unwrap();
    let save = |name: &str, extra: &[&str]| {
        let ckpt = dir.path().join(format!("{name}.ckpt"));
        let mut args = vec!["--steps", "2", "--checkpoint-out", ckpt.to_str().unwrap()];
        args.extend(extra);
        let out = rank_run(&data, &dir.path().join(format!("{name}.jsonl")), &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ckpt
    };
    let plain = save("plain", &[]);
    let verified = save("verified", &["--verify-data"]);
    // Between sampled windows: 64 KiB edge, then 32 windows of 4 KiB
    // spread over the rest; the middle of the gap after window 3.
    let len = lines.len();
    let span = len - 2 * (64 << 10) - (4 << 10);
    let gap = (64 << 10) + span * 3 / 31 + (4 << 10) + (span / 31 - (4 << 10)) / 2;
    let digit = gap + lines[gap..].find(|c: char| c.is_ascii_digit()).unwrap();
    let mut edited = lines.into_bytes();
    edited[digit] = if edited[digit] == b'9' {
        b'8'
    } else {
        edited[digit] + 1
    };
    std::fs::write(data.join("big.jsonl"), &edited).unwrap();
    let resume = |ckpt: &Path, extra: &[&str]| {
        let mut args = vec!["--steps", "1", "--resume", ckpt.to_str().unwrap()];
        args.extend(extra);
        rank_run(&data, &dir.path().join("again.jsonl"), &args)
    };
    // The fingerprint alone: the edit is not seen (why the option exists).
    assert!(resume(&plain, &[]).status.success());
    let out = resume(&verified, &["--verify-data"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an edited shard resumed");
    assert!(
        stderr.contains("big.jsonl") && stderr.contains("bytes differs"),
        "{stderr}"
    );
    // A checkpoint saved without the checksums cannot be checked with them.
    let out = resume(&plain, &["--verify-data"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("is not in the checkpointed run"),
        "{stderr}"
    );
}
