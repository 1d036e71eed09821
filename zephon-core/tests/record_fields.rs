//! A record's fields: the digests runs are checked by, the allocations a
//! small record costs, and the map behaviour against `BTreeMap`'s.

use bytes::Bytes;
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use zephon_core::record::{FieldName, Fields, TokenView, TokenWidth};
use zephon_core::{Record, SamplePtr, Value};

/// Counts the allocations of the current thread, so the harness's other
/// threads do not disturb a test.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

fn ptr(shard: u32, sample: u64, lane: u32) -> SamplePtr {
    SamplePtr {
        dataset: 1,
        shard,
        sample,
        lane,
    }
}

/// Run checksums are sums of record digests: these values were computed
/// when fields were a `BTreeMap`, and must not move.
#[test]
fn digests_are_those_of_the_tree_map() {
    let mut mixed = Record::new()
        .with("text", "hello world")
        .with("id", 42i64)
        .with("a", Value::Null)
        .with("z", Value::Float(2.5))
        .with("b", Value::Bool(true))
        .with("tok", vec![1u32, 2, 70_000])
        .with("bytes", Value::Bytes(Bytes::from_static(b"\x00\x01\xff")))
        .with("j", Value::Json(serde_json::json!({"k": [1, 2], "s": "x"})));
    mixed.lane = 3;
    mixed.lineage.push(ptr(2, 7, 3));
    mixed.lineage.push(ptr(5, 11, 3));
    let many = (0..40)
        .rev()
        .fold(Record::new(), |r, i| r.with(format!("k{i:02}"), i as i64));
    let view = TokenView::new(Bytes::from_static(&[1, 0, 2, 0, 3, 0]), TokenWidth::U16).unwrap();
    let dup = Record::from_fields([
        ("x", Value::Int(1)),
        ("y", Value::Int(2)),
        ("x", Value::Int(3)),
    ]);
    assert_eq!(mixed.digest(), 0x42600ccab3e2502c);
    assert_eq!(many.digest(), 0x2f9d9f85a30aa2a1);
    let tokens = Record::new().with("tokens", Value::TokenView(view));
    assert_eq!(tokens.digest(), 0xdbf0a110ad635dcf);
    assert_eq!(Record::new().digest(), 0xa706dd2f4d197e6f);
    assert_eq!(dup.digest(), 0x6ad1babc60e77cdd);
    assert_eq!(format!("{:?}", dup.fields), r#"{"x": Int(3), "y": Int(2)}"#);
}

/// A reader's record of one field, with its name from the schema, holds
/// it in place: no allocation to make it, change it or drop it; a record of
/// two fields makes one.
#[test]
fn records_of_one_field_allocate_nothing_for_it() {
    let (id, text) = (FieldName::from("id"), FieldName::from("text"));
    let body = Bytes::from_static(b"shared shard bytes");
    let before = allocations();
    for i in 0..100 {
        let mut r = Record::new().with(id.clone(), Value::Int(i));
        r.set(id.clone(), Value::Int(i + 1));
        assert_eq!(r.get("id"), Some(&Value::Int(i + 1)));
        let other = Record::from_fields([(text.clone(), Value::Bytes(body.clone()))]);
        assert_eq!(other.fields.len(), 1);
        std::hint::black_box((r, other));
    }
    assert_eq!(allocations() - before, 0);
    let before = allocations();
    let two = Record::from_fields([
        (text.clone(), Value::Bytes(body.clone())),
        (id.clone(), Value::Int(1)),
    ]);
    assert_eq!(allocations() - before, 1);
    assert_eq!(two.fields.keys().collect::<Vec<_>>(), [&id, &text]);
    // Copies likewise: none for one field, one block for two.
    let one = Record::new().with(id.clone(), Value::Int(7));
    let before = allocations();
    let copies = (one.clone(), two.clone());
    assert_eq!(allocations() - before, 1);
    assert_eq!(copies, (one, two));
}

/// A record of thousands of fields built at once, in reverse order, with
/// every name twice: name order, last value of each name.
#[test]
fn many_fields_in_any_order_keep_name_order_and_the_last_value() {
    let n = 5000;
    let fields: Fields = (0..2 * n)
        .rev()
        .map(|i| {
            (
                FieldName::from(format!("f{:05}", i % n)),
                Value::Int(i as i64),
            )
        })
        .collect();
    assert_eq!(fields.len(), n);
    for (k, (name, v)) in fields.iter().enumerate() {
        assert_eq!(name.as_str(), format!("f{k:05}"));
        // Written in reverse: the last write of name k is value k.
        assert_eq!(v, &Value::Int(k as i64));
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u8, i64),
    Remove(u8),
    Extend(Vec<(u8, i64)>),
    Retain(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..24, any::<i64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        (0u8..24).prop_map(Op::Remove),
        proptest::collection::vec((0u8..24, any::<i64>()), 0..12).prop_map(Op::Extend),
        (1u8..5).prop_map(Op::Retain),
    ]
}

fn name(k: u8) -> FieldName {
    // Names of several lengths, so text order differs from number order.
    FieldName::from("k".repeat(1 + k as usize % 3) + &k.to_string())
}

proptest! {
    /// Any sequence of changes gives what a `BTreeMap` gives: the same
    /// returned values, the same fields in the same order.
    #[test]
    fn behaves_as_a_tree_map(ops in proptest::collection::vec(op(), 0..40)) {
        let mut f = Fields::new();
        let mut m: BTreeMap<FieldName, Value> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Insert(k, v) => {
                    prop_assert_eq!(f.insert(name(k), Value::Int(v)), m.insert(name(k), Value::Int(v)));
                }
                Op::Remove(k) => prop_assert_eq!(f.remove(&name(k)), m.remove(&*name(k))),
                Op::Extend(kv) => {
                    let kv: Vec<(FieldName, Value)> =
                        kv.into_iter().map(|(k, v)| (name(k), Value::Int(v))).collect();
                    f.extend(kv.clone());
                    m.extend(kv);
                }
                Op::Retain(d) => {
                    let keep = |v: &Value| v.as_int().is_some_and(|i| i % d as i64 != 0);
                    f.retain(|_, v| keep(v));
                    m.retain(|_, v| keep(v));
                }
            }
            prop_assert_eq!(f.len(), m.len());
            prop_assert!(f.iter().eq(m.iter()));
            let copy = f.clone();
            prop_assert!(copy.iter().eq(f.iter()));
            for k in 0..24 {
                prop_assert_eq!(f.get(&name(k)), m.get(&*name(k)));
                prop_assert_eq!(f.contains_key(&name(k)), m.contains_key(&*name(k)));
            }
            prop_assert_eq!(format!("{f:?}"), format!("{m:?}"));
        }
        let owned: Vec<(FieldName, Value)> = f.into_iter().collect();
        prop_assert_eq!(owned, m.into_iter().collect::<Vec<_>>());
    }
}
