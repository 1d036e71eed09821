//! Arrow values to record values: strings -> text, integers -> int,
//! floats -> float, booleans, binary -> bytes, lists of integers -> token
//! ids, anything else -> its display text.

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_schema::DataType;
use bytes::Bytes;
use zephon_core::Value;

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
