//! Ranks as separate `zephon rank-run` processes over one local dataset:
//! 2 ranks checkpoint to files, 4 ranks resume from them and checkpoint
//! again, 1 rank finishes the run. The global batches equal those of one
//! uninterrupted process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (step, lane) -> sample ids.
type Global = BTreeMap<(u64, u32), Vec<i64>>;

fn dataset(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let mut id = 0;
    for (s, n) in [70, 45, 61].into_iter().enumerate() {
        let lines: String = (0..n)
            .map(|_| {
                id += 1;
                format!("{{\"id\": {id}, \"text\": \"document {id}\"}}\n")
            })
            .collect();
        std::fs::write(dir.join(format!("shard-{s}.jsonl")), lines).unwrap();
    }
}

/// How a rank learns its place.
#[derive(Clone, Copy)]
enum Launch {
    /// `--rank` and `--world-size`.
    Flags,
    /// torchrun's `RANK`, `WORLD_SIZE`, `LOCAL_RANK`.
    Torchrun,
    /// Slurm's `SLURM_PROCID`, `SLURM_NTASKS`.
    Slurm,
}

const LAUNCHER_VARS: [&str; 6] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
];

/// `zephon rank-run` with none of the launcher variables this test's own
/// environment may hold.
fn rank_run() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zephon"));
    cmd.arg("rank-run");
    for v in LAUNCHER_VARS {
        cmd.env_remove(v);
    }
    cmd
}

/// Runs `world` ranks at once, each for `steps` steps, resuming from
/// `resume`; returns their batches and checkpoint files.
fn phase(
    dir: &Path,
    name: &str,
    (world, launch): (u32, Launch),
    steps: u64,
    resume: &[PathBuf],
) -> (Global, Vec<PathBuf>) {
    phase_with(dir, name, (world, launch), steps, resume, &[])
}

/// [`phase`] with more flags for every rank.
fn phase_with(
    dir: &Path,
    name: &str,
    (world, launch): (u32, Launch),
    steps: u64,
    resume: &[PathBuf],
    extra: &[&str],
) -> (Global, Vec<PathBuf>) {
    let children: Vec<_> = (0..world)
        .map(|rank| {
            let out = dir.join(format!("{name}-{rank}.jsonl"));
            // One rank writes JSON, the others the binary form: both restore.
            let ext = if rank == 0 { "json" } else { "ckpt" };
            let ckpt = dir.join(format!("{name}-{rank}.{ext}"));
            let mut cmd = rank_run();
            let (rank, world) = (rank.to_string(), world.to_string());
            match launch {
                Launch::Flags => cmd.args(["--rank", &rank, "--world-size", &world]),
                Launch::Torchrun => cmd
                    .env("RANK", &rank)
                    .env("WORLD_SIZE", &world)
                    .env("LOCAL_RANK", &rank),
                Launch::Slurm => cmd.env("SLURM_PROCID", &rank).env("SLURM_NTASKS", &world),
            };
            cmd.arg("--data")
                .arg(dir.join("data"))
                .args(["--lanes", "8", "--batch-size", "3", "--passes", "2"])
                .args(["--seed", "17", "--shuffle-buffer", "5"])
                .args(["--steps", &steps.to_string()])
                .arg("--out")
                .arg(&out)
                .arg("--checkpoint-out")
                .arg(&ckpt);
            cmd.args(extra);
            if !resume.is_empty() {
                cmd.arg("--resume").args(resume);
            }
            (cmd.spawn().unwrap(), out, ckpt)
        })
        .collect();
    let mut global = Global::new();
    let mut ckpts = Vec::new();
    for (mut child, out, ckpt) in children {
        assert!(child.wait().unwrap().success(), "{name}: a rank failed");
        for line in std::fs::read_to_string(&out).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let key = (
                v["index"].as_u64().unwrap(),
                v["lane"].as_u64().unwrap() as u32,
            );
            let ids = v["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect();
            assert!(global.insert(key, ids).is_none(), "{name}: {key:?} twice");
        }
        ckpts.push(ckpt);
    }
    (global, ckpts)
}

