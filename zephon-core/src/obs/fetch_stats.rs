//! Per-shard fetch counters.

use crate::dataset::Catalog;
use std::collections::BTreeMap;
use std::sync::Mutex;
use zephon_metrics::{FetchTimingSnapshot, IoStats, ShardFetchStats};

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    samples: u64,
    groups: u64,
    hits: u64,
    misses: u64,
    open_ns: u64,
    read_ns: u64,
    opens: u64,
}

/// What fetch did, per (dataset, shard); one lock per group of samples.
#[derive(Debug)]
pub struct FetchStats {
    catalog: Catalog,
    shards: Mutex<BTreeMap<(u32, u32), Counts>>,
}

/// One read request, as fetch saw it.
#[derive(Clone, Copy, Debug)]
pub struct GroupRecord {
    /// Dataset index.
    pub dataset: u32,
    /// Shard index.
    pub shard: u32,
    /// Samples in the group.
    pub samples: u64,
    /// The shard was ready (cached, local) when the group started.
    pub hit: bool,
    /// Nanoseconds spent opening / downloading before the read.
    pub open_ns: u64,
    /// Nanoseconds spent reading and parsing.
    pub read_ns: u64,
}

impl FetchStats {
    pub(crate) fn new(catalog: Catalog) -> Self {
        FetchStats {
            catalog,
            shards: Mutex::new(BTreeMap::new()),
        }
    }

    /// Records one group.
    pub fn record(&self, g: GroupRecord) {
        let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        let c = shards.entry((g.dataset, g.shard)).or_default();
        c.samples += g.samples;
        c.groups += 1;
        if g.hit {
            c.hits += 1;
        } else {
            c.misses += 1;
            c.opens += 1;
        }
        c.open_ns += g.open_ns;
        c.read_ns += g.read_ns;
    }

    pub(crate) fn snapshot_into(&self, out: &mut FetchTimingSnapshot) {
        let shards = self
            .shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut seen_ds = std::collections::BTreeSet::new();
        for ((d, s), c) in shards {
            let ds = self.catalog.get(d as usize);
            let stats = ShardFetchStats {
                dataset: ds.map_or_else(|| d.to_string(), |x| x.name().to_owned()),
                shard: ds
                    .and_then(|x| x.shards().get(s as usize))
                    .map_or_else(|| s.to_string(), |x| x.name().to_owned()),
                samples: c.samples,
                groups: c.groups,
                cache_hits: c.hits,
                cache_misses: c.misses,
                open_s: c.open_ns as f64 / 1e9,
                read_s: c.read_ns as f64 / 1e9,
                avg_group_s: (c.open_ns + c.read_ns) as f64 / 1e9 / c.groups.max(1) as f64,
                reopens: c.opens.saturating_sub(1),
            };
            let t = &mut out.totals;
            t.samples += stats.samples;
            t.groups += stats.groups;
            t.cache_hits += stats.cache_hits;
            t.cache_misses += stats.cache_misses;
            t.open_s += stats.open_s;
            t.read_s += stats.read_s;
            t.reopens += stats.reopens;
            out.per_shard.push(stats);
            if seen_ds.insert(d)
                && let Some(io) = ds
                    .and_then(|x| x.shards().get(s as usize))
                    .and_then(|x| x.io_stats())
            {
                out.storage
                    .push((ds.map_or_else(String::new, |x| x.name().to_owned()), io));
            }
        }
    }
}

/// Adds `b` into `a`.
pub(crate) fn merge_io(a: &mut IoStats, b: &IoStats) {
    a.cache_hits += b.cache_hits;
    a.cache_misses += b.cache_misses;
    a.failures += b.failures;
    a.retries += b.retries;
    a.bytes_downloaded += b.bytes_downloaded;
    a.download_s += b.download_s;
    a.decode_s += b.decode_s;
    a.evictions += b.evictions;
    a.thrashing |= b.thrashing;
}
