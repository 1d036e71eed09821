//! [`FieldName`]: a field's name, shared by every record of a shard.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// The name of a record field: a shared string, so the records a shard
/// reader makes point at the names of its schema instead of each holding
/// copies. Cloning is a reference-count increment; ordering, equality and
/// hashing are those of the text, and a `&str` looks a field up
/// ([`Borrow<str>`]).
///
/// ```
/// use std::sync::Arc;
/// use zephon_core::record::FieldName;
/// use zephon_core::{Record, Value};
/// let name = FieldName::from("tokens");
/// let a = Record::new().with(name.clone(), Value::Int(1));
/// let b = Record::new().with(name.clone(), Value::Int(2));
/// let (ka, kb) = (a.fields.keys().next().unwrap(), b.fields.keys().next().unwrap());
/// assert!(FieldName::ptr_eq(ka, kb));
/// assert_eq!(a.get("tokens"), Some(&Value::Int(1)));
/// assert_eq!(name, "tokens");
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldName(Arc<str>);

impl FieldName {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether two names share one allocation (names of one schema do).
    pub fn ptr_eq(a: &FieldName, b: &FieldName) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl Deref for FieldName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for FieldName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for FieldName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for FieldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for FieldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for FieldName {
    fn from(s: &str) -> Self {
        FieldName(s.into())
    }
}

impl From<String> for FieldName {
    fn from(s: String) -> Self {
        FieldName(s.into())
    }
}

impl From<&String> for FieldName {
    fn from(s: &String) -> Self {
        FieldName(s.as_str().into())
    }
}

impl From<Arc<str>> for FieldName {
    fn from(s: Arc<str>) -> Self {
        FieldName(s)
    }
}

impl From<&FieldName> for FieldName {
    fn from(s: &FieldName) -> Self {
        s.clone()
    }
}

impl From<FieldName> for String {
    fn from(n: FieldName) -> Self {
        n.0.as_ref().to_owned()
    }
}

impl PartialEq<str> for FieldName {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for FieldName {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for FieldName {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl serde::Serialize for FieldName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for FieldName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(FieldName::from)
    }
}

/// The names of one shard's fields, made once and handed to every record
/// read from it: [`name`](Schema::name) returns the shared [`FieldName`] for
/// a name seen before and adds it otherwise. Formats with a fixed set of
/// columns build it up front; formats whose records carry their own keys
/// (JSON lines) grow it as they read.
///
/// ```
/// use zephon_core::record::{FieldName, Schema};
/// let s = Schema::new(["id", "text"]);
/// assert!(FieldName::ptr_eq(&s.name("text"), &s.name("text")));
/// assert_eq!(s.name("other"), "other");
/// assert_eq!(s.len(), 3);
/// ```
#[derive(Debug, Default)]
pub struct Schema {
    names: std::sync::RwLock<Vec<FieldName>>,
}

/// Beyond this many distinct names a schema stops remembering new ones:
/// records whose keys are data (not a schema) must not grow it without end.
const MAX_NAMES: usize = 256;

impl Schema {
    /// A schema knowing `names`.
    pub fn new<N: Into<FieldName>>(names: impl IntoIterator<Item = N>) -> Self {
        Schema {
            names: std::sync::RwLock::new(names.into_iter().map(Into::into).collect()),
        }
    }

    /// The shared name `s`.
    pub fn name(&self, s: &str) -> FieldName {
        // A poisoned lock only means another reader panicked mid-insert; the
        // list itself is always whole.
        let names = self.names.read().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = names.iter().find(|n| n.as_str() == s) {
            return n.clone();
        }
        drop(names);
        let mut names = self.names.write().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = names.iter().find(|n| n.as_str() == s) {
            return n.clone();
        }
        let n = FieldName::from(s);
        if names.len() < MAX_NAMES {
            names.push(n.clone());
        }
        n
    }

    /// Number of names known.
    pub fn len(&self) -> usize {
        self.names.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no name is known yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
