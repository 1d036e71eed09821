//! Apache Parquet shards (Hugging Face datasets, FineWeb): rows are samples.
//!
//! The footer is parsed once per shard. A read decodes only the row groups
//! its samples fall in, each at most once per read whatever the order of
//! its samples, and only the projected columns
//! ([`FormatOptions::columns`](super::FormatOptions::columns)); a local
//! shard is memory-mapped, so only those groups' column chunks are read
//! from disk. Decoded groups are kept, most recently used first, up to
//! [`DECODED_BUDGET`] bytes for all the shards of the process together
//! (see [`set_decoded_budget`]): a
//! within-shard shuffle touches every group of the shard in every read, so
//! a cache of a fixed few groups would decode a group again for nearly
//! every read once the shard has more groups than that; one budget for all
//! shards keeps memory flat however many shards a dataset has.
//!
//! A shard whose decoded size is past the budget cannot be shuffled within
//! itself cheaply: its samples come from groups read at random, most of
//! them no longer in memory. Such a shard says so once (a warning naming
//! the dataset and the shard, see [`ShardIndex::take_warning`]); read it
//! with `shuffle_within_shard` off and a block shuffle (`shuffle_block_size`,
//! which permutes runs of consecutive samples and so stays within a few
//! groups at a time), raise the budget to its decoded size, or write
//! shards of smaller row groups and fewer rows.
//!
//! A remote shard read by blocks (see [`blocked`](super::blocked)) is
//! read the same way: the footer, then for each row group a read touches
//! only the byte ranges of its projected column chunks
//! ([`ShardIndex::group_ranges`]), fetched through the block cache.
//!
//! Arrow types map to values: strings -> text, integers -> int, floats ->
//! float, booleans, binary -> bytes, lists of integers -> token ids
//! (pre-tokenized `input_ids`), anything else -> its display text. `Utf8`
//! and `LargeUtf8` strings are [`Value::TextView`]s
//! sharing the decoded column's buffer, not copies: a record kept holds its
//! slice of the row group (1,024 rows of that column) in memory.

mod decoded;
pub mod guard;
mod value;

use super::{FormatResult, ShardIndex};
pub use decoded::{DECODED_BUDGET, DECODED_BYTES, decoded_budget, set_decoded_budget};
use decoded::{Decoded, Group, SLICE_ROWS};

use arrow_array::RecordBatch;
use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::file::reader::ChunkReader;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use zephon_core::record::{Fields, PointerChunks, SortedNames};
use zephon_core::{Record, Value};
/// The crates this format is read with, re-exported so callers (fixtures,
/// benchmarks) write files with the very versions Zephon reads them with.
pub use {arrow_array, parquet};

/// A Parquet shard's footer, projection and row-group boundaries.
#[derive(Debug)]
pub struct ParquetIndex {
    meta: ArrowReaderMetadata,
    /// The leaf columns read (all when `None`).
    mask: Option<ProjectionMask>,
    /// The file's size in bytes.
    file_len: u64,
    /// `starts[g]` is the first row of row group `g`; the last entry is the row count.
    starts: Vec<u64>,
    /// This index's number in `decoded`'s keys.
    id: u64,
    /// The decoded groups kept (the process's [`Decoded::shared`]).
    decoded_groups: Arc<Decoded>,
    /// One lock per row group, held while it is decoded: reads in flight
    /// at once that need the same group (a shuffle within a shard spreads
    /// every read over all its groups) decode it once, the others waiting
    /// for it rather than decoding it again beside it.
    decoding: Vec<Mutex<()>>,
    /// Rows decoded so far, which tests hold to a bound.
    decoded: AtomicU64,
    /// Rows served from each group since it was last decoded: a group
    /// whose every row has been read (one pass of a shuffle within the
    /// shard, or of a read in order) leaves the cache at once, so its
    /// memory goes to the next group while it is still the process's
    /// (rather than groups read through waiting for the budget to push
    /// them out, and new groups taking memory the kernel must zero).
    served: Vec<AtomicU64>,
    /// Groups decoded again before all their rows were read: past the
    /// shard's number of groups, its reads are thrashing
    /// ([`ShardIndex::take_warning`]).
    redecoded: AtomicU64,
    /// Whether that warning was given.
    warned: AtomicBool,
    /// The projected columns' names, made once and shared by every row,
    /// in name order with each one's column index (known from the first
    /// group decoded: every group has the projected schema).
    names: OnceLock<SortedNames>,
}

