//! The DataLoader adapter feeds a Burn training loop from a Zephon pipeline.

use burn::data::dataloader::DataLoader;
use burn::data::dataloader::split::split_dataloader;
use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, FloatDType, Tensor};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
        ws,
        device.clone(),
        |ws: WorkSource| {
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
    .unwrap()
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

/// `n` records with an `id`, on `lanes` lanes, batches of 4 per lane; the
/// loader serves the ids of each batch and counts the records fetched.
fn id_loader(
    n: i64,
    lanes: u32,
    keep: fn(i64) -> bool,
) -> (ZephonDataLoader<RecordBatch, Vec<i64>>, Arc<AtomicUsize>) {
    let recs: Vec<Record> = (0..n).map(|i| Record::new().with("id", i)).collect();
    let ws = WorkSource::builder()
        .dataset(Dataset::in_memory("ids", vec![recs]).unwrap(), 1.0)
        .seed(3)
        .canonical_lanes(lanes)
        .build()
        .unwrap();
    let fetched = Arc::new(AtomicUsize::new(0));
    let count = fetched.clone();
    let loader = ZephonDataLoader::new(
        ws,
        Device::flex(),
        move |ws: WorkSource| {
            let lanes = ws.owned_lanes();
            let count = count.clone();
            ws.stream()
                .fetch(2)
                .map_par(
                    move |r: Record| {
                        count.fetch_add(1, Ordering::Relaxed);
                        Ok(r)
                    },
                    2,
                )
                .filter_ok(move |r: &Record| keep(id_of(r)))
                .batch(4)
                .lane_mux(lanes)
                .into_blocking_iter(Runner::threads())
        },
        |b: RecordBatch, _: &Device| Ok(b.items.iter().map(id_of).collect()),
    )
    .unwrap();
    (loader, fetched)
}

fn id_of(r: &Record) -> i64 {
    r.get("id").and_then(|v| v.as_int()).unwrap()
}

fn epoch_ids(loader: &dyn DataLoader<Vec<i64>>) -> Vec<Vec<i64>> {
    loader.iter().map(|b| b.unwrap()).collect()
}

#[test]
fn every_iter_is_the_next_epoch_reshuffled() {
    let (loader, fetched) = id_loader(40, 4, |_| true);
    assert_eq!(loader.num_items(), 40);
    let first: Vec<i64> = epoch_ids(&loader).concat();
    let second: Vec<i64> = epoch_ids(&loader).concat();
    assert_ne!(first, second, "epoch 1 must be reshuffled");
    for ids in [&first, &second] {
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, (0..40).collect::<Vec<_>>());
    }
    assert_eq!(fetched.load(Ordering::Relaxed), 80);
    assert_eq!(loader.next_epoch(), 2);
    // The same epoch is the same order, in a fresh loader or a resumed one.
    let (fresh, _) = id_loader(40, 4, |_| true);
    assert_eq!(epoch_ids(&fresh).concat(), first);
    let (resumed, _) = id_loader(40, 4, |_| true);
    let resumed = resumed.starting_at_epoch(1);
    assert_eq!(epoch_ids(&resumed).concat(), second);
}

#[test]
fn device_slices_split_the_lanes_each_item_once_in_full_batches() {
    let (loader, fetched) = id_loader(64, 8, |_| true);
    let loader: Arc<dyn DataLoader<Vec<i64>>> = Arc::new(loader);
    let devices = [Device::flex(), Device::flex()];
    let slices = split_dataloader(loader.clone(), &devices);
    for epoch in 0..2 {
        let mut all = Vec::new();
        for s in &slices {
            assert_eq!(s.num_items(), 32);
            let mut it = s.iter();
            for batch in it.by_ref() {
                let batch = batch.unwrap();
                assert_eq!(batch.len(), 4, "a slice keeps the batch size");
                all.extend(batch);
            }
            let p = it.progress();
            assert_eq!((p.items_processed, p.items_total), (32, 32));
        }
        all.sort();
        assert_eq!(all, (0..64).collect::<Vec<_>>(), "epoch {epoch}");
    }
    // Each item was produced once per epoch: no replay, no skip.
    assert_eq!(fetched.load(Ordering::Relaxed), 128);
    // The slices' epoch 1 is the whole loader's epoch 1.
    let (whole, _) = id_loader(64, 8, |_| true);
    let whole = whole.starting_at_epoch(1);
    let mut expected = epoch_ids(&whole).concat();
    let (again, _) = id_loader(64, 8, |_| true);
    let again: Arc<dyn DataLoader<Vec<i64>>> = Arc::new(again.starting_at_epoch(1));
    let mut got: Vec<i64> = split_dataloader(again, &devices)
        .iter()
        .flat_map(|s| epoch_ids(s.as_ref()).concat())
        .collect();
    expected.sort();
    got.sort();
    assert_eq!(got, expected);
}

