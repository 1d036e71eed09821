//! Collation of packed rows into training batches.

use zephon_core::{Batch, Record, Value};
use zephon_ops::{IGNORE_INDEX, IdType, PositionMode, TrainingConfig};

fn row(ids: &[u32], segs: &[u32]) -> Record {
    Record::new()
        .with("input_ids", Value::Tokens(ids.to_vec()))
        .with("segment_ids", Value::Tokens(segs.to_vec()))
}

#[test]
fn two_packed_rows_with_padding() {
    let batch = Batch {
        lane: 2,
        index: 9,
        items: vec![row(&[1, 2, 3, 4], &[1, 1, 2, 2]), row(&[5, 6], &[1, 1])],
        cut: None,
    };
    let b = TrainingConfig::new(4)
        .pad_token_id(99)
        .id_type(IdType::I64)
        .collate(&batch)
        .unwrap();
    assert_eq!((b.lane, b.index, b.shape()), (2, 9, [2, 4]));
    assert_eq!(b.input_ids.as_i64().unwrap(), &[1, 2, 3, 4, 5, 6, 99, 99]);
    let x = IGNORE_INDEX;
    assert_eq!(b.labels, vec![2, x, 4, x, 6, x, x, x]);
    assert_eq!(
        b.loss_mask,
        vec![true, false, true, false, true, false, false, false]
    );
    assert_eq!(b.position_ids, vec![0, 1, 0, 1, 0, 1, 0, 0]);
    assert_eq!(b.segment_ids, vec![1, 1, 2, 2, 1, 1, 0, 0]);
    assert_eq!(
        b.attention_mask,
        vec![true, true, true, true, true, true, false, false]
    );
    assert_eq!(b.cu_seqlens, vec![0, 2, 4, 6, 8]);
    assert_eq!((b.max_seqlen, b.num_tokens()), (2, 6));
}

#[test]
fn rows_without_segments_are_one_document_and_bad_rows_are_named() {
    let batch = Batch {
        lane: 0,
        index: 1,
        items: vec![Record::new().with("input_ids", Value::Tokens(vec![7, 8, 9]))],
        cut: None,
    };
    let b = TrainingConfig::new(3).collate(&batch).unwrap();
    assert_eq!(b.input_ids.as_u32().unwrap(), &[7, 8, 9]);
    assert_eq!(b.labels, vec![8, 9, IGNORE_INDEX]);
    assert_eq!(b.cu_seqlens, vec![0, 3]);
    let err = TrainingConfig::new(2)
        .collate(&batch)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("row 0") && err.contains("index 1") && err.contains("3 tokens"),
        "{err}"
    );
}

fn one_batch(items: Vec<Record>) -> zephon_core::Batch<Record> {
    zephon_core::Batch {
        lane: 0,
        index: 3,
        items,
        cut: None,
    }
}

#[test]
fn eos_mask_loss_masks_predictions_from_eos_only() {
    // Two bracketed documents in one row: [BOS=1, a, EOS=2, BOS=1, b, EOS=2].
    let batch = one_batch(vec![
        Record::new().with("input_ids", Value::Tokens(vec![1, 10, 2, 1, 11, 2])),
    ]);
    let x = IGNORE_INDEX;
    let plain = TrainingConfig::new(7).collate(&batch).unwrap();
    assert_eq!(plain.labels, vec![10, 2, 1, 11, 2, x, x]);
    let masked = TrainingConfig::new(7)
        .eos_mask_loss(2)
        .collate(&batch)
        .unwrap();
    assert_eq!(masked.labels, vec![10, 2, x, 11, 2, x, x]);
    assert_eq!(
        masked.loss_mask,
        masked.labels.iter().map(|&l| l != x).collect::<Vec<_>>()
    );
    assert_eq!(
        (plain.num_valid_tokens(), masked.num_valid_tokens()),
        (5, 4)
    );
    // Padding holds the pad id, never a label, even when it equals the EOS.
    let padded = TrainingConfig::new(7)
        .pad_token_id(2)
        .eos_mask_loss(2)
        .collate(&batch)
        .unwrap();
    assert_eq!(padded.labels, masked.labels);
}

#[test]
fn sequence_positions_number_whole_rows_and_keep_boundaries() {
    let batch = one_batch(vec![
        row(&[1, 2, 3, 4], &[1, 1, 2, 2]),
        row(&[5, 6], &[1, 1]),
    ]);
    let doc = TrainingConfig::new(4).collate(&batch).unwrap();
    let seq = TrainingConfig::new(4)
        .position_mode(PositionMode::Sequence)
        .collate(&batch)
        .unwrap();
    assert_eq!(doc.position_ids, vec![0, 1, 0, 1, 0, 1, 0, 0]);
    assert_eq!(seq.position_ids, vec![0, 1, 2, 3, 0, 1, 2, 3]);
    assert_eq!(
        (seq.cu_seqlens.clone(), seq.labels.clone()),
        (doc.cu_seqlens, doc.labels)
    );
}

#[test]
fn a_loss_mask_field_keeps_labels_of_supervised_tokens_only() {
    let chat = Record::new()
        .with("input_ids", Value::Tokens(vec![7, 8, 9, 10, 11]))
        .with("loss_mask", Value::Tokens(vec![0, 0, 1, 1, 0]));
    let b = TrainingConfig::new(6)
        .collate(&one_batch(vec![chat]))
        .unwrap();
    let x = IGNORE_INDEX;
    // The label of t is token t + 1: kept where the mask of t + 1 is 1.
    assert_eq!(b.labels, vec![x, 9, 10, x, x, x]);
    assert_eq!(b.num_valid_tokens(), 2);
    let bad = Record::new()
        .with("input_ids", Value::Tokens(vec![7, 8, 9]))
        .with("loss_mask", Value::Tokens(vec![0, 1]));
    let e = TrainingConfig::new(6)
        .collate(&one_batch(vec![bad]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("row 0") && e.contains("2 loss mask values for 3 tokens"),
        "{e}"
    );
}

proptest::proptest! {
    /// Masking options only ever remove labels; `num_valid_tokens` counts
    /// the labels left, and positions never change labels.
    #[test]
    fn options_only_remove_labels(
        rows in proptest::collection::vec(proptest::collection::vec(0u32..4, 0..9), 1..4),
        eos in 0u32..4,
    ) {
        let batch = one_batch(rows.iter().map(|r| Record::new().with("input_ids", Value::Tokens(r.clone()))).collect());
        let base = TrainingConfig::new(8).collate(&batch).unwrap();
        let opt = TrainingConfig::new(8).eos_mask_loss(eos).position_mode(PositionMode::Sequence).collate(&batch).unwrap();
        for t in 0..base.labels.len() {
            let kept = opt.labels[t] != IGNORE_INDEX;
            proptest::prop_assert!(!kept || opt.labels[t] == base.labels[t]);
            let from_eos = base.attention_mask[t] && base.input_ids.get(t) == Some(eos as i64);
            proptest::prop_assert_eq!(kept, base.labels[t] != IGNORE_INDEX && !from_eos);
        }
        proptest::prop_assert_eq!(opt.num_valid_tokens(), opt.labels.iter().filter(|&&l| l != IGNORE_INDEX).count());
    }
}
