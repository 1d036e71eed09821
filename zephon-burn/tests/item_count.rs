//! The loader's item count for pipelines that pack or filter: counted
//! before each epoch, checked at its end, split over device slices.

use burn::data::dataloader::DataLoader;
use burn::data::dataloader::split::split_dataloader;
use burn::tensor::Device;
use proptest::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use zephon_burn::models::lm::TextData;
use zephon_burn::{ItemCount, ZephonDataLoader};
use zephon_core::{Dataset, LaneId, PipelineExt, Record, RecordBatch, Runner, WorkSource};
use zephon_ops::TrainingBatch;

/// A packed row as served: (lane, lane-batch, row in it, token ids).
type Row = (LaneId, u64, usize, Vec<i64>);

const DOCS: usize = 40;

fn text() -> TextData {
    TextData {
        num_docs: DOCS,
        // Most documents are shorter than a row, so rows hold several.
        seq_len: 128,
        batch_size: 2,
        seed: 4,
        workers: 2,
    }
}

/// The packed text pipeline on `lanes` lanes, serving its rows; `builds`
/// counts the pipelines built.
fn packed(
    lanes: u32,
    items: ItemCount,
) -> (ZephonDataLoader<TrainingBatch, Vec<Row>>, Arc<AtomicUsize>) {
    packed_on(text(), lanes, items)
}

fn packed_on(
    d: TextData,
    lanes: u32,
    items: ItemCount,
) -> (ZephonDataLoader<TrainingBatch, Vec<Row>>, Arc<AtomicUsize>) {
    let builds = Arc::new(AtomicUsize::new(0));
    let count = builds.clone();
    let loader = ZephonDataLoader::new(
        d.work_source(lanes, 0, 1).unwrap(),
        Device::flex(),
        move |ws| {
            count.fetch_add(1, Ordering::Relaxed);
            d.pipeline_on(ws)
        },
        |b: TrainingBatch, _: &Device| {
            let ids = b.input_ids.to_i64();
            Ok(ids
                .chunks(b.seq_len)
                .enumerate()
                .map(|(r, row)| (b.lane, b.index, r, row.to_vec()))
                .collect())
        },
    )
    .unwrap()
    .items(items);
    (loader, builds)
}

/// One epoch's rows, and the progress at its end.
fn epoch(loader: &dyn DataLoader<Vec<Row>>) -> (Vec<Row>, (usize, usize)) {
    let mut it = loader.iter();
    let rows = it.by_ref().flat_map(|b| b.unwrap()).collect();
    let p = it.progress();
    (rows, (p.items_processed, p.items_total))
}

fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort();
    rows
}

#[test]
fn counted_packed_rows_are_the_items_of_each_epoch_across_two_slices() {
    let (whole, _) = packed(4, ItemCount::Counted);
    let (split, builds) = packed(4, ItemCount::Counted);
    let split: Arc<dyn DataLoader<Vec<Row>>> = Arc::new(split);
    let slices = split_dataloader(split.clone(), &[Device::flex(), Device::flex()]);
    let mut epochs = Vec::new();
    for e in 0..2 {
        let n = whole.num_items();
        let (rows, progress) = epoch(&whole);
        assert_eq!(rows.len(), n, "epoch {e}: num_items is the rows served");
        assert_eq!(progress, (n, n), "epoch {e}");
        assert!(
            n < DOCS,
            "epoch {e}: packing puts several documents in a row"
        );
        let counts: Vec<usize> = slices.iter().map(|s| s.num_items()).collect();
        assert_eq!(
            counts.iter().sum::<usize>(),
            n,
            "epoch {e}: slices {counts:?}"
        );
        let mut from_slices = Vec::new();
        for (s, count) in slices.iter().zip(counts) {
            let (part, progress) = epoch(s.as_ref());
            assert_eq!(progress, (count, count), "epoch {e}");
            from_slices.extend(part);
        }
        // Every row once: the slices serve the whole loader's rows, each
        // (lane, batch, row) a single time.
        let from_slices = sorted(from_slices);
        assert!(
            from_slices
                .windows(2)
                .all(|w| (w[0].0, w[0].1, w[0].2) != (w[1].0, w[1].1, w[1].2))
        );
        assert_eq!(from_slices, sorted(rows.clone()), "epoch {e}");
        epochs.push(rows);
    }
    let ids = |rows: &[Row]| rows.iter().map(|r| r.3.clone()).collect::<Vec<_>>();
    assert_ne!(ids(&epochs[0]), ids(&epochs[1]), "epoch 1 is reshuffled");
    // The whole loader was counted once, at the split; each slice counts
    // and serves each epoch once.
    assert_eq!(builds.load(Ordering::Relaxed), 1 + 2 * 2 * 2);
}

