//! Burn's `Learner` fits the autoencoder from Zephon loaders, on one device
//! and on two: every epoch is reshuffled, every sample is served once per
//! epoch across the device slices, and progress ends complete. It fits the
//! transformer LM from the packed text pipeline too, its loaders counting
//! the packed rows of each epoch.

use burn::optim::AdamConfig;
use burn::optim::lr_scheduler::constant::ConstantLr;
use burn::tensor::{Device, FloatDType, Tensor};
use burn::train::logger::TrainingProgressLogger;
use burn::train::metric::LossMetric;
use burn::train::{ExecutionStrategy, Learner, MultiDeviceOptim, SupervisedTraining};
use std::sync::{Arc, Mutex};
use zephon_burn::harness::TimedModel;
use zephon_burn::models::autoencoder::{Autoencoder, AutoencoderConfig, DummyData};
use zephon_burn::models::lm::{LmConfig, LmInput, TextData, TransformerLm};
use zephon_burn::{ItemCount, ZephonDataLoader};
use zephon_core::RecordBatch;
use zephon_ops::TrainingBatch;

type Log<T> = Arc<Mutex<Vec<T>>>;

/// The progress Burn reports: `(split, total)` at each start, then the
/// items processed after every step.
#[derive(Clone, Debug, PartialEq)]
enum Event {
    Start(String, usize),
    Update(usize),
}

struct Recorder(Log<Event>);

impl TrainingProgressLogger for Recorder {
    fn start(&mut self, _: usize, _: usize, _: Option<usize>, _: Option<&str>) {}
    fn update_epoch(&mut self, _: usize) {}
    fn start_split(&mut self, split: &str, total_items: usize) {
        self.0
            .lock()
            .unwrap()
            .push(Event::Start(split.into(), total_items));
    }
    fn update_split(&mut self, items_processed: usize) {
        self.0.lock().unwrap().push(Event::Update(items_processed));
    }
    fn end_split(&mut self) {}
    fn end(&mut self) {}
    fn log_event_training(&mut self, _: String) {}
}

/// A loader over `data` on `lanes` lanes that logs the ids it serves.
fn loader(
    data: &DummyData,
    lanes: u32,
    served: Log<i64>,
) -> ZephonDataLoader<RecordBatch, Tensor<2>> {
    let d = data.clone();
    ZephonDataLoader::new(
        data.work_source(data.seed, lanes).unwrap(),
        Device::flex(),
        move |ws| d.pipeline_on(ws),
        move |batch: RecordBatch, device: &Device| {
            served.lock().unwrap().extend(
                batch
                    .items
                    .iter()
                    .map(|r| r.get("id").and_then(|v| v.as_int()).unwrap()),
            );
            Autoencoder::to_input(batch, device, FloatDType::F32)
        },
    )
    .unwrap()
}

struct Fit {
    train: Vec<i64>,
    valid: Vec<i64>,
    progress: Vec<Event>,
}

fn take<T>(log: Log<T>) -> Vec<T> {
    std::mem::take(&mut *log.lock().unwrap())
}

fn fit(devices: usize) -> Fit {
    let data = DummyData {
        num_samples: 64,
        batch_size: 8,
        input_dim: 16,
        seed: 1,
        workers: 2,
    };
    let valid_data = DummyData {
        num_samples: 24,
        seed: 2,
        ..data.clone()
    };
    let (train, valid, progress) = (Log::default(), Log::default(), Log::default());
    let config = AutoencoderConfig {
        input_dim: 16,
        hidden_dim: 8,
        latent_dim: 4,
    };
    let device = Device::flex();
    let model = Autoencoder::new(&config, &device.autodiff());
    let learner = Learner::new(model, AdamConfig::new().init(), ConstantLr::new(1e-3));
    let dir = tempfile::tempdir().unwrap();
    let mut training = SupervisedTraining::new(
        dir.path(),
        Arc::new(loader(&data, 4, train.clone())),
        Arc::new(loader(&valid_data, 2, valid.clone())),
    )
    .num_epochs(2)
    .metric_train_numeric(LossMetric::new())
    .metric_valid_numeric(LossMetric::new())
    .with_progress_logger(Recorder(progress.clone()))
    .with_application_logger(None);
    if devices > 1 {
        let devices = (0..devices).map(|_| Device::flex()).collect();
        training = training.with_training_strategy(
            ExecutionStrategy::multi(devices, MultiDeviceOptim::OptimMainDevice).into(),
        );
    }
    let result = training.launch(learner);
    assert!(result.error.is_none(), "{:?}", result.error);
    Fit {
        train: take(train),
        valid: take(valid),
        progress: take(progress),
    }
}

