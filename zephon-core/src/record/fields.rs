//! [`Fields`]: a record's named values, kept sorted by name.

use super::{FieldName, Value};
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::fmt;
use std::iter::FusedIterator;

/// Fields held in the record itself; more move to one heap allocation.
/// One, not two: records are moved whole through every stage, and the
/// bytes of a second inline field cost more in moves than the one
/// allocation a record of two fields makes (measured on `bench engine` and
/// `bench formats`).
const INLINE: usize = 1;

type Entries = SmallVec<[(FieldName, Value); INLINE]>;

/// A record's fields: a map from [`FieldName`] to [`Value`], kept as one
/// vector sorted by name.
///
/// Iteration is in name order (what [`Record::digest`](super::Record::digest)
/// hashes), lookups are binary searches, and a single field lives in the
/// record itself: a record of one field allocates nothing for it, one of
/// more fields one exact-size block (a tree map allocates a node of several
/// hundred bytes per record).
/// Building from many fields at once ([`FromIterator`], [`Extend`]) sorts
/// once, so a record of thousands of fields costs `n log n`, not `n²`; a
/// repeated name keeps its last value, as a map's `insert` would.
///
/// ```
/// use zephon_core::record::Fields;
/// use zephon_core::Value;
/// let mut f: Fields = [("text".into(), Value::from("hi")), ("id".into(), Value::Int(1))]
///     .into_iter()
///     .collect();
/// assert_eq!(f.insert("id".into(), Value::Int(2)), Some(Value::Int(1)));
/// assert_eq!(f.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["id", "text"]);
/// assert_eq!(f.get("text").and_then(Value::as_text), Some("hi"));
/// assert_eq!(f.remove("text"), Some(Value::from("hi")));
/// assert_eq!(format!("{f:?}"), r#"{"id": Int(2)}"#);
/// ```
#[derive(Default, PartialEq)]
pub struct Fields {
    entries: Entries,
}

impl Clone for Fields {
    /// A record of one field is copied in one write, without the generic
    /// extend a small vector's clone goes through (checks for spilling and
    /// growth per element); more fields take one exact-size block.
    #[inline(always)]
    fn clone(&self) -> Self {
        let entries = match self.entries.as_slice() {
            [] => Entries::new(),
            [one] => Entries::from_buf([one.clone()]),
            many => {
                let mut v = Vec::with_capacity(many.len());
                v.extend_from_slice(many);
                Entries::from_vec(v)
            }
        };
        Fields { entries }
    }
}

impl Fields {
    /// No fields.
    pub fn new() -> Self {
        Self::default()
    }

    /// No fields, with room for `n` without reallocating.
    pub fn with_capacity(n: usize) -> Self {
        Fields {
            entries: SmallVec::with_capacity(n),
        }
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no field.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Where `name` is (`Ok`), or where it would go (`Err`).
    fn find(&self, name: &str) -> Result<usize, usize> {
        // Readers add fields in one fixed order, often the sorted one: a
        // name after the last is placed with one comparison.
        match self.entries.last() {
            None => return Err(0),
            Some((last, _)) if last.as_str() < name => return Err(self.entries.len()),
            _ => {}
        }
        self.entries.binary_search_by(|(k, _)| k.as_str().cmp(name))
    }

    /// The value of field `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.find(name).ok().map(|i| &self.entries[i].1)
    }