impl ParquetIndex {
    /// Parses the footer of a shard (held in memory, or the spans of it
    /// fetched so far); `columns` (when given) must all exist.
    pub fn open<R: ChunkReader>(data: &R, columns: Option<&[String]>) -> FormatResult<Self> {
        // The footer's claims are checked before the Parquet reader sizes
        // anything by them (see `guard`).
        let len = data.len();
        if len >= 8 {
            let tail = data.get_bytes(len - 8, 8).map_err(|e| e.to_string())?;
            guard::check_footer(len, &tail, |start, n| {
                data.get_bytes(start, n).map_err(|e| e.to_string())
            })?;
        }
        let meta = guarded("its footer", || {
            ArrowReaderMetadata::load(data, ArrowReaderOptions::default())
                .map_err(|e| format!("not a readable Parquet file: {e}"))
        })?;
        let projection = match columns {
            Some(cols) => {
                let schema = meta.schema();
                let idx = cols
                    .iter()
                    .map(|c| {
                        schema.index_of(c).map_err(|_| {
                            let have: Vec<&str> =
                                schema.fields().iter().map(|f| f.name().as_str()).collect();
                            format!("no column `{c}` (columns: {})", have.join(", "))
                        })
                    })
                    .collect::<FormatResult<Vec<usize>>>()?;
                Some(idx)
            }
            None => None,
        };
        let mask = projection
            .as_ref()
            .map(|p| ProjectionMask::roots(meta.parquet_schema(), p.iter().copied()));
        let mut starts = vec![0u64];
        for (i, g) in meta.metadata().row_groups().iter().enumerate() {
            let last = *starts.last().expect("non-empty");
            let end = u64::try_from(g.num_rows())
                .ok()
                .and_then(|n| last.checked_add(n))
                .ok_or_else(|| {
                    format!(
                        "row group {i}: the footer gives {} rows, past any count",
                        g.num_rows()
                    )
                })?;
            starts.push(end);
        }
        let index = ParquetIndex {
            meta,
            mask,
            file_len: data.len(),
            decoding: (1..starts.len()).map(|_| Mutex::new(())).collect(),
            served: (1..starts.len()).map(|_| AtomicU64::new(0)).collect(),
            starts,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            decoded_groups: Decoded::shared(),
            decoded: Default::default(),
            redecoded: Default::default(),
            warned: Default::default(),
            names: OnceLock::new(),
        };
        // Every group's column chunks lie within the file: the footer is
        // input, and the Parquet reader panics on a chunk placed before
        // the file's start.
        for g in 0..index.row_groups() {
            index.group_ranges(g)?;
        }
        Ok(index)
    }

    /// The same index keeping its decoded groups in `cache` (tests).
    #[cfg(test)]
    fn with_cache(mut self, cache: Arc<Decoded>) -> Self {
        self.decoded_groups = cache;
        self
    }

    /// Number of row groups.
    pub fn row_groups(&self) -> usize {
        self.starts.len() - 1
    }

    #[cfg(test)]
    fn decoded_rows(&self) -> u64 {
        self.decoded.load(Ordering::Relaxed)
    }

    fn cached(&self, g: usize) -> Option<Arc<Group>> {
        self.decoded_groups.get((self.id, g))
    }

