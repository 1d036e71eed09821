//! Where position `p` of a dataset's pass lands: shard shuffle, within-shard
//! shuffle and block shuffle, each a keyed permutation evaluated on demand.

use crate::hash::{Permutation, key};
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
    /// The shard (index into `order`) of the last position located.
    hint: usize,
    /// Within-shard permutations of shards met in the pass, by shard
    /// modulo [`WITHIN_CACHED`]: consecutive positions mostly fall in the
    /// same shard, or in a block's few shards, and hashing a permutation's
    /// keys per pointer cost more than the rest of locating it.
    within: Vec<Option<(u32, Permutation)>>,
    /// The block of the last position located, and its permutation.
    block: Option<(u64, Permutation)>,
}

/// Positions located at once by [`DatasetOrder::locate_run`]: a buffer on
/// the stack for [`Permutation::fill`].
const RUN_CHUNK: usize = 256;

/// Within-shard permutations a [`PassLayout`] keeps.
const WITHIN_CACHED: usize = 64;

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
        let order: Vec<u32> = if self.shuffle_shards {
            let mut at = vec![0; n as usize];
            Permutation::new(n, k).fill(0, &mut at);
            at.into_iter().map(|s| s as u32).collect()
        } else {
            (0..n as u32).collect()
        };
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
            within: vec![None; WITHIN_CACHED],
            block: None,
        }
    }

    /// `(shard, sample)` for position `pos` (`< total`) of pass `layout.pass`.
    #[inline]
    pub fn locate(&self, layout: &mut PassLayout, pos: u64) -> (u32, u64) {
        let q = match self.block {
            Some(b) => {
                let block = pos / b;
                let start = block * b;
                let p = self.block_permutation(layout, block);
                start + p.at(pos - start)
            }
            None => pos,
        };
        self.locate_shuffled(layout, q)
    }

    /// The permutation of block `block` of the pass, kept in `layout` for
    /// the positions after.
    fn block_permutation(&self, layout: &mut PassLayout, block: u64) -> Permutation {
        match layout.block {
            Some((b, p)) if b == block => p,
            _ => {
                let b = self.block.expect("a block shuffle");
                let len = b.min(self.total - block * b);
                let p = Permutation::new(len, self.block_key(layout.pass, block));
                layout.block = Some((block, p));
                p
            }
        }
    }

    /// The within-shard permutation of `shard` in the pass, kept in
    /// `layout` for the positions after.
    fn within_permutation(&self, layout: &mut PassLayout, shard: u32) -> Permutation {
        let slot = &mut layout.within[shard as usize % WITHIN_CACHED];
        match *slot {
            Some((s, p)) if s == shard => p,
            _ => {
                let k = key(&[
                    self.seed,
                    self.dataset as u64,
                    shard as u64,
                    layout.pass,
                    WITHIN_SHARD,
                ]);
                let p = Permutation::new(self.shard_lens[shard as usize], k);
                *slot = Some((shard, p));
                p
            }
        }
    }

    fn block_key(&self, pass: u64, block: u64) -> u64 {
        key(&[self.seed, self.dataset as u64, pass, block, BLOCK])
    }

    /// `f(shard, sample)` for the `n` positions from `pos` (`pos + n <=
    /// total`) of pass `layout.pass`, in order: what [`locate`](Self::locate)
    /// gives for each, with each permutation's key hashed once per block or
    /// shard rather than per position, and evaluated a chunk of positions
    /// at a time ([`Permutation::fill`]).
    pub fn locate_run(
        &self,
        layout: &mut PassLayout,
        pos: u64,
        n: u64,
        mut f: impl FnMut(u32, u64),
    ) {
        let end = pos + n;
        let mut buf = [0u64; RUN_CHUNK];
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
                if self.shuffle_within_shard {
                    let within = self.within_permutation(layout, shard);
                    let last = off + (stop - q);
                    let mut o = off + 1;
                    while o < last {
                        let k = (last - o).min(RUN_CHUNK as u64) as usize;
                        within.fill(o, &mut buf[..k]);
                        buf[..k].iter().for_each(|&s| f(shard, s));
                        o += k as u64;
                    }
                } else {
                    (off + 1..off + (stop - q)).for_each(|o| f(shard, o))
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
            let within = self.block_permutation(layout, block);
            let stop = end.min(start + len);
            while p < stop {
                let k = (stop - p).min(RUN_CHUNK as u64) as usize;
                within.fill(p - start, &mut buf[..k]);
                for &q in &buf[..k] {
                    let (shard, sample) = self.locate_shuffled(layout, start + q);
                    f(shard, sample);
                }
                p += k as u64;
            }
        }
    }

    /// `(shard, sample)` for position `q` of pass `layout.pass` after the
    /// block shuffle: the shard order and the within-shard shuffle.
    #[inline]
    fn locate_shuffled(&self, layout: &mut PassLayout, q: u64) -> (u32, u64) {
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
        let sample = if self.shuffle_within_shard {
            self.within_permutation(layout, shard).at(off)
        } else {
            off
        };
        (shard, sample)
    }
}