    /// The value of field `name`, to change in place.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Value> {
        self.find(name).ok().map(|i| &mut self.entries[i].1)
    }

    /// The stored name and the value of field `name`.
    pub fn get_key_value(&self, name: &str) -> Option<(&FieldName, &Value)> {
        self.find(name).ok().map(|i| {
            let (k, v) = &self.entries[i];
            (k, v)
        })
    }

    /// Whether field `name` is present.
    pub fn contains_key(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }

    /// Sets field `name`; returns the value it replaced, if any.
    pub fn insert(&mut self, name: FieldName, value: Value) -> Option<Value> {
        match self.find(&name) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            // Readers add fields in name order: a push, not a shift.
            Err(i) if i == self.entries.len() => {
                self.entries.push((name, value));
                None
            }
            Err(i) => {
                self.entries.insert(i, (name, value));
                None
            }
        }
    }

    /// Appends a field whose name sorts after every name here: for
    /// [`try_from_sorted`](Fields::try_from_sorted), whose names are sorted
    /// once.
    #[inline]
    pub(super) fn push_in_order(&mut self, name: FieldName, value: Value) {
        debug_assert!(self.entries.last().is_none_or(|(last, _)| *last < name));
        self.entries.push((name, value));
    }

    /// Room for `n` more fields without reallocating, and no more.
    pub(super) fn reserve_exact(&mut self, n: usize) {
        self.entries.reserve_exact(n);
    }

    /// Replaces the value of the last field: for
    /// [`try_from_sorted`](Fields::try_from_sorted), of a name given twice.
    #[inline]
    pub(super) fn replace_last(&mut self, value: Value) {
        if let Some((_, v)) = self.entries.last_mut() {
            *v = value;
        }
    }

    /// Removes field `name` and returns its value.
    pub fn remove(&mut self, name: &str) -> Option<Value> {
        self.find(name).ok().map(|i| self.entries.remove(i).1)
    }

    /// Keeps only the fields for which `keep` returns `true`.
    pub fn retain(&mut self, mut keep: impl FnMut(&FieldName, &mut Value) -> bool) {
        self.entries.retain(|(k, v)| keep(k, v));
    }

    /// Removes every field.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The fields in name order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.entries.iter())
    }

    /// The fields in name order, values changeable in place.
    pub fn iter_mut(&mut self) -> IterMut<'_> {
        IterMut(self.entries.iter_mut())
    }

    /// The names, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &FieldName> + ExactSizeIterator {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The values, in name order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Value> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }

    /// The values, in name order, changeable in place.
    pub fn values_mut(
        &mut self,
    ) -> impl DoubleEndedIterator<Item = &mut Value> + ExactSizeIterator {
        self.entries.iter_mut().map(|(_, v)| v)
    }

    /// The fields as a slice of `(name, value)`, sorted by name, no name twice.
    pub fn as_slice(&self) -> &[(FieldName, Value)] {
        &self.entries
    }

    /// Restores the order after fields were appended unsorted: one stable
    /// sort, then of each run of equal names the last (most recent) value.
    fn normalize(&mut self) {
        if self.entries.windows(2).all(|w| w[0].0 < w[1].0) {
            return;
        }
        self.entries.sort_by(|a, b| a.0.cmp(&b.0));
        // `dedup_by` hands (later, kept): the later value moves into the
        // kept slot, so the last one written wins.
        self.entries.dedup_by(|later, kept| {
            if later.0.cmp(&kept.0) == Ordering::Equal {
                std::mem::swap(&mut later.1, &mut kept.1);
                true
            } else {
                false
            }
        });
    }
}

impl fmt::Debug for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FromIterator<(FieldName, Value)> for Fields {
    fn from_iter<I: IntoIterator<Item = (FieldName, Value)>>(iter: I) -> Self {
        let mut f = Fields::new();
        f.extend(iter);
        f
    }
}

impl Extend<(FieldName, Value)> for Fields {
    fn extend<I: IntoIterator<Item = (FieldName, Value)>>(&mut self, iter: I) {
        self.entries.extend(iter);
        self.normalize();
    }
}

impl IntoIterator for Fields {
    type Item = (FieldName, Value);
    type IntoIter = IntoIter;
    fn into_iter(self) -> IntoIter {
        IntoIter(self.entries.into_iter())
    }
}

impl<'a> IntoIterator for &'a Fields {
    type Item = (&'a FieldName, &'a Value);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl<'a> IntoIterator for &'a mut Fields {
    type Item = (&'a FieldName, &'a mut Value);
    type IntoIter = IterMut<'a>;
    fn into_iter(self) -> IterMut<'a> {
        self.iter_mut()
    }
}

/// The fields of a [`Fields`] in name order, borrowed ([`Fields::iter`]).
#[derive(Clone, Debug)]
pub struct Iter<'a>(std::slice::Iter<'a, (FieldName, Value)>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a FieldName, &'a Value);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k, v))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(k, v)| (k, v))
    }
}

impl ExactSizeIterator for Iter<'_> {}
impl FusedIterator for Iter<'_> {}

/// The fields of a [`Fields`] in name order, values mutable
/// ([`Fields::iter_mut`]).
#[derive(Debug)]
pub struct IterMut<'a>(std::slice::IterMut<'a, (FieldName, Value)>);

impl<'a> Iterator for IterMut<'a> {
    type Item = (&'a FieldName, &'a mut Value);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (&*k, v))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for IterMut<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(k, v)| (&*k, v))
    }
}

impl ExactSizeIterator for IterMut<'_> {}
impl FusedIterator for IterMut<'_> {}

/// The fields of a [`Fields`] in name order, moved out (its
/// [`IntoIterator`]).
pub struct IntoIter(smallvec::IntoIter<[(FieldName, Value); INLINE]>);

impl fmt::Debug for IntoIter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.as_slice().iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

impl Iterator for IntoIter {
    type Item = (FieldName, Value);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for IntoIter {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back()
    }
}

impl ExactSizeIterator for IntoIter {}
impl FusedIterator for IntoIter {}
