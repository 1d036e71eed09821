//! The work source: what to train on, in which order, in which lane.
//!
//! Every pointer is a pure function of its *global index* `g`: the mixture
//! schedule says which dataset slot `g` is and that dataset's position; the
//! dataset's pass order (shard, within-shard and block shuffles, keyed by the
//! seed and the pass number) says which sample that is; the lane is
//! `g % canonical_lanes`. A rank emits the pointers of the lanes it owns. No
//! state but the next `g` is needed to resume.

mod lanes;
mod mixture;
mod restore;
mod shuffle;
mod state;

pub use lanes::{LaneConfig, Ownership};
pub use mixture::Mixture;
pub use shuffle::BlockShuffle;
pub use state::{WORK_STATE_VERSION, WorkState};

use crate::dataset::{Catalog, Dataset};
use crate::error::{Error, Result};
use crate::hash;
use crate::pointer::{LaneId, SamplePtr};
use futures::Stream;
use serde::{Deserialize, Serialize};
use shuffle::{DatasetOrder, PassLayout};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// What happens when a dataset has been read completely.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exhaustion {
    /// Stop the stream as soon as any dataset completes this many passes
    /// (so the mixture holds up to the last pointer).
    Stop {
        /// Passes over each dataset.
        passes: u64,
    },
    /// Never stop; every pass is reshuffled (the pass number keys the shuffles).
    Repeat,
}

/// The data-shaping settings of a work source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkConfig {
    /// Seed of every shuffle.
    pub seed: u64,
    /// Mixture chunk size: each chunk holds exact largest-remainder quotas.
    pub chunk_size: u64,
    /// Shuffle the order of shards in each pass (default on).
    pub shuffle_shards: bool,
    /// Shuffle samples within each shard (default on).
    pub shuffle_within_shard: bool,
    /// Block shuffle over the pass (default off).
    pub shuffle_block_size: BlockShuffle,
    /// Passes and exhaustion policy (default: stop after one pass).
    pub exhaustion: Exhaustion,
    /// Lane layout and this rank's place in it.
    pub lanes: LaneConfig,
}

impl Default for WorkConfig {
    fn default() -> Self {
        WorkConfig {
            seed: 0,
            chunk_size: 1024,
            shuffle_shards: true,
            shuffle_within_shard: true,
            shuffle_block_size: BlockShuffle::Off,
            exhaustion: Exhaustion::Stop { passes: 1 },
            lanes: LaneConfig::default(),
        }
    }
}

/// Builds a [`WorkSource`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct WorkSourceBuilder {
    datasets: Vec<(Dataset, f64)>,
    config: WorkConfig,
}

