//! Pointer lists a cut carries without copying them at every batch.
//!
//! A shuffle below a filter cannot have its buffer recomputed from
//! positions, so its cut lists the buffer's pointers. Copying 8,192 of them
//! whenever a lane-batch leaves cost a third of a pipeline's throughput; a
//! [`PtrJournal`] instead keeps an immutable base plus a journal of the
//! changes since, both shared, and a cut is a [`PtrList`] holding the two
//! and the journal's length at the cut: two reference counts. The list is
//! copied out only when a checkpoint is written.

use crate::pointer::SamplePtr;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::{Arc, Mutex};

/// A list of pointers as of one moment, possibly still shared with the
/// journal it was taken from. Serializes as the plain list.
#[derive(Clone)]
pub struct PtrList(Repr);

#[derive(Clone)]
enum Repr {
    /// Base plus the first `len` changes of the journal.
    Journal {
        base: Arc<Vec<SamplePtr>>,
        changes: Arc<Mutex<Vec<(u32, SamplePtr)>>>,
        len: usize,
        /// Pointers in the list.
        size: usize,
    },
    /// The elements of `all` from `from` on.
    Suffix {
        all: Arc<Vec<SamplePtr>>,
        from: usize,
    },
    /// Several lists, one after the other.
    Concat(Arc<[PtrList]>),
}

impl PtrList {
    /// A list of these pointers.
    ///
    /// ```
    /// use zephon_core::SamplePtr;
    /// use zephon_core::checkpoint::PtrList;
    /// let p = SamplePtr { dataset: 0, shard: 0, sample: 7, lane: 1 };
    /// let list = PtrList::new(vec![p]);
    /// assert_eq!(list.to_vec(), vec![p]);
    /// // JSON holds a column per field.
    /// let json = serde_json::to_string(&list).unwrap();
    /// assert_eq!(json, r#"{"dataset":[0],"shard":[0],"sample":[7],"lane":[1]}"#);
    /// assert_eq!(serde_json::from_str::<PtrList>(&json).unwrap(), list);
    /// ```
    pub fn new(ptrs: Vec<SamplePtr>) -> Self {
        Self::suffix(Arc::new(ptrs), 0)
    }

    /// The elements of `all` from `from` on.
    pub fn suffix(all: Arc<Vec<SamplePtr>>, from: usize) -> Self {
        PtrList(Repr::Suffix { all, from })
    }

    /// The lists `parts`, one after the other, without copying them.
    ///
    /// ```
    /// use zephon_core::SamplePtr;
    /// use zephon_core::checkpoint::PtrList;
    /// let p = |i| SamplePtr { dataset: 0, shard: 0, sample: i, lane: 0 };
    /// let list = PtrList::concat(vec![PtrList::new(vec![p(1)]), PtrList::new(vec![p(2), p(3)])]);
    /// assert_eq!(list.len(), 3);
    /// assert_eq!(list.get(2), Some(p(3)));
    /// assert_eq!(list.to_vec(), vec![p(1), p(2), p(3)]);
    /// ```
    pub fn concat(parts: Vec<PtrList>) -> Self {
        let mut parts: Vec<PtrList> = parts.into_iter().filter(|p| !p.is_empty()).collect();
        match parts.len() {
            0 => PtrList::default(),
            1 => parts.remove(0),
            _ => PtrList(Repr::Concat(parts.into())),
        }
    }

    /// The `i`-th pointer. Cheap for a plain list or a concatenation of
    /// them; a journal's snapshot is copied out first.
    pub fn get(&self, i: usize) -> Option<SamplePtr> {
        match &self.0 {
            Repr::Suffix { all, from } => all.get(from.checked_add(i)?).copied(),
            Repr::Journal { .. } => self.to_vec().get(i).copied(),
            Repr::Concat(parts) => {
                let mut i = i;
                for p in parts.iter() {
                    if i < p.len() {
                        return p.get(i);
                    }
                    i -= p.len();
                }
                None
            }
        }
    }

    /// The pointers, copied out.
    pub fn to_vec(&self) -> Vec<SamplePtr> {
        match &self.0 {
            Repr::Suffix { all, from } => all.get(*from..).unwrap_or_default().to_vec(),
            Repr::Concat(parts) => parts.iter().flat_map(PtrList::to_vec).collect(),
            Repr::Journal {
                base, changes, len, ..
            } => {
                let mut out = (**base).clone();
                let changes = changes.lock().unwrap_or_else(|e| e.into_inner());
                apply(&mut out, &changes[..*len]);
                out
            }
        }
    }