/// Each epoch's ids are every sample once; epoch 2's order is not epoch 1's.
fn check_epochs(ids: &[i64], n: usize, what: &str) {
    assert_eq!(ids.len(), 2 * n, "{what}: two epochs of {n}");
    let (first, second) = ids.split_at(n);
    for (e, epoch) in [first, second].into_iter().enumerate() {
        let mut sorted = epoch.to_vec();
        sorted.sort();
        assert_eq!(
            sorted,
            (0..n as i64).collect::<Vec<_>>(),
            "{what}, epoch {}",
            e + 1
        );
    }
    assert_ne!(first, second, "{what}: epoch 2 repeats epoch 1's order");
}

/// Every split's last progress update is its total.
fn check_progress(events: &[Event]) {
    let mut splits = Vec::new();
    for e in events {
        match e {
            Event::Start(split, total) => splits.push((split.clone(), *total, 0)),
            Event::Update(done) => splits.last_mut().unwrap().2 = *done,
        }
    }
    let want: Vec<(String, usize, usize)> = [("train", 64), ("valid", 24)]
        .repeat(2)
        .into_iter()
        .map(|(s, n)| (s.to_string(), n, n))
        .collect();
    assert_eq!(splits, want);
}

#[test]
fn the_learner_fits_the_autoencoder_on_one_device() {
    let fit = fit(1);
    check_epochs(&fit.train, 64, "train");
    check_epochs(&fit.valid, 24, "valid");
    check_progress(&fit.progress);
}

#[test]
fn the_learner_fits_the_autoencoder_on_two_devices() {
    let two = fit(2);
    check_epochs(&two.train, 64, "train");
    check_epochs(&two.valid, 24, "valid");
    check_progress(&two.progress);
    // The devices split the same epochs a single device trains on.
    let one = fit(1);
    for (a, b) in one.train.chunks(64).zip(two.train.chunks(64)) {
        let (mut a, mut b) = (a.to_vec(), b.to_vec());
        a.sort();
        b.sort();
        assert_eq!(a, b);
    }
}

/// A packed row as served: (lane, lane-batch, row in it, token ids).
type Row = (u32, u64, usize, Vec<i64>);

/// A counting loader over the packed rows of `data` on `lanes` lanes that
/// logs the rows it serves.
fn lm_loader(
    data: &TextData,
    lanes: u32,
    served: Log<Row>,
) -> ZephonDataLoader<TrainingBatch, LmInput> {
    let d = data.clone();
    ZephonDataLoader::new(
        data.work_source(lanes, 0, 1).unwrap(),
        Device::flex(),
        move |ws| d.pipeline_on(ws),
        move |b: TrainingBatch, device: &Device| {
            let ids = b.input_ids.to_i64();
            served.lock().unwrap().extend(
                ids.chunks(b.seq_len)
                    .enumerate()
                    .map(|(r, row)| (b.lane, b.index, r, row.to_vec())),
            );
            TransformerLm::to_input(b, device, FloatDType::F32)
        },
    )
    .unwrap()
    .items(ItemCount::Counted)
}

struct LmFit {
    /// Per epoch, the rows served.
    train: Vec<Vec<Row>>,
    valid: Vec<Vec<Row>>,
    progress: Vec<Event>,
}