impl WorkSourceBuilder {
    /// Adds a dataset with its mixture weight (weights need not sum to 1).
    pub fn dataset(mut self, dataset: Dataset, weight: f64) -> Self {
        self.datasets.push((dataset, weight));
        self
    }
    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self
    }
    /// Sets the mixture chunk size.
    pub fn chunk_size(mut self, n: u64) -> Self {
        self.config.chunk_size = n;
        self
    }
    /// Shard shuffle on or off.
    pub fn shuffle_shards(mut self, on: bool) -> Self {
        self.config.shuffle_shards = on;
        self
    }
    /// Within-shard shuffle on or off.
    pub fn shuffle_within_shard(mut self, on: bool) -> Self {
        self.config.shuffle_within_shard = on;
        self
    }
    /// Block shuffle size.
    pub fn shuffle_block_size(mut self, b: BlockShuffle) -> Self {
        self.config.shuffle_block_size = b;
        self
    }
    /// Stop after `n` passes.
    pub fn passes(mut self, n: u64) -> Self {
        self.config.exhaustion = Exhaustion::Stop { passes: n };
        self
    }
    /// Repeat forever, reshuffling every pass.
    pub fn repeat(mut self) -> Self {
        self.config.exhaustion = Exhaustion::Repeat;
        self
    }
    /// Number of canonical lanes (fixed for a run).
    pub fn canonical_lanes(mut self, n: u32) -> Self {
        self.config.lanes.canonical_lanes = n;
        self
    }
    /// This process's rank.
    pub fn rank(mut self, r: u32) -> Self {
        self.config.lanes.rank = r;
        self
    }
    /// Number of data-parallel ranks.
    pub fn world_size(mut self, w: u32) -> Self {
        self.config.lanes.world_size = w;
        self
    }
    /// How lanes are dealt to ranks.
    pub fn ownership(mut self, o: Ownership) -> Self {
        self.config.lanes.ownership = o;
        self
    }
    /// Replaces the whole configuration.
    pub fn config(mut self, config: WorkConfig) -> Self {
        self.config = config;
        self
    }

    /// Validates everything and builds the work source.
    pub fn build(self) -> Result<WorkSource> {
        let c = &self.config;
        if self.datasets.is_empty() {
            return Err(Error::config(
                "datasets",
                "a work source needs at least one dataset",
            ));
        }
        c.lanes.validate()?;
        if let Exhaustion::Stop { passes: 0 } = c.exhaustion {
            return Err(Error::config("passes", "must be at least 1"));
        }
        for (ds, _) in &self.datasets {
            if ds.num_samples() == 0 {
                return Err(Error::Dataset {
                    dataset: ds.name().into(),
                    location: ds.location().into(),
                    message: "has no samples".into(),
                });
            }
        }
        let names: Vec<&str> = self.datasets.iter().map(|(d, _)| d.name()).collect();
        let weights: Vec<f64> = self.datasets.iter().map(|(_, w)| *w).collect();
        let mixture = Mixture::new(&weights, &names, c.chunk_size)?;
        let orders: Vec<DatasetOrder> = self
            .datasets
            .iter()
            .enumerate()
            .map(|(i, (ds, _))| {
                DatasetOrder::new(
                    c.seed,
                    i as u32,
                    ds.shards().iter().map(|s| s.len()).collect(),
                    c.shuffle_shards,
                    c.shuffle_within_shard,
                    c.shuffle_block_size,
                )
            })
            .collect();
        let end = match c.exhaustion {
            Exhaustion::Repeat => None,
            Exhaustion::Stop { passes } => orders
                .iter()
                .enumerate()
                .map(|(d, o)| mixture.global_index(d, passes * o.total))
                .min(),
        };
        let mut fp = hash::key(&[
            c.seed,
            c.chunk_size,
            c.shuffle_shards as u64,
            c.shuffle_within_shard as u64,
            c.lanes.canonical_lanes as u64,
        ]);
        fp = hash::combine(
            fp,
            hash::bytes(format!("{:?}{:?}", c.shuffle_block_size, c.exhaustion).as_bytes()),
        );
        for ((ds, w), o) in self.datasets.iter().zip(&orders) {
            fp = hash::combine(fp, hash::bytes(ds.name().as_bytes()));
            fp = hash::combine(fp, w.to_bits());
            for l in &o.shard_lens {
                fp = hash::combine(fp, *l);
            }
        }
        let catalog: Catalog = self.datasets.into_iter().map(|(d, _)| d).collect();
        Ok(WorkSource {
            plan: Arc::new(Plan {
                catalog,
                config: self.config,
                mixture,
                orders,
                end,
                fingerprint: fp,
            }),
            next_global: 0,
        })
    }
}

#[derive(Debug)]
struct Plan {
    catalog: Catalog,
    config: WorkConfig,
    mixture: Mixture,
    orders: Vec<DatasetOrder>,
    end: Option<u64>,
    fingerprint: u64,
}

/// Decides what to train on: datasets, mixture, shuffles, passes and lanes.
/// Same datasets, seed and config give the same pointer sequence on any
/// machine, for any rank count.
///
/// ```
/// use zephon_core::{Dataset, Record, WorkSource};
/// let a = Dataset::in_memory("a", vec![vec![Record::new(); 70]]).unwrap();
/// let b = Dataset::in_memory("b", vec![vec![Record::new(); 30]]).unwrap();
/// let ws = WorkSource::builder().dataset(a, 0.7).dataset(b, 0.3).chunk_size(10).seed(7).build().unwrap();
/// let ptrs: Vec<_> = ws.stream().pointers().collect();
/// assert_eq!(ptrs.len(), 100);
/// assert_eq!(ptrs[..10].iter().filter(|p| p.dataset == 0).count(), 7);
/// ```
#[derive(Clone, Debug)]
pub struct WorkSource {
    plan: Arc<Plan>,
    next_global: u64,
}

impl WorkSource {
    /// A builder with default settings (seed 0, chunk 1024, shard and
    /// within-shard shuffle on, one pass, one lane, one rank).
    pub fn builder() -> WorkSourceBuilder {
        WorkSourceBuilder::default()
    }

