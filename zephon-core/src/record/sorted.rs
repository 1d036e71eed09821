//! [`SortedNames`]: a fixed set of field names sorted once, so a reader
//! makes each record's fields in the order [`Fields`] keeps them without
//! comparing names.

use super::{FieldName, Fields, Value};
use std::sync::Arc;

/// A fixed set of field names (a shard's columns), sorted once, each with
/// its position among the columns as the caller gave them. A reader making
/// every record's fields with [`Fields::try_from_sorted`] lays them out as
/// [`Fields`] keeps them, where [`Fields::insert`] compares the new name
/// with the last one for every field of every record. Of a name given
/// twice the later column wins, as a map's insert would.
///
/// ```
/// use zephon_core::record::{Fields, SortedNames};
/// use zephon_core::Value;
/// // A shard's columns as stored: text, then id.
/// let names = SortedNames::new(["text", "id"]);
/// assert_eq!(names.iter().map(|(n, col)| (n.as_str(), col)).collect::<Vec<_>>(), [("id", 1), ("text", 0)]);
/// let stored = [Value::from("hello"), Value::Int(7)];
/// let f = Fields::try_from_sorted(&names, |col| Ok::<_, ()>(stored[col].clone())).unwrap();
/// assert_eq!(format!("{f:?}"), r#"{"id": Int(7), "text": Text("hello")}"#);
/// assert_eq!(f.get("text").and_then(Value::as_text), Some("hello"));
/// // A name given twice: every column is read, the later one kept.
/// let names = SortedNames::new(["a", "b", "a"]);
/// let f = Fields::try_from_sorted(&names, |col| Ok::<_, ()>(Value::Int(col as i64))).unwrap();
/// assert_eq!(format!("{f:?}"), r#"{"a": Int(2), "b": Int(1)}"#);
/// ```
#[derive(Clone, Debug, Default)]
pub struct SortedNames {
    /// Each name and its position among the caller's, in name order (of
    /// one name, in the caller's order), and whether it repeats the name
    /// before it.
    names: Arc<[(FieldName, usize, bool)]>,
    /// Names, each counted once.
    distinct: usize,
}

impl SortedNames {
    /// `names` in the caller's order (a shard's columns).
    pub fn new<N: Into<FieldName>>(names: impl IntoIterator<Item = N>) -> Self {
        let mut v: Vec<(FieldName, usize)> = names
            .into_iter()
            .enumerate()
            .map(|(at, n)| (n.into(), at))
            .collect();
        // Stable: of two columns of one name the later comes later.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let repeats: Vec<bool> = (0..v.len())
            .map(|k| k > 0 && v[k - 1].0 == v[k].0)
            .collect();
        let distinct = repeats.iter().filter(|&&r| !r).count();
        let names = v
            .into_iter()
            .zip(repeats)
            .map(|((n, at), r)| (n, at, r))
            .collect();
        SortedNames { names, distinct }
    }

    /// Number of names, each counted once.
    pub fn len(&self) -> usize {
        self.distinct
    }

    /// Whether there is no name.
    pub fn is_empty(&self) -> bool {
        self.distinct == 0
    }

    /// Each name, in name order, with its position among the names as
    /// they were given; a name given twice comes twice, in the order given.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&FieldName, usize)> {
        self.names.iter().map(|(n, at, _)| (n, *at))
    }
}

impl Fields {
    /// The fields named by `names`, the value of each made by `value` from
    /// the name's position as it was given (its column), in name order:
    /// one exact-size allocation for more than one field, no name
    /// compared. Every column is read, so of a name given twice the later
    /// value is kept. The first error stops it.
    pub fn try_from_sorted<E>(
        names: &SortedNames,
        value: impl FnMut(usize) -> Result<Value, E>,
    ) -> Result<Fields, E> {
        let mut f = Fields::new();
        f.try_fill_sorted(names, value)?;
        Ok(f)
    }

    /// [`try_from_sorted`](Fields::try_from_sorted) into these fields,
    /// which it replaces: a reader making records where they stay (a
    /// batch's vector) builds each one's fields in place. Made elsewhere
    /// and moved in, the fields were written as words and read back in
    /// wider moves, which the processor cannot forward from those stores:
    /// a stall per record, the largest cost of decoding an MDS sample.
    /// On an error the fields made before it are kept.
    ///
    /// ```
    /// use zephon_core::record::{Fields, SortedNames};
    /// use zephon_core::Value;
    /// let names = SortedNames::new(["text", "id"]);
    /// let mut f = Fields::new();
    /// f.insert("old".into(), Value::Null);
    /// f.try_fill_sorted(&names, |col| Ok::<_, ()>(Value::Int(col as i64))).unwrap();
    /// assert_eq!(format!("{f:?}"), r#"{"id": Int(1), "text": Int(0)}"#);
    /// ```
    #[inline]
    pub fn try_fill_sorted<E>(
        &mut self,
        names: &SortedNames,
        mut value: impl FnMut(usize) -> Result<Value, E>,
    ) -> Result<(), E> {
        self.clear();
        self.reserve_exact(names.len());
        for (name, at, repeats) in names.names.iter() {
            let v = value(*at)?;
            if *repeats {
                self.replace_last(v);
            } else {
                self.push_in_order(name.clone(), v);
            }
        }
        Ok(())
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
        let names = SortedNames::new(given);
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
        assert!(SortedNames::new(Vec::<&str>::new()).is_empty());
        // Repeated names: the inserted fields too, every column read.
        let given = ["m", "b", "m", "a", "b", "m"];
        let names = SortedNames::new(given);
        assert_eq!(names.len(), 3);
        let mut read = Vec::new();
        let made = Fields::try_from_sorted(&names, |at| {
            read.push(at);
            Ok::<_, ()>(Value::Int(at as i64))
        })
        .unwrap();
        assert_eq!(read, [3, 1, 4, 0, 2, 5]);
        let mut inserted = Fields::new();
        for (at, n) in given.iter().enumerate() {
            inserted.insert((*n).into(), Value::Int(at as i64));
        }
        assert_eq!(made, inserted);
    }
}
