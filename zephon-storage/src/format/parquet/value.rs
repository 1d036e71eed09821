//! Arrow values to record values: strings -> text, integers -> int,
//! floats -> float, booleans, binary -> bytes, lists of integers -> token
//! ids, anything else -> its display text.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array};
use arrow_array::{LargeStringArray, StringArray, StringViewArray};
use arrow_schema::DataType;
use bytes::Bytes;
use zephon_core::Value;
use zephon_core::record::ByteString;

fn token_ids(a: &dyn Array) -> Option<Vec<u32>> {
    fn conv<T: Copy>(v: &[T], f: impl Fn(T) -> Option<u32>) -> Option<Vec<u32>> {
        v.iter().map(|&x| f(x)).collect()
    }
    if a.null_count() > 0 {
        return None;
    }
    match a.data_type() {
        DataType::UInt8 => conv(a.as_primitive::<UInt8Type>().values(), |x| Some(x as u32)),
        DataType::UInt16 => conv(a.as_primitive::<UInt16Type>().values(), |x| Some(x as u32)),
        DataType::UInt32 => Some(a.as_primitive::<UInt32Type>().values().to_vec()),
        DataType::UInt64 => conv(a.as_primitive::<UInt64Type>().values(), |x| {
            u32::try_from(x).ok()
        }),
        DataType::Int16 => conv(a.as_primitive::<Int16Type>().values(), |x| {
            u32::try_from(x).ok()
        }),
        DataType::Int32 => conv(a.as_primitive::<Int32Type>().values(), |x| {
            u32::try_from(x).ok()
        }),
        DataType::Int64 => conv(a.as_primitive::<Int64Type>().values(), |x| {
            u32::try_from(x).ok()
        }),
        _ => None,
    }
}

fn display(a: &dyn Array, r: usize) -> Value {
    let opts = arrow_cast::display::FormatOptions::default();
    match arrow_cast::display::ArrayFormatter::try_new(a, &opts) {
        Ok(f) => Value::Text(f.value(r).to_string()),
        Err(_) => Value::Null,
    }
}

/// The value of row `r` of column `a` (see the module docs of
/// [`parquet`](super) for the mapping).
pub(super) fn value(a: &dyn Array, r: usize) -> Value {
    if a.is_null(r) {
        return Value::Null;
    }
    match a.data_type() {
        DataType::Boolean => Value::Bool(a.as_boolean().value(r)),
        DataType::Int8 => Value::Int(a.as_primitive::<Int8Type>().value(r) as i64),
        DataType::Int16 => Value::Int(a.as_primitive::<Int16Type>().value(r) as i64),
        DataType::Int32 => Value::Int(a.as_primitive::<Int32Type>().value(r) as i64),
        DataType::Int64 => Value::Int(a.as_primitive::<Int64Type>().value(r)),
        DataType::UInt8 => Value::Int(a.as_primitive::<UInt8Type>().value(r) as i64),
        DataType::UInt16 => Value::Int(a.as_primitive::<UInt16Type>().value(r) as i64),
        DataType::UInt32 => Value::Int(a.as_primitive::<UInt32Type>().value(r) as i64),
        DataType::UInt64 => match i64::try_from(a.as_primitive::<UInt64Type>().value(r)) {
            Ok(v) => Value::Int(v),
            Err(_) => display(a, r),
        },
        DataType::Float32 => Value::Float(a.as_primitive::<Float32Type>().value(r) as f64),
        DataType::Float64 => Value::Float(a.as_primitive::<Float64Type>().value(r)),
        DataType::Utf8 => Value::Text(a.as_string::<i32>().value(r).to_owned()),
        DataType::LargeUtf8 => Value::Text(a.as_string::<i64>().value(r).to_owned()),
        DataType::Utf8View => Value::Text(a.as_string_view().value(r).to_owned()),
        DataType::Binary => Value::Bytes(Bytes::copy_from_slice(a.as_binary::<i32>().value(r))),
        DataType::LargeBinary => {
            Value::Bytes(Bytes::copy_from_slice(a.as_binary::<i64>().value(r)))
        }
        DataType::BinaryView => Value::Bytes(Bytes::copy_from_slice(a.as_binary_view().value(r))),
        DataType::List(_) => match token_ids(a.as_list::<i32>().value(r).as_ref()) {
            Some(t) => Value::Tokens(t),
            None => display(a, r),
        },
        DataType::LargeList(_) => match token_ids(a.as_list::<i64>().value(r).as_ref()) {
            Some(t) => Value::Tokens(t),
            None => display(a, r),
        },
        _ => display(a, r),
    }
}

/// An Arrow buffer as the owner of a [`Bytes`]: the slice's decoded text
/// is then shared by the records read from it, not copied into each.
struct ArrowBytes(arrow_buffer::Buffer);

impl AsRef<[u8]> for ArrowBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

fn shared(values: &arrow_buffer::Buffer) -> Bytes {
    Bytes::from_owner(ArrowBytes(values.clone()))
}

/// Row `r` of string array `a` whose value bytes are `values` (shared),
/// as a view of them. Nothing of the text is read: a shuffled read would
/// otherwise wait for a cache miss per row here, only for the text to be
/// read again where it is used.
fn text_view<O: arrow_array::OffsetSizeTrait>(
    a: &arrow_array::GenericStringArray<O>,
    values: &Bytes,
    r: usize,
) -> Value {
    let o = a.value_offsets();
    let (from, to) = (o[r].as_usize(), o[r + 1].as_usize());
    // SAFETY: each value of an Arrow string array is UTF-8 (the invariant
    // `GenericStringArray::value` relies on the same way; the Parquet reader
    // checks it when it decodes), and `values` holds the array's value
    // bytes, so `from..to` is one whole value.
    Value::TextView(unsafe { ByteString::from_bytes_unchecked(values.slice(from..to)) })
}

