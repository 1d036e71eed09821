//! `16-mixed` trains, and the loss scaler skips a step on overflow.

use burn::optim::AdamConfig;
use burn::tensor::Tensor;
use zephon_burn::harness::{self, HarnessConfig, ScalerConfig};
use zephon_burn::models::autoencoder::{Autoencoder, AutoencoderConfig, DummyData};
use zephon_burn::{DeviceChoice, Precision};

fn tiny() -> (AutoencoderConfig, DummyData) {
    (
        AutoencoderConfig {
            input_dim: 16,
            hidden_dim: 8,
            latent_dim: 4,
        },
        DummyData {
            num_samples: 400,
            batch_size: 8,
            input_dim: 16,
            seed: 7,
            workers: 1,
        },
    )
}

fn mean(v: &[f32]) -> f32 {
    v.iter().sum::<f32>() / v.len() as f32
}

#[test]
fn mixed_precision_trains_the_autoencoder() {
    let (device, _) = DeviceChoice::Cpu.resolve().unwrap();
    let (m, d) = tiny();
    let model = Autoencoder::new(&m, &device);
    let cfg = HarnessConfig {
        epochs: 1,
        warmup_batches: 0,
        learning_rate: 1e-2,
        precision: Precision::Mixed16,
        ..HarnessConfig::default()
    };
    let (_, run) = harness::run(
        model,
        AdamConfig::new().init(),
        &mut d.source().unwrap(),
        &device,
        &cfg,
    )
    .unwrap();
    assert_eq!(run.timings.len(), 50);
    let losses: Vec<f32> = run.timings.iter().map(|t| t.loss).collect();
    assert!(losses.iter().all(|l| l.is_finite()));
    let (first, last) = (mean(&losses[..5]), mean(&losses[45..]));
    assert!(last < 0.7 * first, "loss did not fall: {first} -> {last}");
    assert!(run.final_scale.is_some());
}

#[test]
fn bf16_runs_and_reports_its_precision() {
    let (device, _) = DeviceChoice::Cpu.resolve().unwrap();
    let (m, mut d) = tiny();
    d.num_samples = 24;
    let cfg = HarnessConfig {
        epochs: 1,
        warmup_batches: 1,
        precision: Precision::Bf16,
        ..HarnessConfig::default()
    };
    let (_, run) = harness::run(
        Autoencoder::new(&m, &device),
        AdamConfig::new().init(),
        &mut d.source().unwrap(),
        &device,
        &cfg,
    )
    .unwrap();
    assert_eq!(run.timings.len(), 3);
    assert!(run.timings.iter().all(|t| t.loss.is_finite()));
    assert_eq!(run.precision, Precision::Bf16);
}

#[test]
fn the_scaler_skips_a_step_on_overflow() {
    let (device, _) = DeviceChoice::Cpu.resolve().unwrap();
    let (m, mut d) = tiny();
    d.num_samples = 8;
    let model = Autoencoder::new(&m, &device);
    let probe = Tensor::<2>::ones([1, 16], &device);
    let before = model.forward(probe.clone()).into_data();
    // A scale this large makes the f16 gradients infinite.
    let init_scale = 1e30;
    let cfg = HarnessConfig {
        epochs: 1,
        warmup_batches: 0,
        precision: Precision::Mixed16,
        scaler: ScalerConfig {
            init_scale,
            ..ScalerConfig::default()
        },
        ..HarnessConfig::default()
    };
    let (model, run) = harness::run(
        model,
        AdamConfig::new().init(),
        &mut d.source().unwrap(),
        &device,
        &cfg,
    )
    .unwrap();
    assert_eq!(run.skipped_steps, 1);
    assert!(run.timings[0].skipped);
    assert_eq!(run.final_scale, Some(init_scale * 0.5));
    // No step was taken: the weights are untouched.
    assert_eq!(model.forward(probe).into_data(), before);
}
