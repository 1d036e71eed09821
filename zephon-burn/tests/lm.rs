//! The small transformer LM, fed by the Zephon text pipeline, under the harness.

use zephon_burn::harness::{self, HarnessConfig};
use zephon_burn::models::lm::{LmConfig, TextData, TransformerLm};
use zephon_burn::{DeviceChoice, HostBatch, Precision};

fn tiny() -> (LmConfig, TextData) {
    (
        LmConfig {
            vocab_size: 256,
            d_model: 16,
            n_heads: 2,
            n_layers: 1,
            d_ff: 32,
            max_seq_len: 16,
            dropout: 0.0,
        },
        TextData {
            num_docs: 12,
            seq_len: 16,
            batch_size: 4,
            seed: 1,
            workers: 2,
        },
    )
}

#[test]
fn the_lm_trains_from_the_text_pipeline() {
    let (device, _) = DeviceChoice::Cpu.resolve().unwrap();
    let (m, d) = tiny();
    for precision in [Precision::F32, Precision::Mixed16] {
        let cfg = HarnessConfig {
            epochs: 2,
            warmup_batches: 1,
            max_batches_per_epoch: Some(3),
            learning_rate: 1e-2,
            precision,
            ..HarnessConfig::default()
        };
        let optim = burn::optim::AdamConfig::new().init();
        let (_, run) = harness::run(
            TransformerLm::new(&m, &device),
            optim,
            &mut d.source().unwrap(),
            &device,
            &cfg,
        )
        .unwrap();
        assert_eq!(run.timings.len(), 6);
        let l: Vec<f32> = run.timings.iter().map(|t| t.loss).collect();
        assert!(l.iter().all(|x| x.is_finite()), "{precision}: {l:?}");
        // Byte-level cross-entropy starts near ln(256) = 5.5 and falls.
        assert!(l[0] > 4.0 && l[5] < l[0], "{precision}: {l:?}");
    }
}

#[test]
fn training_batches_slice_by_rows() {
    let (_, mut d) = tiny();
    // Rows long enough to hold several documents.
    d.seq_len = 512;
    let b = d.pipeline(0).unwrap().next().unwrap().unwrap();
    // Packed rows: several documents share a row.
    assert!(b.cu_seqlens.len() > b.batch_size + 1, "{:?}", b.cu_seqlens);
    let cut = b.clone().keep(1..3);
    assert_eq!((cut.batch_size, cut.seq_len), (2, 512));
    assert_eq!(cut.labels, b.labels[512..3 * 512].to_vec());
    assert_eq!(cut.cu_seqlens.first(), Some(&0));
    assert_eq!(cut.cu_seqlens.last(), Some(&1024));
    assert!(cut.cu_seqlens.windows(2).all(|w| w[0] < w[1]));
}

/// A token id past the CPU device's `i32` ints is refused when the batch
/// moves to the device: it wrapped to a negative id, whose label was then
/// clamped to token 0 and trained on.
#[test]
fn token_ids_past_the_device_int_type_are_refused() {
    use burn::tensor::{Device, IntDType};
    use zephon_burn::TrainingTensors;
    use zephon_ops::{IdType, TrainingBatch};
    let device = Device::flex();
    assert_eq!(device.settings().int_dtype, IntDType::I32);
    let batch = |id: u32| {
        TrainingBatch::from_rows(&[(&[5, id, 7][..], &[1, 1, 1][..])], 4, IdType::U32, 0, 0)
            .unwrap()
    };
    let e = TrainingTensors::from_batch(&batch(1 << 31), &device)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("token id 2147483648") && e.contains("2147483647"),
        "{e}"
    );
    let t = TrainingTensors::from_batch(&batch((1 << 31) - 1), &device).unwrap();
    let ids = t
        .input_ids
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .unwrap();
    assert_eq!(ids, [5, (1 << 31) - 1, 7, 0]);
}
