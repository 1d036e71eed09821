//! Image and audio batches to tensors (feature `media`): the layouts agree,
//! pixels are scaled as documented, labels and lengths arrive, batches that
//! lie about their shape are refused, and the DataLoader adapter serves,
//! counts and splits them.

use burn::data::dataloader::DataLoader;
use burn::tensor::{Device, FloatDType, Int, Tensor};
use zephon_burn::media::{AudioTensors, ImageTensors, MelTensors, PixelScale};
use zephon_burn::{HostBatch, ZephonDataLoader};
use zephon_core::{Batch, Dataset, PipelineExt, Record, Runner, WorkSource};
use zephon_media::{
    Audio, AudioBatch, AudioCollateConfig, AudioPipelineExt, AudioSample, CollateConfig, Image,
    ImageBatch, ImageSample, Layout, LogMel, MediaPipelineExt, MelBatch, Pixels,
};

/// Image `i`: 3x2 pixels of 3 channels, every value distinct.
fn sample(i: u8) -> ImageSample {
    let pixels: Vec<u8> = (0..18u8).map(|k| i * 20 + k).collect();
    ImageSample {
        image: Image::new_u8(3, 2, 3, pixels).unwrap(),
        record: Record::new().with("cls", i as i64),
    }
}

fn collate(layout: Layout, n: u8) -> ImageBatch {
    let items = (0..n).map(sample).collect();
    CollateConfig::new(layout)
        .label("cls")
        .collate(Batch {
            lane: 0,
            index: 0,
            items,
            cut: None,
        })
        .unwrap()
}

fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_into_vec_as::<f32>().unwrap()
}

fn ints(t: Tensor<1, Int>) -> Vec<i64> {
    t.into_data().try_into_vec_as::<i64>().unwrap()
}

#[test]
fn both_layouts_give_the_same_nchw_tensor() {
    let device = Device::flex();
    let hwc = collate(Layout::Hwc, 3);
    let chw = collate(Layout::Chw, 3);
    let a = ImageTensors::from_batch_with(&hwc, &device, FloatDType::F32, PixelScale::Raw).unwrap();
    let b = ImageTensors::from_batch_with(&chw, &device, FloatDType::F32, PixelScale::Raw).unwrap();
    assert_eq!(a.images.dims(), [3, 3, 2, 3]);
    assert_eq!(b.images.dims(), [3, 3, 2, 3]);
    let (a, b) = (floats(a.images), floats(b.images));
    assert_eq!(a, b);
    // Image 1, channel 2, row 1, column 0 is HWC value (1 * 3 + 0) * 3 + 2
    // of image 1.
    let at = |n: usize, c: usize, y: usize, x: usize| a[((n * 3 + c) * 2 + y) * 3 + x];
    assert_eq!(at(1, 2, 1, 0), (20 + (3 * 3 + 2)) as f32);
    assert_eq!(at(2, 0, 0, 1), (40 + 3) as f32);
}

#[test]
fn u8_pixels_scale_to_unit_and_f32_pixels_pass_as_they_are() {
    let device = Device::flex();
    let b = collate(Layout::Chw, 2);
    let unit = floats(ImageTensors::from_batch(&b, &device).unwrap().images);
    let raw = ImageTensors::from_batch_with(&b, &device, FloatDType::F32, PixelScale::Raw).unwrap();
    let raw = floats(raw.images);
    for (u, r) in unit.iter().zip(&raw) {
        assert!((u * 255.0 - r).abs() < 1e-3, "{u} vs {r}");
    }
    assert!(unit.iter().all(|v| (0.0..=1.0).contains(v)));

    let mut f = b.clone();
    f.pixels = Pixels::F32(vec![-0.5; f.pixels.len()]);
    let t = ImageTensors::from_batch(&f, &device).unwrap();
    assert!(floats(t.images).iter().all(|&v| v == -0.5));

    let half = ImageTensors::from_batch_with(&b, &device, FloatDType::F16, PixelScale::Unit);
    assert_eq!(half.unwrap().images.dtype(), burn::tensor::DType::F16);
}

