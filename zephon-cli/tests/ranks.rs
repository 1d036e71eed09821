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

/// Runs `world` ranks at once, each for `steps` steps, resuming from
/// `resume`; returns their batches and checkpoint files.
fn phase(
    dir: &Path,
    name: &str,
    world: u32,
    steps: u64,
    resume: &[PathBuf],
) -> (Global, Vec<PathBuf>) {
    let children: Vec<_> = (0..world)
        .map(|rank| {
            let out = dir.join(format!("{name}-{rank}.jsonl"));
            // One rank writes JSON, the others the binary form: both restore.
            let ext = if rank == 0 { "json" } else { "ckpt" };
            let ckpt = dir.join(format!("{name}-{rank}.{ext}"));
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_zephon"));
            cmd.arg("rank-run")
                .arg("--data")
                .arg(dir.join("data"))
                .args(["--rank", &rank.to_string()])
                .args(["--world-size", &world.to_string()])
                .args(["--lanes", "8", "--batch-size", "3", "--passes", "2"])
                .args(["--seed", "17", "--shuffle-buffer", "5"])
                .args(["--steps", &steps.to_string()])
                .arg("--out")
                .arg(&out)
                .arg("--checkpoint-out")
                .arg(&ckpt);
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

    let (single, _) = phase(&dir, "single", 1, 1_000, &[]);
    // 176 samples x 2 passes over 8 lanes of batches of 3: 15 steps.
    assert_eq!(single.keys().map(|k| k.0).max(), Some(14));
    assert!(single.values().all(|ids| ids.iter().all(|&i| i > 0)));

    let (a, c2) = phase(&dir, "two", 2, 4, &[]);
    let (b, c4) = phase(&dir, "four", 4, 5, &c2);
    let (c, _) = phase(&dir, "one", 1, 1_000, &c4);

    let mut joined = Global::new();
    for part in [a, b, c] {
        for (key, ids) in part {
            assert!(joined.insert(key, ids).is_none(), "{key:?} delivered twice");
        }
    }
    assert_eq!(joined, single);

    // A checkpoint that does not cover the restoring rank's lanes is refused.
    let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .arg("rank-run")
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
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_manifest_naming_files_outside_the_data_folder_is_refused() {
    use zephon_storage::format::mds::{MdsColumn, encode_shard};
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // Streaming's index, its second shard outside the folder.
    let cols = [MdsColumn {
        name: "id".into(),
        encoding: "int".into(),
        size: Some(8),
    }];
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