#[test]
fn ranks_restart_with_another_count_and_keep_the_global_batches() {
    let dir = std::env::temp_dir().join(format!("zephon-ranks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dataset(&dir.join("data"));

    let (single, _) = phase(&dir, "single", (1, Launch::Flags), 1_000, &[]);
    // 176 samples x 2 passes over 8 lanes of batches of 3: 15 steps.
    assert_eq!(single.keys().map(|k| k.0).max(), Some(14));
    assert!(single.values().all(|ids| ids.iter().all(|&i| i > 0)));

    // Ranks placed by Slurm's variables, then torchrun's, then flags.
    let (a, c2) = phase(&dir, "two", (2, Launch::Slurm), 4, &[]);
    let (b, c4) = phase(&dir, "four", (4, Launch::Torchrun), 5, &c2);
    // As many steps as the flag takes: added to the resumed step count,
    // they overflowed (a panic; wrapped, a stop at the first batch).
    let (c, _) = phase(&dir, "one", (1, Launch::Flags), u64::MAX, &c4);

    let mut joined = Global::new();
    for part in [a, b, c] {
        for (key, ids) in part {
            assert!(joined.insert(key, ids).is_none(), "{key:?} delivered twice");
        }
    }
    assert_eq!(joined, single);

    // A checkpoint that does not cover the restoring rank's lanes is refused.
    let out = rank_run()
        .arg("--data")
        .arg(dir.join("data"))
        .args(["--lanes", "8", "--batch-size", "3", "--passes", "2"])
        .args(["--seed", "17", "--shuffle-buffer", "5", "--steps", "1"])
        .arg("--out")
        .arg(dir.join("refused.jsonl"))
        .arg("--resume")
        .arg(&c2[0])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("merge the checkpoints of all ranks"), "{err}");

    // Launcher variables that are not numbers, or that a flag contradicts.
    let refused = |env: &[(&str, &str)], flags: &[&str], says: &str| {
        let mut cmd = rank_run();
        cmd.arg("--data")
            .arg(dir.join("data"))
            .args(["--steps", "1", "--out"])
            .arg(dir.join("refused.jsonl"))
            .args(flags);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success(), "{env:?} {flags:?} ran");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{env:?} {flags:?}: {err}");
    };
    refused(
        &[("RANK", "zero"), ("WORLD_SIZE", "2")],
        &[],
        "`zero` is not a whole number",
    );
    refused(
        &[("SLURM_PROCID", "4"), ("SLURM_NTASKS", "4")],
        &[],
        "not below SLURM_NTASKS",
    );
    refused(
        &[("RANK", "1"), ("WORLD_SIZE", "2")],
        &["--rank", "0"],
        "the launcher's RANK is 1",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_manifest_naming_files_outside_the_data_folder_is_refused() {
    use zephon_storage::format::mds::{MdsColumn, encode_shard};
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // Streaming's index, its second shard outside the folder.
    let cols = [MdsColumn::new("id", "int", Some(8))];
    let shard = |ids: std::ops::Range<i64>| {
        encode_shard(
            &cols,
            &ids.map(|i| vec![i.to_le_bytes().to_vec()])
                .collect::<Vec<_>>(),
        )
    };
    let (inside, outside) = (shard(1..9), shard(900..908));
    std::fs::write(data.join("shard.00000.mds"), &inside).unwrap();
    std::fs::write(t.path().join("shard.00001.mds"), &outside).unwrap();
    let entry = |base: &str, bytes: usize| {
        serde_json::json!({"column_encodings": ["int"], "column_names": ["id"],
            "column_sizes": [8], "compression": null, "format": "mds",
            "raw_data": {"basename": base, "bytes": bytes}, "samples": 8, "zip_data": null})
    };
    let index = serde_json::json!({"version": 2, "shards": [
        entry("shard.00000.mds", inside.len()),
        entry("../shard.00001.mds", outside.len())]});
    std::fs::write(data.join("index.json"), index.to_string()).unwrap();
    let out_file = t.path().join("out.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .arg("rank-run")
        .arg("--data")
        .arg(&data)
        .args(["--lanes", "1", "--steps", "100", "--out"])
        .arg(&out_file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let delivered = std::fs::read_to_string(&out_file).unwrap_or_default();
    assert!(!out.status.success(), "delivered {delivered}");
    assert!(
        err.contains("index.json")
            && err.contains("\"../shard.00001.mds\"")
            && err.contains("`..`"),
        "{err}"
    );
    assert!(!delivered.contains("90"), "{delivered}");
}

/// A sample without an integer `id` is an error naming it; before, it was
/// written as id -1, so two such samples compared equal.
#[test]
fn a_sample_without_an_integer_id_is_named() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("a.jsonl"),
        "{\"id\":1}\n{\"id\":\"two\"}\n{\"id\":3}\n",
    )
    .unwrap();
    let out = rank_run()
        .arg("--data")
        .arg(&data)
        .args(["--lanes", "1", "--batch-size", "1", "--steps", "3", "--out"])
        .arg(t.path().join("out.jsonl"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("a.jsonl")
            && err.contains("sample 1")
            && err.contains("no integer field `id`"),
        "{err}"
    );
}

/// A checkpoint destination in a folder that is not there is refused
/// before the steps run (no batches written), not after them.
#[test]
fn a_checkpoint_folder_that_is_not_there_is_refused_before_the_run() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("a.jsonl"), "{\"id\":1}\n{\"id\":2}\n").unwrap();
    let out_file = t.path().join("out.jsonl");
    let out = rank_run()
        .arg("--data")
        .arg(&data)
        .args(["--lanes", "1", "--steps", "1", "--out"])
        .arg(&out_file)
        .arg("--checkpoint-out")
        .arg(t.path().join("missing").join("c.ckpt"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--checkpoint-out") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!out_file.exists(), "the steps ran");
}

/// Steps 4 and 5 skipped by 4 ranks resumed from 2: those global batches
/// are never handed out, the rest are the uninterrupted run's, and a later
/// resume on 1 rank keeps the skip without being told again.
#[test]
fn skipped_steps_are_left_out_on_any_rank_count() {
    let dir = tempfile::tempdir().unwrap();
    dataset(&dir.path().join("data"));
    let (all, _) = phase(dir.path(), "all", (1, Launch::Flags), 9, &[]);
    let (a, ckpts) = phase(dir.path(), "a", (2, Launch::Flags), 2, &[]);
    let (b, ckpts) = phase_with(
        dir.path(),
        "b",
        (4, Launch::Flags),
        2,
        &ckpts,
        &["--skip-steps", "4..6"],
    );
    let (c, _) = phase(dir.path(), "c", (1, Launch::Flags), 3, &ckpts);
    let mut got = a;
    got.extend(b);
    got.extend(c);
    let want: Global = all
        .into_iter()
        .filter(|((step, _), _)| !(4..6).contains(step))
        .collect();
    assert_eq!(got.keys().map(|k| k.0).max(), Some(8));
    assert_eq!(got, want);
    // A skip of steps already run is refused, naming the flag's setting.
    let out = rank_run()
        .arg("--data")
        .arg(dir.path().join("data"))
        .args([
            "--lanes",
            "8",
            "--batch-size",
            "3",
            "--passes",
            "2",
            "--seed",
            "17",
            "--shuffle-buffer",
            "5",
        ])
        .args(["--steps", "1", "--skip-steps", "1..3", "--out"])
        .arg(dir.path().join("late.jsonl"))
        .arg("--resume")
        .args(&ckpts)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("`skip`") && stderr.contains("before step"),
        "{stderr}"
    );
}
