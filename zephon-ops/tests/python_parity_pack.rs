//! `pack_sequences`, `pack_flat` and `to_training` against Python Zephon
//! 0.2.0's `PackSequences` (flat output) and `SampleBatch.to_training` on the
//! same documents (tokenized with the committed tokenizer, EOS appended), in
//! one lane, in order. The fixture is written by
//! tests/fixtures/make_pack_fixture.py. Where the two agree, outputs are
//! equal; where they differ on purpose (the README's "Differences from the
//! Python Zephon"), each difference is asserted as documented.

use serde_json::Value as Json;
use zephon_core::{Lineage, PipelineExt, Record, Runner, SamplePtr, Value};
use zephon_ops::{
    IGNORE_INDEX, PackAlgorithm, PackConfig, TextPipelineExt, TrainingBatch, TrainingConfig,
};

const FIXTURE: &str = include_str!("fixtures/pack_parity.json");
const MAX_LENGTH: usize = 32;
const BATCH: usize = 4;
const EOS: u32 = 0;
const PAD: u32 = 1;

fn fixture() -> Json {
    let fx: Json = serde_json::from_str(FIXTURE).unwrap();
    assert_eq!(fx["max_length"], MAX_LENGTH);
    assert_eq!(fx["batch_size"], BATCH);
    assert_eq!(fx["eos_token_id"], EOS);
    assert_eq!(fx["pad_token_id"], PAD);
    fx
}

fn u32s(v: &Json) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn i64s(v: &Json) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().map(|f| f as i64).unwrap())
        .collect()
}

fn docs(fx: &Json, key: &str) -> Vec<Vec<u32>> {
    fx[key].as_array().unwrap().iter().map(u32s).collect()
}

fn case<'a>(fx: &'a Json, key: &str, algorithm: &str) -> &'a Json {
    fx[key]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["algorithm"] == algorithm)
        .unwrap()
}

fn records(docs: &[Vec<u32>], masks: Option<&[Vec<u32>]>) -> Vec<zephon_core::Result<Record>> {
    docs.iter()
        .enumerate()
        .map(|(i, d)| {
            let mut r = Record::new().with("input_ids", Value::Tokens(d.clone()));
            if let Some(m) = masks {
                r.set("loss_mask", Value::Tokens(m[i].clone()));
            }
            r.lineage = Lineage::from_elem(
                SamplePtr {
                    dataset: 0,
                    shard: 0,
                    sample: i as u64,
                    lane: 0,
                },
                1,
            );
            Ok(r)
        })
        .collect()
}

