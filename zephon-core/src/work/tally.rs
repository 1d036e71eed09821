//! What a work source under a mixture schedule has handed out, per phase
//! and dataset: the current phase, and each phase's share of every dataset
//! beside its target ([`WorkSource::phase_shares`](super::WorkSource::phase_shares)).

use super::ScheduleUnit;
use std::sync::{Arc, Mutex};
use zephon_metrics::schedule::{DatasetShare, PhaseShare, PhaseShares};

/// Pointers a stream counts before it adds them to the shared figures: a
/// lock per pointer would cost more than locating it.
const PUBLISH_EVERY: u32 = 4096;

/// The figures every stream of one work source (and of its clones, epochs
/// and lane parts) adds to.
#[derive(Debug)]
pub(super) struct Tally {
    unit: ScheduleUnit,
    names: Vec<String>,
    /// Per phase: its first position (a global index, or a token position
    /// for a schedule by tokens) and each dataset's target share of its
    /// samples.
    phases: Vec<(u64, Vec<f64>)>,
    counts: Mutex<Counts>,
}

#[derive(Debug)]
struct Counts {
    /// `phase * datasets + dataset`.
    handed_out: Vec<u64>,
    last_phase: Option<usize>,
}

impl Tally {
    /// `phases`: each phase's first position and its sample weight per
    /// dataset (in catalog order, 0 for a dataset out of it).
    pub fn new(unit: ScheduleUnit, names: Vec<String>, phases: Vec<(u64, Vec<f64>)>) -> Arc<Self> {
        let phases: Vec<(u64, Vec<f64>)> = phases
            .into_iter()
            .map(|(start, w)| {
                let sum: f64 = w.iter().sum();
                (start, w.iter().map(|x| x / sum).collect())
            })
            .collect();
        let cells = phases.len() * names.len();
        Arc::new(Tally {
            unit,
            names,
            phases,
            counts: Mutex::new(Counts {
                handed_out: vec![0; cells],
                last_phase: None,
            }),
        })
    }

    /// How many phases the schedule has.
    pub fn phases(&self) -> usize {
        self.phases.len()
    }

    pub fn snapshot(&self) -> PhaseShares {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.names.len();
        let phases = self
            .phases
            .iter()
            .enumerate()
            .map(|(p, (start, target))| PhaseShare {
                start: *start,
                datasets: self
                    .names
                    .iter()
                    .enumerate()
                    .map(|(d, name)| DatasetShare {
                        name: name.clone(),
                        target: target[d],
                        handed_out: counts.handed_out[p * n + d],
                    })
                    .collect(),
            })
            .collect();
        let (unit, global_batch) = match self.unit {
            ScheduleUnit::Samples => ("samples", None),
            ScheduleUnit::GlobalBatches { size } => ("global_batches", Some(size)),
            ScheduleUnit::Tokens => ("tokens", None),
        };
        PhaseShares {
            unit: unit.to_owned(),
            global_batch,
            phases,
            current: counts.last_phase,
        }
    }
}

/// A stream's own counts, added to the shared [`Tally`] now and then and
/// when the stream is dropped.
#[derive(Debug)]
pub(super) struct LocalTally {
    shared: Arc<Tally>,
    handed_out: Vec<u64>,
    last_phase: Option<usize>,
    pending: u32,
}

impl LocalTally {
    pub fn new(shared: Arc<Tally>) -> Self {
        let cells = shared.phases.len() * shared.names.len();
        LocalTally {
            shared,
            handed_out: vec![0; cells],
            last_phase: None,
            pending: 0,
        }
    }

    /// `n` pointers of dataset `d` handed out in phase `phase`.
    #[inline]
    pub fn add(&mut self, phase: usize, d: u32, n: u64) {
        let cell = phase * self.shared.names.len() + d as usize;
        if let Some(c) = self.handed_out.get_mut(cell) {
            *c += n;
            self.last_phase = Some(phase);
        }
        self.pending = self.pending.saturating_add(n.min(u32::MAX as u64) as u32);
        if self.pending >= PUBLISH_EVERY {
            self.publish();
        }
    }

    fn publish(&mut self) {
        self.pending = 0;
        let mut shared = self.shared.counts.lock().unwrap_or_else(|e| e.into_inner());
        for (s, c) in shared.handed_out.iter_mut().zip(&mut self.handed_out) {
            *s += std::mem::take(c);
        }
        if self.last_phase.is_some() {
            shared.last_phase = self.last_phase;
        }
    }
}

impl Drop for LocalTally {
    fn drop(&mut self) {
        self.publish();
    }
}
