//! What a work source under a mixture schedule has handed out, per phase
//! and dataset: the current phase, and each phase's share of every dataset
//! beside its target ([`WorkSource::phase_shares`](super::WorkSource::phase_shares)).

use super::ScheduleUnit;
use std::fmt;
use std::sync::{Arc, Mutex};

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

    fn snapshot(&self) -> PhaseShares {
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
        PhaseShares {
            unit: self.unit,
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

pub(super) fn snapshot(tally: &Tally) -> PhaseShares {
    tally.snapshot()
}

/// Per phase of a mixture schedule, the samples a work source handed out of
/// each dataset beside the phase's target share (see
/// [`WorkSource::phase_shares`](super::WorkSource::phase_shares)).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PhaseShares {
    /// The schedule's unit (what [`PhaseShare::start`] counts).
    pub unit: ScheduleUnit,
    /// Every phase, in order.
    pub phases: Vec<PhaseShare>,
    /// The phase of the last pointer handed out (`None` before the first).
    pub current: Option<usize>,
}

/// One phase's figures.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PhaseShare {
    /// The phase's first position: a global index (the samples before it,
    /// all ranks together) or, for a schedule by tokens, a token position.
    pub start: u64,
    /// Every dataset of the work source, in catalog order.
    pub datasets: Vec<DatasetShare>,
}

/// One dataset in one phase.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DatasetShare {
    /// The dataset's name.
    pub name: String,
    /// Its target share of the phase's samples (0: out of the phase).
    pub target: f64,
    /// Samples of it handed out in the phase.
    pub handed_out: u64,
}

impl PhaseShare {
    /// Samples handed out in the phase, every dataset together.
    pub fn handed_out(&self) -> u64 {
        self.datasets.iter().map(|d| d.handed_out).sum()
    }

    /// Each dataset's share of the samples handed out in the phase (all 0
    /// before the phase begins).
    pub fn shares(&self) -> Vec<f64> {
        let total = self.handed_out();
        self.datasets
            .iter()
            .map(|d| match total {
                0 => 0.0,
                t => d.handed_out as f64 / t as f64,
            })
            .collect()
    }
}

impl fmt::Display for PhaseShares {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = |start: u64| match self.unit {
            ScheduleUnit::GlobalBatches { size } => format!("global batch {}", start / size.max(1)),
            ScheduleUnit::Samples => format!("sample {start}"),
            ScheduleUnit::Tokens => format!("token {start}"),
        };
        match self.current {
            Some(c) => writeln!(
                f,
                "schedule: the work source is in phase {} of {} (from {}; the samples handed out include those still in the queues)",
                c + 1,
                self.phases.len(),
                at(self.phases[c].start)
            )?,
            None => writeln!(f, "schedule: {} phases, none begun", self.phases.len())?,
        }
        // A linear schedule has one phase per step: the begun ones are
        // listed, the first and last few when there are many.
        let begun: Vec<(usize, &PhaseShare)> = self
            .phases
            .iter()
            .enumerate()
            .filter(|(_, p)| p.handed_out() > 0)
            .collect();
        const SHOWN: usize = 8;
        for (k, (i, p)) in begun.iter().enumerate() {
            if begun.len() > SHOWN && k == SHOWN / 2 {
                writeln!(f, "  ... {} more phases", begun.len() - SHOWN)?;
            }
            if begun.len() > SHOWN && k >= SHOWN / 2 && k < begun.len() - SHOWN / 2 {
                continue;
            }
            let shares = p.shares();
            let parts: Vec<String> = p
                .datasets
                .iter()
                .zip(shares)
                .filter(|(d, _)| d.target > 0.0 || d.handed_out > 0)
                .map(|(d, s)| {
                    format!(
                        "{} {:.1}% (target {:.1}%)",
                        d.name,
                        100.0 * s,
                        100.0 * d.target
                    )
                })
                .collect();
            writeln!(
                f,
                "  phase {} from {}: {} samples handed out; {}",
                i + 1,
                at(p.start),
                p.handed_out(),
                parts.join(", ")
            )?;
        }
        Ok(())
    }
}
