//! Shards read by blocks of the shard cache: their index opened from the
//! blocks covering an MDS header or a Parquet footer, or from one pass over
//! a WebDataset tar's blocks, and a grouped format's samples read group by
//! group (see [`crate::format::blocked`] for why each format is read so).

use crate::cache::blocks::BlockFile;
use crate::error::shard_error;
use crate::format::{FormatSpec, ShardIndex};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;
use zephon_core::runner::offload;
use zephon_core::{Record, Result};

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
                    match crate::format::mds::header_len(u32::from_le_bytes(
                        n.try_into().expect("4 bytes"),
                    )) {
                        // Refused below, without reading a table that cannot be.
                        table if table > len => count,
                        table => read(file, 0, table).await?,
                    }
                }
                None => count,
            };
            match crate::format::mds::MdsIndex::from_header(&head, len, columns) {
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
            let spans = crate::format::blocked::Spans::new(len, vec![(len - 8 - meta, footer)]);
            let columns = columns.clone();
            let opened = offload("fetch", move || {
                crate::format::parquet::ParquetIndex::open(&spans, columns.as_deref())
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
                .scan(move |reader| crate::format::webdataset::TarIndex::scan(reader, len))
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
        crate::format::warn_once(index.as_ref(), dataset, name);
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
