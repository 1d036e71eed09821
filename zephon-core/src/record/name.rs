//! [`FieldName`]: a field's name, interned: one copy of its text for every
//! record that has the field.

use rustc_hash::FxHashSet;
use std::borrow::Borrow;
use std::cell::RefCell;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// The name of a record field: interned text, so the records a shard
/// reader makes point at one copy of each name instead of each holding
/// copies. Names made from text ([`From<&str>`], [`From<String>`], serde)
/// are interned in one table for the process: cloning and dropping one
/// touches no counter, so records moving between threads never contend on
/// their names. The table is bounded (names up to 256 bytes, 16,384 names,
/// 1 MiB of text in all): data-shaped keys past that, and names given as an
/// `Arc<str>`, are reference-counted instead. Ordering, equality and
/// hashing are those of the text, and a `&str` looks a field up
/// ([`Borrow<str>`]).
///
/// ```
/// use std::sync::Arc;
/// use zephon_core::record::FieldName;
/// use zephon_core::{Record, Value};
/// let name = FieldName::from("tokens");
/// let a = Record::new().with(name.clone(), Value::Int(1));
/// let b = Record::new().with("tokens", Value::Int(2));
/// let (ka, kb) = (a.fields.keys().next().unwrap(), b.fields.keys().next().unwrap());
/// assert!(FieldName::ptr_eq(ka, kb));
/// assert_eq!(a.get("tokens"), Some(&Value::Int(1)));
/// assert_eq!(name, "tokens");
/// let counted = FieldName::from(Arc::<str>::from("tokens"));
/// assert_eq!(counted, name);
/// assert!(!FieldName::ptr_eq(&counted, &name));
/// ```
pub struct FieldName {
    /// The text's first byte: of an interned `&'static str`, or of an
    /// `Arc<str>` made raw by `Arc::into_raw` (see `len`).
    ptr: NonNull<u8>,
    /// The text's length; the top bit set when `ptr` is an `Arc<str>`'s,
    /// whose count this name holds one of. A `str` is never longer than
    /// `isize::MAX` bytes, so that bit is free.
    len: usize,
}

const COUNTED: usize = 1 << (usize::BITS - 1);

// SAFETY: a name is either a `&'static str` or an `Arc<str>`, both `Send`
// and `Sync`; nothing else is reachable through it.
unsafe impl Send for FieldName {}
// SAFETY: as for `Send`.
unsafe impl Sync for FieldName {}

impl FieldName {
    /// The name as text.
    #[inline]
    pub fn as_str(&self) -> &str {
        // SAFETY: `ptr` and the length are those of a live `str`: an
        // interned one is never freed, a counted one lives while this
        // name holds its count.
        unsafe { &*self.raw() }
    }

    /// Whether two names point at the same text (interned names of the
    /// same text do, and clones of one name).
    pub fn ptr_eq(a: &FieldName, b: &FieldName) -> bool {
        a.ptr == b.ptr && a.len == b.len
    }

    fn interned(s: &'static str) -> Self {
        FieldName {
            ptr: NonNull::from(s.as_bytes()).cast(),
            len: s.len(),
        }
    }

    fn counted(s: Arc<str>) -> Self {
        let len = s.len();
        let raw = Arc::into_raw(s);
        FieldName {
            // `Arc::into_raw` never returns null.
            ptr: NonNull::new(raw as *const u8 as *mut u8).expect("an Arc's pointer"),
            len: len | COUNTED,
        }
    }

    /// Interned when the table takes it, counted otherwise.
    fn of(s: &str) -> Self {
        match intern(s) {
            Some(s) => FieldName::interned(s),
            None => FieldName::counted(s.into()),
        }
    }

    fn is_counted(&self) -> bool {
        self.len & COUNTED != 0
    }

    fn raw(&self) -> *const str {
        std::ptr::slice_from_raw_parts(self.ptr.as_ptr() as *const u8, self.len & !COUNTED)
            as *const str
    }
}

impl Clone for FieldName {
    #[inline]
    fn clone(&self) -> Self {
        if self.is_counted() {
            // SAFETY: `raw` came from `Arc::into_raw` and this name holds
            // one count, so the allocation is live.
            unsafe { Arc::increment_strong_count(self.raw()) };
        }
        FieldName {
            ptr: self.ptr,
            len: self.len,
        }
    }
}

impl Drop for FieldName {
    #[inline]
    fn drop(&mut self) {
        if self.is_counted() {
            // SAFETY: gives back the one count this name holds.
            unsafe { Arc::decrement_strong_count(self.raw()) };
        }
    }
}