    /// Row group `g`, decoded (projected columns only), from the small
    /// cache of recent groups or read now. Shuffled reads touch a few rows of
    /// a group at a time; decoding the group once for all of them, rather
    /// than its pages once per read, is what keeps them fast.
    fn group<R: ChunkReader + Clone + 'static>(
        &self,
        data: &R,
        g: usize,
    ) -> FormatResult<Arc<Group>> {
        if let Some(b) = self.cached(g) {
            return Ok(b);
        }
        let _decoding = self
            .decoding
            .get(g)
            .ok_or_else(|| format!("no row group {g}"))?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Decoded by another read while this one waited.
        if let Some(b) = self.cached(g) {
            return Ok(b);
        }
        // Every page header of the group's chunks is checked before the
        // Parquet reader allocates by it (see `guard`).
        let mut left = decoded::decoded_budget();
        for (start, end) in self.group_ranges(g)? {
            let chunk = data
                .get_bytes(start, (end - start) as usize)
                .map_err(|e| format!("row group {g}: {e}"))?;
            let what = format!("row group {g}, the column chunk at byte {start}");
            left -= guard::check_chunk(&chunk, left, &what)?;
        }
        let mut builder =
            ParquetRecordBatchReaderBuilder::new_with_metadata(data.clone(), self.meta.clone())
                .with_row_groups(vec![g])
                .with_batch_size(SLICE_ROWS);
        if let Some(mask) = &self.mask {
            builder = builder.with_projection(mask.clone());
        }
        let slices = guarded(&format!("row group {g}"), || {
            let reader = builder.build().map_err(|e| format!("row group {g}: {e}"))?;
            reader
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("row group {g}: {e}"))
        })?;
        let group = Arc::new(Group::new(slices));
        let rows = (self.starts[g + 1] - self.starts[g]) as usize;
        if group.rows() != rows {
            return Err(format!(
                "row group {g} gave {} rows, the footer says {rows}",
                group.rows()
            ));
        }
        self.decoded.fetch_add(rows as u64, Ordering::Relaxed);
        if self.served[g].swap(0, Ordering::Relaxed) > 0 {
            self.redecoded.fetch_add(1, Ordering::Relaxed);
        }
        self.decoded_groups.insert((self.id, g), group.clone());
        Ok(group)
    }

    /// Counts `n` rows of group `g` read; once all its rows are, the group
    /// leaves the cache (see `served`).
    fn served(&self, g: usize, n: usize) {
        let rows = self.starts[g + 1] - self.starts[g];
        let before = self.served[g].fetch_add(n as u64, Ordering::Relaxed);
        if before < rows && before + n as u64 >= rows {
            self.served[g].store(0, Ordering::Relaxed);
            self.decoded_groups.remove((self.id, g));
        }
    }

    /// The shared names, sorted once, with their columns in `batch` (of a
    /// name given twice, which Arrow allows, the later column wins).
    fn names(&self, batch: &RecordBatch) -> &SortedNames {
        self.names.get_or_init(|| {
            SortedNames::new(
                batch
                    .schema_ref()
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str()),
            )
        })
    }

    /// Row `r` of decoded group `group`, into `fields` (empty).
    fn fill(&self, group: &Group, r: usize, fields: &mut Fields) {
        let (k, row) = group.locate(r);
        let columns = &group.columns[k];
        // Every group has the projected schema the names were taken from;
        // a missing column would read as null.
        let made = fields.try_fill_sorted(self.names(&group.slices[k]), |c| {
            Ok::<_, Infallible>(columns.get(c).map_or(Value::Null, |a| a.value(row)))
        });
        made.unwrap_or_else(|never| match never {});
    }
}

/// `f`, a call into the Parquet reader, with a panic of the reader's (it
/// has some on malformed footers and pages) made an error about `what`:
/// a damaged shard is an error naming it, not the end of the pipeline.
fn guarded<T>(what: &str, f: impl FnOnce() -> FormatResult<T>) -> FormatResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(format!(
            "the Parquet reader failed on {what}: {}",
            zephon_core::error::panic_message(&*p)
        ))
    })
}

/// Numbers the indexes, so each one's groups have keys of their own in
/// the shared cache.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

impl Drop for ParquetIndex {
    fn drop(&mut self) {
        self.decoded_groups.forget(self.id);
    }
}

impl ShardIndex for ParquetIndex {
    fn len(&self) -> u64 {
        *self.starts.last().expect("non-empty")
    }