    /// How many pointers.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Suffix { all, from } => all.len().saturating_sub(*from),
            Repr::Journal { size, .. } => *size,
            Repr::Concat(parts) => parts.iter().map(PtrList::len).sum(),
        }
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Applies changes: a slot one past the end appends, any other replaces.
fn apply(out: &mut Vec<SamplePtr>, changes: &[(u32, SamplePtr)]) {
    for &(slot, p) in changes {
        let slot = slot as usize;
        if slot == out.len() {
            out.push(p);
        } else if let Some(s) = out.get_mut(slot) {
            *s = p;
        }
    }
}

impl Default for PtrList {
    /// The empty list.
    fn default() -> Self {
        PtrList::new(Vec::new())
    }
}

impl std::fmt::Debug for PtrList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PtrList({} pointers)", self.len())
    }
}

impl PartialEq for PtrList {
    fn eq(&self, other: &Self) -> bool {
        self.to_vec() == other.to_vec()
    }
}

impl Eq for PtrList {}

/// The JSON form of a list: one array per field, a third of the size of
/// an object per pointer (a filtered checkpoint lists half a million).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Columns {
    dataset: Vec<u32>,
    shard: Vec<u32>,
    sample: Vec<u64>,
    lane: Vec<u32>,
}

impl Serialize for PtrList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ptrs = self.to_vec();
        if !s.is_human_readable() {
            return ptrs.serialize(s);
        }
        Columns {
            dataset: ptrs.iter().map(|p| p.dataset).collect(),
            shard: ptrs.iter().map(|p| p.shard).collect(),
            sample: ptrs.iter().map(|p| p.sample).collect(),
            lane: ptrs.iter().map(|p| p.lane).collect(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for PtrList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if !d.is_human_readable() {
            return Vec::<SamplePtr>::deserialize(d).map(PtrList::new);
        }
        let c = Columns::deserialize(d)?;
        let n = c.dataset.len();
        if [c.shard.len(), c.sample.len(), c.lane.len()] != [n; 3] {
            return Err(serde::de::Error::custom(
                "a pointer list's columns differ in length",
            ));
        }
        Ok(PtrList::new(
            (0..n)
                .map(|i| SamplePtr {
                    dataset: c.dataset[i],
                    shard: c.shard[i],
                    sample: c.sample[i],
                    lane: c.lane[i],
                })
                .collect(),
        ))
    }
}

/// A list of pointers that changes slot by slot (a shuffle buffer), and
/// hands out [`PtrList`] snapshots of itself cheaply.
#[derive(Debug)]
pub struct PtrJournal {
    base: Arc<Vec<SamplePtr>>,
    changes: Arc<Mutex<Vec<(u32, SamplePtr)>>>,
    len: usize,
    size: usize,
    /// Changes kept before they are folded into a new base: the copy that
    /// costs is spread over at least this many changes.
    fold_after: usize,
}

impl PtrJournal {
    /// A journal starting from `ptrs`; folds its changes every
    /// `max(ptrs.len(), fold_after)` of them.
    ///
    /// ```
    /// use zephon_core::SamplePtr;
    /// use zephon_core::checkpoint::PtrJournal;
    /// let p = |i| SamplePtr { dataset: 0, shard: 0, sample: i, lane: 0 };
    /// let mut j = PtrJournal::new(vec![p(0), p(1)], 4);
    /// let before = j.snapshot();
    /// j.set(1, p(5));
    /// j.set(2, p(6)); // one past the end: appends
    /// assert_eq!(before.to_vec(), vec![p(0), p(1)]);
    /// assert_eq!(j.snapshot().to_vec(), vec![p(0), p(5), p(6)]);
    /// ```
    pub fn new(ptrs: Vec<SamplePtr>, fold_after: usize) -> Self {
        let fold_after = fold_after.max(ptrs.len()).max(1);
        PtrJournal {
            size: ptrs.len(),
            base: Arc::new(ptrs),
            changes: Arc::new(Mutex::new(Vec::new())),
            len: 0,
            fold_after,
        }
    }

    /// Puts `p` into `slot` (appends when `slot` is one past the end).
    pub fn set(&mut self, slot: usize, p: SamplePtr) {
        if self.len >= self.fold_after {
            // Snapshots keep the old base and changes alive; new ones start
            // from the folded list.
            let folded = self.snapshot().to_vec();
            *self = PtrJournal::new(folded, self.fold_after);
        }
        self.changes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((slot as u32, p));
        self.len += 1;
        if slot == self.size {
            self.size += 1;
        }
    }

    /// The list as of now.
    pub fn snapshot(&self) -> PtrList {
        PtrList(Repr::Journal {
            base: self.base.clone(),
            changes: self.changes.clone(),
            len: self.len,
            size: self.size,
        })
    }
}
