//! MDS, Parquet and WebDataset shards read by blocks of the shard cache.
//!
//! Neither format needs the whole shard to read a sample. An MDS shard
//! starts with its offset table: read through the blocks covering it, it
//! gives each sample's byte range, and a read fetches the blocks of those
//! ranges. A Parquet shard ends with its footer: read through the blocks
//! covering it, it gives each row group's column chunks, and a read fetches
//! the blocks of the projected chunks of the row groups its samples lie in,
//! one row group at a time, then decodes that group as a local read does
//! (kept in memory per shard, bounded; see [`parquet`](super::parquet)).
//!
//! A WebDataset tar has no table: its members are found by walking every
//! header, so it is indexed by one pass over all its blocks in order (the
//! whole tar is downloaded once, into the cache, a few blocks in memory at
//! a time); then each sample is one byte range, read like an MDS sample.

use super::{FormatSpec, ShardIndex};
use crate::blocks::BlockFile;
use crate::error::shard_error;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;
use zephon_core::runner::offload;
use zephon_core::{Record, Result};

/// Whether shards of `spec` can be read by blocks with [`open_index`] and
/// [`read_groups`] (MDS, Parquet, WebDataset), beyond the formats read sample by sample
/// from their size or sidecar (token files, Megatron).
pub fn indexed_by_blocks(spec: &FormatSpec) -> bool {
    matches!(spec, FormatSpec::Mds { .. } | FormatSpec::WebDataset)
        || matches!(spec, FormatSpec::Parquet { .. }) && cfg!(feature = "parquet")
}

/// Bytes `from..to` of the shard, through its blocks.
async fn read(file: &Arc<BlockFile>, from: u64, to: u64) -> Result<Bytes> {
    let mut spans = file.fetch_spans(vec![(from, to)]).await?;
    Ok(spans.pop().map(|(_, b)| b).unwrap_or_default())
}

/// `e`, once the cached blocks holding bytes `from..to`, which the format
/// could not read, are dropped: the next run downloads them again rather
/// than fail on the same bytes from the cache.
async fn evicted(
    file: &Arc<BlockFile>,
    from: u64,
    to: u64,
    e: zephon_core::Error,
) -> zephon_core::Error {
    file.evict_ranges(vec![(from, to)]).await;
    e
}

/// The index of an MDS, Parquet or WebDataset shard read by blocks, from
/// its header (MDS) or footer (Parquet), read through the blocks covering
/// it, or from one pass over its blocks (WebDataset).
pub async fn open_index(
    spec: &FormatSpec,
    file: &Arc<BlockFile>,
    dataset: &str,
    name: &str,
) -> Result<Arc<dyn ShardIndex>> {
    let len = file.len();
    let fail = |m: String| shard_error(dataset, name, m);
    match spec {
        FormatSpec::Mds { columns } => {
            // The count, then the table it sizes: two reads, one block
            // download when the table fits the first block.
            let count = read(file, 0, len.min(4)).await?;
            let head = match count.get(..4) {
                Some(n) => {
                    match super::mds::header_len(u32::from_le_bytes(n.try_into().expect("4 bytes")))
                    {
                        // Refused below, without reading a table that cannot be.
                        table if table > len => count,
                        table => read(file, 0, table).await?,
                    }
                }
                None => count,
            };
            match super::mds::MdsIndex::from_header(&head, len, columns) {
                Ok(i) => Ok(Arc::new(i) as Arc<dyn ShardIndex>),
                Err(m) => Err(evicted(file, 0, head.len() as u64, fail(m)).await),
            }
        }
        #[cfg(feature = "parquet")]
        FormatSpec::Parquet { columns } => {
            if len < 8 {
                return Err(fail(format!(
                    "not a readable Parquet file: {len} bytes is too short"
                )));
            }
            let tail = read(file, len - 8, len).await?;
            if &tail[4..] != b"PAR1" {
                let e = fail("not a readable Parquet file: it does not end in PAR1".into());
                return Err(evicted(file, len - 8, len, e).await);
            }
            let meta = u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")) as u64;
            if meta + 8 > len {
                let e = fail(format!(
                    "not a readable Parquet file: its footer claims {meta} bytes of metadata, \
                     more than the file's {len} bytes"
                ));
                return Err(evicted(file, len - 8, len, e).await);
            }
            let footer = read(file, len - 8 - meta, len).await?;
            let spans = Spans::new(len, vec![(len - 8 - meta, footer)]);
            let columns = columns.clone();
            let opened = offload("fetch", move || {
                super::parquet::ParquetIndex::open(&spans, columns.as_deref())
                    .map(|i| Arc::new(i) as Arc<dyn ShardIndex>)
            })
            .await?;
            match opened {
                Ok(i) => Ok(i),
                Err(m) => Err(evicted(file, len - 8 - meta, len, fail(m)).await),
            }
        }
        FormatSpec::WebDataset => {
            let index = file
                .scan(move |reader| super::webdataset::TarIndex::scan(reader, len))
                .await?;
            match index {
                Ok(i) => Ok(Arc::new(i) as Arc<dyn ShardIndex>),
                // A tar is indexed from every one of its blocks.
                Err(m) => Err(evicted(file, 0, len, fail(m)).await),
            }
        }
        _ => Err(fail(format!(
            "the {} format is not read by blocks this way",
            spec.name()
        ))),
    }
}

