//! Token samples are views of the shard's bytes: the right ids in every
//! stored width and at any offset, one shared field name, and a clear error
//! for bytes that are not whole ids.

use bytes::Bytes;
use zephon_core::record::FieldName;
use zephon_core::{Record, Value};
use zephon_storage::format::ShardIndex;
use zephon_storage::format::tokens::{FlatTokens, MegatronIndex, TokenDtype, encode_megatron};

fn key(r: &Record) -> &FieldName {
    r.fields.keys().next().expect("one field")
}

#[test]
fn flat_u16_samples_are_views_sharing_one_name() {
    let mut data = Vec::new();
    let ids: Vec<u32> = (0..12).map(|t| t * 5_003).collect();
    TokenDtype::U16.encode(&ids, &mut data).unwrap();
    let data = Bytes::from(data);
    let f = FlatTokens::open(&data, TokenDtype::U16, 3).unwrap();
    let r = f.decode(&data, &[3, 1]).unwrap();
    assert!(matches!(r[0].get("tokens"), Some(Value::TokenView(_))));
    assert_eq!(r[0].token_ids("tokens").unwrap(), ids[9..12]);
    assert_eq!(r[1].token_ids("tokens").unwrap(), ids[3..6]);
    assert!(FieldName::ptr_eq(key(&r[0]), key(&r[1])));
    // The view reads the shard's buffer, not a copy of it.
    let Some(Value::TokenView(v)) = r[1].get("tokens") else {
        unreachable!()
    };
    assert_eq!(v.bytes().as_ptr(), data[6..].as_ptr());
}

#[test]
fn megatron_views_read_u16_and_i32_ids_at_any_offset() {
    let docs = vec![vec![1, 2, 3], vec![70_000, 0], vec![65_535]];
    let (bin, idx) = encode_megatron(&docs, TokenDtype::I32).unwrap();
    let index = MegatronIndex::open(idx.clone(), bin.len() as u64).unwrap();
    let r = index.decode(&Bytes::from(bin), &[1, 2, 0]).unwrap();
    assert_eq!(r[0].token_ids("tokens").unwrap(), [70_000, 0]);
    assert_eq!(r[1].token_ids("tokens").unwrap(), [65_535]);
    assert_eq!(r[2].token_ids("tokens").unwrap(), [1, 2, 3]);
    assert!(FieldName::ptr_eq(key(&r[0]), key(&r[2])));
    let docs = vec![vec![9], vec![4, 65_535, 7]];
    let (bin, idx) = encode_megatron(&docs, TokenDtype::U16).unwrap();
    let index = MegatronIndex::open(idx.clone(), bin.len() as u64).unwrap();
    let r = index.decode(&Bytes::from(bin), &[1]).unwrap();
    // The sequence starts at byte 2: an offset no u32 read could take.
    assert_eq!(r[0].token_ids("tokens").unwrap(), [4, 65_535, 7]);
    assert_eq!(r[0].token_ids("tokens").unwrap().get(1), Some(65_535));
}

#[test]
fn bad_token_bytes_are_errors_naming_the_sample() {
    let flat = FlatTokens::from_size(8, TokenDtype::U16, 2).unwrap();
    let err = flat
        .decode_range(1, &Bytes::from_static(&[1, 2, 3]))
        .unwrap_err();
    assert!(err.contains("sample 1") && err.contains("3 bytes"), "{err}");
    let err = FlatTokens::from_size(7, TokenDtype::U16, 2).unwrap_err();
    assert!(err.contains("whole number"), "{err}");
    // A seq_len of 0, or past SEQ_LEN (from options or a manifest): a
    // sample of 2^40 tokens was a sample of terabytes.
    for n in [0, 1 << 40] {
        let err = FlatTokens::from_size(1 << 42, TokenDtype::U16, n).unwrap_err();
        assert!(
            err.contains(&format!("seq_len {n} is out of range")),
            "{err}"
        );
    }
    // A truncated buffer: the sample lies past its end.
    let err = flat.decode(&Bytes::from_static(&[0; 6]), &[1]).unwrap_err();
    assert!(
        err.contains("sample 1") && err.contains("past the end"),
        "{err}"
    );
    let (bin, idx) = encode_megatron(&[vec![1], vec![2]], TokenDtype::I32).unwrap();
    let index = MegatronIndex::open(idx.clone(), bin.len() as u64).unwrap();
    let mut bad = bin.clone();
    bad[4..8].copy_from_slice(&(-5i32).to_le_bytes());
    let err = index.decode(&Bytes::from(bad), &[1]).unwrap_err();
    assert!(err.contains("sequence 1") && err.contains("-5"), "{err}");
    let err = index
        .decode(&Bytes::from(bin[..4].to_vec()), &[1])
        .unwrap_err();
    assert!(err.contains("sequence 1"), "{err}");
}
