//! [`SortedNames`]: a fixed set of field names sorted once, so a reader
//! makes each record's fields in the order [`Fields`] keeps them without
//! comparing names.

use super::{FieldName, Fields, Value};
use std::sync::Arc;

/// A fixed set of field names (a shard's columns), sorted once, no name
/// twice, each with its position among the columns as the caller gave
/// them. A reader making every record's fields with
/// [`Fields::try_from_sorted`] lays them out as [`Fields`] keeps them,
/// where [`Fields::insert`] compares the new name with the last one for
/// every field of every record.
///
/// ```
/// use zephon_core::record::{Fields, SortedNames};
/// use zephon_core::Value;
/// // A shard's columns as stored: text, then id.
/// let names = SortedNames::new(["text", "id"]).unwrap();
/// assert_eq!(names.iter().map(|(n, col)| (n.as_str(), col)).collect::<Vec<_>>(), [("id", 1), ("text", 0)]);
/// let stored = [Value::from("hello"), Value::Int(7)];
/// let f = Fields::try_from_sorted(&names, |col| Ok::<_, ()>(stored[col].clone())).unwrap();
/// assert_eq!(format!("{f:?}"), r#"{"id": Int(7), "text": Text("hello")}"#);
/// assert_eq!(f.get("text").and_then(Value::as_text), Some("hello"));
/// // A name given twice: no fixed order, insert the fields instead.
/// assert!(SortedNames::new(["a", "b", "a"]).is_none());
/// ```
#[derive(Clone, Debug, Default)]
pub struct SortedNames {
    /// Each name and its position among the caller's, in name order.
    names: Arc<[(FieldName, usize)]>,
}

impl SortedNames {
    /// `names` in the caller's order (a shard's columns); `None` when a
    /// name is given twice: of such fields the later wins, which
    /// [`Fields::insert`] does.
    pub fn new<N: Into<FieldName>>(names: impl IntoIterator<Item = N>) -> Option<Self> {
        let mut v: Vec<(FieldName, usize)> = names
            .into_iter()
            .enumerate()
            .map(|(at, n)| (n.into(), at))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        if v.windows(2).any(|w| w[0].0 == w[1].0) {
            return None;
        }
        Some(SortedNames { names: v.into() })
    }

    /// Number of names.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there is no name.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Each name, in name order, with its position among the names as
    /// they were given.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&FieldName, usize)> {
        self.names.iter().map(|(n, at)| (n, *at))
    }
}

impl Fields {
    /// The fields named by `names`, the value of each made by `value` from
    /// the name's position as it was given (its column), in name order:
    /// one exact-size allocation for more than one field, no name
    /// compared. The first error stops it.
    pub fn try_from_sorted<E>(
        names: &SortedNames,
        mut value: impl FnMut(usize) -> Result<Value, E>,
    ) -> Result<Fields, E> {
        let mut f = Fields::with_capacity(names.len());
        for (name, at) in names.names.iter() {
            f.push_in_order(name.clone(), value(*at)?);
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fields made in sorted order are the fields inserted one by one,
    /// whatever order the names came in.
    #[test]
    fn made_in_order_they_are_the_inserted_fields() {
        let given = ["m", "b", "zz", "a", "k"];
        let names = SortedNames::new(given).unwrap();
        assert_eq!(names.len(), 5);
        let made =
            Fields::try_from_sorted(&names, |at| Ok::<_, ()>(Value::Int(at as i64))).unwrap();
        let mut inserted = Fields::new();
        for (at, n) in given.iter().enumerate() {
            inserted.insert((*n).into(), Value::Int(at as i64));
        }
        assert_eq!(made, inserted);
        for (at, n) in given.iter().enumerate() {
            assert_eq!(made.get(n), Some(&Value::Int(at as i64)), "{n}");
        }
        // An error stops it and is handed back.
        let err =
            Fields::try_from_sorted(&names, |at| if at == 3 { Err(at) } else { Ok(Value::Null) });
        assert_eq!(err, Err(3));
        assert!(SortedNames::new(Vec::<&str>::new()).unwrap().is_empty());
    }
}