/// Our rows (`pack_sequences`, then `pack_flat`) for `docs`.
fn pack(docs: &[Vec<u32>], masks: Option<&[Vec<u32>]>, config: PackConfig) -> Vec<Record> {
    futures::stream::iter(records(docs, masks))
        .pack_sequences(config)
        .pack_flat(MAX_LENGTH, PAD)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Our training batches of `BATCH` rows.
fn collate(rows: &[Record], eos_mask_loss: bool) -> Vec<TrainingBatch> {
    let mut config = TrainingConfig::new(MAX_LENGTH).pad_token_id(PAD);
    if eos_mask_loss {
        config = config.eos_mask_loss(EOS);
    }
    // The blocking iterator owns its stream.
    let owned: Vec<Record> = rows.to_vec();
    futures::stream::iter(owned.into_iter().map(Ok))
        .batch(BATCH)
        .to_training(config)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Row `r` of Python's rows equals ours: ids (padding included), the loss
/// mask when there is one, and positions on real tokens. Python numbers the
/// padding tail as one more document (0, 1, 2, ...); ours is all 0.
fn assert_row_eq(py: &Json, ours: &Record, what: &str) {
    let ids = ours.tokens("input_ids").unwrap();
    assert_eq!(ids, u32s(&py["input_ids"]), "{what}: ids");
    let pad = py["padding_length"].as_u64().unwrap_or(0) as usize;
    let real = MAX_LENGTH - pad;
    let attention = ours.tokens("attention_mask").unwrap();
    assert_eq!(
        attention.iter().filter(|&&m| m == 1).count(),
        real,
        "{what}"
    );
    let py_pos = u32s(&py["positions"]);
    let pos = ours.tokens("position_ids").unwrap();
    assert_eq!(pos[..real], py_pos[..real], "{what}: positions");
    assert_eq!(
        py_pos[real..],
        (0..pad as u32).collect::<Vec<_>>(),
        "{what}"
    );
    assert!(pos[real..].iter().all(|&p| p == 0), "{what}: pad positions");
    let py_segments = py_pos[..real].iter().filter(|&&p| p == 0).count();
    assert_eq!(py["num_sequences"], py_segments, "{what}");
    match py.get("loss_mask") {
        Some(m) => assert_eq!(ours.tokens("loss_mask").unwrap(), u32s(m), "{what}: mask"),
        None => assert!(ours.get("loss_mask").is_none(), "{what}"),
    }
}

/// Python collates a row of `L` tokens into `L - 1` inputs and labels
/// (`row[:-1]`, `row[1:]`), labels running across document boundaries unless
/// `eos_mask_loss` masks the prediction from EOS; ours keeps `L` positions
/// and never labels across a document boundary (nor from the last one).
/// `eos_masked`: every boundary in these rows follows an EOS, so with it
/// both agree on the first `L - 1` labels exactly.
/// A row's `loss_mask` (Python's too) takes the label of `t` off where the
/// mask of `t + 1` is 0, across a boundary as well.
fn assert_training(
    py: &[Json],
    ours: &[TrainingBatch],
    packed: &[Record],
    eos_masked: bool,
    what: &str,
) {
    assert_eq!(py.len(), ours.len(), "{what}: batches");
    let l = MAX_LENGTH;
    for (k, (p, o)) in py.iter().zip(ours).enumerate() {
        let what = format!("{what}, batch {k}");
        let rows = p["input_ids"].as_array().unwrap();
        assert_eq!(o.batch_size, rows.len(), "{what}");
        let ids = o.input_ids.to_i64();
        let mut valid = 0;
        for b in 0..rows.len() {
            let at = |t: usize| b * l + t;
            let what = format!("{what}, row {b}");
            let py_ids = i64s(&p["input_ids"][b]);
            assert_eq!(py_ids, ids[at(0)..at(l - 1)], "{what}: ids");
            let py_labels = i64s(&p["labels"][b]);
            let mask = packed[k * BATCH + b].tokens("loss_mask");
            for t in 0..l - 1 {
                let supervised = mask.is_none_or(|m| m[t + 1] == 1);
                let crosses = o.attention_mask[at(t + 1)]
                    && o.segment_ids[at(t + 1)] != o.segment_ids[at(t)]
                    && supervised;
                let want = if crosses && !(eos_masked && ids[at(t)] == i64::from(EOS)) {
                    ids[at(t + 1)]
                } else {
                    o.labels[at(t)]
                };
                assert_eq!(py_labels[t], want, "{what}: label {t}");
                if crosses || !supervised {
                    assert_eq!(o.labels[at(t)], IGNORE_INDEX, "{what}: label {t}");
                }
            }
            assert_eq!(o.labels[at(l - 1)], IGNORE_INDEX, "{what}");
            let py_loss: Vec<bool> = i64s(&p["loss_mask"][b]).iter().map(|&x| x == 1).collect();
            let py_labels_kept: Vec<bool> = py_labels.iter().map(|&x| x != IGNORE_INDEX).collect();
            assert_eq!(py_loss, py_labels_kept, "{what}");
            valid += py_labels_kept.iter().filter(|&&x| x).count();
            let py_pad: Vec<bool> = p["padding_mask"][b]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_bool().unwrap())
                .collect();
            let ours_pad: Vec<bool> = o.attention_mask[at(0)..at(l - 1)]
                .iter()
                .map(|&m| !m)
                .collect();
            assert_eq!(py_pad, ours_pad, "{what}: padding");
            let real = ours_pad.iter().filter(|&&x| !x).count();
            let py_pos = i64s(&p["positions"][b]);
            assert_eq!(
                py_pos[..real],
                o.position_ids[at(0)..at(real)],
                "{what}: positions"
            );
            // Python's per-row boundaries (padded with the row length) are
            // ours, within the row, over its first `L - 1` tokens.
            let mut py_cu = i64s(&p["cu_seqlens"][b]);
            py_cu.dedup();
            let mut ours_cu: Vec<i64> = o
                .cu_seqlens
                .iter()
                .map(|&c| i64::from(c) - (b * l) as i64)
                .filter(|&c| (0..=l as i64).contains(&c))
                .map(|c| c.min(l as i64 - 1))
                .collect();
            ours_cu.dedup();
            assert_eq!(py_cu, ours_cu, "{what}: cu_seqlens");
        }
        assert_eq!(p["num_valid_tokens"], valid, "{what}");
        if eos_masked {
            assert_eq!(o.num_valid_tokens(), valid, "{what}: valid tokens");
        }
    }
}

#[test]
fn first_fit_rows_and_batches_equal_pythons() {
    let fx = fixture();
    let docs = docs(&fx, "docs");
    assert!(docs.len() >= 30 && docs.iter().filter(|d| d.len() > MAX_LENGTH).count() >= 5);
    let py = case(&fx, "cases", "first_fit");
    // Python keeps 64 bins open; one window of 64 rows holds the corpus, so
    // the placements are the same first fit in arrival order.
    let config = PackConfig::new(MAX_LENGTH, PackAlgorithm::FirstFit).num_bins(64);
    let rows = pack(&docs, None, config);
    let py_rows = py["rows"].as_array().unwrap();
    assert_eq!(rows.len(), py_rows.len());
    for (i, (p, o)) in py_rows.iter().zip(&rows).enumerate() {
        assert_row_eq(p, o, &format!("first_fit row {i}"));
    }
    let batches = py["training"].as_array().unwrap();
    assert_training(batches, &collate(&rows, false), &rows, false, "first_fit");
    let batches = py["training_eos_masked"].as_array().unwrap();
    assert_training(
        batches,
        &collate(&rows, true),
        &rows,
        true,
        "first_fit, EOS masked",
    );
}

#[test]
fn wrap_equals_python_with_the_remainder_dropped() {
    let fx = fixture();
    let docs = docs(&fx, "docs");
    let py = case(&fx, "cases", "wrap");
    let py_rows = py["rows"].as_array().unwrap();
    let config = PackConfig::new(MAX_LENGTH, PackAlgorithm::Wrap);
    let rows = pack(&docs, None, config.clone().drop_remainder(true));
    assert_eq!(rows.len(), py_rows.len());
    for (i, (p, o)) in py_rows.iter().zip(&rows).enumerate() {
        assert_row_eq(p, o, &format!("wrap row {i}"));
    }
    let batches = py["training"].as_array().unwrap();
    assert_training(batches, &collate(&rows, false), &rows, false, "wrap");
    let batches = py["training_eos_masked"].as_array().unwrap();
    assert_training(
        batches,
        &collate(&rows, true),
        &rows,
        true,
        "wrap, EOS masked",
    );
    // Python always drops the short last row; ours keeps it by default.
    let total: usize = docs.iter().map(Vec::len).sum();
    let kept = pack(&docs, None, config);
    assert_eq!(kept.len(), rows.len() + 1);
    assert_eq!(kept[..rows.len()], rows[..]);
    let tail = kept.last().unwrap().tokens("attention_mask").unwrap();
    assert_eq!(tail.iter().filter(|&&m| m == 1).count(), total % MAX_LENGTH);
    assert_ne!(total % MAX_LENGTH, 0);
}

/// The documents of packed rows (split at position 0), sorted.
fn documents(rows: impl Iterator<Item = (Vec<u32>, Vec<u32>)>) -> Vec<Vec<u32>> {
    let mut out: Vec<Vec<u32>> = Vec::new();
    for (ids, pos) in rows {
        for (id, p) in ids.into_iter().zip(pos) {
            if p == 0 {
                out.push(Vec::new());
            }
            out.last_mut().unwrap().push(id);
        }
    }
    out.sort();
    out
}

fn real_parts(rows: &[Record]) -> impl Iterator<Item = (Vec<u32>, Vec<u32>)> + '_ {
    rows.iter().map(|r| {
        let n = r
            .tokens("attention_mask")
            .unwrap()
            .iter()
            .filter(|&&m| m == 1)
            .count();
        (
            r.tokens("input_ids").unwrap()[..n].to_vec(),
            r.tokens("position_ids").unwrap()[..n].to_vec(),
        )
    })
}

