//! Records: named fields plus the lineage (source pointers) they came from.

use crate::pointer::{Identity, LaneId, Laned, SamplePtr};
use bytes::Bytes;
pub use bytestring::ByteString;
use smallvec::SmallVec;
use std::fmt;

mod chunks;
pub mod fields;
mod name;
mod sorted;
mod tokens;

pub use chunks::PointerChunks;
pub use fields::Fields;
pub use name::{FieldName, Schema};
pub use sorted::SortedNames;
pub use tokens::{TokenView, TokenWidth, Tokens};

/// One field value.
///
/// Token ids come in two forms that compare, digest and read alike:
/// [`Value::Tokens`] (owned, what operators produce) and
/// [`Value::TokenView`] (ids in their stored width over a shard's bytes, what
/// token-file readers produce); [`Value::token_ids`] reads both, and both
/// print as `Tokens([..])`. Text likewise: [`Value::Text`] (owned) and
/// [`Value::TextView`] (checked UTF-8 sharing a shard's buffer) compare,
/// digest and read alike ([`Value::as_text`]), and both print as
/// `Text(..)`.
#[derive(Clone)]
pub enum Value {
    /// JSON `null` or a missing value.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// Text (a document, a caption), owned.
    Text(String),
    /// Text read in place: UTF-8 checked once, sharing a shard's buffer (a
    /// memory map, a cached block, a decoded column) rather than copied.
    TextView(ByteString),
    /// Token ids, owned.
    Tokens(Vec<u32>),
    /// Token ids read in place from a shard's buffer (`u16` or `u32`).
    TokenView(TokenView),
    /// Raw bytes (an image, a serialized blob).
    Bytes(Bytes),
    /// Any other JSON value (objects, arrays).
    Json(serde_json::Value),
}

