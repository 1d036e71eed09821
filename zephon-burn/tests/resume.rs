//! Exact training resume of the small transformer LM fed by the packed text
//! pipeline: a run stopped after K steps and restored from its checkpoint
//! folder into fresh model, optimizer and pipeline objects continues with
//! the uninterrupted run's batches and losses, bit for bit, also when the
//! data side was checkpointed on 2 ranks and restored on 1, and when the
//! saving and the restoring run are separate processes.

use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, FloatDType};
use std::path::Path;
use std::sync::Mutex;
use zephon_burn::DeviceChoice;
use zephon_burn::Error;
use zephon_burn::harness::TimedModel;
use zephon_burn::models::lm::{LmConfig, TextData, TransformerLm};
use zephon_burn::resume::{MANIFEST, read_manifest, restore_training, save_training};
use zephon_core::BlockingIter;
use zephon_core::checkpoint::{Checkpoint, Checkpointed, CheckpointedExt};
use zephon_ops::TrainingBatch;

const LANES: u32 = 2;
const STEPS: u64 = 6;
const STOP: u64 = 3;

fn model_config() -> LmConfig {
    LmConfig {
        vocab_size: 256,
        d_model: 16,
        n_heads: 2,
        n_layers: 1,
        d_ff: 32,
        max_seq_len: 16,
        dropout: 0.0,
    }
}

fn data() -> TextData {
    TextData {
        num_docs: 40,
        seq_len: 16,
        batch_size: 2,
        seed: 3,
        workers: 2,
    }
}

fn device() -> Device {
    DeviceChoice::Cpu.resolve().unwrap().0
}

/// Burn initialises parameters lazily, on first use, from a process-wide
/// generator: runs take turns, so a run's weights depend on the seed alone,
/// as they would in separate processes seeded alike.
static RUNS: Mutex<()> = Mutex::new(());

fn fresh_model(device: &Device) -> TransformerLm {
    device.seed(11);
    TransformerLm::new(&model_config(), device)
}

/// A global batch as the model sees it: per lane, (lane, index, input ids,
/// labels).
type GlobalBatch = Vec<(u32, u64, Vec<i64>, Vec<i64>)>;

/// What a run trained on and the loss of every step.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Trace {
    losses: Vec<f32>,
    batches: Vec<GlobalBatch>,
}

/// Lane-batch `step` of every lane, in lane order, gathered from the ranks.
fn next_global(
    ranks: &mut [Checkpointed<BlockingIter<TrainingBatch>>],
    owned: usize,
    step: u64,
) -> Vec<TrainingBatch> {
    let mut global: Vec<TrainingBatch> = ranks
        .iter_mut()
        .flat_map(|it| it.by_ref().take(owned).map(|b| b.unwrap()))
        .collect();
    global.sort_by_key(|b| b.lane);
    let shape: Vec<(u32, u64)> = global.iter().map(|b| (b.lane, b.index)).collect();
    let want: Vec<(u32, u64)> = (0..LANES).map(|l| (l, step)).collect();
    assert_eq!(shape, want, "step {step}: the data ran out or lanes mixed");
    global
}

/// One optimizer step on a global batch: the mean of the lanes' losses,
/// summed in lane order so the result does not depend on the rank count.
fn train_step(
    model: TransformerLm,
    optimizer: &mut ModuleOptimizer,
    global: &[TrainingBatch],
    device: &Device,
) -> (TransformerLm, f32) {
    let mut total = None;
    for b in global {
        let input = TransformerLm::to_input(b.clone(), device, FloatDType::F32).unwrap();
        let loss = model.loss(input);
        total = Some(match total {
            None => loss,
            Some(t) => t + loss,
        });
    }
    let loss = total.unwrap() / global.len() as f32;
    let value = loss.clone().into_data().try_to_vec::<f32>().unwrap()[0];
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    (optimizer.step(1e-2, model, grads), value)
}