/// Samples `indices` (each below the shard's length) of a shard whose
/// samples are decoded in groups, in request order: group by group, each
/// from memory when the index keeps it decoded, or from the blocks of its
/// [`group_ranges`](ShardIndex::group_ranges).
pub async fn read_groups(
    file: &Arc<BlockFile>,
    index: Arc<dyn ShardIndex>,
    indices: &[u64],
    dataset: &Arc<str>,
    name: &str,
) -> Result<Vec<Record>> {
    let fail = |m: String| shard_error(dataset, name, m);
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (k, &i) in indices.iter().enumerate() {
        let g = index
            .group_of(i)
            .ok_or_else(|| fail(format!("sample {i} lies in no group")))?;
        groups.entry(g).or_default().push(k);
    }
    let mut out: Vec<Option<Record>> = vec![None; indices.len()];
    for (g, at) in groups {
        let wanted: Vec<u64> = at.iter().map(|&k| indices[k]).collect();
        let decode = |spans: Option<Vec<(u64, Bytes)>>| {
            let (index, wanted) = (index.clone(), wanted.clone());
            offload("fetch", move || index.decode_group(g, spans, &wanted))
        };
        let records = match decode(None).await?.map_err(fail)? {
            Some(r) => r,
            None => {
                let ranges = index.group_ranges(g).map_err(fail)?;
                let spans = file.fetch_spans(ranges.clone()).await?;
                match decode(Some(spans)).await? {
                    Ok(r) => r.ok_or_else(|| fail(format!("group {g} was not decoded")))?,
                    // Cached blocks the format cannot decode are dropped, so
                    // the next run downloads them again.
                    Err(m) => {
                        file.evict_ranges(ranges).await;
                        return Err(fail(m));
                    }
                }
            }
        };
        super::shard::warn_once(index.as_ref(), dataset, name);
        if records.len() != at.len() {
            return Err(fail(format!(
                "group {g} gave {} samples for {} asked",
                records.len(),
                at.len()
            )));
        }
        for (k, r) in at.into_iter().zip(records) {
            out[k] = Some(r);
        }
    }
    Ok(out
        .into_iter()
        .map(|r| r.expect("every position is in a group"))
        .collect())
}

/// The byte ranges that reading samples `indices` touches, in the order
/// they would be read: each sample's own range, or the ranges of the group
/// it lies in (once per group). Samples outside the shard are skipped.
pub fn sample_ranges(index: &dyn ShardIndex, indices: &[u64]) -> Vec<(u64, u64)> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for &i in indices {
        match index.group_of(i) {
            Some(g) if seen.insert(g) => out.extend(index.group_ranges(g).unwrap_or_default()),
            Some(_) => {}
            None => out.extend(index.byte_range(i)),
        }
    }
    out
}

/// The byte ranges of every group of the shard, in file order (of a
/// format without groups, none), stopping at a group whose ranges the
/// footer gets wrong (its read reports it).
pub fn all_group_ranges(index: &dyn ShardIndex) -> Vec<(u64, u64)> {
    (0..)
        .map_while(|g| index.group_ranges(g).ok())
        .flatten()
        .collect()
}

/// Parts of a file fetched so far, as the `parquet` crate reads files: a
/// read outside them is an error, never a silent short read.
#[cfg(feature = "parquet")]
#[derive(Clone, Debug)]
pub struct Spans {
    len: u64,
    spans: Arc<Vec<(u64, Bytes)>>,
}

#[cfg(feature = "parquet")]
impl Spans {
    /// The parts `spans` (each its start and bytes, sorted by start) of a
    /// file of `len` bytes.
    pub fn new(len: u64, spans: Vec<(u64, Bytes)>) -> Self {
        Spans {
            len,
            spans: Arc::new(spans),
        }
    }

    /// The fetched bytes from `start` to the end of the span holding it.
    fn from(&self, start: u64) -> parquet::errors::Result<Bytes> {
        let k = self.spans.partition_point(|(s, _)| *s <= start);
        k.checked_sub(1)
            .map(|k| &self.spans[k])
            .filter(|(s, b)| start - s <= b.len() as u64)
            .map(|(s, b)| b.slice((start - s) as usize..))
            .ok_or_else(|| {
                parquet::errors::ParquetError::General(format!(
                    "offset {start} lies outside the bytes read for this row group"
                ))
            })
    }
}

#[cfg(feature = "parquet")]
impl parquet::file::reader::Length for Spans {
    fn len(&self) -> u64 {
        self.len
    }
}

#[cfg(feature = "parquet")]
impl parquet::file::reader::ChunkReader for Spans {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        Ok(self.from(start)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let b = self.from(start)?;
        if b.len() < length {
            return Err(parquet::errors::ParquetError::General(format!(
                "bytes {start}..{} lie outside the bytes read for this row group",
                start + length as u64
            )));
        }
        Ok(b.slice(..length))
    }
}

#[cfg(all(test, feature = "parquet"))]
mod tests {
    use super::*;
    use parquet::file::reader::ChunkReader;

    #[test]
    fn spans_serve_only_what_was_fetched() {
        let s = Spans::new(
            100,
            vec![
                (10, Bytes::from_static(b"abcd")),
                (50, Bytes::from_static(b"xyz")),
            ],
        );
        assert_eq!(s.get_bytes(11, 2).unwrap(), Bytes::from_static(b"bc"));
        assert_eq!(s.get_bytes(50, 3).unwrap(), Bytes::from_static(b"xyz"));
        assert!(s.get_bytes(12, 4).is_err());
        assert!(s.get_bytes(5, 1).is_err());
        assert!(s.get_bytes(30, 1).is_err());
    }
}
