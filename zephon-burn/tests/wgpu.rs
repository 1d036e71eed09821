//! The wgpu device end to end (feature `wgpu`): a Zephon loader's batches
//! become wgpu tensors and the autoencoder trains on them. CI runs it on
//! Mesa's software Vulkan driver, so it needs no GPU.

use burn::data::dataloader::DataLoader;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, FloatDType, Tensor};
use zephon_burn::harness::TimedModel;
use zephon_burn::models::autoencoder::{Autoencoder, AutoencoderConfig, DummyData};
use zephon_burn::{DeviceChoice, ZephonDataLoader};
use zephon_core::RecordBatch;

#[test]
fn the_autoencoder_trains_on_wgpu_from_a_zephon_loader() {
    let (device, name) = DeviceChoice::Wgpu.resolve().unwrap();
    assert_eq!(name, "wgpu");
    let data = DummyData {
        num_samples: 32,
        batch_size: 8,
        input_dim: 16,
        seed: 1,
        workers: 1,
    };
    let d = data.clone();
    let loader = ZephonDataLoader::new(
        data.work_source(data.seed, 2).unwrap(),
        device.clone(),
        move |ws| d.pipeline_on(ws),
        |b: RecordBatch, device: &Device| Autoencoder::to_input(b, device, FloatDType::F32),
    )
    .unwrap();
    let config = AutoencoderConfig {
        input_dim: 16,
        hidden_dim: 8,
        latent_dim: 4,
    };
    let mut model = Autoencoder::new(&config, &device);
    let mut optim = AdamConfig::new().init();
    let mut epoch_loss = Vec::new();
    for _ in 0..8 {
        let (mut sum, mut n) = (0.0, 0);
        for batch in loader.iter() {
            let x: Tensor<2> = batch.unwrap();
            assert_eq!(x.dims(), [8, 16]);
            let loss = model.loss(x);
            sum += loss.clone().into_scalar::<f32>();
            n += 1;
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(0.02, model, grads);
        }
        assert_eq!(n, 4);
        epoch_loss.push(sum / n as f32);
    }
    assert!(epoch_loss.iter().all(|l| l.is_finite()), "{epoch_loss:?}");
    assert!(epoch_loss[7] < epoch_loss[0], "{epoch_loss:?}");
}