/// Trains to step `until` with the data pipeline split over `world` ranks:
/// from scratch, or restored from the folder `from` into fresh objects;
/// optionally saves a training checkpoint into `save_to` at the end.
fn run(world: u32, from: Option<&Path>, until: u64, save_to: Option<&Path>) -> Trace {
    let _turn = RUNS.lock().unwrap_or_else(|e| e.into_inner());
    let device = device();
    let d = data();
    let works: Vec<_> = (0..world)
        .map(|r| d.work_source(LANES, r, world).unwrap())
        .collect();
    let mut model = fresh_model(&device);
    let mut optimizer: ModuleOptimizer = AdamConfig::new().init();
    let mut step = 0;
    let mut progress: Vec<_> = works.iter().map(|ws| d.recipe(ws).start(ws)).collect();
    if let Some(dir) = from {
        let restored = restore_training(dir, model, optimizer, &d.recipe(&works[0])).unwrap();
        (model, optimizer, step) = (restored.model, restored.optimizer, restored.step);
        progress = works
            .iter()
            .map(|ws| d.recipe(ws).resume(ws, &restored.data).unwrap())
            .collect();
    }
    let mut ranks: Vec<_> = works
        .iter()
        .zip(progress)
        .map(|(ws, p)| d.resumable_pipeline(ws, &p).unwrap().checkpointed(p))
        .collect();
    let owned = (LANES / world) as usize;
    let mut trace = Trace::default();
    for t in step..until {
        let global = next_global(&mut ranks, owned, t);
        trace.batches.push(
            global
                .iter()
                .map(|b| (b.lane, b.index, b.input_ids.to_i64(), b.labels.clone()))
                .collect(),
        );
        let loss;
        (model, loss) = train_step(model, &mut optimizer, &global, &device);
        trace.losses.push(loss);
    }
    if let Some(dir) = save_to {
        let data = Checkpoint::merge(ranks.iter().map(|r| r.checkpoint())).unwrap();
        save_training(dir, until, &model, &optimizer, &data).unwrap();
    }
    trace
}

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
            "stage_in_child_process",
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
    let full = run(1, None, STEPS, None);
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

/// Restores `dir` into fresh objects for the run `d` (model of `m`) and
/// returns the error's file name and message.
fn restore_error(dir: &Path, d: &TextData, m: &LmConfig) -> (String, String) {
    let device = device();
    let ws = d.work_source(LANES, 0, 1).unwrap();
    let model = TransformerLm::new(m, &device);
    match restore_training(dir, model, AdamConfig::new().init(), &d.recipe(&ws)) {
        Ok(_) => panic!("{} restored", dir.display()),
        Err(Error::Checkpoint { path, message }) => (
            path.file_name().unwrap().to_string_lossy().into_owned(),
            message,
        ),
        Err(e) => panic!("not a checkpoint error: {e}"),
    }
}

fn manifest_part(m: &zephon_burn::resume::Manifest, part: &str) -> String {
    match part {
        "model" => m.model.file.clone(),
        "optimizer" => m.optimizer.file.clone(),
        _ => m.data.file.clone(),
    }
}

fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join(MANIFEST);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn bad_checkpoint_folders_are_refused_with_the_file_and_the_reason() {
    let (d, m) = (data(), model_config());
    let saved = tempfile::tempdir().unwrap();
    run(1, None, 1, Some(saved.path()));
    let manifest = read_manifest(saved.path()).unwrap();
    let data_file = manifest.data.file.clone();
    // A fresh copy of the good folder per case.
    let copy = || {
        let dir = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(saved.path()).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
        }
        dir
    };
    let expect = |dir: &Path, d: &TextData, m: &LmConfig, file: &str, says: &str| {
        let (f, msg) = restore_error(dir, d, m);
        assert_eq!(f, file, "{msg}");
        assert!(msg.contains(says), "{file}: `{msg}` does not say `{says}`");
    };

    let empty = tempfile::tempdir().unwrap();
    expect(empty.path(), &d, &m, MANIFEST, "no manifest");

    let dir = copy();
    std::fs::write(dir.path().join(MANIFEST), "{\"format\": ").unwrap();
    expect(dir.path(), &d, &m, MANIFEST, "corrupt manifest");

    let dir = copy();
    edit_manifest(dir.path(), |v| v["format"] = "something else".into());
    expect(dir.path(), &d, &m, MANIFEST, "not a training checkpoint");

    let dir = copy();
    edit_manifest(dir.path(), |v| v["data"]["file"] = "../escape.zpck".into());
    expect(
        dir.path(),
        &d,
        &m,
        MANIFEST,
        "not a file name inside the folder",
    );

    let dir = copy();
    edit_manifest(dir.path(), |v| v["step"] = 2.into());
    expect(dir.path(), &d, &m, &data_file, "different steps");

    let dir = copy();
    std::fs::remove_file(dir.path().join(&manifest.optimizer.file)).unwrap();
    expect(dir.path(), &d, &m, &manifest.optimizer.file, "cannot read");

    let dir = copy();
    let path = dir.path().join(&data_file);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.pop();
    std::fs::write(&path, &bytes).unwrap();
    expect(dir.path(), &d, &m, &data_file, "truncated");

    let dir = copy();
    let path = dir.path().join(&manifest.model.file);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    expect(dir.path(), &d, &m, &manifest.model.file, "content hash");

    // A forged manifest that vouches for garbage: each part is still
    // decoded with an error, not a panic.
    for (part, says) in [
        ("model", "not a model record"),
        ("optimizer", "not an optimizer record"),
        ("data", "not a data checkpoint"),
    ] {
        for garbage in [
            &b"not a record"[..],
            &[0u8; 64][..],
            &b"BPK\0\xff\xff\xff\xff"[..],
        ] {
            let dir = copy();
            let file = manifest_part(&manifest, part);
            std::fs::write(dir.path().join(&file), garbage).unwrap();
            edit_manifest(dir.path(), |v| {
                v[part]["bytes"] = garbage.len().into();
                v[part]["hash"] = format!("{:016x}", zephon_core::hash::bytes(garbage)).into();
            });
            expect(dir.path(), &d, &m, &file, says);
        }
    }

    // The model's record named as the optimizer's and the other way round.
    let dir = copy();
    edit_manifest(dir.path(), |v| {
        let model = v["model"].clone();
        v["model"] = v["optimizer"].clone();
        v["optimizer"] = model;
    });
    expect(
        dir.path(),
        &d,
        &m,
        &manifest.optimizer.file,
        "does not fit the model",
    );

    let dir = copy();
    edit_manifest(dir.path(), |v| v["optimizer"] = v["model"].clone());
    expect(
        dir.path(),
        &d,
        &m,
        MANIFEST,
        "as both the model and the optimizer part",
    );
    // The model's record under the optimizer's name.
    let dir = copy();
    std::fs::copy(
        dir.path().join(&manifest.model.file),
        dir.path().join(&manifest.optimizer.file),
    )
    .unwrap();
    edit_manifest(dir.path(), |v| {
        v["optimizer"]["bytes"] = v["model"]["bytes"].clone();
        v["optimizer"]["hash"] = v["model"]["hash"].clone();
    });
    expect(
        dir.path(),
        &d,
        &m,
        &manifest.optimizer.file,
        "not this optimizer's record",
    );

    // Another run: other seed, or other rows per batch.
    let other_seed = TextData { seed: 4, ..data() };
    expect(saved.path(), &other_seed, &m, &data_file, "seed differs");
    let other_batch = TextData {
        batch_size: 3,
        ..data()
    };
    expect(saved.path(), &other_batch, &m, &data_file, "batch_size");

    // A model of other sizes does not take the record.
    let wider = LmConfig {
        d_model: 8,
        ..model_config()
    };
    expect(
        saved.path(),
        &d,
        &wider,
        &manifest.model.file,
        "does not fit",
    );

    // Nothing was consumed from the good folder.
    assert!(
        restore_training(
            saved.path(),
            TransformerLm::new(&m, &device()),
            AdamConfig::new().init(),
            &d.recipe(&d.work_source(LANES, 0, 1).unwrap())
        )
        .is_ok()
    );
}

#[test]
fn a_save_refuses_a_partial_or_out_of_step_data_checkpoint() {
    let (device, d) = (device(), data());
    let model = TransformerLm::new(&model_config(), &device);
    let optimizer: ModuleOptimizer = AdamConfig::new().init();
    let ws = d.work_source(LANES, 0, 2).unwrap();
    let mut progress = d.recipe(&ws).start(&ws);
    progress.record(0, 2);
    let dir = tempfile::tempdir().unwrap();
    let err = save_training(dir.path(), 1, &model, &optimizer, &progress.checkpoint())
        .unwrap_err()
        .to_string();
    assert!(err.contains("misses lanes [1]"), "{err}");

    let ws = d.work_source(LANES, 0, 1).unwrap();
    let mut progress = d.recipe(&ws).start(&ws);
    progress.record(0, 2);
    progress.record(1, 2);
    let err = save_training(dir.path(), 2, &model, &optimizer, &progress.checkpoint())
        .unwrap_err()
        .to_string();
    assert!(err.contains("at step 1, the model at step 2"), "{err}");
    // Nothing was written.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_new_save_replaces_the_previous_parts() {
    let dir = tempfile::tempdir().unwrap();
    run(1, None, 1, Some(dir.path()));
    run(1, None, 2, Some(dir.path()));
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "data-00000002.zpck",
            MANIFEST,
            "model-00000002.bpk",
            "optimizer-00000002.bpk"
        ]
    );
}