fn fit_lm(devices: usize) -> LmFit {
    let data = TextData {
        num_docs: 16,
        // Most documents are shorter than a row, so rows hold several.
        seq_len: 256,
        batch_size: 2,
        seed: 5,
        workers: 2,
    };
    let valid_data = TextData {
        num_docs: 6,
        seed: 6,
        ..data.clone()
    };
    let config = LmConfig {
        vocab_size: 256,
        d_model: 16,
        n_heads: 2,
        n_layers: 1,
        d_ff: 32,
        max_seq_len: 256,
        dropout: 0.0,
    };
    let (train, valid, progress) = (Log::default(), Log::default(), Log::default());
    let train_loader = lm_loader(&data, 2, train.clone());
    let valid_loader = lm_loader(&valid_data, 1, valid.clone());
    // Burn asks for the totals once, before the first epoch: take each
    // epoch's count from the data's own loader to check the rows served
    // against.
    let counts = |d: &TextData, lanes: u32| -> Vec<usize> {
        let l = d.loader(lanes, &Device::flex()).unwrap();
        assert_eq!(l.item_count(), ItemCount::Counted);
        (0..2).map(|e| l.items_in_epoch(e).unwrap()).collect()
    };
    let (train_counts, valid_counts) = (counts(&data, 2), counts(&valid_data, 1));
    let device = Device::flex();
    let model = TransformerLm::new(&config, &device.autodiff());
    let learner = Learner::new(model, AdamConfig::new().init(), ConstantLr::new(1e-2));
    let dir = tempfile::tempdir().unwrap();
    let mut training =
        SupervisedTraining::new(dir.path(), Arc::new(train_loader), Arc::new(valid_loader))
            .num_epochs(2)
            .metric_train_numeric(LossMetric::new())
            .metric_valid_numeric(LossMetric::new())
            .with_progress_logger(Recorder(progress.clone()))
            .with_application_logger(None);
    if devices > 1 {
        let devices = (0..devices).map(|_| Device::flex()).collect();
        training = training.with_training_strategy(
            ExecutionStrategy::multi(devices, MultiDeviceOptim::OptimMainDevice).into(),
        );
    }
    let result = training.launch(learner);
    assert!(result.error.is_none(), "{:?}", result.error);
    let split = |rows: Vec<Row>, counts: &[usize]| -> Vec<Vec<Row>> {
        assert_eq!(rows.len(), counts.iter().sum::<usize>(), "{counts:?}");
        let (a, b) = rows.split_at(counts[0]);
        vec![a.to_vec(), b.to_vec()]
    };
    LmFit {
        train: split(take(train), &train_counts),
        valid: split(take(valid), &valid_counts),
        progress: take(progress),
    }
}

/// The rows of both epochs, each sorted.
fn sorted_epochs(epochs: &[Vec<Row>]) -> Vec<Vec<Row>> {
    epochs
        .iter()
        .map(|e| {
            let mut e = e.clone();
            e.sort();
            e
        })
        .collect()
}

/// Each split's progress ends at the rows it served; the totals Burn
/// reports are the first epoch's counts.
fn check_lm_progress(fit: &LmFit) {
    let mut splits = Vec::new();
    for e in &fit.progress {
        match e {
            Event::Start(split, total) => splits.push((split.clone(), *total, 0)),
            Event::Update(done) => splits.last_mut().unwrap().2 = *done,
        }
    }
    let (t, v) = (&fit.train, &fit.valid);
    let want: Vec<(String, usize, usize)> = vec![
        ("train".into(), t[0].len(), t[0].len()),
        ("valid".into(), v[0].len(), v[0].len()),
        ("train".into(), t[0].len(), t[1].len()),
        ("valid".into(), v[0].len(), v[1].len()),
    ];
    assert_eq!(splits, want);
}

#[test]
fn the_learner_fits_the_lm_from_packed_rows_on_one_and_two_devices() {
    let one = fit_lm(1);
    check_lm_progress(&one);
    for (what, epochs, docs) in [("train", &one.train, 16), ("valid", &one.valid, 6)] {
        let sorted = sorted_epochs(epochs);
        for (e, rows) in sorted.iter().enumerate() {
            assert!(
                !rows.is_empty() && rows.len() < docs,
                "{what} {e}: {}",
                rows.len()
            );
            assert!(
                rows.windows(2)
                    .all(|w| (w[0].0, w[0].1, w[0].2) != (w[1].0, w[1].1, w[1].2)),
                "{what} {e}: a row served twice"
            );
        }
        let ids = |rows: &[Row]| rows.iter().map(|r| r.3.clone()).collect::<Vec<_>>();
        assert_ne!(
            ids(&epochs[0]),
            ids(&epochs[1]),
            "{what}: epoch 2 repeats epoch 1"
        );
    }
    // Two devices split the lanes of the same epochs.
    let two = fit_lm(2);
    check_lm_progress(&two);
    assert_eq!(sorted_epochs(&two.train), sorted_epochs(&one.train));
    assert_eq!(sorted_epochs(&two.valid), sorted_epochs(&one.valid));
}