#[test]
fn labels_arrive_and_bad_shapes_are_refused() {
    let device = Device::flex();
    let b = collate(Layout::Hwc, 3);
    let t = ImageTensors::from_batch(&b, &device).unwrap();
    assert_eq!(ints(t.labels.unwrap()), [0, 1, 2]);

    let unlabelled = CollateConfig::new(Layout::Hwc)
        .collate(Batch {
            lane: 0,
            index: 0,
            items: vec![sample(0)],
            cut: None,
        })
        .unwrap();
    assert!(
        ImageTensors::from_batch(&unlabelled, &device)
            .unwrap()
            .labels
            .is_none()
    );

    let mut short = b.clone();
    short.labels.pop();
    let e = ImageTensors::from_batch(&short, &device)
        .unwrap_err()
        .to_string();
    assert!(e.contains("labels") && e.contains("2 values"), "{e}");

    let mut lying = b.clone();
    lying.height = 3;
    let e = ImageTensors::from_batch(&lying, &device)
        .unwrap_err()
        .to_string();
    assert!(e.contains("pixel values"), "{e}");
}

#[test]
fn a_cut_image_batch_keeps_its_rows() {
    let device = Device::flex();
    for layout in [Layout::Hwc, Layout::Chw] {
        let b = collate(layout, 4);
        let whole = floats(ImageTensors::from_batch(&b, &device).unwrap().images);
        let cut = b.clone().keep(1..3);
        assert_eq!((cut.num_items(), cut.labels.clone()), (2, vec![1, 2]));
        assert_eq!(cut.records.len(), 2);
        let part = floats(ImageTensors::from_batch(&cut, &device).unwrap().images);
        let per = 3 * 2 * 3;
        assert_eq!(part, whole[per..3 * per]);
    }
}

fn image_loader(lanes: u32) -> ZephonDataLoader<ImageBatch, ImageTensors> {
    let recs: Vec<Record> = (0..12i64).map(|i| Record::new().with("i", i)).collect();
    let ws = WorkSource::builder()
        .dataset(Dataset::in_memory("d", vec![recs]).unwrap(), 1.0)
        .seed(5)
        .canonical_lanes(lanes)
        .build()
        .unwrap();
    // The record is kept: its lineage carries the lane the sample is of.
    let to_image = |mut r: Record| {
        let i = r.get("i").and_then(|v| v.as_int()).unwrap_or(0);
        r.set("cls", i);
        Ok(ImageSample {
            image: Image::new_u8(2, 2, 1, vec![i as u8; 4])?,
            record: r,
        })
    };
    ZephonDataLoader::new(
        ws,
        Device::flex(),
        move |ws: WorkSource| {
            let lanes = ws.owned_lanes();
            ws.stream()
                .fetch(1)
                .map_par(to_image, 2)
                .batch(3)
                .lane_mux(lanes)
                .collate_images(CollateConfig::new(Layout::Hwc).label("cls"))
                .into_blocking_iter(Runner::Inline)
        },
        |b: ImageBatch, device: &Device| {
            ImageTensors::from_batch_with(&b, device, FloatDType::F32, PixelScale::Raw)
        },
    )
    .unwrap()
}

#[test]
fn the_dataloader_serves_and_splits_image_batches() {
    let loader = image_loader(2);
    assert_eq!(loader.num_items(), 12);
    let mut seen = Vec::new();
    for t in loader.iter() {
        let t = t.unwrap();
        let labels = ints(t.labels.unwrap());
        // Pixels carry the label they were made from, through any shuffle.
        let px = floats(t.images);
        for (row, l) in labels.iter().enumerate() {
            assert!(px[row * 4..row * 4 + 4].iter().all(|&v| v == *l as f32));
        }
        seen.extend(labels);
    }
    seen.sort();
    assert_eq!(seen, (0..12).collect::<Vec<i64>>());

    // Two devices: a lane each, six images each, together all twelve.
    let loader = image_loader(2);
    let halves = [loader.slice(0, 6), loader.slice(6, 12)];
    let mut all = Vec::new();
    for h in &halves {
        assert_eq!(h.num_items(), 6);
        let labels: Vec<i64> = h
            .iter()
            .flat_map(|t| ints(t.unwrap().labels.unwrap()))
            .collect();
        assert_eq!(labels.len(), 6);
        all.extend(labels);
    }
    all.sort();
    assert_eq!(all, (0..12).collect::<Vec<i64>>());
}

