//! Decoded row groups: one budget for every Parquet shard open in the
//! process, not one per shard. A dataset of many shards keeps the index of
//! each shard it has read (the footer is parsed once); a budget per shard
//! let the groups those indexes kept grow with the number of shards (a
//! 3 M-row dataset in 48 shards ended its first pass holding all of it
//! decoded, 700 MiB, against 58 MiB for the plain loop over the same files).

use super::value::Column;
use arrow_array::RecordBatch;
use std::sync::{Arc, LazyLock, Mutex};

/// Bytes of decoded row groups kept in the process, all Parquet shards
/// together (their decoded size: the arrays' buffers). The group just
/// decoded is kept even when it alone is larger, so a read never decodes a
/// group twice. A shuffle within a shard reads its groups at random, so a
/// shard whose decoded size is past this decodes a group again for many of
/// its samples; see [`ShardIndex::take_warning`](crate::format::ShardIndex::take_warning).
pub const DECODED_BUDGET: usize = 128 << 20;

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
    budget: usize,
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
            budget,
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
        while lru.bytes > self.budget && lru.groups.len() > 1 {
            let (_, _, freed) = lru.groups.remove(0);
            lru.bytes -= freed;
        }
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