    /// The datasets, indexed by `SamplePtr::dataset`.
    pub fn catalog(&self) -> &Catalog {
        &self.plan.catalog
    }

    /// The configuration.
    pub fn config(&self) -> &WorkConfig {
        &self.plan.config
    }

    /// The mixture schedule.
    pub fn mixture(&self) -> &Mixture {
        &self.plan.mixture
    }

    /// The lanes this rank owns.
    pub fn owned_lanes(&self) -> Vec<LaneId> {
        self.plan.config.lanes.owned_lanes()
    }

    /// Total global pointers (all lanes), `None` when repeating forever.
    pub fn global_len(&self) -> Option<u64> {
        self.plan.end
    }

    /// Number of pointers this rank will emit from the current position,
    /// `None` when repeating forever.
    pub fn len(&self) -> Option<u64> {
        let end = self.plan.end?;
        let lanes = &self.plan.config.lanes;
        let l = lanes.canonical_lanes as u64;
        Some(
            lanes
                .owned_lanes()
                .iter()
                .map(|&lane| count_lane(self.next_global, end, lane as u64, l))
                .sum(),
        )
    }

    /// Whether there is nothing left to emit.
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// The pointer at global index `g` (any lane).
    pub fn pointer_at(&self, g: u64) -> SamplePtr {
        let mut cache = vec![None; self.plan.orders.len()];
        self.plan.pointer_at(g, &mut cache)
    }

    /// The current state, for a checkpoint.
    pub fn state(&self) -> WorkState {
        WorkState {
            version: WORK_STATE_VERSION,
            fingerprint: self.plan.fingerprint,
            seed: self.plan.config.seed,
            canonical_lanes: self.plan.config.lanes.canonical_lanes,
            next_global: self.next_global,
        }
    }

    /// Moves to a checkpointed state. The seed, lane count, datasets and
    /// data-shaping settings must match; rank, world size and ownership may differ.
    pub fn restore(&mut self, state: &WorkState) -> Result<()> {
        let c = &self.plan.config;
        if state.version != WORK_STATE_VERSION {
            return Err(Error::config(
                "checkpoint",
                format!(
                    "work state version {} is not supported (this build reads {WORK_STATE_VERSION})",
                    state.version
                ),
            ));
        }
        if state.seed != c.seed {
            return Err(Error::config(
                "seed",
                format!("checkpoint has seed {}, this run {}", state.seed, c.seed),
            ));
        }
        if state.canonical_lanes != c.lanes.canonical_lanes {
            return Err(Error::config(
                "canonical_lanes",
                format!(
                    "checkpoint has {} lanes, this run {}",
                    state.canonical_lanes, c.lanes.canonical_lanes
                ),
            ));
        }
        if state.fingerprint != self.plan.fingerprint {
            return Err(Error::config(
                "checkpoint",
                "fingerprint differs: the datasets, weights or shuffle settings are not those of the checkpointed run",
            ));
        }
        self.next_global = state.next_global;
        Ok(())
    }

    /// Starts at global index `g`.
    pub fn seek(&mut self, g: u64) {
        self.next_global = g;
    }

    /// The pointer stream of the lanes this rank owns, from the current position.
    pub fn stream(&self) -> PointerStream {
        PointerStream {
            plan: self.plan.clone(),
            next: self.next_global,
            cache: vec![None; self.plan.orders.len()],
            board_looked: false,
            resume: None,
        }
    }
}

fn count_lane(from: u64, end: u64, lane: u64, l: u64) -> u64 {
    // Indices g in [from, end) with g % l == lane.
    let first = from + (lane + l - from % l) % l;
    if first >= end {
        0
    } else {
        (end - 1 - first) / l + 1
    }
}

impl Plan {
    fn pointer_at(&self, g: u64, cache: &mut [Option<PassLayout>]) -> SamplePtr {
        let (d, pos) = self.mixture.locate(g);
        let order = &self.orders[d as usize];
        let pass = pos / order.total;
        let layout = match &mut cache[d as usize] {
            Some(l) if l.pass == pass => l,
            slot => slot.insert(order.layout(pass)),
        };
        let (shard, sample) = order.locate(layout, pos % order.total);
        SamplePtr {
            dataset: d,
            shard,
            sample,
            lane: (g % self.config.lanes.canonical_lanes as u64) as LaneId,
        }
    }
}