impl PartialEq for FieldName {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        FieldName::ptr_eq(self, other) || self.as_str() == other.as_str()
    }
}

impl Eq for FieldName {}

impl PartialOrd for FieldName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for FieldName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for FieldName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

/// Longest name the table interns.
const INTERN_MAX_LEN: usize = 256;
/// Most names the table holds.
const INTERN_MAX_NAMES: usize = 16_384;
/// Most bytes of text the table holds.
const INTERN_MAX_BYTES: usize = 1 << 20;

#[derive(Default)]
struct Table {
    names: FxHashSet<&'static str>,
    bytes: usize,
}

impl Table {
    /// The copy of `s` in the table, added if there is room.
    fn get_or_add(&mut self, s: &str) -> Option<&'static str> {
        if let Some(&found) = self.names.get(s) {
            return Some(found);
        }
        if self.names.len() >= INTERN_MAX_NAMES || self.bytes + s.len() > INTERN_MAX_BYTES {
            return None;
        }
        // Leaked on purpose: interned names live as long as the process,
        // within the table's bounds.
        let leaked: &'static str = Box::leak(s.into());
        self.names.insert(leaked);
        self.bytes += s.len();
        Some(leaked)
    }
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

thread_local! {
    /// The names this thread has interned or looked up: found here, a name
    /// costs no lock.
    static SEEN: RefCell<FxHashSet<&'static str>> = RefCell::default();
}

/// The interned copy of `s`, made if the table has room; `None` when it is
/// full or `s` is too long.
fn intern(s: &str) -> Option<&'static str> {
    if s.len() > INTERN_MAX_LEN {
        return None;
    }
    // `try_with`: a name made while this thread's locals are being torn
    // down goes to the table, without the thread's list.
    if let Ok(Some(found)) = SEEN.try_with(|seen| seen.borrow().get(s).copied()) {
        return Some(found);
    }
    // A poisoned lock only means another thread panicked while holding
    // it; the table is whole after every statement.
    let found = TABLE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(Table::default)
        .get_or_add(s)?;
    let _ = SEEN.try_with(|seen| seen.borrow_mut().insert(found));
    Some(found)
}

impl Deref for FieldName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for FieldName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for FieldName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for FieldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for FieldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for FieldName {
    fn from(s: &str) -> Self {
        FieldName::of(s)
    }
}

impl From<String> for FieldName {
    fn from(s: String) -> Self {
        FieldName::of(&s)
    }
}

impl From<&String> for FieldName {
    fn from(s: &String) -> Self {
        FieldName::of(s)
    }
}

impl From<Arc<str>> for FieldName {
    fn from(s: Arc<str>) -> Self {
        FieldName::counted(s)
    }
}

impl From<&FieldName> for FieldName {
    fn from(s: &FieldName) -> Self {
        s.clone()
    }
}

impl From<FieldName> for String {
    fn from(n: FieldName) -> Self {
        n.as_str().to_owned()
    }
}

impl PartialEq<str> for FieldName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for FieldName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for FieldName {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl serde::Serialize for FieldName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
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
    /// Looked up without writing anything shared: a read lock writes its
    /// count, and that one cache line, updated by every thread decoding
    /// the shard for every field of every record, made reads on two
    /// threads slower than on one. A name added replaces the list whole,
    /// under `grow`.
    names: arc_swap::ArcSwap<Vec<FieldName>>,
    grow: std::sync::Mutex<()>,
}

/// Beyond this many distinct names a schema stops remembering new ones:
/// records whose keys are data (not a schema) must not grow it without end.
const MAX_NAMES: usize = 256;

impl Schema {
    /// A schema knowing `names`.
    pub fn new<N: Into<FieldName>>(names: impl IntoIterator<Item = N>) -> Self {
        Schema {
            names: arc_swap::ArcSwap::from_pointee(names.into_iter().map(Into::into).collect()),
            grow: std::sync::Mutex::default(),
        }
    }

    /// The shared name `s`.
    pub fn name(&self, s: &str) -> FieldName {
        if let Some(n) = self.names.load().iter().find(|n| n.as_str() == s) {
            return n.clone();
        }
        // A poisoned lock only means another thread panicked while adding a
        // name; the list it would have replaced is still whole.
        let _grow = self.grow.lock().unwrap_or_else(|e| e.into_inner());
        let names = self.names.load_full();
        if let Some(n) = names.iter().find(|n| n.as_str() == s) {
            return n.clone();
        }
        let n = FieldName::from(s);
        if names.len() < MAX_NAMES {
            let mut more = Vec::clone(&names);
            more.push(n.clone());
            self.names.store(std::sync::Arc::new(more));
        }
        n
    }