/// Sound `i`: `i + 2` frames of mono at 8 kHz, labelled `i`.
fn sound(mut r: Record) -> zephon_core::Result<AudioSample> {
    let i = r.get("i").and_then(|v| v.as_int()).unwrap_or(0);
    let samples: Vec<f32> = (0..i + 2).map(|k| (k as f32 * 0.1).sin()).collect();
    r.set("cls", i);
    Ok(AudioSample::new(Audio::new(8_000, 1, samples)?, r))
}

fn sounds(n: i64) -> WorkSource {
    let recs: Vec<Record> = (0..n).map(|i| Record::new().with("i", i)).collect();
    WorkSource::builder()
        .dataset(Dataset::in_memory("a", vec![recs]).unwrap(), 1.0)
        .seed(2)
        .build()
        .unwrap()
}

#[test]
fn audio_batches_arrive_with_lengths_through_the_dataloader() {
    let loader = ZephonDataLoader::new(
        sounds(6),
        Device::flex(),
        |ws: WorkSource| {
            ws.stream()
                .fetch(1)
                .map_par(sound, 1)
                .batch(4)
                .collate_audio(AudioCollateConfig::new().frames(8).label("cls"))
                .into_blocking_iter(Runner::Inline)
        },
        |b: AudioBatch, device: &Device| AudioTensors::from_batch(&b, device, FloatDType::F32),
    )
    .unwrap();
    assert_eq!(loader.num_items(), 6);
    let mut n = 0;
    for t in loader.iter() {
        let t = t.unwrap();
        let [b, c, frames] = t.samples.dims();
        assert_eq!((c, frames), (1, 8));
        let labels = ints(t.labels.unwrap());
        let lengths = ints(t.lengths);
        assert_eq!(lengths.len(), b);
        let s = floats(t.samples);
        for (row, (l, len)) in labels.iter().zip(&lengths).enumerate() {
            assert_eq!(*len, (l + 2).min(8), "sound {l}");
            // Zero past the sound's own frames.
            assert!(
                s[row * 8 + *len as usize..row * 8 + 8]
                    .iter()
                    .all(|&v| v == 0.0)
            );
        }
        n += b;
    }
    assert_eq!(n, 6);

    let bad = AudioBatch {
        lane: 0,
        index: 3,
        batch_size: 2,
        sample_rate: 8_000,
        channels: 1,
        frames: 2,
        samples: vec![0.0; 4],
        lengths: vec![2],
        labels: Vec::new(),
        records: Vec::new(),
        cut: None,
    };
    let e = AudioTensors::from_batch(&bad, &Device::flex(), FloatDType::F32).unwrap_err();
    assert!(e.to_string().contains("`lengths` has 1 values"), "{e}");
}

#[test]
fn mel_batches_arrive_through_the_dataloader_and_cut() {
    let loader = ZephonDataLoader::new(
        sounds(5),
        Device::flex(),
        |ws: WorkSource| {
            ws.stream()
                .fetch(1)
                .map_par(sound, 1)
                .batch(2)
                .collate_audio(AudioCollateConfig::new().frames(64).label("cls"))
                .log_mel(LogMel::new(8_000, 32, 16, 4), 1)
                .into_blocking_iter(Runner::Inline)
        },
        |b: MelBatch, device: &Device| MelTensors::from_batch(&b, device, FloatDType::F32),
    )
    .unwrap();
    assert_eq!(loader.num_items(), 5);
    let mut n = 0;
    for t in loader.iter() {
        let t = t.unwrap();
        let [b, c, m, _f] = t.values.dims();
        assert_eq!((c, m), (1, 4));
        assert_eq!(ints(t.lengths).len(), b);
        assert_eq!(ints(t.labels.unwrap()).len(), b);
        n += b;
    }
    assert_eq!(n, 5);

    let mel = MelBatch {
        lane: 0,
        index: 0,
        batch_size: 3,
        channels: 1,
        n_mels: 2,
        frames: 1,
        values: vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
        lengths: vec![1, 1, 1],
        labels: vec![7, 8, 9],
        records: Vec::new(),
        cut: None,
    };
    let cut = mel.keep(2..3);
    assert_eq!(
        (cut.values, cut.labels, cut.batch_size),
        (vec![4.0, 5.0], vec![9], 1)
    );
}