/// One column of a decoded slice with its type looked up once, when the
/// slice is decoded, rather than once per value: the common types read
/// straight from their typed arrays, the rest through [`value`].
#[derive(Debug)]
pub(super) enum Column {
    Bool(BooleanArray),
    I32(Int32Array),
    I64(Int64Array),
    F64(Float64Array),
    /// The array and its value bytes, shared by the text views of its rows.
    Utf8(StringArray, Bytes),
    LargeUtf8(LargeStringArray, Bytes),
    Utf8View(StringViewArray),
    Other(ArrayRef),
}

impl Column {
    pub(super) fn new(a: &ArrayRef) -> Column {
        match a.data_type() {
            DataType::Boolean => Column::Bool(a.as_boolean().clone()),
            DataType::Int32 => Column::I32(a.as_primitive::<Int32Type>().clone()),
            DataType::Int64 => Column::I64(a.as_primitive::<Int64Type>().clone()),
            DataType::Float64 => Column::F64(a.as_primitive::<Float64Type>().clone()),
            DataType::Utf8 => {
                let a = a.as_string::<i32>();
                Column::Utf8(a.clone(), shared(a.values()))
            }
            DataType::LargeUtf8 => {
                let a = a.as_string::<i64>();
                Column::LargeUtf8(a.clone(), shared(a.values()))
            }
            DataType::Utf8View => Column::Utf8View(a.as_string_view().clone()),
            _ => Column::Other(a.clone()),
        }
    }

    /// The value of row `r` (below the slice's row count), as [`value`]
    /// gives it.
    pub(super) fn value(&self, r: usize) -> Value {
        fn typed<A: Array>(a: &A, r: usize, v: impl FnOnce(&A) -> Value) -> Value {
            if a.is_null(r) { Value::Null } else { v(a) }
        }
        match self {
            Column::Bool(a) => typed(a, r, |a| Value::Bool(a.value(r))),
            Column::I32(a) => typed(a, r, |a| Value::Int(a.value(r) as i64)),
            Column::I64(a) => typed(a, r, |a| Value::Int(a.value(r))),
            Column::F64(a) => typed(a, r, |a| Value::Float(a.value(r))),
            Column::Utf8(a, values) => typed(a, r, |a| text_view(a, values, r)),
            Column::LargeUtf8(a, values) => typed(a, r, |a| text_view(a, values, r)),
            Column::Utf8View(a) => typed(a, r, |a| Value::Text(a.value(r).to_owned())),
            Column::Other(a) => value(a.as_ref(), r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float32Array, Int16Array};
    use std::sync::Arc;

    /// Each typed column reads what the general conversion reads, nulls
    /// included, for the types read straight and for those that are not.
    #[test]
    fn typed_columns_read_as_the_general_conversion() {
        let columns: Vec<(ArrayRef, Vec<Value>)> = vec![
            (
                Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
                vec![Value::Bool(true), Value::Null, Value::Bool(false)],
            ),
            (
                Arc::new(Int32Array::from(vec![Some(-3), None, Some(4)])),
                vec![Value::Int(-3), Value::Null, Value::Int(4)],
            ),
            (
                Arc::new(Int64Array::from(vec![None, Some(i64::MIN), Some(7)])),
                vec![Value::Null, Value::Int(i64::MIN), Value::Int(7)],
            ),
            (
                Arc::new(Float64Array::from(vec![Some(1.5), Some(-0.25), None])),
                vec![Value::Float(1.5), Value::Float(-0.25), Value::Null],
            ),
            (
                Arc::new(StringArray::from(vec![Some("a"), None, Some("ünï")])),
                vec![Value::from("a"), Value::Null, Value::from("ünï")],
            ),
            (
                Arc::new(LargeStringArray::from(vec![None, Some(""), Some("x")])),
                vec![Value::Null, Value::from(""), Value::from("x")],
            ),
            (
                Arc::new(StringViewArray::from(vec![
                    Some("a string longer than twelve bytes"),
                    Some("short"),
                    None,
                ])),
                vec![
                    Value::from("a string longer than twelve bytes"),
                    Value::from("short"),
                    Value::Null,
                ],
            ),
            (
                // A slice: its offsets point past the start of its values.
                Arc::new(
                    StringArray::from(vec![Some("skipped"), Some("é"), None, Some("z")])
                        .slice(1, 3),
                ),
                vec![Value::from("é"), Value::Null, Value::from("z")],
            ),
            (
                Arc::new(Int16Array::from(vec![Some(5), None, Some(-6)])),
                vec![Value::Int(5), Value::Null, Value::Int(-6)],
            ),
            (
                Arc::new(Float32Array::from(vec![None, Some(2.5), Some(0.5)])),
                vec![Value::Null, Value::Float(2.5), Value::Float(0.5)],
            ),
        ];
        for (a, want) in &columns {
            let typed = Column::new(a);
            for (r, w) in want.iter().enumerate() {
                let v = typed.value(r);
                assert_eq!(&v, w, "{} row {r}", a.data_type());
                if matches!(a.data_type(), DataType::Utf8 | DataType::LargeUtf8) && !a.is_null(r) {
                    assert!(matches!(v, Value::TextView(_)), "a view of the column");
                }
                assert_eq!(&value(a.as_ref(), r), w, "{} row {r}", a.data_type());
            }
        }
    }
}
