//! Collation of packed rows into training batches.

use zephon_core::{Batch, Record, Value};
use zephon_ops::{IGNORE_INDEX, IdType, TrainingConfig};

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
