//! The direct JSONL line parser: a top-level object deserialized straight
//! into a record's fields, keys into the shard's names, values as
//! [`Value::from_json`] makes them, strings without escapes as views of the
//! shard's bytes where the line is a slice of them.

use crate::format::text::text_view;
use bytes::Bytes;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use zephon_core::Value;
use zephon_core::record::{ByteString, FieldName, Fields, Schema};

/// Deserializes a top-level JSON object straight into a record's fields,
/// with no intermediate `serde_json::Map` and no owned key per field: keys
/// are looked up in the shard's [`Schema`] while still borrowed from the
/// line. Each value is what the general parse and [`Value::from_json`] give
/// ([`ValueSeed`]), except that a string without escapes inside `base` (the
/// shard's bytes, when the line is a slice of them) is a view of it. A
/// repeated key keeps its last value, as `serde_json::Map` does.
pub(super) struct RecordSeed<'a> {
    pub(super) names: Option<&'a Schema>,
    pub(super) base: Option<&'a Bytes>,
}

impl<'de> DeserializeSeed<'de> for RecordSeed<'_> {
    type Value = Fields;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        de: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RecordSeed<'_> {
    type Value = Fields;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        // Collected, not inserted one by one: the fields are sorted once at
        // the end, so a line of many keys in any order costs `n log n`.
        let mut failed = None;
        let fields = std::iter::from_fn(|| {
            let next = map
                .next_key_seed(KeySeed { names: self.names })
                .and_then(|k| match k {
                    Some(k) => map
                        .next_value_seed(ValueSeed { base: self.base })
                        .map(|v| Some((k, v))),
                    None => Ok(None),
                });
            next.unwrap_or_else(|e| {
                failed = Some(e);
                None
            })
        })
        .collect::<Fields>();
        match failed {
            Some(e) => Err(e),
            None => Ok(fields),
        }
    }
}

/// A top-level key as a shared [`FieldName`], read without an owned copy
/// when the key has no escapes.
struct KeySeed<'a> {
    names: Option<&'a Schema>,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = FieldName;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        de: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = FieldName;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<FieldName, E> {
        Ok(match self.names {
            Some(names) => names.name(s),
            None => s.into(),
        })
    }

    fn visit_string<E: serde::de::Error>(self, s: String) -> std::result::Result<FieldName, E> {
        Ok(match self.names {
            Some(names) => names.name(&s),
            None => s.into(),
        })
    }
}

/// One field's value: what `serde_json::Value` and [`Value::from_json`]
/// give for the same JSON, without building the `serde_json::Value` for a
/// scalar, and a string the parser borrows from `base` (no escapes: its
/// bytes are the value's) as a [`Value::TextView`] of `base`.
struct ValueSeed<'a> {
    base: Option<&'a Bytes>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        de: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> Result<Value, E> {
        Ok(Value::Int(i))
    }

    /// As `Number::as_i64`, then `as_f64`: past `i64::MAX` a float.
    fn visit_u64<E>(self, u: u64) -> Result<Value, E> {
        Ok(i64::try_from(u).map_or(Value::Float(u as f64), Value::Int))
    }

    /// As `serde_json::Value`: a number that is not finite is `null`.
    fn visit_f64<E>(self, f: f64) -> Result<Value, E> {
        Ok(if f.is_finite() {
            Value::Float(f)
        } else {
            Value::Null
        })
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Value, E> {
        Ok(self
            .base
            .and_then(|base| view(base, s))
            .map_or_else(|| Value::Text(s.to_owned()), Value::TextView))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::Text(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::Text(s))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        let v = serde::Deserialize::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        Ok(Value::Json(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        let v = serde::Deserialize::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Value::Json(v))
    }
}

/// `s` as a view of `base`, when `s` lies inside it (a string the parser
/// borrowed from a line of the shard); `None` otherwise.
fn view(base: &Bytes, s: &str) -> Option<ByteString> {
    let (start, at) = (base.as_ptr() as usize, s.as_ptr() as usize);
    let from = at.checked_sub(start)?;
    let to = from.checked_add(s.len()).filter(|&to| to <= base.len())?;
    // Checked again as UTF-8 (the parser checked it already; the bytes are
    // in the cache), which keeps this free of an `unsafe` of its own.
    text_view(base.slice(from..to)).ok()
}
