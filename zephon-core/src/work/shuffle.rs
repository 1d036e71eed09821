//! Where position `p` of a dataset's pass lands: shard shuffle, within-shard
//! shuffle and block shuffle, each a keyed permutation evaluated on demand.

use crate::hash::{Permutation, key, permute};
use serde::{Deserialize, Serialize};

/// Block shuffle: after shard order and within-shard order are fixed, the
/// dataset's pass is cut into blocks of this many samples and each block is
/// permuted. Blocks larger than a shard mix samples across shards.
/// Over remote data, blocks keep reads local (cache-friendly) where a
/// global shuffle reads at random; see
/// [`WorkSourceBuilder::shuffle_block_size`](crate::work::WorkSourceBuilder::shuffle_block_size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockShuffle {
    /// No block shuffle.
    #[default]
    Off,
    /// Blocks of this many samples.
    Size(u64),
    /// Blocks of the dataset's mean shard length, so each block spans about two shards.
    Auto,
    /// One block: a global shuffle of the whole dataset.
    Global,
}

impl std::str::FromStr for BlockShuffle {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "off" | "none" => Ok(BlockShuffle::Off),
            "auto" => Ok(BlockShuffle::Auto),
            "global" => Ok(BlockShuffle::Global),
            n => n
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .map(BlockShuffle::Size)
                .ok_or_else(|| {
                    crate::Error::config(
                        "shuffle_block_size",
                        format!("`{s}` is not a positive number, `auto`, `global` or `off`"),
                    )
                }),
        }
    }
}

/// Salts that keep the three permutations independent.
const SHARD_ORDER: u64 = 0x5A4D;
const WITHIN_SHARD: u64 = 0x0717;
const BLOCK: u64 = 0xB10C;

/// The shard layout of one dataset and its shuffle settings.
#[derive(Clone, Debug)]
pub(crate) struct DatasetOrder {
    pub seed: u64,
    pub dataset: u32,
    pub shard_lens: Vec<u64>,
    pub total: u64,
    pub shuffle_shards: bool,
    pub shuffle_within_shard: bool,
    /// Resolved block size, `None` when off.
    pub block: Option<u64>,
}

/// Shard order of one pass, with the start of each shard in pass order.
#[derive(Clone, Debug)]
pub(crate) struct PassLayout {
    pub pass: u64,
    pub order: Vec<u32>,
    pub starts: Vec<u64>,
    /// The dataset position where this pass starts (`pass * total`).
    pub first: u64,
    /// The shard (index into `order`) of the last position located, and
    /// its within-shard permutation key: consecutive positions mostly fall
    /// in the same shard, and hashing the key per pointer cost more than
    /// the rest of locating it.
    hint: usize,
    within_key: Option<(u32, u64)>,
}

impl DatasetOrder {
    pub fn new(
        seed: u64,
        dataset: u32,
        shard_lens: Vec<u64>,
        shuffle_shards: bool,
        shuffle_within_shard: bool,
        block: BlockShuffle,
    ) -> Self {
        let total: u64 = shard_lens.iter().sum();
        let block = match block {
            BlockShuffle::Off => None,
            BlockShuffle::Size(n) => Some(n.max(1)),
            BlockShuffle::Auto => Some(total.div_ceil(shard_lens.len().max(1) as u64).max(1)),
            BlockShuffle::Global => Some(total.max(1)),
        };
        DatasetOrder {
            seed,
            dataset,
            shard_lens,
            total,
            shuffle_shards,
            shuffle_within_shard,
            block,
        }
    }

    pub fn layout(&self, pass: u64) -> PassLayout {
        let n = self.shard_lens.len() as u64;
        let k = key(&[self.seed, self.dataset as u64, pass, SHARD_ORDER]);
        let order: Vec<u32> = (0..n)
            .map(|i| {
                if self.shuffle_shards {
                    permute(i, n, k) as u32
                } else {
                    i as u32
                }
            })
            .collect();
        let mut starts = Vec::with_capacity(order.len());
        let mut acc = 0;
        for &s in &order {
            starts.push(acc);
            acc += self.shard_lens[s as usize];
        }
        PassLayout {
            pass,
            order,
            starts,
            first: pass * self.total,
            hint: 0,
            within_key: None,
        }
    }

    /// `(shard, sample)` for position `pos` (`< total`) of pass `layout.pass`.
    #[inline]
    pub fn locate(&self, layout: &mut PassLayout, pos: u64) -> (u32, u64) {
        let q = match self.block {
            Some(b) => {
                let block = pos / b;
                let start = block * b;
                let len = b.min(self.total - start);
                start + permute(pos - start, len, self.block_key(layout.pass, block))
            }
            None => pos,
        };
        self.locate_shuffled(layout, q)
    }

    fn block_key(&self, pass: u64, block: u64) -> u64 {
        key(&[self.seed, self.dataset as u64, pass, block, BLOCK])
    }

    /// `f(shard, sample)` for the `n` positions from `pos` (`pos + n <=
    /// total`) of pass `layout.pass`, in order: what [`locate`](Self::locate)
    /// gives for each, with each permutation's key hashed once per block or
    /// shard rather than per position.
    pub fn locate_run(
        &self,
        layout: &mut PassLayout,
        pos: u64,
        n: u64,
        mut f: impl FnMut(u32, u64),
    ) {
        let end = pos + n;
        let Some(b) = self.block else {
            // Shard by shard: a run of consecutive offsets of one shard.
            let mut q = pos;
            while q < end {
                let (shard, first) = self.locate_shuffled(layout, q);
                f(shard, first);
                let idx = layout.hint;
                let off = q - layout.starts[idx];
                let len = self.shard_lens[shard as usize];
                let stop = end.min(q + len - off);
                match layout.within_key {
                    Some((_, k)) if self.shuffle_within_shard => {
                        let within = Permutation::new(len, k);
                        (off + 1..off + (stop - q)).for_each(|o| f(shard, within.at(o)))
                    }
                    _ => (off + 1..off + (stop - q)).for_each(|o| f(shard, o)),
                }
                q = stop;
            }
            return;
        };
        let mut p = pos;
        while p < end {
            let block = p / b;
            let start = block * b;
            let len = b.min(self.total - start);
            let within = Permutation::new(len, self.block_key(layout.pass, block));
            let stop = end.min(start + len);
            for i in p..stop {
                let q = start + within.at(i - start);
                let (shard, sample) = self.locate_shuffled(layout, q);
                f(shard, sample);
            }
            p = stop;
        }
    }

    /// `(shard, sample)` for position `q` of pass `layout.pass` after the
    /// block shuffle: the shard order and the within-shard shuffle.
    #[inline]
    fn locate_shuffled(&self, layout: &mut PassLayout, q: u64) -> (u32, u64) {
        let pass = layout.pass;
        let starts = &layout.starts;
        let h = layout.hint;
        let idx = if starts[h] <= q && starts.get(h + 1).is_none_or(|&next| q < next) {
            h
        } else {
            let i = starts.partition_point(|&s| s <= q) - 1;
            layout.hint = i;
            i
        };
        let shard = layout.order[idx];
        let off = q - starts[idx];
        let len = self.shard_lens[shard as usize];
        let sample = if self.shuffle_within_shard {
            let k = match layout.within_key {
                Some((s, k)) if s == shard => k,
                _ => {
                    let k = key(&[
                        self.seed,
                        self.dataset as u64,
                        shard as u64,
                        pass,
                        WITHIN_SHARD,
                    ]);
                    layout.within_key = Some((shard, k));
                    k
                }
            };
            permute(off, len, k)
        } else {
            off
        };
        (shard, sample)
    }
}