// ---------------------------------------------------------------------
// Mid-epoch resume of a Learner-driven run, across processes, with a model
// of the test's own (not a shipped one).

mod mid_epoch {
    use super::{Event, Log, Recorder, take};
    use burn::module::Module;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::AdamConfig;
    use burn::optim::lr_scheduler::constant::ConstantLr;
    use burn::tensor::{Device, FloatDType, Tensor};
    use burn::train::{
        InferenceStep, Interrupter, Learner, SupervisedTraining, TrainOutput, TrainStep,
    };
    use std::path::Path;
    use std::sync::{Arc, Mutex};
    use zephon_burn::ZephonDataLoader;
    use zephon_burn::convert::{f32_bytes, float_rows};
    use zephon_burn::resume::read_manifest;
    use zephon_burn::train::{LossOutput, StepCheckpoints};
    use zephon_core::checkpoint::{Progress, Recipe, ResumeExt};
    use zephon_core::{Dataset, PipelineExt, Record, RecordBatch, Runner, ShuffleMode, WorkSource};

    /// The loss of every training step of this process, in order.
    static LOSSES: Mutex<Vec<f32>> = Mutex::new(Vec::new());

    /// A model of the test's own: two linear layers regressing the target
    /// column from the 4 feature columns.
    #[derive(Module, Debug)]
    pub struct Probe {
        a: Linear,
        b: Linear,
    }

    impl Probe {
        fn new(device: &Device) -> Self {
            device.seed(11);
            Probe {
                a: LinearConfig::new(4, 8).init(device),
                b: LinearConfig::new(8, 1).init(device),
            }
        }
        fn loss(&self, xy: Tensor<2>) -> Tensor<1> {
            let x = xy.clone().narrow(1, 0, 4);
            let y = xy.narrow(1, 4, 1);
            let h = burn::tensor::activation::relu(self.a.forward(x));
            (self.b.forward(h) - y).powf_scalar(2.0).mean()
        }
    }

    impl TrainStep for Probe {
        type Input = Tensor<2>;
        type Output = LossOutput;
        fn step(&self, xy: Tensor<2>) -> TrainOutput<LossOutput> {
            let loss = self.loss(xy);
            let value = loss.clone().into_data().try_to_vec::<f32>().unwrap()[0];
            LOSSES.lock().unwrap().push(value);
            TrainOutput::new(self, loss.backward(), LossOutput { loss })
        }
    }

    impl InferenceStep for Probe {
        type Input = Tensor<2>;
        type Output = LossOutput;
        fn step(&self, xy: Tensor<2>) -> LossOutput {
            LossOutput {
                loss: self.loss(xy),
            }
        }
    }

    pub const SAMPLES: i64 = 48;
    pub const BATCH: usize = 4;
    /// Batches per epoch: 48 samples in batches of 4.
    pub const PER_EPOCH: usize = 12;
    pub const EPOCHS: usize = 3;
    /// The first run saves after every 5th batch of an epoch and is stopped
    /// after the 7th of epoch 1: it resumes from batch 5 of epoch 1.
    pub const EVERY: u64 = 5;
    pub const STOP_AFTER: usize = PER_EPOCH + 7;

    fn work() -> WorkSource {
        let recs: Vec<Record> = (0..SAMPLES)
            .map(|i| {
                let h = |j: u64| {
                    (zephon_core::hash::key(&[7, i as u64, j]) >> 40) as f32 / (1u64 << 24) as f32
                };
                let x = [h(0), h(1), h(2), h(3)];
                let y = x[0] - 2.0 * x[1] + 0.5 * x[2] * x[3];
                Record::new()
                    .with("id", i)
                    .with("xy", f32_bytes(&[x[0], x[1], x[2], x[3], y]))
            })
            .collect();
        WorkSource::builder()
            .dataset(Dataset::in_memory("points", vec![recs]).unwrap(), 1.0)
            .seed(5)
            .shuffle_within_shard(true)
            .canonical_lanes(2)
            .build()
            .unwrap()
    }

    fn recipe(ws: &WorkSource) -> Recipe {
        Recipe::new(ws)
            .setting("shuffle", (6, 3))
            .setting("batch", BATCH)
    }