impl Value {
    /// Converts a JSON value: strings become [`Value::Text`], numbers
    /// [`Value::Int`] or [`Value::Float`], objects and arrays stay JSON.
    pub fn from_json(v: serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(b),
            serde_json::Value::String(s) => Value::Text(s),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            other => Value::Json(other),
        }
    }

    /// The text, if this is [`Value::Text`] or [`Value::TextView`].
    ///
    /// ```
    /// use bytes::Bytes;
    /// use zephon_core::Value;
    /// use zephon_core::record::ByteString;
    /// let shard = Bytes::from_static(b"{hello}");
    /// let v = Value::TextView(ByteString::try_from(shard.slice(1..6)).unwrap());
    /// assert_eq!(v.as_text(), Some("hello"));
    /// assert_eq!(v, Value::Text("hello".into()));
    /// assert!(ByteString::try_from(Bytes::from_static(&[0xff])).is_err());
    /// ```
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            Value::TextView(s) => Some(s),
            _ => None,
        }
    }

    /// Owned text: moved out of [`Value::Text`], copied out of a
    /// [`Value::TextView`]; `Err(self)` for other values.
    pub fn into_text(self) -> Result<String, Value> {
        match self {
            Value::Text(s) => Ok(s),
            Value::TextView(s) => Ok(String::from(&*s)),
            other => Err(other),
        }
    }

    /// The token ids as a `u32` slice, when they are stored so: owned
    /// ([`Value::Tokens`]) or an aligned `u32` view. A `u16` view is not a
    /// `u32` slice; [`token_ids`](Value::token_ids) reads every width.
    pub fn as_tokens(&self) -> Option<&[u32]> {
        self.token_ids().and_then(|t| t.as_u32_slice())
    }

    /// The token ids in any stored width, if this is [`Value::Tokens`] or
    /// [`Value::TokenView`].
    ///
    /// ```
    /// use bytes::Bytes;
    /// use zephon_core::Value;
    /// use zephon_core::record::{TokenView, TokenWidth};
    /// let view = TokenView::new(Bytes::from_static(&[1, 0, 2, 0]), TokenWidth::U16).unwrap();
    /// let v = Value::TokenView(view);
    /// assert_eq!(v.token_ids().unwrap(), [1, 2]);
    /// assert_eq!(v.as_tokens(), None);
    /// assert_eq!(v, Value::Tokens(vec![1, 2]));
    /// ```
    pub fn token_ids(&self) -> Option<Tokens<'_>> {
        match self {
            Value::Tokens(t) => Some(Tokens::U32(t)),
            Value::TokenView(v) => Some(Tokens::View(v)),
            _ => None,
        }
    }

    /// Owned token ids: moved out of [`Value::Tokens`], copied out of a
    /// [`Value::TokenView`]; `Err(self)` for other values.
    pub fn into_token_vec(self) -> Result<Vec<u32>, Value> {
        match self {
            Value::Tokens(t) => Ok(t),
            Value::TokenView(v) => Ok(v.tokens().to_vec()),
            other => Err(other),
        }
    }

    /// The integer, if this is [`Value::Int`].
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The kind of value, for error messages and `inspect`.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Text(_) | Value::TextView(_) => "text",
            Value::Tokens(_) | Value::TokenView(_) => "tokens",
            Value::Bytes(_) => "bytes",
            Value::Json(_) => "json",
        }
    }

    /// Approximate heap size in bytes (for byte counters).
    pub fn byte_len(&self) -> usize {
        match self {
            Value::Text(s) => s.len(),
            Value::TextView(s) => s.len(),
            Value::Tokens(t) => t.len() * 4,
            Value::TokenView(v) => v.bytes().len(),
            Value::Bytes(b) => b.len(),
            Value::Json(j) => j.to_string().len(),
            _ => 8,
        }
    }

    fn digest_into(&self, h: u64) -> u64 {
        use crate::hash::{bytes, combine};
        match self {
            Value::Null => combine(h, 0),
            Value::Bool(b) => combine(combine(h, 1), *b as u64),
            Value::Int(i) => combine(combine(h, 2), *i as u64),
            Value::Float(f) => combine(combine(h, 3), f.to_bits()),
            // Owned text and views of the same text digest alike.
            Value::Text(s) => combine(combine(h, 4), bytes(s.as_bytes())),
            Value::TextView(s) => combine(combine(h, 4), bytes(s.as_bytes())),
            // Owned ids and views of the same ids digest alike.
            Value::Tokens(t) => t.iter().fold(combine(h, 5), |h, &x| combine(h, x as u64)),
            Value::TokenView(v) => v
                .tokens()
                .iter()
                .fold(combine(h, 5), |h, x| combine(h, x as u64)),
            Value::Bytes(b) => combine(combine(h, 6), bytes(b)),
            Value::Json(j) => combine(combine(h, 7), bytes(j.to_string().as_bytes())),
        }
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("Null"),
            Value::Bool(b) => f.debug_tuple("Bool").field(b).finish(),
            Value::Int(i) => f.debug_tuple("Int").field(i).finish(),
            Value::Float(x) => f.debug_tuple("Float").field(x).finish(),
            Value::Text(t) => f.debug_tuple("Text").field(t).finish(),
            Value::TextView(t) => f.debug_tuple("Text").field(&&**t).finish(),
            // Equal ids print alike, whichever form holds them.
            Value::Tokens(_) | Value::TokenView(_) => {
                let t = self.token_ids().expect("a token value");
                f.debug_tuple("Tokens").field(&t).finish()
            }
            Value::Bytes(b) => f.debug_tuple("Bytes").field(b).finish(),
            Value::Json(j) => f.debug_tuple("Json").field(j).finish(),
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        use Value::*;
        match (self, other) {
            (Null, Null) => true,
            (Bool(a), Bool(b)) => a == b,
            (Int(a), Int(b)) => a == b,
            (Float(a), Float(b)) => a == b,
            (Text(_) | TextView(_), Text(_) | TextView(_)) => self.as_text() == other.as_text(),
            (Bytes(a), Bytes(b)) => a == b,
            (Json(a), Json(b)) => a == b,
            _ => match (self.token_ids(), other.token_ids()) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            },
        }
    }
}

impl From<TokenView> for Value {
    fn from(v: TokenView) -> Self {
        Value::TokenView(v)
    }
}

impl From<ByteString> for Value {
    fn from(s: ByteString) -> Self {
        Value::TextView(s)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_owned())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}
