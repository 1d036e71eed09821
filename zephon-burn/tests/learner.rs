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