    /// Number of names known.
    pub fn len(&self) -> usize {
        self.names.load().len()
    }

    /// Whether no name is known yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_names_give_back_their_count() {
        let text: Arc<str> = Arc::from("a counted name");
        let name = FieldName::from(text.clone());
        assert_eq!(Arc::strong_count(&text), 2);
        let clones: Vec<FieldName> = (0..5).map(|_| name.clone()).collect();
        assert_eq!(Arc::strong_count(&text), 7);
        assert!(clones.iter().all(|c| FieldName::ptr_eq(c, &name)));
        assert_eq!(clones[4], "a counted name");
        drop(clones);
        drop(name);
        assert_eq!(Arc::strong_count(&text), 1);
    }

    #[test]
    fn text_makes_one_interned_copy_on_every_thread() {
        let here = FieldName::from("interned on two threads");
        let there = std::thread::spawn(|| FieldName::from(String::from("interned on two threads")))
            .join()
            .unwrap();
        assert!(FieldName::ptr_eq(&here, &there));
        assert!(!here.is_counted());
    }

    #[test]
    fn names_past_the_bounds_are_counted_and_equal_by_text() {
        let long = "x".repeat(INTERN_MAX_LEN + 1);
        let a = FieldName::from(long.as_str());
        let b = FieldName::from(long.clone());
        assert!(a.is_counted() && b.is_counted());
        assert!(!FieldName::ptr_eq(&a, &b));
        assert_eq!(a, b);
        assert_eq!(a.cmp(&b), std::cmp::Ordering::Equal);
        let hash = |n: &FieldName| {
            let mut h = std::hash::DefaultHasher::new();
            n.hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&a), hash(&b));
        assert_eq!(a.as_str(), long);
    }

    #[test]
    fn a_table_stops_growing_at_its_bounds() {
        // Data-shaped keys: far more than a table holds (a table of its
        // own, so the process's table is left for the other tests).
        let mut table = Table::default();
        let got: Vec<Option<&str>> = (0..INTERN_MAX_NAMES + 100)
            .map(|i| table.get_or_add(&format!("key-{i}")))
            .collect();
        assert_eq!(table.names.len(), INTERN_MAX_NAMES);
        assert!(
            got[..INTERN_MAX_NAMES]
                .iter()
                .enumerate()
                .all(|(i, g)| *g == Some(format!("key-{i}").as_str()))
        );
        assert!(got[INTERN_MAX_NAMES..].iter().all(Option::is_none));
        // Found again, not added again.
        assert_eq!(table.get_or_add("key-7"), got[7]);
        assert_eq!(table.names.len(), INTERN_MAX_NAMES);
        let mut table = Table::default();
        let big = "y".repeat(INTERN_MAX_LEN);
        let fits = INTERN_MAX_BYTES / INTERN_MAX_LEN;
        for i in 0..fits {
            assert!(table.get_or_add(&format!("{i:04}{}", &big[4..])).is_some());
        }
        assert_eq!(table.bytes, INTERN_MAX_BYTES);
        assert_eq!(table.get_or_add("one more"), None);
    }

    #[test]
    fn a_schema_looked_up_from_many_threads_keeps_one_name_each_up_to_its_bound() {
        // Names too long to intern: a name is shared only if the schema
        // kept it, so sharing shows which names it kept.
        let names: Vec<String> = (0..MAX_NAMES + 51)
            .map(|i| format!("{}{i}", "n".repeat(INTERN_MAX_LEN)))
            .collect();
        let schema = Schema::default();
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (schema, names) = (&schema, &names);
                scope.spawn(move || {
                    // Each thread asks in an order of its own (307 names, a
                    // prime, so each order is a permutation), so they race
                    // to add different names.
                    for k in 0..names.len() {
                        let i = (k * (2 * t + 1) + t * 37) % names.len();
                        assert_eq!(schema.name(&names[i]), names[i].as_str());
                    }
                });
            }
        });
        assert_eq!(schema.len(), MAX_NAMES);
        let kept = names
            .iter()
            .filter(|n| FieldName::ptr_eq(&schema.name(n), &schema.name(n)))
            .count();
        assert_eq!(kept, MAX_NAMES);
    }
}
