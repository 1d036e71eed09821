//! Reading one group of pointers: per shard, or a window across shards
//! split into one read per shard.

use crate::dataset::Catalog;
use crate::error::{Error, Result};
use crate::obs::{FetchStats, GroupRecord, OpStats};
use crate::pointer::SamplePtr;
use crate::record::Record;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Fetch sizes one read group in this many, and one record in this many
/// within it (bytes are an estimate).
const BYTE_SAMPLE: u64 = 16;

#[derive(Clone, Default)]
pub(super) struct Instruments {
    pub(super) op: Option<Arc<OpStats>>,
    pub(super) fetch: Option<Arc<FetchStats>>,
}

/// Records read by one group, in pointer order, in consecutive chunks.
pub(super) type Chunks = Vec<Vec<Record>>;

/// Where a group's records are to be cut into chunks: the first chunk's
/// length, then every later one's (see [`Shard::read_pointer_chunks`]).
///
/// [`Shard::read_pointer_chunks`]: crate::Shard::read_pointer_chunks
pub(super) type Cut = Option<(usize, usize)>;

fn read_group(
    catalog: &Catalog,
    group: Vec<SamplePtr>,
    cut: Cut,
    inst: Instruments,
) -> BoxFuture<'static, Result<Chunks>> {
    let first = group[0];
    let Some(shard) = catalog
        .get(first.dataset as usize)
        .and_then(|d| d.shards().get(first.shard as usize))
        .cloned()
    else {
        return futures::future::ready(Err(Error::UnknownPointer { ptr: first })).boxed();
    };
    // Named only in the error below: a counted clone, not a copy per group.
    let catalog = catalog.clone();
    async move {
        let timed = inst.op.is_some() || inst.fetch.is_some();
        let t0 = timed.then(Instant::now);
        let hit = !timed || shard.is_warm();
        if !hit {
            // A failed warm-up is not fatal: the read below tries again and
            // reports the error with its shard.
            let _ = shard.warm().await;
        }
        let t1 = timed.then(Instant::now);
        // Lane and lineage come set: a shard making its records sets them
        // as it makes each.
        let records = match cut {
            Some((first, len)) => shard.read_pointer_chunks(&group, first, len).await?,
            None => vec![shard.read_pointers(&group).await?],
        };
        let count: usize = records.iter().map(Vec::len).sum();
        if let (Some(t0), Some(t1)) = (t0, t1) {
            let (open_ns, read_ns) = ((t1 - t0).as_nanos() as u64, t1.elapsed().as_nanos() as u64);
            if let Some(f) = &inst.fetch {
                f.record(GroupRecord {
                    dataset: first.dataset,
                    shard: first.shard,
                    samples: group.len() as u64,
                    hit,
                    open_ns,
                    read_ns,
                });
            }
            if let Some(op) = &inst.op {
                op.busy.record_many(open_ns + read_ns, group.len() as u64);
                // Sizing every record costs more than reading it from memory;
                // one group in BYTE_SAMPLE stands for the others.
                // Within it, one record in BYTE_SAMPLE too.
                if op.tick().is_multiple_of(BYTE_SAMPLE) && count > 0 {
                    let step = BYTE_SAMPLE as usize;
                    let (sum, n) = records
                        .iter()
                        .flatten()
                        .step_by(step)
                        .fold((0u64, 0u64), |(s, n), r| (s + r.byte_len() as u64, n + 1));
                    op.bytes_out.add(sum * count as u64 / n * BYTE_SAMPLE);
                }
            }
        }
        if count != group.len() {
            return Err(Error::Operator {
                op: "fetch",
                message: format!(
                    "dataset `{}`, shard `{}` returned {} records for {} samples",
                    catalog[first.dataset as usize].name(),
                    shard.name(),
                    count,
                    group.len()
                ),
            });
        }
        Ok(records)
    }
    .boxed()
}

/// Reads a group whose pointers may name several shards: one
/// [`read_group`] per shard, all at once, the records put back in pointer
/// order. A group of one shard is cut into chunks as `cut` asks; one of
/// several comes back in one chunk. `one_shard`: the caller built the group
/// from one shard's pointers only (`fetch` without `across_shards`), so
/// they are not looked over again.
pub(super) fn read_window(
    catalog: &Catalog,
    group: Vec<SamplePtr>,
    one_shard: bool,
    cut: Cut,
    inst: Instruments,
) -> BoxFuture<'static, Result<Chunks>> {
    let first = group[0];
    let same = |p: &SamplePtr| p.dataset == first.dataset && p.shard == first.shard;
    debug_assert!(!one_shard || group.iter().all(same));
    if one_shard || group.iter().all(same) {
        return read_group(catalog, group, cut, inst);
    }
    // Each shard's positions and pointers, in order of first appearance.
    let mut slot: HashMap<(u32, u32), usize> = HashMap::new();
    let mut parts: Vec<(Vec<usize>, Vec<SamplePtr>)> = Vec::new();
    for (i, p) in group.iter().enumerate() {
        let k = *slot.entry((p.dataset, p.shard)).or_insert_with(|| {
            parts.push((Vec::new(), Vec::new()));
            parts.len() - 1
        });
        parts[k].0.push(i);
        parts[k].1.push(*p);
    }
    let reads: Vec<_> = parts
        .iter_mut()
        .map(|(_, ptrs)| read_group(catalog, std::mem::take(ptrs), None, inst.clone()))
        .collect();
    let n = group.len();
    async move {
        let results = futures::future::try_join_all(reads).await?;
        let mut out: Vec<Option<Record>> = (0..n).map(|_| None).collect();
        for ((positions, _), records) in parts.iter().zip(results) {
            // `read_group` checked that each share got one record per pointer.
            for (&i, r) in positions.iter().zip(records.into_iter().flatten()) {
                out[i] = Some(r);
            }
        }
        out.into_iter()
            .collect::<Option<Vec<Record>>>()
            .map(|records| vec![records])
            .ok_or_else(|| Error::Operator {
                op: "fetch",
                message: format!("a read window of {n} pointers came back incomplete"),
            })
    }
    .boxed()
}