fn py_real_parts(rows: &[Json]) -> impl Iterator<Item = (Vec<u32>, Vec<u32>)> + '_ {
    rows.iter().map(|r| {
        let n = MAX_LENGTH - r["padding_length"].as_u64().unwrap_or(0) as usize;
        (
            u32s(&r["input_ids"])[..n].to_vec(),
            u32s(&r["positions"])[..n].to_vec(),
        )
    })
}

#[test]
fn best_fit_is_decreasing_per_window_where_pythons_is_online() {
    let fx = fixture();
    let docs = docs(&fx, "docs");
    let py_rows = case(&fx, "cases", "best_fit")["rows"].as_array().unwrap();
    let config = PackConfig::new(MAX_LENGTH, PackAlgorithm::BestFit).num_bins(64);
    let rows = pack(&docs, None, config);
    // The same whole documents (oversized ones dropped by both) ...
    let kept: Vec<Vec<u32>> = {
        let mut d: Vec<_> = docs
            .iter()
            .filter(|d| d.len() <= MAX_LENGTH)
            .cloned()
            .collect();
        d.sort();
        d
    };
    assert_eq!(documents(py_real_parts(py_rows)), kept);
    assert_eq!(documents(real_parts(&rows)), kept);
    // ... in fewer rows: best fit decreasing over the window against
    // Python's best fit in arrival order.
    assert_eq!((rows.len(), py_rows.len()), (10, 11));
}

