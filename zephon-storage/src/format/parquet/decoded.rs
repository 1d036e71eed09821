//! Decoded row groups: one budget for every Parquet shard open in the
//! process, not one per shard. A dataset of many shards keeps the index of
//! each shard it has read (the footer is parsed once); a budget per shard
//! let the groups those indexes kept grow with the number of shards (a
//! 3 M-row dataset in 48 shards ended its first pass holding all of it
//! decoded, 700 MiB, against 58 MiB for the plain loop over the same files).

use super::value::Column;
use arrow_array::RecordBatch;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use zephon_core::settings::Range;

/// Bytes of decoded row groups kept in the process by default, all Parquet
/// shards together (their decoded size: the arrays' buffers); see
/// [`set_decoded_budget`]. The group just decoded is kept even when it
/// alone is larger, so a read never decodes a group twice. A shuffle within
/// a shard reads its groups at random, so a shard whose decoded size is
/// past the budget decodes a group again for many of its samples; see
/// [`ShardIndex::take_warning`](crate::format::ShardIndex::take_warning).
pub const DECODED_BUDGET: usize = 128 << 20;

/// Allowed values of [`set_decoded_budget`]: 1 MiB to 1 TiB.
pub const DECODED_BYTES: Range = Range::new(
    1 << 20,
    1 << 40,
    "the decoded row groups of every Parquet shard are held in memory together",
);

/// Sets the bytes of decoded row groups the process keeps, all Parquet
/// shards together (default [`DECODED_BUDGET`]), dropping the least
/// recently used groups at once down to it. Raise it to shuffle within
/// shards larger than the default holds decoded (they then take that much
/// memory); a value outside [`DECODED_BYTES`] is an error naming the
/// setting and the range.
///
/// ```
/// use zephon_storage::format::parquet::{DECODED_BUDGET, decoded_budget, set_decoded_budget};
/// set_decoded_budget(512 << 20).unwrap();
/// assert_eq!(decoded_budget(), 512 << 20);
/// let e = set_decoded_budget(0).unwrap_err().to_string();
/// assert!(e.contains("parquet_decoded_bytes"), "{e}");
/// assert_eq!(decoded_budget(), 512 << 20, "an error changes nothing");
/// set_decoded_budget(DECODED_BUDGET as u64).unwrap();
/// ```
pub fn set_decoded_budget(bytes: u64) -> zephon_core::Result<()> {
    let bytes = DECODED_BYTES.check("parquet_decoded_bytes", bytes)?;
    Decoded::shared().set_budget(usize::try_from(bytes).unwrap_or(usize::MAX));
    Ok(())
}

/// The bytes of decoded row groups the process keeps (see
/// [`set_decoded_budget`]).
pub fn decoded_budget() -> u64 {
    Decoded::shared().budget.load(Ordering::Relaxed) as u64
}

/// Rows decoded per slice of a row group. A group is kept as slices of this
/// many rows, as the reader hands them out: one slice of the whole group
/// would grow its buffers by doubling through memory the allocator has to
/// fetch (and the kernel zero) afresh, and gluing slices together copies
/// every byte once more.
pub(super) const SLICE_ROWS: usize = 1024;

/// A decoded row group: its slices, in order.
#[derive(Debug)]
pub(super) struct Group {
    pub(super) slices: Vec<RecordBatch>,
    /// Each slice's columns, their types looked up once.
    pub(super) columns: Vec<Vec<Column>>,
    /// `ends[k]` is the row after the last of slice `k`.
    ends: Vec<usize>,
}

impl Group {
    pub(super) fn new(slices: Vec<RecordBatch>) -> Self {
        let ends = slices
            .iter()
            .scan(0, |end, b| {
                *end += b.num_rows();
                Some(*end)
            })
            .collect();
        let columns = slices
            .iter()
            .map(|b| b.columns().iter().map(Column::new).collect())
            .collect();
        Group {
            slices,
            columns,
            ends,
        }
    }