    /// A resumable loader whose pipeline holds state across batches (a
    /// shuffle buffer), logging the ids of every batch it serves and
    /// stopping the run after its `stop_after`-th.
    fn loader(
        served: Log<Vec<i64>>,
        stop: Option<(usize, Interrupter)>,
    ) -> ZephonDataLoader<RecordBatch, Tensor<2>> {
        ZephonDataLoader::resumable(
            work(),
            Device::flex(),
            recipe,
            |ws: WorkSource, p: &mut Progress| {
                ws.stream()
                    .fetch(2)
                    .shuffle(6, ShuffleMode::Reservoir, 3)
                    .batch(BATCH)
                    .resume(p)
                    .prefetch_batches(2)
                    .into_blocking_iter(Runner::threads())
            },
            move |b: RecordBatch, device: &Device| {
                let ids = b
                    .items
                    .iter()
                    .map(|r| r.get("id").and_then(|v| v.as_int()).unwrap())
                    .collect();
                let mut served = served.lock().unwrap();
                served.push(ids);
                if let Some((n, interrupter)) = &stop
                    && served.len() == *n
                {
                    // Burn trains this batch, then stops: a preemption.
                    interrupter.stop(Some("preempted"));
                }
                float_rows(&b.items, "xy", 5, device, FloatDType::F32)
            },
        )
        .unwrap()
    }

    fn valid() -> ZephonDataLoader<RecordBatch, Tensor<2>> {
        ZephonDataLoader::new(
            work(),
            Device::flex(),
            |ws: WorkSource| {
                let lanes = ws.owned_lanes();
                ws.stream()
                    .fetch(2)
                    .batch(12)
                    .lane_mux(lanes)
                    .into_blocking_iter(Runner::Inline)
            },
            |b: RecordBatch, device: &Device| {
                float_rows(&b.items, "xy", 5, device, FloatDType::F32)
            },
        )
        .unwrap()
    }

    /// What a run trained on: per step its loss and the ids of its batch,
    /// and the train totals Burn reported at each epoch's start.
    #[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
    pub struct Trace {
        pub losses: Vec<f32>,
        pub batches: Vec<Vec<i64>>,
        pub totals: Vec<usize>,
    }

    /// One stage, run in this process: `full` trains both epochs,
    /// `first` trains with step checkpoints into `dir` until preempted,
    /// `resume` restores from `dir` and trains to the end.
    pub fn stage(kind: &str, dir: &Path) -> Trace {
        let device = Device::flex();
        let served = Log::default();
        let progress: Log<Event> = Log::default();
        let interrupter = Interrupter::new();
        let ckpt = dir.join("steps");
        let (learner, train) = match kind {
            "resume" => {
                let train = loader(served.clone(), None);
                let restored = train
                    .restore_training(
                        &ckpt,
                        Probe::new(&device.clone().autodiff()),
                        AdamConfig::new().init(),
                    )
                    .unwrap();
                let (learner, position) = restored.into_learner(ConstantLr::new(2e-2));
                (learner, train.resume_from(position).unwrap())
            }
            _ => {
                let stop = (kind == "first").then(|| (STOP_AFTER, interrupter.clone()));
                let learner = Learner::new(
                    Probe::new(&device.clone().autodiff()),
                    AdamConfig::new().init(),
                    ConstantLr::new(2e-2),
                );
                (learner, loader(served.clone(), stop))
            }
        };
        let strategy = StepCheckpoints::new(device, &ckpt, EVERY, train.position_handle());
        let result = SupervisedTraining::new(dir, Arc::new(train), Arc::new(valid()))
            .num_epochs(EPOCHS)
            // No `.checkpoint(epoch)`: the strategy starts at the epoch of
            // the resumed position.
            .with_training_strategy(strategy.into_strategy())
            .with_interrupter(interrupter)
            .with_progress_logger(Recorder(progress.clone()))
            .with_application_logger(None)
            .launch(learner);
        assert!(result.error.is_none(), "{:?}", result.error);
        assert_eq!(result.interrupted.is_some(), kind == "first");
        let totals = take(progress)
            .into_iter()
            .filter_map(|e| match e {
                Event::Start(split, n) if split == "train" => Some(n),
                _ => None,
            })
            .collect();
        Trace {
            losses: std::mem::take(&mut *LOSSES.lock().unwrap()),
            batches: take(served),
            totals,
        }
    }

