//! Text read in place ([`Value::TextView`]) is the same value as owned text
//! ([`Value::Text`]) to every reader: equality, digests, printing, kinds.

use bytes::Bytes;
use zephon_core::record::ByteString;
use zephon_core::{Record, Value};

fn view(shard: &Bytes, from: usize, to: usize) -> Value {
    Value::TextView(ByteString::try_from(shard.slice(from..to)).expect("UTF-8"))
}

#[test]
fn a_text_view_digests_compares_and_prints_as_its_owned_text() {
    let shard = Bytes::from("xx héllo wörld yy".to_owned());
    let v = view(&shard, 3, shard.len() - 3);
    let owned = Value::Text("héllo wörld".into());
    let a = Record::new()
        .with("text", v.clone())
        .with("id", Value::Int(1));
    let b = Record::new()
        .with("text", owned.clone())
        .with("id", Value::Int(1));
    assert_eq!(a, b);
    assert_eq!(a.digest(), b.digest());
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_eq!(a.text("text"), Some("héllo wörld"));
    assert_eq!((v.kind(), v.byte_len()), (owned.kind(), owned.byte_len()));
    assert_eq!(v.clone().into_text(), Ok("héllo wörld".to_owned()));
    assert_eq!(Value::Int(3).into_text(), Err(Value::Int(3)));

    // Another text, or the same bytes as another kind, differ.
    let c = Record::new()
        .with("text", view(&shard, 3, 8))
        .with("id", Value::Int(1));
    assert_ne!(a, c);
    assert_ne!(a.digest(), c.digest());
    assert_ne!(v, Value::Bytes(shard.slice(3..shard.len() - 3)));
}

#[test]
fn a_text_view_shares_the_buffer_it_was_cut_from() {
    let shard = Bytes::from(vec![b'a'; 4096]);
    let v = view(&shard, 100, 200);
    let text = v.as_text().expect("text");
    let inside = shard.as_ptr_range();
    assert!(inside.contains(&text.as_ptr()), "a copy, not a view");
}

#[test]
fn bytes_that_are_not_utf8_make_no_view() {
    let shard = Bytes::from_static(&[b'o', b'k', 0xC3]);
    assert!(ByteString::try_from(shard.slice(0..2)).is_ok());
    let err = ByteString::try_from(shard.clone()).unwrap_err();
    assert!(err.to_string().contains("incomplete utf-8"), "{err}");
}
