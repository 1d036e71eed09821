//! The work source: what to train on, in which order, in which lane.
//!
//! Every pointer is a pure function of its *global index* `g`: the mixture
//! schedule says which dataset slot `g` is and that dataset's position; the
//! dataset's pass order (shard, within-shard and block shuffles, keyed by the
//! seed and the pass number) says which sample that is; the lane is
//! `g % canonical_lanes`. A rank emits the pointers of the lanes it owns. No
//! state but the next `g` is needed to resume.
//!
//! Exhaustion policies that change the mixture part-way (a dataset that
//! leaves and gives its weight to the others) split the schedule into
//! segments computed from the configuration at build time, so this holds
//! for them too.

mod builder;
mod config;
mod epoch;
mod lanes;
mod launcher;
mod mixture;
mod phases;
mod policy;
mod restore;
mod shuffle;
mod state;
mod stream;
mod tally;
mod tokens;

pub use builder::WorkSourceBuilder;
pub use config::{Exhaustion, WorkConfig};
pub use lanes::{LaneConfig, Ownership};
pub use launcher::{Launcher, LauncherKind};
pub use mixture::{Mixture, weight_scale};
pub use phases::{MAX_PHASES, MixtureSchedule, ScheduleForm, ScheduleUnit};
pub use policy::{ExhaustedPolicy, Segment};
pub use shuffle::BlockShuffle;
pub use state::{WORK_STATE_VERSION, WorkState};
pub use stream::{Catalogued, PointerStream};
pub use tokens::{ShareError, ShareReport, token_share_error};
pub use zephon_metrics::schedule::{DatasetShare, PhaseShare, PhaseShares};

use crate::dataset::Catalog;
use crate::error::{Error, Result};
use crate::pointer::{LaneId, SamplePtr};
use shuffle::{DatasetOrder, PassLayout};
use std::sync::Arc;

#[derive(Clone, Debug)]
struct Plan {
    catalog: Catalog,
    config: WorkConfig,
    schedule: policy::Schedule,
    orders: Vec<DatasetOrder>,
    end: Option<u64>,
    /// The weights as given, in dataset order.
    weights: Vec<f64>,
    /// Tokens per sample in dataset order, when the weights are token shares.
    tokens_per_sample: Option<Vec<f64>>,
    /// Global pointers of one run as configured (`end` of epoch 0).
    epoch_len: Option<u64>,
    fingerprint: u64,
    /// Under a mixture schedule: what its streams handed out, per phase.
    tally: Option<Arc<tally::Tally>>,
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

    /// The mixture schedule of the first segment (the whole run unless a
    /// dataset leaves under [`ExhaustedPolicy::Redistribute`]).
    pub fn mixture(&self) -> &Mixture {
        &self.plan.schedule.segments[0].mixture
    }