    /// Once the shard has decoded more of its row groups again, before all
    /// their rows were read, than it has groups: they no longer fit the
    /// decoded-group budget beside what else is being read, and a shuffle
    /// within the shard decodes them again and again.
    fn take_warning(&self) -> Option<String> {
        let groups = self.row_groups() as u64;
        let again = self.redecoded.load(Ordering::Relaxed);
        if again <= groups || self.warned.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(format!(
            "decoded row groups {again} times again before their rows were all read, in a \
             shard of {groups} groups: its decoded groups do \
             not fit the {} MiB kept for all Parquet shards together, and a shuffle within the \
             shard reads them at random, decoding a whole group again for a few rows; read it \
             with `shuffle_within_shard` off and a block shuffle (`shuffle_block_size`), raise \
             the budget (`parquet_decoded_bytes`) to the shard's decoded size, or write smaller \
             row groups and shards",
            decoded_budget() >> 20
        ))
    }

    fn group_of(&self, i: u64) -> Option<usize> {
        (i < self.len()).then(|| self.starts.partition_point(|&s| s <= i) - 1)
    }

    /// Row groups, from the footer parsed at open: only the columns read
    /// count towards the decoded size.
    fn group_sizes(&self) -> Option<super::GroupSizes> {
        let mut sizes = super::GroupSizes {
            groups: self.row_groups() as u64,
            ..Default::default()
        };
        for (w, g) in self
            .starts
            .windows(2)
            .zip(self.meta.metadata().row_groups())
        {
            sizes.max_rows = sizes.max_rows.max(w[1] - w[0]);
            let bytes = g
                .columns()
                .iter()
                .enumerate()
                .filter(|(c, _)| self.mask.as_ref().is_none_or(|m| m.leaf_included(*c)))
                .map(|(_, chunk)| u64::try_from(chunk.uncompressed_size()).unwrap_or(0))
                .fold(0u64, u64::saturating_add);
            sizes.decoded_bytes = sizes.decoded_bytes.saturating_add(bytes);
        }
        Some(sizes)
    }