#[test]
fn a_packing_pipeline_does_not_fit_a_per_sample_loader() {
    let (loader, _) = packed(2, ItemCount::PerSample);
    assert_eq!(loader.num_items(), DOCS);
    let batches: Vec<_> = loader.iter().collect();
    let last = batches.last().unwrap().as_ref().unwrap_err().to_string();
    assert!(
        last.contains("epoch 0 over lanes [0, 1]: the pipeline served")
            && last.contains("by its end, but the work source holds 40; a pipeline that drops, adds or packs samples does not fit a per-sample loader, count its items with `ItemCount::Counted`"),
        "{last}"
    );
    assert!(batches[..batches.len() - 1].iter().all(|b| b.is_ok()));
}

#[test]
fn an_epoch_is_counted_once_however_often_it_is_asked() {
    let (loader, builds) = packed(2, ItemCount::Counted);
    let n = loader.num_items();
    assert_eq!(loader.num_items(), n);
    assert_eq!(loader.items_in_epoch(0).unwrap(), n);
    assert_eq!(builds.load(Ordering::Relaxed), 1);
    let (rows, _) = epoch(&loader);
    assert_eq!(rows.len(), n);
    assert_eq!(
        builds.load(Ordering::Relaxed),
        2,
        "counted once, served once"
    );
}

