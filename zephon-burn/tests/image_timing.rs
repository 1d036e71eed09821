//! The image classifier of the timing harness (feature `media`), fed from
//! WebDataset samples of JPEGs: the stall attribution names `decode_image`
//! when decoding limits the step, `run_timing_with` runs a configuration
//! of it end to end, and its data is checked before the model sees it.

use burn::optim::AdamConfig;
use std::path::{Path, PathBuf};
use zephon_burn::harness::{self, HarnessConfig};
use zephon_burn::models::image_classifier::{
    GenerateImages, ImageClassifier, ImageClassifierConfig, ImageData, InMemoryShards, ShardStore,
};
use zephon_burn::{
    DeviceChoice, Precision, TimingConfig, TimingOptions, run_timing, run_timing_with,
};
use zephon_core::Record;

fn data(width: u32, height: u32, n: usize, decode_workers: usize) -> ImageData {
    ImageData {
        dir: PathBuf::from("shards"),
        image_size: 16,
        batch_size: 4,
        num_classes: 3,
        seed: 4,
        decode_workers,
        workers: 2,
        generate: Some(GenerateImages {
            num_samples: n,
            width,
            height,
            shard_samples: 8,
            quality: 90,
        }),
    }
}

fn model(device: &burn::tensor::Device) -> ImageClassifier {
    let cfg = ImageClassifierConfig {
        in_channels: 3,
        conv_channels: [2, 4],
        num_classes: 3,
    };
    ImageClassifier::new(&cfg, device)
}

#[test]
fn decoding_large_images_on_one_worker_is_named_the_limit() {
    let (device, _) = DeviceChoice::Cpu.resolve().unwrap();
    let store = InMemoryShards::default();
    // Large JPEGs, one decoder, small crops and a tiny model: the step
    // waits on decoding.
    let d = data(640, 480, 16, 1);
    let mut source = d.source(&store).unwrap();
    let cfg = HarnessConfig {
        epochs: 1,
        warmup_batches: 1,
        ..HarnessConfig::default()
    };
    let (_, run) = harness::run(
        model(&device),
        AdamConfig::new().init(),
        &mut source,
        &device,
        &cfg,
    )
    .unwrap();
    assert_eq!(run.timings.len(), 4);
    assert!(run.timings.iter().all(|t| t.samples == 4));
    let p = run.pipeline.expect("the run has a pipeline breakdown");
    let names: Vec<&str> = p.operators.iter().map(|o| o.name.as_str()).collect();
    for op in [
        "decode_image",
        "random_resized_crop",
        "flip",
        "collate_images",
    ] {
        assert!(names.contains(&op), "{op} missing from {names:?}");
    }
    assert_eq!(p.bottleneck, "decode_image", "{p:#?}");
    assert_eq!(p.largest().unwrap().name, "decode_image", "{p:#?}");
    assert!(p.line.contains("`decode_image`"), "{}", p.line);
    let decode = p
        .operators
        .iter()
        .find(|o| o.name == "decode_image")
        .unwrap();
    assert_eq!(decode.parallelism, 1);
}

#[test]
fn small_images_leave_decoding_a_small_share() {
    // The counterpart of the test above: the same pipeline over images
    // close to the crop size spends little of its time decoding, so the
    // attribution above comes from the data, not from the operator's name.
    let (device, _) = DeviceChoice::Cpu.resolve().unwrap();
    let store = InMemoryShards::default();
    let mut large = data(640, 480, 8, 1).source(&store).unwrap();
    let store = InMemoryShards::default();
    let mut small = data(20, 20, 8, 1).source(&store).unwrap();
    let cfg = HarnessConfig {
        epochs: 1,
        warmup_batches: 1,
        ..HarnessConfig::default()
    };
    let decode_s = |source: &mut dyn harness::BatchSource<zephon_media::ImageBatch>| {
        let (_, run) = harness::run(
            model(&device),
            AdamConfig::new().init(),
            source,
            &device,
            &cfg,
        )
        .unwrap();
        let p = run.pipeline.unwrap();
        p.operators
            .iter()
            .find(|o| o.name == "decode_image")
            .unwrap()
            .busy_s
    };
    let (large, small) = (decode_s(&mut large), decode_s(&mut small));
    assert!(
        small * 10.0 < large,
        "decoding: {small} s small, {large} s large"
    );
}