    /// The projected column chunks of row group `g`, checked against the
    /// file's size (the footer is input like any other).
    fn group_ranges(&self, g: usize) -> FormatResult<Vec<(u64, u64)>> {
        let group = self
            .meta
            .metadata()
            .row_groups()
            .get(g)
            .ok_or_else(|| format!("no row group {g}"))?;
        let mut out = Vec::new();
        for (c, chunk) in group.columns().iter().enumerate() {
            if self.mask.as_ref().is_some_and(|m| !m.leaf_included(c)) {
                continue;
            }
            // Where `ColumnChunkMetaData::byte_range` would panic on a
            // negative offset, this is an error.
            let start = chunk
                .dictionary_page_offset()
                .unwrap_or_else(|| chunk.data_page_offset());
            let range = u64::try_from(start)
                .ok()
                .zip(u64::try_from(chunk.compressed_size()).ok())
                .and_then(|(from, n)| Some((from, from.checked_add(n)?)))
                .filter(|&(_, to)| to <= self.file_len);
            match range {
                Some(r) => out.push(r),
                None => {
                    return Err(format!(
                        "row group {g}, column {c}: the footer places its chunk at offset {start}, \
                         {} bytes, outside the file's {} bytes",
                        chunk.compressed_size(),
                        self.file_len
                    ));
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    fn decode_group(
        &self,
        g: usize,
        spans: Option<Vec<(u64, Bytes)>>,
        indices: &[u64],
    ) -> FormatResult<Option<Vec<Record>>> {
        let (first, end) = match (self.starts.get(g), self.starts.get(g + 1)) {
            (Some(&a), Some(&b)) => (a, b),
            _ => return Err(format!("no row group {g}")),
        };
        if let Some(&i) = indices.iter().find(|&&i| i < first || i >= end) {
            return Err(format!("sample {i} is not in row group {g}"));
        }
        let batch = match (self.cached(g), spans) {
            (Some(b), _) => b,
            (None, None) => return Ok(None),
            (None, Some(spans)) => {
                self.group(&super::blocked::Spans::new(self.file_len, spans), g)?
            }
        };
        let mut out: Vec<Record> = Vec::with_capacity(indices.len());
        for &i in indices {
            out.push(Record::default());
            let r = out.last_mut().expect("just pushed");
            self.fill(&batch, (i - first) as usize, &mut r.fields);
        }
        self.served(g, indices.len());
        Ok(Some(out))
    }

    fn decode(&self, data: &Bytes, indices: &[u64]) -> FormatResult<Vec<Record>> {
        // Filled in group order: empty records (which allocate nothing)
        // hold the places not reached yet.
        let mut out: Vec<Record> = (0..indices.len()).map(|_| Record::default()).collect();
        self.fill_all(data, indices, out.iter_mut().collect())?;
        Ok(out)
    }

    /// As `decode`, each record made in its place in `out`'s chunks.
    fn decode_chunks(&self, data: &Bytes, out: &mut PointerChunks<'_>) -> FormatResult<()> {
        let indices: Vec<u64> = out.pointers().iter().map(|p| p.sample).collect();
        self.fill_all(data, &indices, out.place_all())
    }
}

impl ParquetIndex {
    /// Fills `out[k]` (empty) with sample `indices[k]`, for every `k`.
    fn fill_all(
        &self,
        data: &Bytes,
        indices: &[u64],
        mut out: Vec<&mut Record>,
    ) -> FormatResult<()> {
        // Shuffled samples alternate between groups; visiting them group by
        // group fetches each group once per read even when the cache cannot
        // hold them all.
        let groups: Vec<usize> = indices
            .iter()
            .map(|&i| self.starts.partition_point(|&s| s <= i) - 1)
            .collect();
        let mut order: Vec<usize> = (0..indices.len()).collect();
        order.sort_by_key(|&k| groups[k]);
        // The group being filled from, and how many rows it gave.
        let mut current: Option<(usize, Arc<Group>, usize)> = None;
        for k in order {
            let g = groups[k];
            if current.as_ref().is_none_or(|(c, _, _)| *c != g) {
                if let Some((done, _, n)) = current.take() {
                    self.served(done, n);
                }
                current = Some((g, self.group(data, g)?, 0));
            }
            let (_, group, n) = current.as_mut().expect("set just above");
            let row = (indices[k] - self.starts[g]) as usize;
            self.fill(group, row, &mut out[k].fields);
            *n += 1;
        }
        if let Some((done, _, n)) = current {
            self.served(done, n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    // Larger than a decoded slice (`SLICE_ROWS`), so rows are found across
    // slices, the last one short.
    const GROUP: usize = 2500;
    const GROUPS: usize = 4;
    const ROWS: usize = GROUP * GROUPS;

    fn text(i: usize) -> String {
        format!("row {i} {}", "lorem ipsum ".repeat(1 + i % 7))
    }

    fn shard() -> Bytes {
        use arrow_array::{ArrayRef, Int64Array, StringArray};
        let batch = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(Int64Array::from_iter_values(0..ROWS as i64)) as ArrayRef,
            ),
            (
                "text",
                Arc::new(StringArray::from_iter_values((0..ROWS).map(text))) as ArrayRef,
            ),
        ])
        .unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(GROUP))
            .build();
        let mut out = Vec::new();
        let mut w = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        Bytes::from(out)
    }

    /// An index of `data` keeping its groups in a cache of its own that
    /// holds `budget` bytes.
    fn own_index(data: &Bytes, budget: usize) -> (ParquetIndex, Arc<Decoded>) {
        let cache = Arc::new(Decoded::new(budget));
        let index = ParquetIndex::open(data, None)
            .unwrap()
            .with_cache(cache.clone());
        (index, cache)
    }

    /// A fixed pseudo-random permutation of `0..n` (Fisher-Yates over an LCG),
    /// so the test needs no random crate and is the same on every run.
    fn shuffled(n: usize, mut seed: u64) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            v.swap(i, (seed >> 33) as usize % (i + 1));
        }
        v
    }

    /// Reads `calls` (each a list of sample indices) through a fresh index
    /// and checks every record; returns the rows decoded.
    fn read_all(data: &Bytes, calls: &[Vec<u64>]) -> u64 {
        let index = ParquetIndex::open(data, None).unwrap();
        assert_eq!(index.row_groups(), GROUPS);
        let mut seen = 0;
        for call in calls {
            let records = index.decode(data, call).unwrap();
            assert_eq!(records.len(), call.len());
            for (&i, r) in call.iter().zip(&records) {
                assert_eq!(r.get("id"), Some(&Value::Int(i as i64)));
                assert_eq!(r.get("text"), Some(&Value::Text(text(i as usize))));
                // Shared with the decoded column, not copied per record.
                assert!(matches!(r.get("text"), Some(Value::TextView(_))));
            }
            seen += call.len();
        }
        assert_eq!(seen, ROWS);
        index.decoded_rows()
    }

    /// Columns stored out of name order land in their fields, made in
    /// name order; of a name stored twice (Arrow allows it) the later
    /// column wins, as a map's insert would.
    #[test]
    fn columns_in_any_order_land_in_their_fields() {
        use arrow_array::{ArrayRef, Int64Array, StringArray};
        let ids = || Arc::new(Int64Array::from_iter_values(0..10)) as ArrayRef;
        let texts = || Arc::new(StringArray::from_iter_values((0..10).map(text))) as ArrayRef;
        let tens = || Arc::new(Int64Array::from_iter_values((0..10).map(|i| i * 10))) as ArrayRef;
        for (columns, want) in [
            (
                vec![("text", texts()), ("id", ids()), ("b", tens())],
                vec!["b", "id", "text"],
            ),
            (
                vec![("text", texts()), ("b", ids()), ("b", tens())],
                vec!["b", "text"],
            ),
        ] {
            let batch = RecordBatch::try_from_iter(columns).unwrap();
            let mut out = Vec::new();
            let mut w = ArrowWriter::try_new(&mut out, batch.schema(), None).unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
            let data = Bytes::from(out);
            let index = ParquetIndex::open(&data, None).unwrap();
            let records = index.decode(&data, &[7, 2]).unwrap();
            for (r, i) in records.iter().zip([7i64, 2]) {
                let names: Vec<&str> = r.fields.keys().map(|k| k.as_str()).collect();
                assert_eq!(names, want);
                assert_eq!(r.get("text"), Some(&Value::Text(text(i as usize))));
                assert_eq!(r.get("b"), Some(&Value::Int(i * 10)));
                if want.contains(&"id") {
                    assert_eq!(r.get("id"), Some(&Value::Int(i)));
                }
            }
        }
    }

    /// The group sizes come from the footer parsed at open: every group,
    /// the largest one's rows, and only the projected columns' bytes.
    #[test]
    fn group_sizes_count_the_columns_read() {
        let data = shard();
        let all = ParquetIndex::open(&data, None)
            .unwrap()
            .group_sizes()
            .unwrap();
        let cols = ["id".to_owned()];
        let ids = ParquetIndex::open(&data, Some(&cols))
            .unwrap()
            .group_sizes()
            .unwrap();
        assert_eq!((all.groups, all.max_rows), (GROUPS as u64, GROUP as u64));
        assert_eq!((ids.groups, ids.max_rows), (all.groups, all.max_rows));
        // Eight bytes an id at least, and the texts (a dozen bytes and
        // more a row) on top of them when every column is read.
        assert!(ids.decoded_bytes >= 8 * ROWS as u64, "{ids:?}");
        assert!(
            all.decoded_bytes > ids.decoded_bytes + 12 * ROWS as u64,
            "{all:?} {ids:?}"
        );
    }

    #[test]
    fn groups_over_the_budget_are_dropped_and_each_read_decodes_a_group_once() {
        let data = shard();
        let (index, cache) = own_index(&data, 0);
        let mut bound = 0;
        for call in shuffled(ROWS, 3).chunks(256) {
            let call: Vec<u64> = call.iter().map(|&i| i as u64).collect();
            let records = index.decode(&data, &call).unwrap();
            for (&i, r) in call.iter().zip(&records) {
                assert_eq!(r.get("id"), Some(&Value::Int(i as i64)));
            }
            let mut groups: Vec<u64> = call.iter().map(|&i| i / GROUP as u64).collect();
            groups.sort_unstable();
            groups.dedup();
            bound += groups.len() as u64 * GROUP as u64;
            assert_eq!(cache.held().0, 1);
        }
        assert!(index.decoded_rows() <= bound);
    }

    #[test]
    fn every_sample_in_any_order_decodes_each_row_group_about_once() {
        let data = shard();
        let runs: Vec<Vec<u64>> = (0..ROWS as u64)
            .step_by(256)
            .map(|s| (s..(s + 256).min(ROWS as u64)).collect())
            .collect();
        let mut shuffled_runs = runs.clone();
        let order = shuffled(runs.len(), 7);
        for (k, &j) in order.iter().enumerate() {
            shuffled_runs[k] = runs[j].clone();
        }
        // What a within-shard shuffle issues: random samples, 256 per call.
        let random: Vec<Vec<u64>> = shuffled(ROWS, 11)
            .chunks(256)
            .map(|c| c.iter().map(|&i| i as u64).collect())
            .collect();
        for (what, calls) in [
            ("runs in order", runs),
            ("runs in shuffled order", shuffled_runs),
            ("shuffled samples", random),
        ] {
            let decoded = read_all(&data, &calls);
            assert!(
                decoded <= 2 * ROWS as u64,
                "{what}: decoded {decoded} rows to read a shard of {ROWS}"
            );
        }
    }

    /// The groups of many shards share one budget: reading shard after
    /// shard keeps what fits it (plus the group just decoded), and an index
    /// dropped takes its groups with it.
    #[test]
    fn shards_share_one_budget_and_a_dropped_index_frees_its_groups() {
        let data = shard();
        let one_group = own_index(&data, usize::MAX)
            .0
            .group(&data, 0)
            .unwrap()
            .memory_size();
        // Room for three groups of the eight shards' 32.
        let cache = Arc::new(Decoded::new(3 * one_group + one_group / 2));
        let indexes: Vec<ParquetIndex> = (0..8)
            .map(|_| {
                ParquetIndex::open(&data, None)
                    .unwrap()
                    .with_cache(cache.clone())
            })
            .collect();
        // All but each group's last row, so no group is read through (and
        // dropped for that).
        let most: Vec<u64> = shuffled(ROWS, 9)
            .into_iter()
            .filter(|i| i % GROUP != GROUP - 1)
            .map(|i| i as u64)
            .collect();
        for index in &indexes {
            let records = index.decode(&data, &most).unwrap();
            assert_eq!(records.len(), most.len());
            let (groups, bytes) = cache.held();
            assert!(groups <= 3, "{groups} groups held");
            assert!(bytes <= 3 * one_group + one_group / 2, "{bytes} bytes held");
        }
        let kept = cache.held().0;
        assert!(kept > 0);
        drop(indexes);
        assert_eq!(
            cache.held(),
            (0, 0),
            "{kept} groups of dropped indexes kept"
        );
    }

    /// A budget lowered drops groups down to it at once; raised, it keeps
    /// what it had and holds more.
    #[test]
    fn a_budget_set_lower_drops_groups_at_once() {
        let data = shard();
        let (index, cache) = own_index(&data, usize::MAX);
        // A row of each group, none read through.
        index
            .decode(&data, &[0, GROUP as u64, 2 * GROUP as u64])
            .unwrap();
        let (groups, bytes) = cache.held();
        assert_eq!(groups, 3);
        cache.set_budget(bytes / 2);
        let (kept, left) = cache.held();
        assert!(kept < 3 && left <= bytes / 2, "{kept} groups, {left} bytes");
        // The most recent stays.
        assert!(cache.get((index.id, 2)).is_some());
        cache.set_budget(usize::MAX);
        index.decode(&data, &[0, GROUP as u64]).unwrap();
        assert_eq!(cache.held().0, 3);
    }

    /// A shard shuffled within itself past the budget decodes its groups
    /// again and says so, once; one whose groups stay in memory does not.
    #[test]
    fn a_shard_decoding_its_groups_again_warns_once() {
        let data = shard();
        let calls: Vec<Vec<u64>> = shuffled(ROWS, 13)
            .chunks(16)
            .map(|c| c.iter().map(|&i| i as u64).collect())
            .collect();
        let (starved, _) = own_index(&data, 0);
        let mut warnings = Vec::new();
        for call in &calls {
            starved.decode(&data, call).unwrap();
            warnings.extend(starved.take_warning());
        }
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("shuffle_block_size"),
            "{}",
            warnings[0]
        );
        assert!(
            warnings[0].contains(&format!("a shard of {GROUPS}")),
            "{}",
            warnings[0]
        );

        // Three passes, each shuffled within the shard: every group is
        // decoded once a pass and leaves the cache once its rows are read,
        // which is no reason to warn.
        let (roomy, cache) = own_index(&data, usize::MAX);
        for pass in 1..=3u64 {
            for call in shuffled(ROWS, 13 + pass).chunks(16) {
                let call: Vec<u64> = call.iter().map(|&i| i as u64).collect();
                roomy.decode(&data, &call).unwrap();
                assert_eq!(roomy.take_warning(), None);
            }
            assert_eq!(roomy.decoded_rows(), pass * ROWS as u64);
            assert_eq!(cache.held(), (0, 0), "groups read through are kept");
        }
    }