    /// A checksum of a batch's sample ids, in order.
    pub fn checksum(ids: &[i64]) -> u64 {
        let words: Vec<u64> = ids.iter().map(|&i| i as u64).collect();
        zephon_core::hash::key(&words)
    }

    pub fn assert_manifest(dir: &Path) {
        let m = read_manifest(dir.join("steps")).unwrap();
        // 5 batches of epoch 1 over 2 lanes in round robin: lane 0 served 3.
        assert_eq!((m.epoch, m.step), (1, 3));
        assert!(m.scheduler.is_some());
    }
}

/// Names the stage a child process of the mid-epoch test runs.
const LEARNER_STAGE: &str = "ZEPHON_LEARNER_STAGE";

/// Runs a stage of [`mid_epoch`] in a child process of this test binary.
fn learner_child(kind: &str, dir: &std::path::Path) -> mid_epoch::Trace {
    let out = dir.join(format!("trace-{kind}.json"));
    let stage = serde_json::json!({ "kind": kind, "dir": dir, "out": &out });
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "learner_stage_in_child_process",
            "--nocapture",
        ])
        .env(LEARNER_STAGE, stage.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "the child process of {stage} failed");
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}

/// Entry point of the child processes of
/// [`a_learner_run_resumes_mid_epoch_in_another_process`]; ignored in a
/// normal run.
#[test]
#[ignore = "run by the mid-epoch resume test in a child process"]
fn learner_stage_in_child_process() {
    let stage: serde_json::Value =
        serde_json::from_str(&std::env::var(LEARNER_STAGE).expect("ZEPHON_LEARNER_STAGE")).unwrap();
    let dir = std::path::Path::new(stage["dir"].as_str().unwrap());
    let trace = mid_epoch::stage(stage["kind"].as_str().unwrap(), dir);
    std::fs::write(
        stage["out"].as_str().unwrap(),
        serde_json::to_vec(&trace).unwrap(),
    )
    .unwrap();
}

#[test]
fn a_learner_run_resumes_mid_epoch_in_another_process() {
    use mid_epoch::*;
    let reference = tempfile::tempdir().unwrap();
    let full = learner_child("full", reference.path());
    let total = PER_EPOCH * EPOCHS;
    assert_eq!(full.losses.len(), total);
    assert_eq!(full.batches.len(), total);
    assert_eq!(full.totals, [SAMPLES as usize; EPOCHS]);

    // One process trains until preempted after batch 7 of epoch 1 (it
    // saved after batch 5 of that epoch); another restores the folder and
    // trains to the end. They
    // share the folder and nothing else.
    let dir = tempfile::tempdir().unwrap();
    let first = learner_child("first", dir.path());
    assert_eq!(first.losses.len(), STOP_AFTER);
    assert_manifest(dir.path());
    let second = learner_child("resume", dir.path());
    let saved = PER_EPOCH + EVERY as usize;
    // The resumed epoch holds the items left; the next one is whole.
    assert_eq!(
        second.totals,
        [SAMPLES as usize - EVERY as usize * BATCH, SAMPLES as usize]
    );

    let resumed_losses: Vec<f32> = first.losses[..saved]
        .iter()
        .chain(&second.losses)
        .copied()
        .collect();
    let resumed_batches: Vec<Vec<i64>> = first.batches[..saved]
        .iter()
        .chain(&second.batches)
        .cloned()
        .collect();
    let mut table =
        String::from("step  epoch  batch checksum    uninterrupted loss  resumed loss\n");
    for t in 0..total {
        let (a, b) = (
            full.losses[t],
            resumed_losses.get(t).copied().unwrap_or(f32::NAN),
        );
        table += &format!(
            "{t:>4}  {:>5}  {:016x}  {a:>18.9}  {b:>12.9}{}\n",
            t / PER_EPOCH,
            checksum(&full.batches[t]),
            if t < saved {
                "  (first process)"
            } else if t == saved {
                "  <- second process resumes here"
            } else {
                ""
            }
        );
    }
    println!("{table}");
    assert_eq!(resumed_batches, full.batches, "\n{table}");
    let bits = |l: &[f32]| l.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&resumed_losses), bits(&full.losses), "\n{table}");
    // The batches are not all alike, and epoch 1 is reshuffled.
    assert_ne!(full.batches[..PER_EPOCH], full.batches[PER_EPOCH..]);
}