/// The pointers of the lanes this rank owns, in global order. Never pending.
#[must_use = "streams do nothing unless polled"]
#[derive(Debug)]
pub struct PointerStream {
    plan: Arc<Plan>,
    next: u64,
    cache: Vec<Option<PassLayout>>,
    board_looked: bool,
    /// Restoring from lane cuts: the preamble, and where each lane resumes.
    resume: Option<restore::Resume>,
}

impl PointerStream {
    /// The next global index this stream will consider.
    pub fn position(&self) -> u64 {
        self.next
    }
}

/// Streams that know the catalog their pointers refer to, so `fetch()` needs
/// no argument.
pub trait Catalogued {
    /// The datasets the pointers index into.
    fn catalog(&self) -> &Catalog;
}

impl Catalogued for PointerStream {
    fn catalog(&self) -> &Catalog {
        &self.plan.catalog
    }
}

impl PointerStream {
    /// The pointers as a plain iterator (the stream never waits).
    pub fn pointers(self) -> impl Iterator<Item = SamplePtr> {
        let mut s = self;
        std::iter::from_fn(move || s.next_pointer())
    }

    /// The next pointer of an owned lane, `None` at the end.
    pub fn next_pointer(&mut self) -> Option<SamplePtr> {
        let lanes = self.plan.config.lanes;
        let l = lanes.canonical_lanes as u64;
        if let Some(r) = &mut self.resume
            && let Some(p) = r.preamble.pop_front()
        {
            return Some(p);
        }
        loop {
            let g = self.next;
            if self.plan.end.is_some_and(|e| g >= e) {
                return None;
            }
            self.next += 1;
            let lane = (g % l) as LaneId;
            if lanes.owns(lane)
                && self
                    .resume
                    .as_ref()
                    .is_none_or(|r| g / l >= r.starts[lane as usize])
            {
                return Some(self.plan.pointer_at(g, &mut self.cache));
            }
        }
    }

    /// First poll of a checkpointed pipeline being restored: take the lane
    /// cuts off the board.
    fn look_for_restore(&mut self) {
        self.board_looked = true;
        let Some(board) = crate::checkpoint::cut::Board::current() else {
            return;
        };
        if board.restoring().is_empty() || board.replaying_all() {
            return;
        }
        if let Some(r) = restore::plan(&self.plan, &board) {
            let lanes = self.plan.config.lanes;
            let l = lanes.canonical_lanes as u64;
            let first = lanes
                .owned_lanes()
                .iter()
                .map(|&lane| r.starts[lane as usize] * l + lane as u64)
                .min()
                .unwrap_or(0);
            self.next = self.next.max(first);
            self.resume = Some(r);
        }
    }

    fn remaining(&self) -> (usize, Option<usize>) {
        match self.plan.end {
            None => (usize::MAX, None),
            Some(end) => {
                let lanes = self.plan.config.lanes;
                let l = lanes.canonical_lanes as u64;
                let n: u64 = lanes
                    .owned_lanes()
                    .iter()
                    .map(|&lane| {
                        let start = self
                            .resume
                            .as_ref()
                            .map_or(0, |r| r.starts[lane as usize] * l + lane as u64);
                        count_lane(self.next.max(start), end, lane as u64, l)
                    })
                    .sum::<u64>()
                    + self.resume.as_ref().map_or(0, |r| r.preamble.len() as u64);
                (n as usize, Some(n as usize))
            }
        }
    }
}

impl Stream for PointerStream {
    type Item = Result<SamplePtr>;
    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if !this.board_looked {
            this.look_for_restore();
        }
        Poll::Ready(this.next_pointer().map(Ok))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.remaining()
    }
}

impl crate::obs::Explain for PointerStream {
    fn describe(&self, out: &mut Vec<crate::obs::StageDescription>) {
        let c = &self.plan.config;
        let datasets: Vec<String> = self
            .plan
            .catalog
            .iter()
            .zip(&self.plan.mixture.quotas)
            .map(|(d, q)| format!("{} ({q}/{})", d.name(), c.chunk_size))
            .collect();
        out.push(crate::obs::StageDescription::new(
            "work_source",
            1,
            None,
            format!(
                "{}; seed {}; {:?}; lanes {:?} of {}",
                datasets.join(", "),
                c.seed,
                c.exhaustion,
                c.lanes.owned_lanes(),
                c.lanes.canonical_lanes
            ),
        ));
    }
}