    /// A group leaves the cache as soon as its last row is read, whether
    /// the rows come in order or shuffled, and through `decode_group` (the
    /// block reader's path) too; a group not read through stays.
    #[test]
    fn a_group_read_through_leaves_the_cache() {
        let data = shard();
        let (index, cache) = own_index(&data, usize::MAX);
        let first: Vec<u64> = (0..GROUP as u64 - 1).collect();
        index.decode(&data, &first).unwrap();
        assert_eq!(cache.held().0, 1, "group 0 is not read through yet");
        let last = [GROUP as u64 - 1];
        let records = index.decode_group(0, None, &last).unwrap().unwrap();
        assert_eq!(records[0].get("id"), Some(&Value::Int(GROUP as i64 - 1)));
        assert_eq!(cache.held().0, 0, "group 0 was read through");
        // Group 1 in two shuffled halves.
        let g1: Vec<u64> = shuffled(GROUP, 2)
            .into_iter()
            .map(|r| (GROUP + r) as u64)
            .collect();
        index.decode(&data, &g1[..GROUP / 2]).unwrap();
        assert_eq!(cache.held().0, 1);
        index.decode(&data, &g1[GROUP / 2..]).unwrap();
        assert_eq!(cache.held().0, 0);
        assert_eq!(index.decoded_rows(), 2 * GROUP as u64);
    }

    /// Reads in flight at once that need the same row groups (what
    /// `fetch(p)` issues under a shuffle within a shard) decode each group
    /// once: the others wait for it and take it from the recent groups.
    #[test]
    fn reads_at_once_decode_each_group_once() {
        let data = shard();
        let index = ParquetIndex::open(&data, None).unwrap();
        let calls: Vec<Vec<u64>> = shuffled(ROWS, 5)
            .chunks(ROWS / 8)
            .map(|c| c.iter().map(|&i| i as u64).collect())
            .collect();
        let start = std::sync::Barrier::new(calls.len());
        std::thread::scope(|s| {
            for call in &calls {
                let (index, data, start) = (&index, &data, &start);
                s.spawn(move || {
                    start.wait();
                    let records = index.decode(data, call).unwrap();
                    for (&i, r) in call.iter().zip(&records) {
                        assert_eq!(r.get("id"), Some(&Value::Int(i as i64)));
                    }
                });
            }
        });
        assert_eq!(index.decoded_rows(), ROWS as u64);
    }
}