    pub(super) fn rows(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    pub(super) fn memory_size(&self) -> usize {
        self.slices.iter().map(|b| b.get_array_memory_size()).sum()
    }

    /// The slice row `r` of the group is in, and its row there (`r` is
    /// below [`rows`](Group::rows), checked when the group was decoded).
    pub(super) fn locate(&self, r: usize) -> (usize, usize) {
        let k = self.ends.partition_point(|&e| e <= r);
        let start = if k == 0 { 0 } else { self.ends[k - 1] };
        (k, r - start)
    }
}

/// A decoded group's key: the shard index that decoded it (each
/// [`ParquetIndex`](super::ParquetIndex) has its own number) and the group.
pub(super) type Key = (u64, usize);

/// Decoded row groups, least recently used first, kept to a budget.
#[derive(Debug)]
pub(super) struct Decoded {
    budget: AtomicUsize,
    lru: Mutex<Lru>,
}

#[derive(Debug, Default)]
struct Lru {
    groups: Vec<(Key, Arc<Group>, usize)>,
    bytes: usize,
}

impl Lru {
    fn get(&mut self, key: Key) -> Option<Arc<Group>> {
        let at = self.groups.iter().rposition(|(k, _, _)| *k == key)?;
        let entry = self.groups.remove(at);
        let group = entry.1.clone();
        self.groups.push(entry);
        Some(group)
    }
}

impl Decoded {
    /// A cache of its own holding up to `budget` bytes (tests; the shards
    /// share [`Decoded::shared`]).
    pub(super) fn new(budget: usize) -> Self {
        Decoded {
            budget: AtomicUsize::new(budget),
            lru: Mutex::new(Lru::default()),
        }
    }

    /// The process's cache, [`DECODED_BUDGET`] bytes.
    pub(super) fn shared() -> Arc<Decoded> {
        static SHARED: LazyLock<Arc<Decoded>> =
            LazyLock::new(|| Arc::new(Decoded::new(DECODED_BUDGET)));
        SHARED.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        // Every change leaves the list whole, so a panic elsewhere while
        // it was held leaves nothing half-done.
        self.lru.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn get(&self, key: Key) -> Option<Arc<Group>> {
        self.lock().get(key)
    }

    /// Keeps `group`, dropping the least recently used groups (of any
    /// shard) until the rest fit the budget beside it.
    pub(super) fn insert(&self, key: Key, group: Arc<Group>) {
        let mut lru = self.lock();
        // Another reader may have decoded the same group meanwhile.
        if lru.get(key).is_some() {
            return;
        }
        let size = group.memory_size();
        lru.groups.push((key, group, size));
        lru.bytes += size;
        self.evict(&mut lru);
    }

    /// Drops the least recently used groups until the rest fit the budget
    /// (the most recent one stays whatever its size).
    fn evict(&self, lru: &mut Lru) {
        let budget = self.budget.load(Ordering::Relaxed);
        while lru.bytes > budget && lru.groups.len() > 1 {
            let (_, _, freed) = lru.groups.remove(0);
            lru.bytes -= freed;
        }
    }

    /// Keeps `budget` bytes from now on, dropping groups down to it now.
    pub(super) fn set_budget(&self, budget: usize) {
        let mut lru = self.lock();
        self.budget.store(budget, Ordering::Relaxed);
        self.evict(&mut lru);
    }

    /// Drops group `key` (its rows have all been read).
    pub(super) fn remove(&self, key: Key) {
        let mut lru = self.lock();
        if let Some(at) = lru.groups.iter().rposition(|(k, _, _)| *k == key) {
            let (_, _, freed) = lru.groups.remove(at);
            lru.bytes -= freed;
        }
    }

    /// Drops every group index `id` decoded (its index is being dropped).
    pub(super) fn forget(&self, id: u64) {
        let mut lru = self.lock();
        let mut freed = 0;
        lru.groups.retain(|(k, _, size)| {
            let keep = k.0 != id;
            if !keep {
                freed += size;
            }
            keep
        });
        lru.bytes -= freed;
    }

    /// Groups held now, and their bytes.
    #[cfg(test)]
    pub(super) fn held(&self) -> (usize, usize) {
        let lru = self.lock();
        (lru.groups.len(), lru.bytes)
    }
}
