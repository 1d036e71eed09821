//! Burn's `Learner` fits the autoencoder from Zephon loaders, on one device
//! and on two: every epoch is reshuffled, every sample is served once per
//! epoch across the device slices, and progress ends complete.

use burn::optim::AdamConfig;
use burn::optim::lr_scheduler::constant::ConstantLr;
use burn::tensor::{Device, FloatDType, Tensor};
use burn::train::logger::TrainingProgressLogger;
use burn::train::metric::LossMetric;
use burn::train::{ExecutionStrategy, Learner, MultiDeviceOptim, SupervisedTraining};
use std::sync::{Arc, Mutex};
use zephon_burn::ZephonDataLoader;
use zephon_burn::harness::TimedModel;
use zephon_burn::models::autoencoder::{Autoencoder, AutoencoderConfig, DummyData};
use zephon_core::RecordBatch;

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