impl From<Vec<u32>> for Value {
    fn from(t: Vec<u32>) -> Self {
        Value::Tokens(t)
    }
}

/// Source pointers of a record; one pointer is stored inline, without allocating.
pub type Lineage = SmallVec<[SamplePtr; 1]>;

/// A sample in flight: named fields, the lane it travels in, and its lineage,
/// the source pointers it was made from (one for a fetched record, several for
/// a packed row). Mixture accounting and checkpoint replay read the lineage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    /// The lane this record travels in.
    pub lane: LaneId,
    /// The source samples this record was made from (inline for one).
    pub lineage: Lineage,
    /// Named fields, in name order; the names are shared ([`FieldName`]).
    pub fields: Fields,
}

impl Record {
    /// An empty record with no lineage (lane 0).
    pub fn new() -> Self {
        Self::default()
    }

    /// A record of the given fields, lane 0, no lineage.
    ///
    /// ```
    /// use zephon_core::{Record, Value};
    /// let r = Record::from_fields([("text", Value::from("hello"))]);
    /// assert_eq!(r.text("text"), Some("hello"));
    /// ```
    pub fn from_fields<K: Into<FieldName>>(fields: impl IntoIterator<Item = (K, Value)>) -> Self {
        Record {
            fields: fields.into_iter().map(|(k, v)| (k.into(), v)).collect(),
            ..Record::default()
        }
    }

    /// Builder-style: sets a field.
    pub fn with(mut self, name: impl Into<FieldName>, value: impl Into<Value>) -> Self {
        self.fields.insert(name.into(), value.into());
        self
    }

    /// Sets a field.
    pub fn set(&mut self, name: impl Into<FieldName>, value: impl Into<Value>) {
        self.fields.insert(name.into(), value.into());
    }

    /// A field by name.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.get(name)
    }

    /// Removes and returns a field.
    pub fn take(&mut self, name: &str) -> Option<Value> {
        self.fields.remove(name)
    }

    /// A text field by name.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(Value::as_text)
    }

    /// A token field by name, as a `u32` slice when stored so (see
    /// [`Value::as_tokens`]); [`token_ids`](Record::token_ids) reads every
    /// width.
    pub fn tokens(&self, name: &str) -> Option<&[u32]> {
        self.get(name).and_then(Value::as_tokens)
    }

    /// A token field by name, in any stored width.
    pub fn token_ids(&self, name: &str) -> Option<Tokens<'_>> {
        self.get(name).and_then(Value::token_ids)
    }

    /// The first source pointer, if any.
    pub fn source(&self) -> Option<&SamplePtr> {
        self.lineage.first()
    }

    /// Approximate payload size in bytes.
    pub fn byte_len(&self) -> usize {
        self.fields
            .iter()
            .map(|(k, v)| k.len() + v.byte_len())
            .sum()
    }

    /// A stable 64-bit digest of lane, lineage and fields, for checksums of
    /// whole runs (equal digests across runs mean equal data).
    pub fn digest(&self) -> u64 {
        use crate::hash::{bytes, combine};
        let mut h = combine(0, self.lane as u64);
        for p in &self.lineage {
            h = combine(h, p.identity());
        }
        for (k, v) in &self.fields {
            h = v.digest_into(combine(h, bytes(k.as_bytes())));
        }
        h
    }
}

impl Laned for Record {
    fn lane(&self) -> LaneId {
        self.lane
    }
}

impl Identity for Record {
    /// The identity of the lineage; a record without lineage falls back to
    /// its content digest.
    fn identity(&self) -> u64 {
        if self.lineage.is_empty() {
            return self.digest();
        }
        lineage_identity(&self.lineage)
    }
}

/// The identity of a record with lineage `ptrs` (see [`Identity`] for
/// [`Record`]): a checkpoint restore recomputes identities from pointers.
pub fn lineage_identity(ptrs: &[crate::pointer::SamplePtr]) -> u64 {
    ptrs.iter().fold(0xD1B5_4A32_D192_ED03, |h, p| {
        crate::hash::combine(h, p.identity())
    })
}
