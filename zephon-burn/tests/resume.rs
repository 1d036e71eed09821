//! Exact training resume of the small transformer LM fed by the packed text
//! pipeline: a run stopped after K steps and restored from its checkpoint
//! folder into fresh model, optimizer and pipeline objects continues with
//! the uninterrupted run's batches and losses, bit for bit, also when the
//! data side was checkpointed on 2 ranks and restored on 1, and when the
//! saving and the restoring run are separate processes.

use crate::common;

use common::{STEPS, STOP, Trace, run};
use std::path::Path;
use zephon_burn::resume::read_manifest;

fn bits(losses: &[f32]) -> Vec<u32> {
    losses.iter().map(|l| l.to_bits()).collect()
}

fn table(full: &Trace, first: &Trace, second: &Trace) -> String {
    let restarted = first.losses.iter().chain(&second.losses);
    full.losses
        .iter()
        .zip(restarted)
        .enumerate()
        .map(|(t, (a, b))| format!("step {t}: uninterrupted {a:.7}  restarted {b:.7}\n"))
        .collect()
}

/// Checks a restart against the uninterrupted run: the same global batches
/// and the same losses, bit for bit. The flex backend is deterministic on
/// the CPU (two uninterrupted runs agree to the bit, checked below), so no
/// tolerance is needed.
fn assert_same(full: &Trace, first: &Trace, second: &Trace) {
    let k = first.losses.len();
    assert_eq!(k + second.losses.len(), full.losses.len());
    assert_eq!(first.batches, full.batches[..k]);
    assert_eq!(second.batches, full.batches[k..]);
    assert_eq!(
        bits(&first.losses),
        bits(&full.losses[..k]),
        "\n{}",
        table(full, first, second)
    );
    assert_eq!(
        bits(&second.losses),
        bits(&full.losses[k..]),
        "\n{}",
        table(full, first, second)
    );
}

#[test]
fn a_restored_run_continues_bit_for_bit() {
    let full = run(1, None, STEPS, None);
    let again = run(1, None, STEPS, None);
    assert_eq!(
        bits(&full.losses),
        bits(&again.losses),
        "flex is not deterministic"
    );
    assert!(
        full.losses[0] > 4.0 && full.losses[5] < full.losses[0],
        "{:?}",
        full.losses
    );

    let dir = tempfile::tempdir().unwrap();
    let first = run(1, None, STOP, Some(dir.path()));
    assert_eq!(read_manifest(dir.path()).unwrap().step, STOP);
    let second = run(1, Some(dir.path()), STEPS, None);
    eprintln!("{}", table(&full, &first, &second));
    assert_same(&full, &first, &second);
}

/// Names the stage a child process runs (see [`stage_in_child_process`]).
const STAGE: &str = "ZEPHON_RESUME_STAGE";

/// Runs `world` ranks' data side to step `until` in a child process of
/// this test binary, from and into the folder `dir`; returns its trace.
fn child_run(dir: &Path, world: u32, restore: bool, until: u64) -> Trace {
    let out = dir.join(format!("trace-{world}-{until}.json"));
    let stage = serde_json::json!({
        "dir": dir, "world": world, "restore": restore, "until": until, "out": &out,
    });
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            // The test's name in the suite binary (tests/suite.rs).
            "resume::stage_in_child_process",
            "--nocapture",
        ])
        .env(STAGE, stage.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "the child process of {stage} failed");
    let trace = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    std::fs::remove_file(&out).unwrap();
    trace
}

/// Entry point of the child processes of
/// [`a_restart_in_other_processes_continues_bit_for_bit`]: runs the stage
/// the environment names and writes its trace. Ignored in a normal test
/// run; the parent runs it with `--ignored`.
#[test]
#[ignore = "run by the resume tests in a child process"]
fn stage_in_child_process() {
    let stage: serde_json::Value =
        serde_json::from_str(&std::env::var(STAGE).expect("ZEPHON_RESUME_STAGE")).unwrap();
    let dir = Path::new(stage["dir"].as_str().unwrap());
    let world = stage["world"].as_u64().unwrap() as u32;
    let until = stage["until"].as_u64().unwrap();
    let trace = if stage["restore"].as_bool().unwrap() {
        run(world, Some(dir), until, None)
    } else {
        run(world, None, until, Some(dir))
    };
    let out = stage["out"].as_str().unwrap();
    std::fs::write(out, serde_json::to_vec(&trace).unwrap()).unwrap();
}

#[test]
fn a_restart_in_other_processes_continues_bit_for_bit() {
    // The uninterrupted run in a process of its own too: each side then
    // runs alone in its process, not beside the suite's other tests (with
    // them, it once gave other losses from step 0 on).
    let reference = tempfile::tempdir().unwrap();
    let full = child_run(reference.path(), 1, false, STEPS);
    let dir = tempfile::tempdir().unwrap();
    // One process trains 3 steps, its data side split over 2 ranks, and
    // saves; another restores on 1 rank and trains to 6. They share the
    // folder and nothing else.
    let first = child_run(dir.path(), 2, false, STOP);
    let second = child_run(dir.path(), 1, true, STEPS);
    assert_same(&full, &first, &second);
}

#[test]
fn the_data_side_restores_on_another_rank_count() {
    let full = run(1, None, STEPS, None);
    let dir = tempfile::tempdir().unwrap();
    // Checkpointed with the pipeline split over 2 ranks, one lane each.
    let first = run(2, None, STOP, Some(dir.path()));
    // Restored on 1 rank owning both lanes.
    let second = run(1, Some(dir.path()), STEPS, None);
    assert_same(&full, &first, &second);
}