#[test]
fn labels_outside_the_classes_are_refused_naming_the_sample() {
    let (device, _) = DeviceChoice::Cpu.resolve().unwrap();
    let store = InMemoryShards::default();
    // Shards written for 5 classes, read by data declaring 3.
    let mut wide = data(24, 24, 8, 1);
    wide.num_classes = 5;
    wide.generate = Some(GenerateImages {
        num_samples: 40,
        ..wide.generate.unwrap()
    });
    wide.dataset(&store).unwrap();
    let mut source = data(24, 24, 8, 1).source(&store).unwrap();
    let cfg = HarnessConfig {
        epochs: 1,
        warmup_batches: 0,
        ..HarnessConfig::default()
    };
    let e = harness::run(
        model(&device),
        AdamConfig::new().init(),
        &mut source,
        &device,
        &cfg,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("data.num_classes") && e.contains("outside 0..3") && e.contains("key `"),
        "{e}"
    );
}

#[test]
fn a_folder_without_shards_needs_generate() {
    let mut d = data(24, 24, 8, 1);
    d.generate = None;
    let e = d
        .source(&InMemoryShards::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("data.dir") && e.contains("no WebDataset shards"),
        "{e}"
    );
    // Samples already there are read as they are, without generate.
    let store = InMemoryShards::default();
    let records = (0..3i64).map(|i| {
        Record::new()
            .with("__key__", format!("k{i}"))
            .with(
                "jpg",
                zephon_core::Value::Bytes(b"not a jpeg".to_vec().into()),
            )
            .with("cls", i)
    });
    store
        .write_webdataset(Path::new("shards"), 2, &mut records.into_iter())
        .unwrap();
    assert_eq!(d.dataset(&store).unwrap().num_samples(), 3);
}

const CONFIG: &str = "\
model:
  name: image_classifier
  conv_channels: [2, 4]
  num_classes: 3
data:
  name: webdataset_images
  dir: shards
  image_size: 16
  batch_size: 4
  num_classes: 3
  seed: 1
  generate: { num_samples: 12, width: 40, height: 30, shard_samples: 4 }
timing:
  warmup_batches: 1
";

#[test]
fn run_timing_with_a_store_times_the_classifier() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("images.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let opts = TimingOptions {
        config,
        epochs: 2,
        save_dir: Some(dir.path().join("out")),
        precision: Precision::F32,
        device: DeviceChoice::Cpu,
        trace: None,
        progress: false,
    };
    let store = InMemoryShards::default();
    let report = run_timing_with(&opts, &store).unwrap();
    assert_eq!(report.summary.model, "image_classifier");
    assert_eq!(report.run.timings.len(), 6);
    assert!(report.run.timings.iter().all(|t| t.loss.is_finite()));
    let p = report.run.pipeline.as_ref().unwrap();
    assert!(p.operators.iter().any(|o| o.name == "decode_image"));
    assert!(report.save_dir.join("timing_summary.yaml").is_file());
    // The shards were written once, into the store, and read back.
    assert!(store.open("x", Path::new("shards")).unwrap().is_some());

    // Without a store, the shards cannot be read: an error naming the key.
    let e = run_timing(&opts).unwrap_err().to_string();
    assert!(
        e.contains("data.dir") && e.contains("run_timing_with"),
        "{e}"
    );
}

#[test]
fn the_configuration_is_checked_by_key() {
    let e = TimingConfig::from_yaml_str(
        &CONFIG.replace("num_classes: 3\ndata", "num_classes: 4\ndata"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("data.num_classes") && e.contains("model.num_classes 4"),
        "{e}"
    );
    let e = TimingConfig::from_yaml_str(&CONFIG.replace("image_size: 16", "image_size: 0"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("data.image_size"), "{e}");
    let e = TimingConfig::from_yaml_str(&CONFIG.replace("shard_samples: 4", "shard_sampels: 4"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("shard_sampels"), "{e}");
    let e = TimingConfig::from_yaml_str(&CONFIG.replace("webdataset_images", "dummy"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("data"), "{e}");
}

#[test]
fn the_shipped_image_config_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/config/timing_images.yaml");
    let cfg = TimingConfig::from_file(&path).unwrap();
    assert_eq!(cfg.model_name(), "image_classifier");
}

#[test]
fn each_epoch_gets_fresh_crops_and_the_same_epoch_the_same() {
    let store = InMemoryShards::default();
    let d = data(60, 40, 8, 2);
    let ds = d.dataset(&store).unwrap();
    let digests = |epoch: usize| -> Vec<u64> {
        // One work source for both epochs: only the augmentations differ.
        let ws = d.work_source(ds.clone(), 0).unwrap();
        d.pipeline_on(ws, epoch)
            .unwrap()
            .map(|b| b.unwrap().digest())
            .collect()
    };
    assert_eq!(digests(0), digests(0));
    assert_ne!(digests(0), digests(1));
}