#[test]
fn best_fit_wrap_fills_the_same_rows_with_other_pieces() {
    let fx = fixture();
    let docs = docs(&fx, "docs");
    let py_rows = case(&fx, "cases", "best_fit_wrap")["rows"]
        .as_array()
        .unwrap();
    let config = PackConfig::new(MAX_LENGTH, PackAlgorithm::BestFitWrap).num_bins(4);
    let rows = pack(&docs, None, config);
    let total: usize = docs.iter().map(Vec::len).sum();
    let mut all: Vec<u32> = docs.concat();
    all.sort();
    // Both keep every token, in full rows but the last ...
    let ours: Vec<Vec<u32>> = real_parts(&rows).map(|p| p.0).collect();
    let python: Vec<Vec<u32>> = py_real_parts(py_rows).map(|p| p.0).collect();
    for packed in [ours, python] {
        assert_eq!(packed.len(), total.div_ceil(MAX_LENGTH));
        assert!(
            packed[..packed.len() - 1]
                .iter()
                .all(|r| r.len() == MAX_LENGTH)
        );
        let mut t: Vec<u32> = packed.concat();
        t.sort();
        assert_eq!(t, all);
    }
    // ... but Python cuts a long document into rows of its own as it
    // arrives and splits the shortest candidate, ours splits the oldest.
    assert_ne!(
        rows[0].tokens("input_ids").unwrap(),
        u32s(&py_rows[0]["input_ids"])
    );
    assert_eq!(u32s(&py_rows[0]["input_ids"]), docs[0][..MAX_LENGTH]);
}

/// A `loss_mask` (as `tokenize_chat` writes it) is cut and joined with the
/// ids, padded with 0, and applied by `to_training`: as Python's.
#[test]
fn loss_masks_travel_through_packing_as_pythons_do() {
    let fx = fixture();
    let docs = docs(&fx, "masked_docs");
    let masks: Vec<Vec<u32>> = fx["masks"].as_array().unwrap().iter().map(u32s).collect();
    assert!(masks.iter().any(|m| m.contains(&0)));
    for (algorithm, config) in [
        (
            "first_fit",
            PackConfig::new(MAX_LENGTH, PackAlgorithm::FirstFit).num_bins(64),
        ),
        (
            "wrap",
            PackConfig::new(MAX_LENGTH, PackAlgorithm::Wrap).drop_remainder(true),
        ),
    ] {
        let py = case(&fx, "masked_cases", algorithm);
        let py_rows = py["rows"].as_array().unwrap();
        let rows = pack(&docs, Some(&masks), config);
        assert_eq!(rows.len(), py_rows.len(), "{algorithm}");
        assert!(py_rows.iter().all(|r| r.get("loss_mask").is_some()));
        for (i, (p, o)) in py_rows.iter().zip(&rows).enumerate() {
            assert_row_eq(p, o, &format!("masked {algorithm} row {i}"));
        }
        let what = format!("masked {algorithm}");
        let batches = py["training"].as_array().unwrap();
        assert_training(batches, &collate(&rows, false), &rows, false, &what);
        let batches = py["training_eos_masked"].as_array().unwrap();
        assert_training(batches, &collate(&rows, true), &rows, true, &what);
    }
}
