//! How an MDS column's bytes become a [`Value`]: the decoder of each
//! encoding, chosen once per shard.

use super::FormatResult;
use crate::format::text::text_view;
use bytes::Bytes;
use zephon_core::Value;

/// How a column's bytes become a [`Value`] (the encodings of the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Text,
    Bytes,
    I64,
    I32,
    I16,
    I8,
    U64,
    U32,
    U16,
    U8,
    F64,
    F32,
    F16,
    StrInt,
    StrFloat,
    Json,
}

impl Kind {
    pub(super) fn of(encoding: &str) -> Kind {
        match encoding {
            "str" | "str_decimal" => Kind::Text,
            "int" | "int64" => Kind::I64,
            "int32" => Kind::I32,
            "int16" => Kind::I16,
            "int8" => Kind::I8,
            "uint64" => Kind::U64,
            "uint32" => Kind::U32,
            "uint16" => Kind::U16,
            "uint8" => Kind::U8,
            "float64" => Kind::F64,
            "float32" => Kind::F32,
            "float16" => Kind::F16,
            "str_int" => Kind::StrInt,
            "str_float" => Kind::StrFloat,
            "json" => Kind::Json,
            // `bytes`, and what stays bytes (`pkl`, `jpeg`, `ndarray...`).
            _ => Kind::Bytes,
        }
    }

    /// Streaming's name for it, for error messages.
    fn name(self) -> &'static str {
        match self {
            Kind::Text => "str",
            Kind::Bytes => "bytes",
            Kind::I64 => "int64",
            Kind::I32 => "int32",
            Kind::I16 => "int16",
            Kind::I8 => "int8",
            Kind::U64 => "uint64",
            Kind::U32 => "uint32",
            Kind::U16 => "uint16",
            Kind::U8 => "uint8",
            Kind::F64 => "float64",
            Kind::F32 => "float32",
            Kind::F16 => "float16",
            Kind::StrInt => "str_int",
            Kind::StrFloat => "str_float",
            Kind::Json => "json",
        }
    }
}

fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
    let exp = ((bits >> 10) & 0x1f) as i32;
    let frac = (bits & 0x3ff) as f64;
    sign * match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

/// The value of a column of kind `kind` from its bytes `b`; `shared` gives
/// the same bytes as a [`Bytes`] sharing the shard's buffer, for `bytes`
/// and `str` columns (text is checked as UTF-8 and shared, not copied).
#[inline]
pub(super) fn decode_value(
    kind: Kind,
    b: &[u8],
    shared: impl FnOnce() -> Bytes,
) -> FormatResult<Value> {
    let text = || std::str::from_utf8(b).map_err(|e| format!("not UTF-8: {e}"));
    let fixed = |n: usize| -> FormatResult<&[u8]> {
        (b.len() == n)
            .then_some(b)
            .ok_or_else(|| format!("{} needs {n} bytes, found {}", kind.name(), b.len()))
    };
    Ok(match kind {
        Kind::Text => Value::TextView(text_view(shared()).map_err(|e| format!("not UTF-8: {e}"))?),
        Kind::Bytes => Value::Bytes(shared()),
        Kind::I64 => Value::Int(i64::from_le_bytes(fixed(8)?.try_into().expect("8"))),
        Kind::I32 => Value::Int(i32::from_le_bytes(fixed(4)?.try_into().expect("4")) as i64),
        Kind::I16 => Value::Int(i16::from_le_bytes(fixed(2)?.try_into().expect("2")) as i64),
        Kind::I8 => Value::Int(fixed(1)?[0] as i8 as i64),
        Kind::U64 => {
            let v = u64::from_le_bytes(fixed(8)?.try_into().expect("8"));
            Value::Int(i64::try_from(v).map_err(|_| format!("uint64 {v} exceeds i64"))?)
        }
        Kind::U32 => Value::Int(u32::from_le_bytes(fixed(4)?.try_into().expect("4")) as i64),
        Kind::U16 => Value::Int(u16::from_le_bytes(fixed(2)?.try_into().expect("2")) as i64),
        Kind::U8 => Value::Int(fixed(1)?[0] as i64),
        Kind::F64 => Value::Float(f64::from_le_bytes(fixed(8)?.try_into().expect("8"))),
        Kind::F32 => Value::Float(f32::from_le_bytes(fixed(4)?.try_into().expect("4")) as f64),
        Kind::F16 => Value::Float(f16_to_f64(u16::from_le_bytes(
            fixed(2)?.try_into().expect("2"),
        ))),
        Kind::StrInt => Value::Int(text()?.trim().parse().map_err(|e| format!("{e}"))?),
        Kind::StrFloat => Value::Float(text()?.trim().parse().map_err(|e| format!("{e}"))?),
        Kind::Json => Value::from_json(serde_json::from_slice(b).map_err(|e| format!("{e}"))?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_floats() {
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0xc000), -2.0);
        assert_eq!(f16_to_f64(0x3800), 0.5);
    }
}
