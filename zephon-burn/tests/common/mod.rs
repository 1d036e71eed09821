//! What the resume tests share: the tiny LM and text data, and a training
//! run that starts fresh or from a checkpoint folder and may save one.
// Each test binary uses a part of this module.
#![allow(dead_code)]

use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, FloatDType};
use std::path::Path;
use std::sync::Mutex;
use zephon_burn::DeviceChoice;
use zephon_burn::harness::TimedModel;
use zephon_burn::models::lm::{LmConfig, TextData, TransformerLm};
use zephon_burn::resume::{restore_training, save_training};
use zephon_core::BlockingIter;
use zephon_core::checkpoint::{Checkpoint, Checkpointed, CheckpointedExt};
use zephon_ops::TrainingBatch;

pub const LANES: u32 = 2;
pub const STEPS: u64 = 6;
pub const STOP: u64 = 3;

pub fn model_config() -> LmConfig {
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

pub fn data() -> TextData {
    TextData {
        num_docs: 40,
        seq_len: 16,
        batch_size: 2,
        seed: 3,
        workers: 2,
    }
}

pub fn device() -> Device {
    DeviceChoice::Cpu.resolve().unwrap().0
}

/// Burn initialises parameters lazily, on first use, from a process-wide
/// generator: runs take turns, so a run's weights depend on the seed alone,
/// as they would in separate processes seeded alike.
pub static RUNS: Mutex<()> = Mutex::new(());

pub fn fresh_model(device: &Device) -> TransformerLm {
    device.seed(11);
    TransformerLm::new(&model_config(), device)
}

/// A global batch as the model sees it: per lane, (lane, index, input ids,
/// labels).
pub type GlobalBatch = Vec<(u32, u64, Vec<i64>, Vec<i64>)>;

/// What a run trained on and the loss of every step.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Trace {
    pub losses: Vec<f32>,
    pub batches: Vec<GlobalBatch>,
}

/// Lane-batch `step` of every lane, in lane order, gathered from the ranks.
pub fn next_global(
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
pub fn train_step(
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
pub fn run(world: u32, from: Option<&Path>, until: u64, save_to: Option<&Path>) -> Trace {
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