#[test]
fn a_split_the_lanes_cannot_take_is_an_error_naming_them() {
    let (loader, _) = id_loader(64, 8, |_| true);
    let loader: Arc<dyn DataLoader<Vec<i64>>> = Arc::new(loader);
    let slices = split_dataloader(loader, &[Device::flex(), Device::flex(), Device::flex()]);
    let e = slices[0].iter().next().unwrap().unwrap_err().to_string();
    assert!(
        e.contains("slice 0..21 of 64 items over lanes [0, 1, 2, 3, 4, 5, 6, 7]"),
        "{e}"
    );
}

#[test]
fn served_items_that_differ_from_the_work_source_are_an_error() {
    let (loader, _) = id_loader(40, 2, |id| id % 3 != 0);
    let batches: Vec<_> = loader.iter().collect();
    let last = batches.last().unwrap().as_ref().unwrap_err().to_string();
    assert!(
        last.contains("epoch 0 over lanes [0, 1]: the pipeline served 26 items by its end, but the work source holds 40"),
        "{last}"
    );
    assert!(batches[..batches.len() - 1].iter().all(|b| b.is_ok()));
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

mod resumable {
    use burn::data::dataloader::DataLoader;
    use burn::tensor::Device;
    use zephon_burn::{ItemCount, ZephonDataLoader};
    use zephon_core::checkpoint::{Progress, Recipe, ResumeExt};
    use zephon_core::{Dataset, PipelineExt, Record, RecordBatch, Runner, WorkSource};

    fn work() -> WorkSource {
        let recs: Vec<Record> = (0..30).map(|i| Record::new().with("id", i)).collect();
        WorkSource::builder()
            .dataset(Dataset::in_memory("d", vec![recs]).unwrap(), 1.0)
            .seed(2)
            .shuffle_within_shard(true)
            .canonical_lanes(2)
            .build()
            .unwrap()
    }

    fn ids(b: RecordBatch, _: &Device) -> zephon_burn::Result<Vec<i64>> {
        Ok(b.items
            .iter()
            .map(|r| r.get("id").and_then(|v| v.as_int()).unwrap())
            .collect())
    }

    fn even(r: &Record) -> bool {
        r.get("id")
            .and_then(|v| v.as_int())
            .is_some_and(|i| i % 2 == 0)
    }

    /// Keeps the even ids, so only a count of the pipeline knows an epoch's items.
    fn loader(restore_step: bool) -> ZephonDataLoader<RecordBatch, Vec<i64>> {
        ZephonDataLoader::resumable(
            work(),
            Device::flex(),
            |ws: &WorkSource| Recipe::new(ws).setting("even", true),
            move |ws: WorkSource, p: &mut Progress| {
                let batches = ws.stream().fetch(2).filter_ok(even).batch(2);
                if restore_step {
                    batches.resume(p).into_blocking_iter(Runner::Inline)
                } else {
                    let lanes = ws.owned_lanes();
                    batches.lane_mux(lanes).into_blocking_iter(Runner::Inline)
                }
            },
            ids,
        )
        .unwrap()
        .items(ItemCount::Counted)
    }

    #[test]
    fn a_counted_loader_resumes_in_a_later_epoch_with_the_items_left() {
        let full = loader(true);
        let epochs: Vec<Vec<Vec<i64>>> = (0..3)
            .map(|_| full.iter().map(Result::unwrap).collect())
            .collect();
        let first = loader(true).starting_at_epoch(1);
        let head: Vec<Vec<i64>> = first.iter().take(3).map(Result::unwrap).collect();
        let position = first.position().unwrap();
        assert_eq!(position.epoch, 1);
        let resumed = loader(true).resume_from(position).unwrap();
        let served: usize = head.iter().map(Vec::len).sum();
        assert_eq!(resumed.num_items(), 15 - served);
        let rest: Vec<Vec<i64>> = resumed.iter().map(Result::unwrap).collect();
        assert_eq!([head, rest].concat(), epochs[1]);
        // The next epoch is whole and fresh.
        assert_eq!(resumed.num_items(), 15);
        let next: Vec<Vec<i64>> = resumed.iter().map(Result::unwrap).collect();
        assert_eq!(next, epochs[2]);
    }

    #[test]
    fn a_resume_without_its_restore_step_is_an_error_not_a_restart() {
        let first = loader(false);
        let _: Vec<_> = first.iter().take(2).collect();
        let resumed = loader(false)
            .resume_from(first.position().unwrap())
            .unwrap();
        let e = resumed
            .iter()
            .find_map(Result::err)
            .expect("an error, not a restart");
        assert!(e.to_string().contains("without its restore step"), "{e}");
    }

    #[test]
    fn a_plain_loader_or_another_runs_position_is_refused() {
        let position = {
            let l = loader(true);
            let _: Vec<_> = l.iter().take(1).collect();
            l.position().unwrap()
        };
        let plain = ZephonDataLoader::new(
            work(),
            Device::flex(),
            |ws: WorkSource| {
                let lanes = ws.owned_lanes();
                ws.stream()
                    .fetch(2)
                    .batch(2)
                    .lane_mux(lanes)
                    .into_blocking_iter(Runner::Inline)
            },
            ids,
        )
        .unwrap();
        assert!(plain.position().is_none());
        let e = plain.resume_from(position.clone()).unwrap_err();
        assert!(e.to_string().contains("ZephonDataLoader::resumable"), "{e}");
        let other = ZephonDataLoader::resumable(
            work(),
            Device::flex(),
            |ws: &WorkSource| Recipe::new(ws).setting("even", false),
            |ws: WorkSource, p: &mut Progress| {
                ws.stream()
                    .fetch(2)
                    .batch(2)
                    .resume(p)
                    .into_blocking_iter(Runner::Inline)
            },
            ids,
        )
        .unwrap();
        let e = other.resume_from(position).unwrap_err();
        assert!(e.to_string().contains("even"), "{e}");
    }
}

/// `ItemCount::CountedOnce` counts the first epoch and keeps the count: the
/// pipeline runs once more in all (Counted: once more per epoch), serves
/// the same epochs, and an epoch whose count differs is an error.
mod counted_once {
    use burn::data::dataloader::DataLoader;
    use burn::tensor::Device;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use zephon_burn::{ItemCount, ZephonDataLoader};
    use zephon_core::{Dataset, PipelineExt, Record, RecordBatch, Runner, WorkSource};

    /// Even ids of 40, through a map that counts the records it sees;
    /// with `by_epoch`, epoch 1 keeps only ids below 20 (another count).
    fn loader(
        items: ItemCount,
        seen: Arc<AtomicUsize>,
        by_epoch: bool,
    ) -> ZephonDataLoader<RecordBatch, usize> {
        let recs: Vec<Record> = (0..40).map(|i| Record::new().with("id", i)).collect();
        let ws = WorkSource::builder()
            .dataset(Dataset::in_memory("d", vec![recs]).unwrap(), 1.0)
            .seed(3)
            .canonical_lanes(2)
            .build()
            .unwrap();
        ZephonDataLoader::new(
            ws,
            Device::flex(),
            move |ws: WorkSource| {
                let seen = seen.clone();
                let second = ws.state().next_global >= 40;
                let lanes = ws.owned_lanes();
                ws.stream()
                    .fetch(2)
                    .map_par(
                        move |r: Record| {
                            seen.fetch_add(1, Ordering::Relaxed);
                            Ok(r)
                        },
                        1,
                    )
                    .filter_ok(move |r: &Record| {
                        let id = r.get("id").and_then(|v| v.as_int()).unwrap();
                        id % 2 == 0 && !(by_epoch && second && id >= 20)
                    })
                    .batch(4)
                    .lane_mux(lanes)
                    .into_blocking_iter(Runner::Inline)
            },
            |b: RecordBatch, _: &Device| Ok(b.items.len()),
        )
        .unwrap()
        .items(items)
    }

    fn epochs(l: &ZephonDataLoader<RecordBatch, usize>, n: usize) -> Vec<usize> {
        (0..n)
            .map(|_| {
                assert_eq!(l.num_items(), 20);
                l.iter().map(Result::unwrap).sum()
            })
            .collect()
    }

    #[test]
    fn the_first_count_is_kept_for_later_epochs() {
        let (once, every) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let a = epochs(&loader(ItemCount::CountedOnce, once.clone(), false), 3);
        let b = epochs(&loader(ItemCount::Counted, every.clone(), false), 3);
        assert_eq!(a, [20, 20, 20]);
        assert_eq!(a, b);
        // Three epochs of 40 records served, plus the counting passes.
        assert_eq!(once.load(Ordering::Relaxed), 4 * 40);
        assert_eq!(every.load(Ordering::Relaxed), 6 * 40);
    }

    #[test]
    fn an_epoch_of_another_count_is_an_error_naming_both() {
        let l = loader(ItemCount::CountedOnce, Arc::default(), true);
        assert_eq!(l.iter().map(Result::unwrap).sum::<usize>(), 20);
        let e = l
            .iter()
            .find_map(Result::err)
            .expect("an error at the epoch's end");
        let e = e.to_string();
        assert!(
            e.contains("the first epoch counted 20") && e.contains("ItemCount::Counted"),
            "{e}"
        );
    }
}
