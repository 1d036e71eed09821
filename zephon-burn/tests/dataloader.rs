//! The DataLoader adapter feeds a Burn training loop from a Zephon pipeline.

use burn::data::dataloader::DataLoader;
use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, FloatDType, Tensor};
use std::sync::Arc;
use zephon_burn::convert::{f32_bytes, float_rows};
use zephon_burn::harness::{self, HarnessConfig, LoaderSource, TimedModel};
use zephon_burn::{DeviceChoice, ZephonDataLoader};
use zephon_core::{Dataset, PipelineExt, Record, RecordBatch, Runner, ShuffleMode, WorkSource};

type XY = (Tensor<2>, Tensor<2>);

/// 60 samples of y = 2 a - 3 b + 1, through fetch -> shuffle -> batch.
fn loader(device: &Device) -> ZephonDataLoader<RecordBatch, XY> {
    let recs: Vec<Record> = (0..60)
        .map(|i| {
            let (a, b) = ((i % 7) as f32 / 7.0, (i % 5) as f32 / 5.0);
            Record::new()
                .with("x", f32_bytes(&[a, b]))
                .with("y", f32_bytes(&[2.0 * a - 3.0 * b + 1.0]))
        })
        .collect();
    let ws = WorkSource::builder()
        .dataset(Dataset::in_memory("lin", vec![recs]).unwrap(), 1.0)
        .seed(5)
        .build()
        .unwrap();
    ZephonDataLoader::new(
        60,
        device.clone(),
        move || {
            ws.stream()
                .fetch(2)
                .shuffle(16, ShuffleMode::Reservoir, 9)
                .batch(8)
                .into_blocking_iter(Runner::threads())
        },
        |b: RecordBatch, d: &Device| {
            Ok((
                float_rows(&b.items, "x", 2, d, FloatDType::F32)?,
                float_rows(&b.items, "y", 1, d, FloatDType::F32)?,
            ))
        },
    )
}

#[derive(Module, Debug)]
struct Regressor {
    linear: Linear,
}

impl TimedModel for Regressor {
    type Batch = XY;
    type Input = XY;
    fn to_input(b: XY, _: &Device, _: FloatDType) -> zephon_burn::Result<XY> {
        Ok(b)
    }
    fn batch_len(b: &XY) -> usize {
        b.0.dims()[0]
    }
    fn loss(&self, (x, y): XY) -> Tensor<1> {
        MseLoss::new().forward(self.linear.forward(x), y, Reduction::Mean)
    }
}

#[test]
fn a_burn_training_loop_learns_from_the_adapter() {
    let (device, _) = DeviceChoice::Cpu.resolve().unwrap();
    let loader: Arc<dyn DataLoader<XY>> = Arc::new(loader(&device));
    assert_eq!(loader.num_items(), 60);
    let mut model = Regressor {
        linear: LinearConfig::new(2, 1).init(&device),
    };
    let mut optim = AdamConfig::new().init();
    let mut epoch_loss = Vec::new();
    for _ in 0..30 {
        let mut it = loader.iter();
        let (mut sum, mut n) = (0.0, 0);
        for batch in it.by_ref() {
            let loss = model.loss(batch.unwrap());
            sum += loss.clone().into_scalar::<f32>();
            n += 1;
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(0.05, model, grads);
        }
        let p = it.progress();
        assert_eq!((p.items_processed, p.items_total), (60, 60));
        assert_eq!(n, 8);
        epoch_loss.push(sum / n as f32);
    }
    assert!(epoch_loss[29] < 0.05 * epoch_loss[0], "{epoch_loss:?}");
}

#[test]
fn slices_and_device_moves_keep_exact_item_counts() {
    let device = Device::flex();
    let l = loader(&device);
    let s = l.slice(10, 25);
    assert_eq!(s.num_items(), 15);
    let rows: usize = s.iter().map(|b| b.unwrap().0.dims()[0]).sum();
    assert_eq!(rows, 15);
    let moved = s.to_device(&device);
    assert_eq!(moved.num_items(), 15);
    assert_eq!(l.slice(50, 90).num_items(), 10);
    // The plain iterator for custom loops.
    assert_eq!(l.batches().unwrap().count(), 8);
}

#[test]
fn the_harness_times_a_burn_dataloader() {
    let (device, _) = DeviceChoice::Cpu.resolve().unwrap();
    let l: Arc<dyn DataLoader<XY>> = Arc::new(loader(&device));
    let mut source = LoaderSource::new(l, Some(8));
    let model = Regressor {
        linear: LinearConfig::new(2, 1).init(&device),
    };
    let cfg = HarnessConfig {
        epochs: 2,
        warmup_batches: 1,
        ..HarnessConfig::default()
    };
    let (_, run) =
        harness::run(model, AdamConfig::new().init(), &mut source, &device, &cfg).unwrap();
    assert_eq!(run.timings.len(), 16);
    assert_eq!(run.summary().batches, 15);
}