    /// Every segment of the schedule, in global order: one static mixture
    /// each, a new one wherever a dataset leaves the mixture.
    ///
    /// ```
    /// use zephon_core::work::ExhaustedPolicy;
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let a = Dataset::in_memory("a", vec![vec![Record::new(); 4]])?;
    /// let b = Dataset::in_memory("b", vec![vec![Record::new(); 40]])?;
    /// let ws = WorkSource::builder().dataset(a, 1.0).dataset(b, 1.0).chunk_size(2)
    ///     .exhausted_policy(ExhaustedPolicy::Redistribute).build()?;
    /// let s = ws.segments();
    /// assert_eq!((s.len(), s[1].start, s[1].active.clone()), (2, 8, vec![1]));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn segments(&self) -> &[Segment] {
        &self.plan.schedule.segments
    }

    /// Average tokens per sample of each dataset (catalog order) when the
    /// weights are token shares, `None` when they are sample shares.
    pub fn tokens_per_sample(&self) -> Option<&[f64]> {
        self.plan.tokens_per_sample.as_deref()
    }

    /// Under a mixture schedule, per phase: the samples this work source's
    /// streams (its clones', epochs' and lane parts' too, on this process)
    /// have handed out of each dataset, beside the phase's target share,
    /// and the phase of the last pointer handed out; `None` without a
    /// schedule. Pointers still in a pipeline's queues count as handed
    /// out, and each stream adds its counts every few thousand pointers
    /// and when it is dropped.
    ///
    /// ```
    /// use zephon_core::work::{MixtureSchedule, ScheduleUnit};
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let web = Dataset::in_memory("web", vec![vec![Record::new(); 1000]])?;
    /// let code = Dataset::in_memory("code", vec![vec![Record::new(); 1000]])?;
    /// let schedule = MixtureSchedule::phases(ScheduleUnit::GlobalBatches { size: 10 })
    ///     .at(30, &[("web", 1.0), ("code", 1.0)]);
    /// let ws = WorkSource::builder().dataset(web, 1.0).dataset(code, 0.0)
    ///     .chunk_size(10).repeat().mixture_schedule(schedule).build()?;
    /// assert_eq!(ws.stream().pointers().take(400).count(), 400);
    /// let shares = ws.phase_shares().expect("a schedule");
    /// assert_eq!(shares.current, Some(1));
    /// let second = &shares.phases[1];
    /// assert_eq!((second.start, second.handed_out()), (300, 100));
    /// assert_eq!(second.shares(), [0.5, 0.5]);
    /// assert_eq!(second.datasets[1].target, 0.5);
    /// assert!(shares.to_string().contains("in phase 2 of 2 (from global batch 30"));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn phase_shares(&self) -> Option<PhaseShares> {
        self.plan.tally.as_deref().map(tally::Tally::snapshot)
    }

    /// How far `delivered_tokens` (per dataset, catalog order) are from the
    /// token shares the weights ask for (see [`token_share_error`]).
    ///
    /// ```
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let a = Dataset::in_memory("a", vec![vec![Record::new(); 4]])?;
    /// let b = Dataset::in_memory("b", vec![vec![Record::new(); 4]])?;
    /// let ws = WorkSource::builder().dataset(a, 3.0).dataset(b, 1.0).build()?;
    /// let r = ws.token_share_error(&[600, 400])?;
    /// assert!((r.max_abs_error - 0.15).abs() < 1e-9);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn token_share_error(&self, delivered_tokens: &[u64]) -> Result<ShareReport> {
        let names: Vec<&str> = self.plan.catalog.iter().map(|d| d.name()).collect();
        token_share_error(&names, &self.plan.weights, delivered_tokens)
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
            tokens_per_sample: self.plan.tokens_per_sample.clone().unwrap_or_default(),
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
        let ours = self.plan.tokens_per_sample.as_deref().unwrap_or_default();
        if state.tokens_per_sample != ours {
            return Err(Error::config(
                "tokens_per_sample",
                format!(
                    "checkpoint has {:?} tokens per sample, this run {ours:?}: give the checkpoint's estimate (WorkState::tokens_per_sample) to continue its schedule",
                    state.tokens_per_sample
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
            owned: {
                let lanes = self.plan.config.lanes;
                (0..lanes.canonical_lanes)
                    .map(|l| lanes.owns(l as LaneId))
                    .collect()
            },
            board_looked: false,
            resume: None,
            cursor: None,
            tally: self.plan.tally.clone().map(tally::LocalTally::new),
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

/// Where one global index falls: its lane and lane position, its segment
/// and its chunk and slot in that segment's mixture. A pointer stream visits
/// the global indices one after the other, and advancing this by one needs
/// no division, where computing it from the index takes four (lane, lane
/// position, chunk and slot) and a search of the segments.
#[derive(Clone, Debug)]
struct Cursor {
    /// The global index described.
    g: u64,
    /// `g % canonical_lanes`.
    lane: u64,
    /// `g / canonical_lanes`: the position within the lane.
    round: u64,
    seg: usize,
    /// Where the next segment starts (`u64::MAX` after the last).
    seg_end: u64,
    /// `(g - segment start) / chunk_size` and `% chunk_size`.
    chunk: u64,
    slot: usize,
}

impl Cursor {
    /// The cursor of global index `g`.
    fn at(plan: &Plan, g: u64) -> Self {
        let l = plan.config.lanes.canonical_lanes as u64;
        let segs = &plan.schedule.segments;
        let seg = segs.partition_point(|s| s.start <= g) - 1;
        let s = &segs[seg];
        let c = s.mixture.chunk_size();
        let within = g - s.start;
        Cursor {
            g,
            lane: g % l,
            round: g / l,
            seg,
            seg_end: segs.get(seg + 1).map_or(u64::MAX, |n| n.start),
            chunk: within / c,
            slot: (within % c) as usize,
        }
    }

    /// Moves to the next global index.
    #[inline]
    fn advance(&mut self, plan: &Plan) {
        let g = self.g.wrapping_add(1);
        if g >= self.seg_end || g == 0 {
            *self = Cursor::at(plan, g);
            return;
        }
        self.g = g;
        self.lane += 1;
        if self.lane == plan.config.lanes.canonical_lanes as u64 {
            self.lane = 0;
            self.round += 1;
        }
        self.slot += 1;
        if self.slot == plan.schedule.segments[self.seg].mixture.slots.len() {
            self.slot = 0;
            self.chunk += 1;
        }
    }
}

impl Plan {
    fn pointer_at(&self, g: u64, cache: &mut [Option<PassLayout>]) -> SamplePtr {
        let lane = (g % self.config.lanes.canonical_lanes as u64) as LaneId;
        self.pointer_in_lane(g, lane, cache)
    }

    /// [`pointer_at`](Plan::pointer_at) for a caller that knows `g`'s lane.
    fn pointer_in_lane(&self, g: u64, lane: LaneId, cache: &mut [Option<PassLayout>]) -> SamplePtr {
        let (d, pos) = self.schedule.locate(g);
        self.pointer_of(d, pos, lane, cache)
    }

    /// The pointer at `cursor`'s global index: [`pointer_at`](Plan::pointer_at)
    /// without its divisions.
    #[inline]
    fn pointer_at_cursor(&self, cursor: &Cursor, cache: &mut [Option<PassLayout>]) -> SamplePtr {
        let (d, pos) = self.position_at_cursor(cursor);
        self.pointer_of(d, pos, cursor.lane as LaneId, cache)
    }

    /// The dataset and its position that the cursor's global index is.
    #[inline]
    fn position_at_cursor(&self, cursor: &Cursor) -> (u32, u64) {
        let s = &self.schedule.segments[cursor.seg];
        let m = &s.mixture;
        let k = m.slots[cursor.slot];
        let d = s.active[k as usize];
        let pos =
            s.base[d as usize] + cursor.chunk * m.quotas[k as usize] + m.occurrence[cursor.slot];
        (d, pos)
    }

    /// The pointer at position `pos` of dataset `d`'s own stream.
    #[inline]
    fn pointer_of(
        &self,
        d: u32,
        pos: u64,
        lane: LaneId,
        cache: &mut [Option<PassLayout>],
    ) -> SamplePtr {
        let order = &self.orders[d as usize];
        // A dataset's positions come in order, so the cached pass mostly
        // holds the next one: no division to find it.
        let layout = match &mut cache[d as usize] {
            Some(l) if pos.wrapping_sub(l.first) < order.total => l,
            slot => slot.insert(order.layout(pos / order.total)),
        };
        let within = pos - layout.first;
        let (shard, sample) = order.locate(layout, within);
        SamplePtr {
            dataset: d,
            shard,
            sample,
            lane,
        }
    }
}