/// 20 records with an `id` on 2 lanes, batches of 4 per lane; the first
/// pipeline built keeps the even ids only, the later ones keep all.
fn flaky(items: ItemCount) -> ZephonDataLoader<RecordBatch, usize> {
    let recs: Vec<Record> = (0..20).map(|i| Record::new().with("id", i)).collect();
    let ws = WorkSource::builder()
        .dataset(Dataset::in_memory("ids", vec![recs]).unwrap(), 1.0)
        .seed(3)
        .canonical_lanes(2)
        .build()
        .unwrap();
    let builds = Arc::new(AtomicUsize::new(0));
    ZephonDataLoader::new(
        ws,
        Device::flex(),
        move |ws: WorkSource| {
            let first = builds.fetch_add(1, Ordering::Relaxed) == 0;
            let lanes = ws.owned_lanes();
            ws.stream()
                .fetch(2)
                .filter_ok(move |r: &Record| {
                    !first || r.get("id").and_then(|v| v.as_int()).unwrap() % 2 == 0
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

#[test]
fn a_pipeline_that_serves_another_count_than_it_counted_is_an_error() {
    let loader = flaky(ItemCount::Counted);
    assert_eq!(loader.num_items(), 10);
    let batches: Vec<_> = loader.iter().collect();
    let last = batches.last().unwrap().as_ref().unwrap_err().to_string();
    assert!(
        last.contains("epoch 0 over lanes [0, 1]: the pipeline served")
            && last.contains("so far, but counting the same epoch before serving it gave 10; the pipeline is not deterministic"),
        "{last}"
    );
    // Nothing past the count was converted.
    let served: usize = batches.iter().filter_map(|b| b.as_ref().ok()).sum();
    assert!(served <= 10, "{served}");
}

#[test]
fn a_pipeline_that_fails_while_counted_is_an_error_naming_the_epoch() {
    let recs: Vec<Record> = (0..8).map(|i| Record::new().with("id", i)).collect();
    let ws = WorkSource::builder()
        .dataset(Dataset::in_memory("ids", vec![recs]).unwrap(), 1.0)
        .canonical_lanes(2)
        .build()
        .unwrap();
    let loader = ZephonDataLoader::new(
        ws,
        Device::flex(),
        |ws: WorkSource| {
            let lanes = ws.owned_lanes();
            ws.stream()
                .fetch(2)
                .map_par(
                    |r: Record| match r.get("id").and_then(|v| v.as_int()) {
                        Some(5) => Err(zephon_core::Error::config("id", "record 5 is bad")),
                        _ => Ok(r),
                    },
                    2,
                )
                .batch(2)
                .lane_mux(lanes)
                .into_blocking_iter(Runner::Inline)
        },
        |b: RecordBatch, _: &Device| Ok(b.items.len()),
    )
    .unwrap()
    .items(ItemCount::Counted)
    .starting_at_epoch(3);
    assert_eq!(loader.num_items(), 0);
    let all: Vec<_> = loader.iter().collect();
    assert_eq!(all.len(), 1, "nothing served past the error");
    let e = all[0].as_ref().unwrap_err().to_string();
    assert!(
        e.contains("counting the items of epoch 3 over lanes [0, 1]:")
            && e.contains("record 5 is bad"),
        "{e}"
    );
}

#[test]
fn a_declared_count_is_checked_and_not_split() {
    // No counting pass: the first pipeline built, 10 items, is served.
    let right = flaky(ItemCount::Declared(10));
    assert_eq!(right.num_items(), 10);
    let mut it = right.iter();
    assert_eq!(it.by_ref().map(|b| b.unwrap()).sum::<usize>(), 10);
    let p = it.progress();
    assert_eq!((p.items_processed, p.items_total), (10, 10));
    let batches: Vec<_> = flaky(ItemCount::Declared(20)).iter().collect();
    let last = batches.last().unwrap().as_ref().unwrap_err().to_string();
    assert!(
        last.contains("epoch 0 over lanes [0, 1]: the pipeline served 10 items by its end, but 20 were declared (`ItemCount::Declared`)"),
        "{last}"
    );
    let half = flaky(ItemCount::Declared(10)).slice(0, 5);
    let e = half.iter().next().unwrap().unwrap_err().to_string();
    assert!(
        e.contains("slice 0..5 of 10 declared items over lanes [0, 1]: a declared count cannot be shared out"),
        "{e}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the data, lanes, devices, epoch and tokenizing threads,
    /// the counted items are the rows the epoch serves, and the device
    /// slices' counts and rows add up to the whole loader's.
    #[test]
    fn counts_match_what_is_served_on_any_split(
        num_docs in 1usize..60,
        seq_len in prop::sample::select(vec![16usize, 64, 256]),
        batch_size in 1usize..4,
        seed in 0u64..1000,
        lanes in prop::sample::select(vec![1u32, 2, 4]),
        devices in prop::sample::select(vec![1usize, 2, 4]),
        start in 0u64..3,
    ) {
        let d = TextData { num_docs, seq_len, batch_size, seed, workers: 2 };
        let (whole, _) = packed_on(d.clone(), lanes, ItemCount::Counted);
        let whole = whole.starting_at_epoch(start);
        let n = whole.num_items();
        let (rows, progress) = epoch(&whole);
        prop_assert_eq!(rows.len(), n);
        prop_assert_eq!(progress, (n, n));
        // One tokenizing thread serves the same rows in the same order.
        let (inline, _) = packed_on(TextData { workers: 1, ..d.clone() }, lanes, ItemCount::Counted);
        let inline = inline.starting_at_epoch(start);
        prop_assert_eq!(inline.num_items(), n);
        prop_assert_eq!(&epoch(&inline).0, &rows);
        // Burn's split needs a share of whole lanes, and its equal item
        // ranges map onto them only with enough items per lane.
        prop_assume!((lanes as usize).is_multiple_of(devices) && n >= lanes as usize * devices);
        let (split, _) = packed_on(d, lanes, ItemCount::Counted);
        let split: Arc<dyn DataLoader<Vec<Row>>> = Arc::new(split.starting_at_epoch(start));
        let slices = split_dataloader(split, &vec![Device::flex(); devices]);
        let counts: Vec<usize> = slices.iter().map(|s| s.num_items()).collect();
        prop_assert_eq!(counts.iter().sum::<usize>(), n, "slices {:?}", counts);
        let mut from_slices = Vec::new();
        for (s, count) in slices.iter().zip(counts) {
            let (part, progress) = epoch(s.as_ref());
            prop_assert_eq!(progress, (count, count));
            from_slices.extend(part);
        }
        prop_assert_eq!(sorted(from_slices), sorted(rows));
    }
}
